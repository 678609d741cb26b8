"""The jobs of a campaign run and the pools of hosts that may take them.

A job is one server's life: started clean, swept, stopped. Which jobs exist follows from the campaign's
placement (``campaign.model.PLACEMENTS``):

- ``spread``: one job per config and repeat (``tp8#r0``), taken by any host of the config's pool, so a
  config's repeats may run on different hosts and each repeat is a fresh server;
- ``every-host``: one job per config and host of its pool (``tp8@lab1``), with every repeat, as a hardware
  comparison needs the same config on each host.

A config's pool is the play's hosts, or those of the inventory group it is pinned to (``hosts:``); a
server over ``nodes`` hosts needs that many hosts of its pool at once. Hosts in ``excluded`` (their deploy
failed) take no job. Jobs are listed in the order they are taken: under ``spread`` in rounds, each round
one repeat of every config (every config's first repeat before any config's second, so a slow drift of the
machines does not fall on one config), in an order drawn per round from the campaign's seed
(``round_order``: a config measured first or last in every round would meet the same part of any periodic
load each time); under ``every-host``, the campaign's config order.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fairbench.campaign.model import DEFAULT_NODES, EVERY_HOST, SPREAD, repeats_json, workloads_json
from fairbench.measure.repeats import most, planned, repeats_from_json
from fairbench.measure.workload import DEFAULT_SEED

PLAY_POOL = "gpu_hosts"
"""The pool of a config pinned to no group: the play's hosts, named after the inventory group it runs on."""


class PlanError(Exception):
    """The campaign cannot be placed on these hosts; the message says which config and why."""


@dataclass(frozen=True)
class Job:
    id: str
    config: str
    repeats: tuple[int, ...]
    """The repeats this job measures (``point_id``'s repeat numbers)."""
    pool: str
    """The pool's name: PLAY_POOL or the inventory group the config is pinned to."""
    hosts: tuple[str, ...]
    """The hosts that may take it: its pool, or under ``every-host`` the one host it is for."""
    nodes: int
    """Hosts its server spans, rank 0 first; each takes part until the job ends."""
    extends_repeats: bool = False
    """Whether its sweep adds automatic repeats itself (every-host: one server measures all of a config's
    repeats on its host); under spread the queue adds them as jobs (``fleet.queue``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "config": self.config,
            "repeats": list(self.repeats),
            "pool": self.pool,
            "eligible": list(self.hosts),
            "nodes": self.nodes,
            "extends_repeats": self.extends_repeats,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Job:
        return cls(
            id=str(data["id"]),
            config=str(data["config"]),
            repeats=tuple(int(repeat) for repeat in data["repeats"]),
            pool=str(data["pool"]),
            hosts=tuple(str(host) for host in data["eligible"]),
            nodes=int(data["nodes"]),
            extends_repeats=bool(data.get("extends_repeats", False)),
        )


def pools(
    campaign: Mapping[str, Any], groups: Mapping[str, Sequence[str]], play_hosts: Sequence[str]
) -> dict[str, list[str]]:
    """Each pool the campaign's configs use, by name, with its hosts in the play's order: PLAY_POOL, and each
    group a config is pinned to (only its hosts that are in the play)."""
    found = {PLAY_POOL: list(play_hosts)}
    for name, config in campaign["configs"].items():
        group = config.get("hosts")
        if group is None or group in found:
            continue
        if group not in groups:
            known = ", ".join(sorted(g for g in groups if g not in ("all", "ungrouped")))
            raise PlanError(f"config {name}: hosts: {group} is no inventory group (groups: {known})")
        members = set(groups[group])
        found[group] = [host for host in play_hosts if host in members]
    return found


def check_gpus(
    campaign: Mapping[str, Any], pools_by_name: Mapping[str, Sequence[str]], facts: Mapping[str, Any]
) -> None:
    """With engine sglang, PlanError naming every host of a config's pool that has fewer GPUs than the
    config's server needs on each of its hosts (``gpus_per_node``), from the hosts' fleet facts
    (``hosts.fleet_facts``); a host without facts (check mode before the first deploy) is not judged."""
    if campaign["engine"] != "sglang":
        return
    refused = []
    for config in campaign["configs"].values():
        for host in pools_by_name[config.get("hosts") or PLAY_POOL]:
            described = facts.get(host)
            if not described or described["gpu_count"] >= config["gpus_per_node"]:
                continue
            what = described["gpu_model"] or described.get("reasons", {}).get("gpu_model", "no GPUs")
            over = f", over {config['nodes']} hosts" if config.get("nodes", DEFAULT_NODES) > 1 else ""
            refused.append(
                f"{host}: config {config['name']} needs {config['gpus_per_node']} GPUs per host "
                f"({config['gpus_formula']}{over}), the host has {described['gpu_count']} ({what})"
            )
    if refused:
        raise PlanError("\n".join(refused))


def plan(
    campaign: Mapping[str, Any],
    pools_by_name: Mapping[str, Sequence[str]],
    *,
    placement: str,
    excluded: Sequence[str] = (),
) -> list[Job]:
    """The run's jobs, in the order they are taken (module docstring). PlanError when a config's pool has
    fewer hosts than its server needs; one whose usable hosts (less ``excluded``) are too few still gets
    its jobs, which the queue leaves unplaced (``queue.new_state``)."""
    policy = repeats_from_json(repeats_json(campaign))
    repeats = planned(policy)
    configs = list(campaign["configs"].values())
    usable = {
        name: tuple(host for host in hosts if host not in excluded) for name, hosts in pools_by_name.items()
    }
    for config in configs:
        pool = config.get("hosts") or PLAY_POOL
        nodes = int(config.get("nodes", DEFAULT_NODES))
        if len(pools_by_name[pool]) < nodes:
            raise PlanError(
                f"config {config['name']}: its server spans {nodes} host(s), but pool {pool} has "
                f"{len(pools_by_name[pool])}: {', '.join(pools_by_name[pool]) or 'none'}"
            )
    if placement == SPREAD:
        by_name = {str(config["name"]): config for config in configs}
        seed = rounds_seed(campaign)
        return [
            _job(by_name[name], f"{name}#r{repeat}", (repeat,), usable)
            for repeat in range(repeats)
            for name in round_order(list(by_name), seed, repeat, rounds=most(policy) > 1)
        ]
    if placement == EVERY_HOST:
        return [
            replace(
                _job(config, f"{config['name']}@{host}", tuple(range(repeats)), usable, host=host),
                extends_repeats=True,
            )
            for config in configs
            for host in usable[config.get("hosts") or PLAY_POOL]
        ]
    raise PlanError(f"placement {placement!r}: not {SPREAD} or {EVERY_HOST}")


def rounds_seed(campaign: Mapping[str, Any]) -> int:
    """The seed the rounds' orders are drawn from: the campaign's (its first workload's ``seed``)."""
    return int(next(iter(workloads_json(campaign).values())).get("seed", DEFAULT_SEED))


def round_order(configs: Sequence[str], seed: int, round_index: int, *, rounds: bool = True) -> list[str]:
    """The order round ``round_index`` measures ``configs`` in, counterbalanced in pairs of rounds: an even
    round draws a permutation from ``seed`` and the round, the odd round after it measures the same
    configs in the reverse order. Any two configs then meet in both orders within each pair of rounds, so a
    load that changes over a round's jobs (one that grows, or toggles every other job) lands on each
    alike, which a drawn order alone leaves to chance (with two configs, three drawn rounds are all in one
    order a quarter of the time). The same seed draws the same, for a run, its resume and the plan. A
    campaign of one round (``rounds`` false: one repeat) keeps its own order: no comparison is tested over a
    single repeat."""
    if not rounds:
        return list(configs)
    drawn = random.Random(f"{seed}/{round_index - round_index % 2}").sample(list(configs), len(configs))
    return drawn[::-1] if round_index % 2 else drawn


def most_jobs(campaign: Mapping[str, Any], jobs: Sequence[Job], *, placement: str) -> int:
    """The most jobs the run may have: those planned, and under spread with automatic repeats the further
    repeats the queue may add to each config (up to ``max`` in all)."""
    repeats = repeats_from_json(repeats_json(campaign))
    extra = most(repeats) - planned(repeats) if placement == SPREAD else 0
    return len(jobs) + extra * len(campaign["configs"])


def _job(
    config: Mapping[str, Any],
    job_id: str,
    repeats: tuple[int, ...],
    usable: Mapping[str, tuple[str, ...]],
    host: str | None = None,
) -> Job:
    pool = config.get("hosts") or PLAY_POOL
    return Job(
        id=job_id,
        config=str(config["name"]),
        repeats=repeats,
        pool=pool,
        hosts=(host,) if host else usable[pool],
        nodes=int(config.get("nodes", DEFAULT_NODES)),
    )
