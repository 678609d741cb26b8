"""When a queue of jobs ends if each job takes a known time: the queue's own hand-out, played on a clock.

The hosts claim their jobs as a run's hosts do (``fleet.queue.QueueState``: plan order, gathering of servers
over several hosts, sticky hosts), each job taking ``job_seconds(job)``; the answer is the instant the last
one ends. It is the campaign's wall time as the plan estimates it (``fleet.forecast``), and, from a run's
fleet.json as it stands, the time left (``cli.run_eta``); with every job taking as long, the jobs each host
would lead (``predict``: what ``--check`` shows). Automatic repeats add no job here: a queue whose
``repeats`` is a count is played as it is, so a forecast plays the least and the most repeats as two counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fairbench.fleet.queue import GATHERING, PENDING, RUN, RUNNING, WAIT, QueueState


def makespan(
    queue: Mapping[str, Any],
    hosts: Sequence[str],
    job_seconds: Callable[[Mapping[str, Any]], float],
    *,
    now: float = 0.0,
    running_ends: Mapping[str, float] | None = None,
) -> float:
    """The instant the last job of ``queue`` (fleet.json's shape) ends, its ``hosts`` free from ``now``
    but those of its running jobs, which end at ``running_ends`` (job id: instant; absent: ``now`` plus
    the job's seconds). A job being gathered is gathered again; ``now`` when nothing is left to run."""
    data: dict[str, Any] = json.loads(json.dumps(queue))
    ends = dict(running_ends or {})
    running: list[tuple[float, str, str]] = []  # (ends at, job, its rank 0)
    for job in data["jobs"]:
        if job["state"] == GATHERING:
            job["state"], job["hosts"] = PENDING, []
        elif job["state"] == RUNNING and job["hosts"]:
            end = ends.get(job["id"], now + job_seconds(job))
            running.append((max(end, now), job["id"], job["hosts"][0]))
    busy = {host for job in data["jobs"] if job["state"] == RUNNING for host in job["hosts"]}
    state = QueueState(data)
    idle = [host for host in hosts if host not in busy and host not in state.finished_hosts]
    return play(state, idle, running, job_seconds, now)


def play(
    state: QueueState,
    idle: list[str],
    running: list[tuple[float, str, str]],
    job_seconds: Callable[[Mapping[str, Any]], float],
    clock: float,
    *,
    on_run: Callable[[str, dict[str, Any]], None] | None = None,
) -> float:
    """The queue's hand-out from ``clock``: each of the ``idle`` hosts claims, a job taken runs for
    ``job_seconds(job)`` (``on_run(host, job)`` told of it), and the hosts of the first ``running`` job to
    end (each ``(ends at, job, its rank 0)``) claim again; the instant the last ends."""
    while idle or running:
        before = json.dumps(state.data)
        waiting = []
        for host in idle:
            claim = state.claim(host, clock)
            if claim.answer == RUN and claim.job is not None:
                if on_run is not None:
                    on_run(host, claim.job)
                running.append((clock + job_seconds(claim.job), claim.job["id"], host))
            elif claim.answer == WAIT:
                waiting.append(host)
        idle = waiting
        if not running:
            if json.dumps(state.data) != before:
                continue  # a host joined a server: its leader claims again
            break  # every host is done, or waits on a server nothing running will free hosts for
        clock = min(end for end, _, _ in running)
        for entry in [entry for entry in running if entry[0] == clock]:
            running.remove(entry)
            _, job_id, leader = entry
            state.finish(job_id, leader, ok=True, reason=None, now=clock)
            idle.extend(host for host in state.job(job_id)["hosts"] if host not in idle)
    return clock


def predict(data: Mapping[str, Any], hosts: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The jobs each host would lead (with the hosts they would run on) if every job took the same time:
    what ``--check`` shows, by playing the queue's own hand-out on a copy of fleet.json's ``data``."""
    led: dict[str, list[dict[str, Any]]] = {host: [] for host in hosts}
    state = QueueState(json.loads(json.dumps(data)))
    play(state, list(hosts), [], lambda job: 1.0, 0.0, on_run=lambda host, job: led[host].append(job))
    return led
