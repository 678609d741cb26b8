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
  ``judged``: per config, the repeats it got and why no more were added;
- ``rounds`` (spread): ``seed``, the seed each round's order is drawn from (``plan.round_order``), and
  ``orders``, each round's configs in the order they were queued; ``judging``: what automatic repeats are
  judged by (``decide``, the campaign's margin, or null; ``baseline``; each config's ``gpus``).

Under ``spread`` a job measures one repeat of a config on a fresh server, and repeats run in rounds: round
K is every config's job ``#rK``. A host takes the open job of the earliest round whose config it has
measured least (then in the round's order), so each config meets each host as evenly as the counts allow.

Automatic repeats under ``spread``: a job's rank 0 reports the throughput of each listed level with its
finish; once every job has ended, the queue judges the round (``fleet.stopping``: by the verdict's
comparisons against the campaign's margin, or without one by each level's interval) and queues the next
round of the configs still needed, at most ``max`` jobs a config. A host with nothing to take waits while
such a round may still come, instead of being told it is done.
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
from fairbench.fleet.plan import Job, round_order
from fairbench.fleet.sharing import serialised
from fairbench.fleet.stopping import judge, levels_of
from fairbench.measure.decision import baseline_of, decide_rule_from_json
from fairbench.measure.repeats import (
    JUDGED_METRIC,
    AutoRepeats,
    Repeats,
    repeats_from_json,
    repeats_to_json,
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
        for job in self._claim_order(host):
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

    def _claim_order(self, host: str) -> list[dict[str, Any]]:
        """The jobs in the order ``host`` looks for one to take: under spread, by round; then those of the
        configs it has measured least; of those, first the config the hosts yet to take a job of that round
        have measured most (leaving them the configs they have not); then in the round's order. Else in
        plan order."""
        if self.data["placement"] != SPREAD:
            return self.jobs
        met: dict[tuple[str, str], int] = {}
        taken: dict[int, set[str]] = {}
        for job in self.jobs:
            if job["state"] not in (*OPEN, UNPLACED):
                for each in job["hosts"]:
                    met[each, job["config"]] = met.get((each, job["config"]), 0) + 1
                    taken.setdefault(min(job["repeats"]), set()).add(each)
        hosts = {each for job in self.jobs for each in job["eligible"]} - {host}

        def key(job: dict[str, Any]) -> tuple[int, int, int]:
            index = min(job["repeats"])
            waiting = hosts - taken.get(index, set())
            return (
                index,
                met.get((host, job["config"]), 0),
                -sum(met.get((w, job["config"]), 0) for w in waiting),
            )

        return sorted(self.jobs, key=key)

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
        # Lowest level first within a workload: the lowest is what the verdict's first regime compares at.
        ordered = sorted(points, key=lambda point: (str(point.get("workload") or ""), *self._load(point)))
        job["throughputs"] = {
            self._judged_level(point): float(point[JUDGED_METRIC])
            for point in ordered
            if point.get("repeat") in job["repeats"]
            and point.get("level_source", LISTED) == LISTED
            and isinstance(point.get(JUDGED_METRIC), int | float)
        }
        self._judge()

    @staticmethod
    def _load(point: Mapping[str, Any]) -> tuple[bool, float]:
        return is_open_loop(point), load_of(point)

    @staticmethod
    def _judged_level(point: Mapping[str, Any]) -> str:
        """A level as automatic repeats judge it: a named workload's (``workload``, as a job of several
        reports its points) apart from another's at the same load."""
        tag = level_tag(load_of(point), open_loop=is_open_loop(point))
        return f"{point['workload']}/{tag}" if point.get("workload") else tag

    def _policy(self) -> AutoRepeats | None:
        policy = repeats_from_json(self.data.get("repeats", 1))
        return policy if isinstance(policy, AutoRepeats) and self.data["placement"] == SPREAD else None

    def _judge(self) -> None:
        """Once every job has ended: judge the round (``fleet.stopping.judge``), record why each config
        that needs no more stopped (``judged``) and queue the next round of those that do."""
        policy = self._policy()
        if policy is None or any(job["state"] in (*OPEN, RUNNING) for job in self.jobs):
            return
        judged: dict[str, Any] = self.data.setdefault("judged", {})
        counts: dict[str, int] = {}
        for job in self.jobs:
            if job["config"] not in judged:
                counts[job["config"]] = counts.get(job["config"], 0) + 1
        if not counts:
            return
        judging = self.data.get("judging") or {}
        found = judge(
            levels_of(self.jobs),
            counts,
            policy,
            rule=decide_rule_from_json(judging.get("decide")),
            baseline=str(judging.get("baseline") or next(iter(counts))),
            gpus=judging.get("gpus") or {},
        )
        for config, why in found.items():
            if why is not None:
                judged[config] = {"count": counts[config], "stopped": why}
        needed = [config for config, why in found.items() if why is None]
        if needed:
            self._queue_round(needed)

    def _queue_round(self, configs: Sequence[str]) -> None:
        """The next round: a job of each of ``configs``, in the order drawn for the round."""
        index = 1 + max(max(job["repeats"]) for job in self.jobs)
        rounds = self.data.setdefault("rounds", {"seed": 0, "orders": []})
        order = round_order(configs, int(rounds["seed"]), index)
        for config in order:
            last = [job for job in self.jobs if job["config"] == config][-1]
            self.jobs.append(
                {
                    **{key: last[key] for key in ("config", "pool", "eligible", "nodes", "extends_repeats")},
                    **{"id": f"{config}#r{index}", "repeats": [index], "state": PENDING, "hosts": []},
                    **{"sticky": [], "claimed_at": None, "finished_at": None, "reason": None},
                }
            )
        rounds["orders"].append(order)

    def _judging(self, host: str) -> list[str]:
        """The configs ``host`` may run that may still get another round: not judged yet, fewer than
        ``max`` jobs, while some job still runs (its end judges the round)."""
        policy = self._policy()
        if policy is None or host in self.finished_hosts:
            return []
        if not any(job["state"] in (GATHERING, RUNNING) for job in self.jobs):
            return []
        judged = self.data.get("judged") or {}
        found: dict[str, int] = {}
        for job in self.jobs:
            if job["config"] not in judged and host in job["eligible"]:
                found[job["config"]] = found.get(job["config"], 0) + 1
        return [config for config, count in found.items() if count < policy.maximum]

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
    seed: int = 0,
    judging: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A fresh queue of ``jobs``: every job pending, led by its sticky hosts where it has them, but those
    with too few usable hosts (their pool's others failed to deploy), unplaced at once; ``machines``: the
    hosts that share a machine (``fleet.sharing.machines_json``), None where none was judged; under spread,
    ``seed`` draws the order of the rounds the queue adds, and ``judging`` (``judging_json``) says what
    automatic repeats are judged by."""
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
    if placement == SPREAD:
        orders: dict[int, list[str]] = {}
        for planned in jobs:
            orders.setdefault(min(planned.repeats), []).append(planned.config)
        data["rounds"] = {"seed": seed, "orders": [orders[index] for index in sorted(orders)]}
        data["judging"] = dict(judging) if judging is not None else None
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


def judging_json(campaign: Mapping[str, Any]) -> dict[str, Any]:
    """fleet.json's ``judging`` for ``campaign`` (campaign.json's data): its ``decide`` (or null), its
    baseline config (``decision.baseline_of``) and each config's GPUs."""
    rule = decide_rule_from_json(campaign.get("decide"))
    return {
        "decide": rule.to_json() if rule is not None else None,
        "baseline": baseline_of(campaign),
        "gpus": {name: config.get("gpus") for name, config in campaign["configs"].items()},
    }


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
