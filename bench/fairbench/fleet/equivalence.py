"""Whether the hosts of each pool are equivalent, from their fleet facts (fairbench.campaign.fleet_facts).

A campaign spread over a pool (the inventory group ``gpu_hosts``, or a group a config is pinned to) runs
each config on one host, so comparing two configs is fair only when their hosts agree on every fact of
``FACTS``. Before any server unit is deployed, ``check_pools`` compares the hosts of each pool: a
difference in a fact the campaign does not accept (``accept_host_differences``) refuses the campaign, and
``message`` says what differs and how to accept it; an accepted difference is a threat the report lists
against every comparison it touches.

``EquivalenceResult.to_json`` is what the results tree saves as fleet.json's ``equivalence``::

    {"pools": {pool: [host, ...]},            # each pool's hosts, in order
     "hosts": [host, ...],                    # every host of a pool, once, in order of first appearance
     "facts": {host: {fact: value, ..., "reasons": {fact: why null}}},
     "accepted_facts": [fact, ...],           # the campaign's accept_host_differences
     "refused": [DIFFERENCE, ...],            # differences in facts the campaign does not accept
     "accepted": [DIFFERENCE, ...]}           # differences it accepts: threats to the comparisons
    DIFFERENCE = {"pool": pool, "fact": fact, "values": {host: value}, "reasons": {host: why null},
                  "text": Difference.describe()}

``EquivalenceResult.from_json`` reads it back (``text`` is derived, and ignored).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fairbench.campaign.fleet_facts import FACTS, REASONS

MISSING_FACT = "not reported by the host (its fairbench predates this fact)"
"""The reason of a fact a host's facts lack, as with an older fairbench on it."""


@dataclass(frozen=True)
class Difference:
    """One fact whose value is not the same on every host of a pool."""

    fact: str
    values: dict[str, Any]
    """Host -> its value, for every host of the pool, in the pool's order."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Host -> why its value is null, for the hosts whose value is null."""

    def describe(self) -> str:
        """``sglang: 0.5.23 on lab1, 0.0.1 on lab2``: each value once, with the hosts that have it."""
        groups: dict[str, list[str]] = {}
        for host, value in self.values.items():
            groups.setdefault(_shown(value, self.reasons.get(host)), []).append(host)
        return f"{self.fact}: " + ", ".join(
            f"{value} on {hosts[0]}"
            if len(hosts) == 1
            else f"{value} on {len(hosts)} hosts ({', '.join(hosts)})"
            for value, hosts in groups.items()
        )

    def to_json(self) -> dict[str, Any]:
        return {"fact": self.fact, "values": self.values, "reasons": self.reasons, "text": self.describe()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Difference:
        return cls(fact=data["fact"], values=dict(data["values"]), reasons=dict(data.get("reasons", {})))


def _shown(value: Any, reason: str | None) -> str:
    if value is None:
        return f"null ({reason})" if reason else "null"
    return value if isinstance(value, str) else json.dumps(value)


def differences(facts_by_host: Mapping[str, Mapping[str, Any]], hosts: Sequence[str]) -> list[Difference]:
    """Every fact of ``FACTS`` (in its order) whose values are not all equal on ``hosts``, one pool.

    A host without facts (absent from ``facts_by_host``, or empty) is a ValueError naming it: its facts
    were never gathered, which is no evidence that it matches. A fact missing from a host's facts counts
    as null.
    """
    without = [host for host in hosts if not facts_by_host.get(host)]
    if without:
        raise ValueError(f"no fleet facts for host(s) {', '.join(without)}")
    found = []
    for fact in FACTS:
        values = {host: facts_by_host[host].get(fact) for host in hosts}
        if len({json.dumps(value, sort_keys=True) for value in values.values()}) > 1:
            reasons = {
                host: _reason(facts_by_host[host], fact) for host, value in values.items() if value is None
            }
            found.append(Difference(fact=fact, values=values, reasons=reasons))
    return found


def _reason(facts: Mapping[str, Any], fact: str) -> str:
    if fact not in facts:
        return MISSING_FACT
    reason = (facts.get(REASONS) or {}).get(fact)
    return str(reason) if reason else "no reason given"


def check_accepted(accepted: Sequence[str]) -> None:
    """Raise ValueError, listing the known facts, when ``accepted`` names a fact ``FACTS`` lacks."""
    unknown = [fact for fact in accepted if fact not in FACTS]
    if unknown:
        raise ValueError(
            f"accept_host_differences: unknown fact(s) {', '.join(unknown)}; the facts are {', '.join(FACTS)}"
        )


@dataclass(frozen=True)
class EquivalenceResult:
    """The hosts' differences in every pool, split by whether the campaign accepts them."""

    pools: dict[str, list[str]]
    facts: dict[str, dict[str, Any]]
    """Host -> its fleet facts, for every host of a pool."""
    accepted_facts: list[str]
    refused: list[tuple[str, Difference]]
    """(pool, difference) for each difference in a fact the campaign does not accept."""
    accepted: list[tuple[str, Difference]]
    """(pool, difference) for each difference the campaign accepts: threats to its comparisons."""

    @property
    def ok(self) -> bool:
        """Whether the campaign may run: nothing refused."""
        return not self.refused

    def message(self) -> str:
        """Why the campaign is refused, one line per difference, then how to accept them; "" when ok."""
        if self.ok:
            return ""
        lines = ["the hosts of a pool differ, so the configs run on them would not compare fairly:"]
        lines += [f"  pool {pool}: {difference.describe()}" for pool, difference in self.refused]
        refused = {difference.fact for _, difference in self.refused}
        to_accept = [fact for fact in FACTS if fact in refused or fact in self.accepted_facts]
        them = "it as a threat" if len(refused) == 1 else "them as threats"
        lines.append(
            f"set accept_host_differences: [{', '.join(to_accept)}] in the campaign to run anyway; "
            f"the report will list {them}"
        )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """fleet.json's ``equivalence`` (the module docstring)."""
        return {
            "pools": self.pools,
            "hosts": list(dict.fromkeys(host for hosts in self.pools.values() for host in hosts)),
            "facts": self.facts,
            "accepted_facts": self.accepted_facts,
            "refused": [{"pool": pool, **difference.to_json()} for pool, difference in self.refused],
            "accepted": [{"pool": pool, **difference.to_json()} for pool, difference in self.accepted],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EquivalenceResult:
        def pairs(key: str) -> list[tuple[str, Difference]]:
            return [(entry["pool"], Difference.from_json(entry)) for entry in data[key]]

        return cls(
            pools={pool: list(hosts) for pool, hosts in data["pools"].items()},
            facts={host: dict(facts) for host, facts in data["facts"].items()},
            accepted_facts=list(data["accepted_facts"]),
            refused=pairs("refused"),
            accepted=pairs("accepted"),
        )


def check_pools(
    facts_by_host: Mapping[str, Mapping[str, Any]],
    pools: Mapping[str, Sequence[str]],
    accepted: Sequence[str],
) -> EquivalenceResult:
    """Compare the hosts of each pool (name -> hosts, in order); ``accepted``: the campaign's
    ``accept_host_differences``, each a name of ``FACTS`` (else ValueError, see ``check_accepted``)."""
    check_accepted(accepted)
    refused: list[tuple[str, Difference]] = []
    taken: list[tuple[str, Difference]] = []
    for pool, hosts in pools.items():
        for difference in differences(facts_by_host, hosts):
            (taken if difference.fact in accepted else refused).append((pool, difference))
    return EquivalenceResult(
        pools={pool: list(hosts) for pool, hosts in pools.items()},
        facts={host: dict(facts_by_host[host]) for hosts in pools.values() for host in hosts},
        accepted_facts=list(accepted),
        refused=refused,
        accepted=taken,
    )
