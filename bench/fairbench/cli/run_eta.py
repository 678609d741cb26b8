"""The time a campaign run has left, as ``fairbench run`` shows it: the plan, corrected by the jobs done.

From the run's fleet.json as it stands (``fleet.queue``) and its plan (``fleet.forecast``), each time a job
starts or ends:

    k = sum over the jobs ended ok of (finished_at - claimed_at) / sum of their planned job_s (least)
        (1 until one has ended, and wherever the plan has no time for one)
    end = the instant the queue's last job ends, each job left taking k x job_s and each running one
          ending at claimed_at + k x job_s, or now if that is past (``fleet.schedule.makespan``)
    left = end - now

at the least (the jobs the queue holds, and each job's least time) and at the most (each config whose
automatic repeats are not judged yet topped up to its ``max`` jobs, and each job's most time). Unknown
where the plan could not time a job of the queue.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairbench.campaign.model import SPREAD
from fairbench.fleet.forecast import LEAST, MOST, Forecast, clock_text
from fairbench.fleet.plan import Job
from fairbench.fleet.queue import FAILED, FLEET_FILE, OK, RUNNING, new_state
from fairbench.fleet.schedule import makespan
from fairbench.measure.repeats import AutoRepeats, repeats_from_json


@dataclass(frozen=True)
class Eta:
    """When the run is expected to end, at the least and the most, and how far it has come."""

    least_end: float | None
    """Epoch seconds; None where a job has no planned time."""
    most_end: float | None
    done: int
    jobs: int
    """The jobs the queue holds now (automatic repeats add to them)."""

    def text(self, now: float) -> str:
        """``ETA 4 min 10 s (to 6 min 2 s), 5 of 15 jobs done``: the time left from ``now``."""
        least = None if self.least_end is None else max(self.least_end - now, 0.0)
        most = None if self.most_end is None else max(self.most_end - now, 0.0)
        shown = clock_text(least)
        if most is not None and clock_text(most) != shown:
            shown += f" (to {clock_text(most)})"
        return f"ETA {shown}, {self.done} of {self.jobs} jobs done"


class RunEta:
    """The ETA of the run in ``run_dir``, by its ``plan`` (module docstring)."""

    def __init__(self, plan: Forecast, run_dir: Path) -> None:
        self.plan = plan
        self.run_dir = run_dir

    def estimate(self, now: float | None = None) -> Eta | None:
        """The ETA from fleet.json as it stands; None until the queue is written, or where it cannot be
        read (it is being replaced: the next look sees it)."""
        now = time.time() if now is None else now
        try:
            queue: dict[str, Any] = json.loads((self.run_dir / FLEET_FILE).read_text(encoding="utf-8"))
            jobs: list[dict[str, Any]] = queue["jobs"]
            hosts = list(dict.fromkeys(host for members in queue["pools"].values() for host in members))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        factor = self._factor(jobs)
        ends = {}
        for bound in (LEAST, MOST):
            ends[bound] = self._end(_topped_up(queue) if bound == MOST else queue, hosts, bound, factor, now)
        done = sum(job.get("state") in (OK, FAILED) for job in jobs)
        return Eta(ends[LEAST], ends[MOST], done, len(jobs))

    def _factor(self, jobs: list[dict[str, Any]]) -> float:
        """k: the jobs ended ok, their time over their plan's."""
        actual = planned = 0.0
        for job in jobs:
            seconds = self.plan.job_s(str(job.get("config")), LEAST)
            claimed, finished = job.get("claimed_at"), job.get("finished_at")
            if job.get("state") != OK or seconds is None or claimed is None or finished is None:
                continue
            actual += float(finished) - float(claimed)
            planned += seconds
        return actual / planned if actual > 0 and planned > 0 else 1.0

    def _end(
        self, queue: Mapping[str, Any], hosts: list[str], bound: str, factor: float, now: float
    ) -> float | None:
        seconds = {}
        for job in queue["jobs"]:
            planned = self.plan.job_s(str(job["config"]), bound)
            if planned is None:
                return None
            seconds[str(job["id"])] = factor * planned
        running_ends = {
            str(job["id"]): float(job["claimed_at"]) + seconds[str(job["id"])]
            for job in queue["jobs"]
            if job["state"] == RUNNING and job.get("claimed_at") is not None
        }
        return makespan(
            {**queue, "repeats": 1},
            hosts,
            lambda job: seconds[str(job["id"])],
            now=now,
            running_ends=running_ends,
        )


def _topped_up(queue: Mapping[str, Any]) -> dict[str, Any]:
    """``queue`` with each config whose automatic repeats are not judged yet (spread) given every job it
    may still get, up to ``max``, as the queue adds them (``fleet.queue``: behind every other job)."""
    policy = repeats_from_json(queue.get("repeats", 1))
    if not isinstance(policy, AutoRepeats) or queue.get("placement") != SPREAD:
        return dict(queue)
    added: list[Job] = []
    judged: Mapping[str, Any] = queue.get("judged") or {}
    by_config: dict[str, list[Mapping[str, Any]]] = {}
    for job in queue["jobs"]:
        by_config.setdefault(str(job["config"]), []).append(job)
    for config, jobs in by_config.items():
        if config in judged:
            continue
        last = Job.from_json(jobs[-1])
        next_repeat = 1 + max(max(job["repeats"]) for job in jobs)
        for repeat in range(next_repeat, next_repeat + policy.maximum - len(jobs)):
            added.append(Job(f"{config}#r{repeat}", config, (repeat,), last.pool, last.hosts, last.nodes))
    extra = new_state(
        placement=str(queue["placement"]),
        pools=queue["pools"],
        jobs=added,
        excluded={},
        equivalence=None,
        sticky={},
    )["jobs"]
    return {**queue, "jobs": [*queue["jobs"], *extra]}
