"""Which hosts of a run share one machine, from their machine facts (fairbench.hosts.machine), and which
hosts the queue therefore runs one job at a time.

Two inventory hosts share a machine when, of their machine facts:

- ``product_uuid``: both are the same (neither null): one box's firmware;
- ``board``: both are the same: one board;
- ``kernel_boot``: they differ by at most ``KERNEL_BOOT_TOLERANCE_S``: one kernel;
- ``gpu_uuids``: some GPU is in both: one GPU.

Sharing is transitive (a host that shares with two others disturbs both): the shared machines are the
groups of hosts linked by any of these, each with its evidence, one entry per fact and group of hosts
it links. A host without machine facts (its fairbench predates them, or check mode gathered none) shares
with none: it is not judged.

Jobs measured at the same time on hosts of one machine interfere (CPU, memory bandwidth, PCIe, GPUs), so
unless the campaign declares its hosts isolated (``isolated_hosts: true``: each has cores, memory and GPUs
of its own), the queue (fairbench.fleet.queue) lets one host of a shared machine run a job at a time
(``serialised``). What is found is fleet.json's ``machines`` (``machines_json``)::

    {"shared": [{"hosts": [host, ...],                                   # in the given hosts' order
                 "evidence": [{"fact": fact, "hosts": [host, ...], "text": EVIDENCE}, ...],
                 "text": SharedMachine.describe()}, ...],
     "isolated": false}                                                  # the campaign's isolated_hosts

``EVIDENCE`` says what the hosts share (``one kernel, booted at 2026-12-06 02:27:53.175 UTC``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from fairbench.hosts.machine import MACHINE_FACTS, machine_facts

KERNEL_BOOT_TOLERANCE_S = 0.01
"""Two kernel boot instants this close are one kernel's. Hosts of one kernel read it within microseconds
of each other; distinct kernels booted within 10 ms of each other are taken for one, which only makes
their jobs wait for each other."""


@dataclass(frozen=True)
class Evidence:
    """One fact that links some hosts: they are one machine."""

    fact: str
    """A name of ``MACHINE_FACTS``."""
    hosts: tuple[str, ...]
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"fact": self.fact, "hosts": list(self.hosts), "text": self.text}


@dataclass(frozen=True)
class SharedMachine:
    """Hosts found to be one machine, and why."""

    hosts: tuple[str, ...]
    evidence: tuple[Evidence, ...]

    def describe(self) -> str:
        """``lab1, lab2: one kernel, booted at ...``: the hosts, then what links them, with the hosts of
        any fact that links only some of them."""
        return f"{', '.join(self.hosts)}: " + "; ".join(
            item.text if item.hosts == self.hosts else f"{item.text} ({', '.join(item.hosts)})"
            for item in self.evidence
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "hosts": list(self.hosts),
            "evidence": [item.to_json() for item in self.evidence],
            "text": self.describe(),
        }


def _linked(fact: str, a: Any, b: Any) -> bool:
    """Whether two hosts' values of ``fact`` say they are one machine (the module docstring's rule)."""
    if a is None or b is None:
        return False
    if fact == "kernel_boot":
        numbers = all(isinstance(value, int | float) and not isinstance(value, bool) for value in (a, b))
        return numbers and abs(float(a) - float(b)) <= KERNEL_BOOT_TOLERANCE_S
    if fact == "gpu_uuids":
        return isinstance(a, list) and isinstance(b, list) and bool(set(map(str, a)) & set(map(str, b)))
    return isinstance(a, str) and a == b


def _groups(hosts: Sequence[str], linked: Mapping[str, set[str]]) -> list[tuple[str, ...]]:
    """The connected groups of two or more ``hosts`` under ``linked`` (host -> the hosts it links to), each
    in the hosts' order."""
    seen: set[str] = set()
    found = []
    for host in hosts:
        if host in seen:
            continue
        group, todo = {host}, [host]
        while todo:
            for other in linked.get(todo.pop(), set()) - group:
                group.add(other)
                todo.append(other)
        seen |= group
        if len(group) > 1:
            found.append(tuple(each for each in hosts if each in group))
    return found


def _describe(fact: str, values: Sequence[Any]) -> str:
    """What the hosts of one group share in ``fact`` (their values, in order)."""
    if fact == "kernel_boot":
        instant = datetime.fromtimestamp(float(values[0]), tz=timezone.utc)
        return f"one kernel, booted at {instant:%Y-%m-%d %H:%M:%S.%f}"[:-3] + " UTC"
    if fact == "gpu_uuids":
        counts: dict[str, int] = {}
        for listed in values:
            for gpu in dict.fromkeys(map(str, listed)):
                counts[gpu] = counts.get(gpu, 0) + 1
        return "the same GPU(s): " + ", ".join(sorted(gpu for gpu, count in counts.items() if count > 1))
    if fact == "product_uuid":
        return f"the same DMI system UUID, {values[0]}"
    return f"the same board, {values[0]}"


def shared_machines(
    facts_by_host: Mapping[str, Mapping[str, Any]], hosts: Sequence[str]
) -> list[SharedMachine]:
    """The machines two or more of ``hosts`` share (the module docstring's rule), each with its hosts in
    ``hosts``' order and the evidence of each fact."""
    machine = {host: machine_facts(facts_by_host.get(host)) for host in hosts}
    evidence: list[Evidence] = []
    linked: dict[str, set[str]] = {host: set() for host in hosts}
    for fact in MACHINE_FACTS:
        by_fact: dict[str, set[str]] = {host: set() for host in hosts}
        for index, a in enumerate(hosts):
            for b in hosts[index + 1 :]:
                if _linked(fact, machine[a].get(fact), machine[b].get(fact)):
                    by_fact[a].add(b)
                    by_fact[b].add(a)
        for group in _groups(hosts, by_fact):
            text = _describe(fact, [machine[host][fact] for host in group])
            evidence.append(Evidence(fact, group, text))
            for host in group:
                linked[host] |= set(group) - {host}
    return [
        SharedMachine(group, tuple(item for item in evidence if set(item.hosts) <= set(group)))
        for group in _groups(hosts, linked)
    ]


def machines_json(shared: Sequence[SharedMachine], *, isolated: bool) -> dict[str, Any]:
    """fleet.json's ``machines`` (the module docstring)."""
    return {"shared": [machine.to_json() for machine in shared], "isolated": isolated}


def serialised(machines: Mapping[str, Any] | None) -> list[list[str]]:
    """The groups of hosts the queue runs one job at a time, from fleet.json's ``machines``: each shared
    machine's hosts, none when the campaign declared its hosts isolated or the queue predates ``machines``."""
    if not machines or machines.get("isolated"):
        return []
    return [list(machine["hosts"]) for machine in machines.get("shared", [])]
