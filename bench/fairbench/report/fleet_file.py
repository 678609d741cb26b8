"""fleet.json (``fairbench.fleet.queue``) as the report reads it: the placement, the pools, the hosts'
equivalence (``fairbench.fleet.equivalence``: the differences the campaign accepted and those it refused),
the hosts found to share a machine and whether the campaign declared its hosts isolated
(``fairbench.fleet.sharing``), the jobs of the queue, under automatic repeats how the queue judged
each config's repeats (``judged``), and under spread the order each round's configs were queued in
(``rounds``), each holding only what is well-formed; the rest is named, by key path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairbench.campaign.model import PLACEMENTS
from fairbench.fleet.queue import FLEET_FILE
from fairbench.measure.json_rules import (
    FileReader,
    Rule,
    checked_element,
    drop_broken,
    element,
    is_finite,
    is_host_list,
    is_list,
    is_mapping,
    is_text,
    list_of,
    object_of,
    or_null,
    whole,
)
from fairbench.report.campaign_file import is_placement


@dataclass(frozen=True)
class HostDifference:
    """A fact whose value is not the same on every host of a pool (fleet.json's ``equivalence``)."""

    pool: str
    fact: str
    values: dict[str, Any]
    """Host -> its value."""


@dataclass(frozen=True)
class SharedMachine:
    """Hosts found to share one machine (fleet.json's ``machines.shared``)."""

    hosts: tuple[str, ...]
    text: str
    """What links them: ``lab1, lab2: one kernel, booted at ...`` (``fleet.sharing``)."""


@dataclass(frozen=True)
class FleetJob:
    """One job of fleet.json's queue, as far as the report reads it."""

    id: str
    config: str
    state: str
    """``ok``, ``failed``, ``unplaced``, or a state of a queue that never finished (fleet.queue.STATES)."""
    repeats: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    reason: str | None = None
    claimed_at: float | None = None
    """When it got all its hosts, epoch seconds on the control node; None where it never did."""
    finished_at: float | None = None
    """When its rank 0 said how it ended; None where it never did."""


@dataclass(frozen=True)
class Judged:
    """How the queue judged one config's automatic repeats (fleet.json's ``judged``)."""

    count: int
    """The repeats it got: one job each."""
    stopped: str
    """Why the queue added no more: ``C=1: interval ±1.35 % within ±8 % after 4 repeats; C=64: ...``
    (``measure.repeats.stop_reason`` of each level)."""


@dataclass(frozen=True)
class RoundOrders:
    """The order each round's configs were queued in (fleet.json's ``rounds``)."""

    seed: int | None
    """What the orders were drawn from; None where not recorded."""
    orders: tuple[tuple[str, ...], ...]
    """Per round (its index), its configs in the order queued."""


@dataclass(frozen=True)
class Fleet:
    """fleet.json (fleet.queue), as far as the report reads it, holding only what is well-formed of it."""

    placement: str | None = None
    pools: dict[str, list[str]] = field(default_factory=dict)
    accepted: tuple[HostDifference, ...] = ()
    """Differences the campaign accepted (``accept_host_differences``): threats to the comparisons they
    touch."""
    refused: tuple[HostDifference, ...] = ()
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Host -> its fleet facts (hosts.fleet_facts)."""
    shared_machines: tuple[SharedMachine, ...] = ()
    """Hosts found to share a machine; empty where none did, or fleet.json predates ``machines``."""
    isolated: bool = False
    """Whether the campaign declared its hosts isolated (``isolated_hosts``): hosts of one machine took jobs
    at the same time; else one at a time."""
    jobs: tuple[FleetJob, ...] = ()
    judged: dict[str, Judged] = field(default_factory=dict)
    """Config -> how its automatic repeats were judged; empty under fixed repeats, every-host, or a
    fleet.json from before the queue judged repeats."""
    rounds: RoundOrders | None = None
    """None where fleet.json records no rounds (every-host, or a run from before they were recorded)."""


FLEET_RULES: tuple[Rule, ...] = (
    Rule("placement", " or ".join(PLACEMENTS), is_placement, False),
    Rule("pools", "an object of lists of strings", object_of(list_of(is_text)), False),
    Rule("equivalence", "null or an object", or_null(is_mapping), False),
    Rule("equivalence.accepted", "a list", is_list, False),
    Rule("equivalence.refused", "a list", is_list, False),
    Rule("equivalence.facts", "an object of objects", object_of(is_mapping), False),
    Rule("machines", "null or an object", or_null(is_mapping), False),
    Rule("machines.shared", "a list", is_list, False),
    Rule("machines.isolated", "true or false", lambda value: isinstance(value, bool), False),
    Rule("jobs", "a list", is_list, False),
    Rule("judged", "an object", is_mapping, False),
    Rule("rounds", "an object", is_mapping, False),
    Rule("rounds.seed", "a whole number", whole(0), False),
    Rule("rounds.orders", "a list of lists of strings", list_of(list_of(is_text)), False),
)
"""fleet.json (fleet.queue) as far as the report reads it; a key that breaks its rule is left out."""
HOST_DIFFERENCE_RULES: tuple[Rule, ...] = (
    Rule("pool", "a string", is_text, True),
    Rule("fact", "a string", is_text, True),
    Rule("values", "an object", is_mapping, True),
)
SHARED_MACHINE_RULES: tuple[Rule, ...] = (
    Rule("hosts", "a list of strings", is_host_list, True),
    Rule("text", "a string", is_text, True),
)
JUDGED_RULES: tuple[Rule, ...] = (
    Rule("count", "a whole number of at least 1", whole(1), True),
    Rule("stopped", "a string", is_text, True),
)
FLEET_JOB_RULES: tuple[Rule, ...] = (
    Rule("id", "a string", is_text, True),
    Rule("config", "a string", is_text, True),
    Rule("state", "a string", is_text, True),
    Rule("repeats", "a list of whole numbers", list_of(whole(0)), False),
    Rule("hosts", "a list of strings", list_of(is_text), False),
    Rule("reason", "null or a string", or_null(is_text), False),
    *(
        Rule(key, "null or a finite number", or_null(is_finite), False)
        for key in ("claimed_at", "finished_at")
    ),
)


def _host_differences(values: object, where: str, problems: list[str]) -> tuple[HostDifference, ...]:
    found = []
    for index, value in enumerate(values if isinstance(values, list) else []):
        entry = checked_element(value, HOST_DIFFERENCE_RULES, f"{where}[{index}]", "difference", problems)
        if entry is not None:
            found.append(HostDifference(entry["pool"], entry["fact"], dict(entry["values"])))
    return tuple(found)


def _shared_machines(values: object, problems: list[str]) -> tuple[SharedMachine, ...]:
    found = []
    for index, value in enumerate(values if isinstance(values, list) else []):
        where = f"machines.shared[{index}]"
        entry = element(value, SHARED_MACHINE_RULES, where, "shared machine", problems)
        if entry is not None:
            found.append(SharedMachine(tuple(entry["hosts"]), entry["text"]))
    return tuple(found)


def _fleet_job(value: object, where: str, problems: list[str]) -> FleetJob | None:
    job = checked_element(value, FLEET_JOB_RULES, where, "job", problems)
    if job is None:
        return None
    return FleetJob(
        id=job["id"],
        config=job["config"],
        state=job["state"],
        repeats=tuple(job.get("repeats", ())),
        hosts=tuple(job.get("hosts", ())),
        reason=job.get("reason"),
        claimed_at=job.get("claimed_at"),
        finished_at=job.get("finished_at"),
    )


def _judged(values: dict[str, Any], problems: list[str]) -> dict[str, Judged]:
    found = {}
    for config, value in values.items():
        entry = element(value, JUDGED_RULES, f"judged.{config}", "judgement", problems)
        if entry is not None:
            found[config] = Judged(entry["count"], entry["stopped"])
    return found


def load_fleet(run_dir: Path) -> tuple[Fleet | None, list[str]]:
    """The run's fleet.json holding only its well-formed keys and entries (None when the file is absent or
    cannot be used at all), and the problems naming the file and the key path of the rest."""
    files = FileReader(run_dir)
    document = files.json_object(FLEET_FILE)
    if document is None:
        return None, files.problems
    problems: list[str] = []
    kept = drop_broken(document, FLEET_RULES, "", problems)
    equivalence = kept.get("equivalence") or {}
    machines = kept.get("machines") or {}
    rounds = kept.get("rounds")
    jobs = [_fleet_job(value, f"jobs[{index}]", problems) for index, value in enumerate(kept.get("jobs", []))]
    fleet = Fleet(
        placement=kept.get("placement"),
        pools={name: list(hosts) for name, hosts in kept.get("pools", {}).items()},
        accepted=_host_differences(equivalence.get("accepted"), "equivalence.accepted", problems),
        refused=_host_differences(equivalence.get("refused"), "equivalence.refused", problems),
        facts={host: dict(facts) for host, facts in equivalence.get("facts", {}).items()},
        shared_machines=_shared_machines(machines.get("shared"), problems),
        isolated=machines.get("isolated", False),
        jobs=tuple(job for job in jobs if job is not None),
        judged=_judged(kept.get("judged", {}), problems),
        rounds=(
            None
            if rounds is None
            else RoundOrders(rounds.get("seed"), tuple(map(tuple, rounds.get("orders", []))))
        ),
    )
    return fleet, [f"{run_dir / FLEET_FILE}: {problem}" for problem in problems]
