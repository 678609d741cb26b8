"""The work queue the hosts of a campaign run take their jobs from: ``fleet.json`` in the run's directory.

Every host loops: claim a job, run it, say how it ended, claim again, until the queue says it is done. A
host takes the first job (in plan order) it is eligible for that nobody has taken, so a slow config holds
up no other host. A server over ``nodes`` hosts is gathered: the first host to claim it leads (rank 0, the
one that starts, sweeps and stops every rank); later claimers that are eligible join it (ranks 1, 2, ...
in the order they came) and wait until it ends; its leader runs it once it has all its hosts. Jobs are
gathered in plan order, so two servers can never each hold half the hosts the other needs.

Hosts that share one machine (``machines``: fairbench.fleet.sharing) take jobs one at a time, unless the
campaign declares its hosts isolated: a host whose machine is busy with another job (one a host sharing
it leads or joined) waits, and once the machine is free the host that has waited longest for it goes
first (``waiting_for_machine``), so hosts of one machine take turns: none waits longer than a job of each
of the others. A server over several hosts of one machine is one job: its hosts join it together.

A re-run of the same run id resumes: a job runs again (its sweep measures only the points missing), but
only on the host that measured it before (``sticky``, learned from the previous fleet.json and from the
points already in the results tree), so one job's points never end up split over two host directories.
A job whose hosts are all gone from the run (``--limit``, a failed deploy) is ``unplaced``, with why.

The file is JSON, rewritten whole (through a temporary file and a rename) under an exclusive lock of
``.fleet.json.lock``, so concurrent claims from every host's Ansible worker see one consistent queue. Keys:

- ``placement``, ``pools`` (name: hosts), ``excluded`` (host: why it takes no job), ``equivalence`` (the
  hosts' facts and differences, ``fleet.equivalence``), ``machines`` (the hosts that share a machine, and
  whether the campaign declared its hosts isolated, ``fleet.sharing``);
- ``jobs``: the plan (``Job.to_json``), each with ``state`` (one of ``STATES``), ``hosts`` (those running
  it, rank 0 first), ``sticky``, ``claimed_at`` and ``finished_at`` (epoch seconds on the control node),
  ``reason`` (why it failed or was not placed);
- ``finished_hosts``: the hosts told they are done;
- ``waiting_for_machine``: host -> when (epoch seconds) it was first told to wait for the machine it
  shares, for each host waiting so now;
- ``repeats``: the campaign's (``measure.repeats``: a count, or automatic), and under automatic repeats
  ``judged``: per config, the repeats it got and why no more were added.

Automatic repeats under ``spread``: each job measures one repeat of a config on a fresh server. Its rank 0
reports the throughput of each listed level with its finish; once every job of a config has ended, the
queue judges the config's levels over its repeats (``repeats.stop_reason``) and appends the next repeat
as a new job while a level's interval is too wide, at most ``max`` jobs in all. The new job goes to the
end of the queue, behind every other config's: the repeats of different configs interleave in time. A
host with nothing to take waits while such a job may still come, instead of being told it is done.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fairbench.campaign.model import SPREAD
from fairbench.fleet.plan import Job
from fairbench.fleet.sharing import serialised
from fairbench.measure.repeats import (
    JUDGED_METRIC,
    AutoRepeats,
    Repeats,
    repeats_from_json,
    repeats_to_json,
    stop_reason,
)
from fairbench.measure.results_format import LISTED, POINTS_FILE, is_open_loop, level_tag, load_of

FLEET_FILE = "fleet.json"
PENDING = "pending"
GATHERING = "gathering"
RUNNING = "running"
OK = "ok"
FAILED = "failed"
UNPLACED = "unplaced"
STATES = (PENDING, GATHERING, RUNNING, OK, FAILED, UNPLACED)
OPEN = (PENDING, GATHERING)
"""States of a job a host may still take or join."""

RUN = "run"
WAIT = "wait"
DONE = "done"
"""What a claim answers: run this job, wait and claim again, or nothing is left for this host."""
WAIT_POLL_S = 0.2
"""How often a claim that waits (``Queue.claim`` with ``wait_s``) claims again: a read of fleet.json under
its lock, far cheaper than the task a host would otherwise run for each claim, and soon enough that a
freed machine or a gathered server is taken at once."""


@dataclass(frozen=True)
class Claim:
    answer: str
    job: dict[str, Any] | None = None
    """For RUN: the job, with ``hosts`` (rank 0 first)."""
    why: str = ""
    changed: bool = False
    """Whether answering changed the queue (a finish recorded, a job taken or joined, a host done): a
    claim retried while it waits, carrying a finish already recorded, changes nothing."""

    def to_json(self) -> dict[str, Any]:
        return {"answer": self.answer, "job": self.job, "why": self.why}


@dataclass(frozen=True)
class Finished:
    """How a job ended, as its rank 0 says when it claims the next."""

    job: str
    ok: bool
    reason: str | None = None
    points: tuple[Mapping[str, Any], ...] = ()
    """The points of the config's directory on its host (each with ``repeat``, ``max_concurrency``,
    ``level_source`` and the judged metric): the job's own repeats' throughputs are kept, for automatic
    repeats to be judged on."""


class QueueState:
    """The queue in memory: ``claim`` and ``finish`` are the whole algorithm (module docstring)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    @property
    def jobs(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = self.data["jobs"]
        return jobs

    @property
    def finished_hosts(self) -> list[str]:
        hosts: list[str] = self.data["finished_hosts"]
        return hosts

    def claim(self, host: str, now: float) -> Claim:
        for job in self.jobs:
            if job["state"] in (GATHERING, RUNNING) and host in job["hosts"]:
                return self._joined(job, host, now)
        busy: dict[str, Any] | None = None
        for job in self.jobs:
            if job["state"] not in OPEN or not self._may_take(job, host):
                continue
            blocking = self._machine_busy(host, job)
            if blocking is not None:
                busy = busy or blocking
                continue
            ahead = self._waited_longer(host)
            if ahead is not None:
                return self._wait_for_machine(host, now, f"{ahead} shares its machine and has waited longer")
            self._stop_waiting(host)
            job["hosts"].append(host)
            job["state"] = GATHERING
            return self._joined(job, host, now)
        if busy is not None:
            sharing = [other for other in busy["hosts"] if other in self._sharing(host)]
            why = f"shares its machine with {', '.join(sharing)}, busy with {busy['id']}"
            return self._wait_for_machine(host, now, why)
        self._stop_waiting(host)
        self._unplace_stuck()
        if any(job["state"] in OPEN and self._may_take(job, host) for job in self.jobs):
            return Claim(WAIT, why="a server over several hosts is being gathered")
        judging = self._judging(host)
        if judging:
            return Claim(WAIT, why=f"automatic repeats of {', '.join(judging)} are still being judged")
        if host not in self.finished_hosts:
            self.finished_hosts.append(host)
        self._unplace_stuck()
        return Claim(DONE)

    def leave(self, host: str) -> None:
        """``host`` takes no job (its deploy failed after the jobs were placed): jobs that cannot get their
        hosts without it are unplaced, so no other host waits for it."""
        if host not in self.finished_hosts:
            self.finished_hosts.append(host)
        self._stop_waiting(host)
        self._unplace_stuck()

    def _sharing(self, host: str) -> list[str]:
        """The other hosts that share a machine with ``host`` and take jobs one at a time with it."""
        for group in serialised(self.data.get("machines")):
            if host in group:
                return [other for other in group if other != host]
        return []

    def _machine_busy(self, host: str, job: dict[str, Any]) -> dict[str, Any] | None:
        """The job, other than ``job``, that a host sharing ``host``'s machine leads or joined, while it is
        gathered or runs; None when the machine is free for ``job``."""
        sharing = self._sharing(host)
        for other in self.jobs:
            active = other is not job and other["state"] in (GATHERING, RUNNING)
            if active and any(each in sharing for each in other["hosts"]):
                return other
        return None

    def _could_start(self, host: str) -> bool:
        """Whether ``host`` may take or join some job now, its machine free for it."""
        return any(
            job["state"] in OPEN and self._may_take(job, host) and self._machine_busy(host, job) is None
            for job in self.jobs
        )

    def _waited_longer(self, host: str) -> str | None:
        """A host sharing ``host``'s machine that has waited for it longer and could start a job now: it
        goes first (the earliest wait; ``host`` not waiting, any wait is longer)."""
        waiting: dict[str, float] = self.data.get("waiting_for_machine") or {}
        order = list(waiting)
        mine = (waiting[host], order.index(host)) if host in waiting else None
        ahead = [
            other
            for other in self._sharing(host)
            if other in waiting
            and (mine is None or (waiting[other], order.index(other)) < mine)
            and self._could_start(other)
        ]
        return min(ahead, key=lambda other: (waiting[other], order.index(other)), default=None)

    def _wait_for_machine(self, host: str, now: float, why: str) -> Claim:
        """Wait for the machine ``host`` shares, noting since when (once: a retried wait changes nothing)."""
        self.data.setdefault("waiting_for_machine", {}).setdefault(host, now)
        return Claim(WAIT, why=why)

    def _stop_waiting(self, host: str) -> None:
        """``host`` no longer waits for its machine: it takes a job, or has none to wait for."""
        (self.data.get("waiting_for_machine") or {}).pop(host, None)

    def finish(
        self,
        job_id: str,
        host: str,
        *,
        ok: bool,
        reason: str | None,
        now: float,
        points: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Record how the job ``host`` led ended, with the throughputs of its own repeats' listed levels
        among ``points``; again for a job it already finished, nothing (a retried claim carries its finish
        again). Under automatic repeats, its config may get its next repeat (module docstring)."""
        job = self.job(job_id)
        if job["state"] in (OK, FAILED) and job["hosts"][:1] == [host]:
            return
        if job["state"] != RUNNING or not job["hosts"] or job["hosts"][0] != host:
            raise ValueError(f"{FLEET_FILE}: job {job_id} is not running with {host} as its rank 0")
        job["state"] = OK if ok else FAILED
        job["reason"] = reason
        job["finished_at"] = now
        job["throughputs"] = {
            self._judged_level(point): float(point[JUDGED_METRIC])
            for point in points
            if point.get("repeat") in job["repeats"]
            and point.get("level_source", LISTED) == LISTED
            and isinstance(point.get(JUDGED_METRIC), int | float)
        }
        self._judge(job["config"])

    @staticmethod
    def _judged_level(point: Mapping[str, Any]) -> str:
        """A level as automatic repeats judge it: a named workload's (``workload``, as a job of several
        reports its points) apart from another's at the same load."""
        tag = level_tag(load_of(point), open_loop=is_open_loop(point))
        return f"{point['workload']}/{tag}" if point.get("workload") else tag

    def _policy(self) -> AutoRepeats | None:
        policy = repeats_from_json(self.data.get("repeats", 1))
        return policy if isinstance(policy, AutoRepeats) and self.data["placement"] == SPREAD else None

    def _judge(self, config: str) -> None:
        """Once every job of ``config`` has ended: append its next repeat while a level's interval is wide
        and it has had fewer than ``max`` jobs, else record why its repeats stopped (``judged``)."""
        policy = self._policy()
        jobs = [job for job in self.jobs if job["config"] == config]
        if policy is None or any(job["state"] in (*OPEN, RUNNING) for job in jobs):
            return
        by_level: dict[str, list[float]] = {}
        for job in jobs:
            for level, value in job.get("throughputs", {}).items():
                by_level.setdefault(level, []).append(value)
        reasons = {level: stop_reason(values, policy) for level, values in by_level.items()}
        if len(jobs) < policy.maximum and None in reasons.values():
            last = jobs[-1]
            repeat = 1 + max(max(job["repeats"]) for job in jobs)
            self.jobs.append(
                {
                    **{key: last[key] for key in ("config", "pool", "eligible", "nodes", "extends_repeats")},
                    **{"id": f"{config}#r{repeat}", "repeats": [repeat], "state": PENDING, "hosts": []},
                    **{"sticky": [], "claimed_at": None, "finished_at": None, "reason": None},
                }
            )
            return
        shown = "; ".join(f"{level}: {why}" for level, why in reasons.items() if why) or (
            f"no level measured in {len(jobs)} job(s)"
        )
        self.data.setdefault("judged", {})[config] = {"count": len(jobs), "stopped": shown}

    def _judging(self, host: str) -> list[str]:
        """The configs ``host`` may run whose next automatic repeat is not decided yet: some job of theirs
        still runs, and they have had fewer than ``max``."""
        policy = self._policy()
        if policy is None or host in self.finished_hosts:
            return []
        found: dict[str, None] = {}
        for job in self.jobs:
            config_jobs = [other for other in self.jobs if other["config"] == job["config"]]
            if (
                job["state"] in (GATHERING, RUNNING)
                and host in job["eligible"]
                and len(config_jobs) < policy.maximum
            ):
                found[job["config"]] = None
        return list(found)

    def job(self, job_id: str) -> dict[str, Any]:
        for job in self.jobs:
            if job["id"] == job_id:
                return job
        raise ValueError(f"{FLEET_FILE}: no job {job_id}")

    def _joined(self, job: dict[str, Any], host: str, now: float) -> Claim:
        if len(job["hosts"]) < job["nodes"]:
            return Claim(WAIT, why=f"{job['id']} has {len(job['hosts'])} of its {job['nodes']} hosts")
        if job["state"] == GATHERING:
            job["state"] = RUNNING
            job["claimed_at"] = now
        if job["hosts"][0] != host:
            rank = job["hosts"].index(host)
            return Claim(WAIT, why=f"rank {rank} of {job['id']}, run by {job['hosts'][0]}")
        return Claim(RUN, job=dict(job))

    def _may_take(self, job: dict[str, Any], host: str) -> bool:
        if host not in job["eligible"] or host in job["hosts"] or host in self.finished_hosts:
            return False
        sticky: list[str] = job["sticky"]
        # The host that measured it before leads it again; the other ranks may be any.
        return not sticky or (host == sticky[0] if not job["hosts"] else host in job["eligible"])

    def _unplace_stuck(self) -> None:
        """Jobs that can no longer get their hosts: every host left to take them has been told it is done."""
        for job in self.jobs:
            if job["state"] not in OPEN:
                continue
            left = [h for h in job["eligible"] if h not in self.finished_hosts or h in job["hosts"]]
            leaders = job["sticky"][:1] or left
            if len(left) < job["nodes"] or not any(h in left for h in leaders):
                job["state"] = UNPLACED
                job["reason"] = (
                    f"needs {job['nodes']} host(s) of {', '.join(job['eligible'])}"
                    + (f", led by {job['sticky'][0]}, which measured it before" if job["sticky"] else "")
                    + f"; left to take it: {', '.join(left) or 'none'}"
                )
                job["hosts"] = []


def new_state(
    *,
    placement: str,
    pools: Mapping[str, Sequence[str]],
    jobs: Sequence[Job],
    excluded: Mapping[str, str],
    equivalence: Mapping[str, Any] | None,
    sticky: Mapping[str, Sequence[str]],
    repeats: Repeats = 1,
    machines: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A fresh queue of ``jobs``: every job pending, led by its sticky hosts where it has them, but those
    with too few usable hosts (their pool's others failed to deploy), unplaced at once; ``machines``: the
    hosts that share a machine (``fleet.sharing.machines_json``), None where none was judged."""
    data: dict[str, Any] = {
        "placement": placement,
        "repeats": repeats_to_json(repeats),
        "pools": {name: list(hosts) for name, hosts in pools.items()},
        "excluded": dict(excluded),
        "equivalence": dict(equivalence) if equivalence is not None else None,
        "machines": dict(machines) if machines is not None else None,
        "jobs": [
            {
                **job.to_json(),
                "state": PENDING,
                "hosts": [],
                "sticky": list(sticky.get(job.id, ())),
                "claimed_at": None,
                "finished_at": None,
                "reason": None,
            }
            for job in jobs
        ],
        "finished_hosts": [],
        "waiting_for_machine": {},
    }
    queued: list[dict[str, Any]] = data["jobs"]
    for job in queued:
        if len(job["eligible"]) < job["nodes"]:
            failed = [f"{host} ({why})" for host, why in excluded.items() if host in pools[job["pool"]]]
            job["state"] = UNPLACED
            job["reason"] = (
                f"needs {job['nodes']} host(s) of pool {job['pool']}; usable: "
                f"{', '.join(job['eligible']) or 'none'}; deploy failed on {', '.join(failed) or 'none'}"
            )
    return data


def sticky_hosts(run_dir: Path, jobs: Sequence[Job]) -> dict[str, list[str]]:
    """The hosts each job ran on before in this run: from the previous fleet.json, else the host whose
    results directory holds points of the job's repeats."""
    previous: dict[str, list[str]] = {}
    try:
        old = json.loads((run_dir / FLEET_FILE).read_text(encoding="utf-8"))
        for job in old.get("jobs", []):
            if job.get("hosts"):
                previous[str(job["id"])] = [str(host) for host in job["hosts"]]
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    found: dict[str, list[str]] = {}
    for job in jobs:
        if job.id in previous:
            found[job.id] = previous[job.id]
            continue
        for host in job.hosts:
            if _has_points(run_dir / host / job.config, job.repeats):
                found[job.id] = [host]
                break
    return found


def _has_points(config_dir: Path, repeats: Sequence[int]) -> bool:
    """Whether the points of the config's workload (or of any of its named workloads, one directory
    down: ``campaign.model.workload_dir``) hold one of ``repeats``."""
    suffixes = tuple(f"-r{repeat}" for repeat in repeats)
    lines: list[str] = []
    for points in (config_dir / POINTS_FILE, *sorted(config_dir.glob(f"*/{POINTS_FILE}"))):
        try:
            lines += points.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
    for line in lines:
        try:
            if str(json.loads(line).get("point_id", "")).endswith(suffixes):
                return True
        except (ValueError, AttributeError):
            continue
    return False


class Queue:
    """fleet.json on disk: each call reads it, changes it and writes it back under the lock."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / FLEET_FILE
        self.lock_path = run_dir / f".{FLEET_FILE}.lock"

    def create(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._write(data)

    def read(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))
        return data

    def claim(
        self, host: str, finished: Finished | None = None, *, leaving: bool = False, wait_s: float = 0.0
    ) -> Claim:
        """The next job for ``host``, after recording how the one it ran before ended (``finished``); with
        ``leaving``, none: the host takes no job (``QueueState.leave``). With ``wait_s``, while the answer
        is wait, claims again every ``WAIT_POLL_S`` until it is not or ``wait_s`` has passed: a host that
        waits long (for its machine, a server's other hosts) runs one task per ``wait_s``."""
        deadline = time.monotonic() + wait_s
        claim = self._claim_once(host, finished, leaving=leaving)
        changed = claim.changed
        while claim.answer == WAIT and time.monotonic() < deadline:
            time.sleep(WAIT_POLL_S)
            claim = self._claim_once(host, None, leaving=False)
            changed = changed or claim.changed
        return replace(claim, changed=changed)

    def _claim_once(self, host: str, finished: Finished | None, *, leaving: bool) -> Claim:
        with self._locked():
            before = self.read()
            state = QueueState(json.loads(json.dumps(before)))
            if finished is not None:
                state.finish(
                    finished.job,
                    host,
                    ok=finished.ok,
                    reason=finished.reason,
                    now=time.time(),
                    points=finished.points,
                )
            if leaving:
                state.leave(host)
            claim = Claim(DONE) if leaving else state.claim(host, time.time())
            if state.data != before:
                self._write(state.data)
        return replace(claim, changed=state.data != before)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self.lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
