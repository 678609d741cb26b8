"""The fleet keys of a campaign file: how its configs' servers are placed on the hosts of a pool.

At the top level:

- ``placement`` (``PLACEMENTS``): ``spread`` (``DEFAULT_PLACEMENT``) runs each config, and each repeat of
  it, on one host of its pool, the hosts taking the next job when free; ``every-host`` runs every config on
  every host of its pool, to compare the hosts' hardware.
- ``accept_host_differences``: names of host facts (``fairbench.campaign.fleet_facts.FACTS``) that may differ
  between the hosts of a pool: such a difference is reported as a threat instead of stopping a spread
  campaign. Each name once; default none.
- ``isolated_hosts``: true or false (``DEFAULT_ISOLATED_HOSTS``). Hosts found to share one machine
  (fairbench.fleet.sharing) take jobs one at a time, since jobs measured on one machine at the same time
  interfere; true declares that they do not (each has cores, memory and GPUs of its own), and they take
  jobs at the same time. It names no host: the hosts are the inventory's, found sharing when the run
  starts.

In a config, each inherited through ``extends`` unless the config sets its own (``common`` takes neither:
they place one config's server, they are no setting of the fair baseline):

- ``nodes``: the hosts one server spans (``NODES``), default 1. fairbench renders SGLang's ``--nnodes``,
  ``--node-rank`` and ``--dist-init-addr`` per host, so ``args`` may not carry them. ``gpus`` stays the
  server's total; each host runs ``gpus / nodes`` of them (``gpus_per_node``), so ``nodes`` must divide it.
- ``hosts``: the inventory group the config is pinned to (``GROUP_NAME``), or null for the campaign's pool
  (the play's hosts), the default; null in a config returns a child of a pinned config to the pool. Only
  its shape is checked here: the fleet planner, which reads the inventory, checks that the group exists.

The rules across these keys and the settings live in ``fairbench.campaign.rules``: ``nodes`` must divide the
server's GPUs, a server over several hosts holds no data-parallel replicas (SGLang refuses them), and it
needs ``placement: spread``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fairbench.campaign.checks import Fields, bounded
from fairbench.campaign.findings import Findings, describe
from fairbench.campaign.fleet_facts import FACTS
from fairbench.campaign.model import DEFAULT_ISOLATED_HOSTS, DEFAULT_NODES
from fairbench.measure.bounds import NODES

GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""An inventory group's name as Ansible takes it without a warning: letters, digits and ``_``, starting
with a letter or ``_``."""


def host_fact_names(findings: Findings, path: str, value: object) -> tuple[str, ...]:
    """``accept_host_differences``: a list of distinct names of ``FACTS``."""
    if not isinstance(value, list):
        findings.error(path, f"must be a list of host facts, got {describe(value)}")
        return ()
    names: dict[str, None] = {}  # ordered, and a repeat is found at once
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        if not isinstance(item, str) or item not in FACTS:
            suggestion = findings.did_you_mean(item, FACTS) if isinstance(item, str) else ""
            findings.error(
                item_path,
                f"unknown host fact {describe(item)}; expected one of {', '.join(FACTS)}{suggestion}",
            )
        elif item in names:
            findings.error(item_path, f"{item!r} is listed twice")
        else:
            names[item] = None
    return tuple(names)


def isolated_hosts(findings: Findings, path: str, value: object) -> bool:
    """``isolated_hosts``: true or false."""
    if isinstance(value, bool):
        return value
    findings.error(path, f"must be true or false, got {describe(value)}")
    return DEFAULT_ISOLATED_HOSTS


def _group(findings: Findings, path: str, value: object) -> str | None:
    """``hosts``: an inventory group's name, or null for the campaign's pool."""
    if value is None or (isinstance(value, str) and GROUP_NAME.fullmatch(value)):
        return value
    findings.error(
        path,
        f"must name an inventory group (letters, digits and '_', starting with a letter or '_') or be "
        f"null for the campaign's pool, got {describe(value)}",
    )
    return None


@dataclass(frozen=True)
class Scheduling:
    """Where a config's server runs: the hosts it spans, and the inventory group it is pinned to."""

    nodes: int = DEFAULT_NODES
    hosts: str | None = None
    """None: the campaign's pool."""


@dataclass(frozen=True)
class OwnScheduling:
    """What one config's entry says of ``nodes`` and ``hosts``; what it leaves out it inherits."""

    nodes: int | None = None
    """None: inherited."""
    hosts: str | None = None
    sets_hosts: bool = False
    """Whether the entry has ``hosts``: its null returns the config to the campaign's pool."""

    def over(self, inherited: Scheduling) -> Scheduling:
        """The config's scheduling, given what it inherits."""
        return Scheduling(
            nodes=inherited.nodes if self.nodes is None else self.nodes,
            hosts=self.hosts if self.sets_hosts else inherited.hosts,
        )


def own_scheduling(fields: Fields) -> OwnScheduling:
    """A config entry's ``nodes`` and ``hosts``, each checked."""
    return OwnScheduling(
        nodes=fields.get("nodes", bounded(NODES), None),
        hosts=fields.get("hosts", _group, None),
        sets_hosts="hosts" in fields,
    )
