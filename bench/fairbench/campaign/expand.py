"""Each config expanded into what its server is launched with.

A config's settings are ``common``'s, then those of each config of its ``extends`` chain, root first: each
level first removes the keys it ``unset``s (each must be set by what it inherits, and not set again by the
same config), then sets its own. A chain that names an unknown config or runs in a cycle is reported, and
the configs on or behind it are left out. The expanded settings are rendered into each config's argv, its
unit's name and the GPUs its server needs; what a config declares is what differs from ``common``.
A config's ``nodes`` and ``hosts`` are its own where it sets them, else its parent's, else the defaults
(``fairbench.campaign.fleet``); its GPUs are shared evenly by its ``nodes`` hosts (``gpus_per_node``).

Once the expanded configs hold more than ``MAX_EXPANDED_VALUES`` flag values and variables in all, the file
is refused as no campaign: a few lines of ``extends`` must not take seconds and gigabytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from fairbench.campaign.disaggregation import OwnDisaggregation, disaggregate
from fairbench.campaign.findings import Findings
from fairbench.campaign.fleet import Scheduling
from fairbench.campaign.model import (
    UNIT_NAME_MAX,
    ServingConfig,
    Settings,
    UnsetKeys,
    gpus_needed,
    render_flags,
    unit_name,
)
from fairbench.campaign.structure import Layer

MAX_EXPANDED_VALUES = 100_000
"""Every config repeats what it inherits: its flags' values and its variables, summed over the configs, stay
below this (about a hundred in a shipped campaign), or a small file would take seconds and gigabytes."""

V = TypeVar("V")


def expand(
    findings: Findings,
    campaign: str,
    engine: str,
    model: str,
    *,
    common: Settings,
    layers: Mapping[str, Layer],
) -> dict[str, ServingConfig]:
    """The configs whose ``extends`` chains hold, expanded, in the file's order."""
    chains = _extends_chains(findings, layers)
    effective = _effective_settings(findings, common, layers, chains)
    scheduling = _scheduling(layers, chains)
    disaggregation = _own_disaggregation(layers, chains)
    configs = {
        name: _serving_config(
            campaign,
            engine,
            model,
            common=common,
            chain=chains[name],
            settings=settings,
            scheduling=scheduling[name],
            disaggregation=disaggregation[name],
        )
        for name, settings in effective.items()
    }
    for name, config in configs.items():
        if len(config.unit) > UNIT_NAME_MAX:
            findings.error(
                f"configs.{name}", f"unit name {config.unit} is longer than {UNIT_NAME_MAX} characters"
            )
    return configs


def _extends_chains(findings: Findings, layers: Mapping[str, Layer]) -> dict[str, tuple[str, ...]]:
    """Each config's chain, root first and itself last, in the file's order; configs on or behind a broken
    chain are left out. A walk stops at a config already walked: a long chain costs its length once."""
    for name, layer in layers.items():
        if layer.extends is not None and layer.extends not in layers:
            findings.error(
                f"configs.{name}.extends",
                f"unknown config {layer.extends!r}{findings.did_you_mean(layer.extends, layers)}",
            )
    chains: dict[str, tuple[str, ...]] = {}
    broken: set[str] = set()
    for name in layers:
        walked = [name]
        on_walk = {name}
        parent = layers[name].extends
        while (
            parent is not None
            and parent in layers
            and parent not in on_walk
            and parent not in chains
            and parent not in broken
        ):
            walked.append(parent)
            on_walk.add(parent)
            parent = layers[parent].extends
        if parent is None or parent in chains:
            chain = () if parent is None else chains[parent]
            for config in reversed(walked):
                chain = (*chain, config)
                chains[config] = chain
            continue
        if parent in on_walk:  # a cycle, found once: later walks stop at its broken configs
            cycle = walked[walked.index(parent) :]
            findings.error(f"configs.{cycle[-1]}.extends", f"cycle: {' -> '.join([*cycle, parent])}")
        broken.update(walked)
    return {name: chains[name] for name in layers if name in chains}


def _without_unset(
    findings: Findings, path: str, inherited: Mapping[str, V], own: Mapping[str, V], unset: Sequence[str]
) -> dict[str, V]:
    """``inherited`` less the ``unset`` keys, each of which must be there and not set again by ``own``."""
    kept = dict(inherited)
    for index, key in enumerate(unset):
        key_path = f"{path}[{index}]"
        if key in own:
            findings.error(key_path, f"{key!r} is both set and unset by this config")
        elif key not in kept:
            findings.error(key_path, f"{key!r} is not set by common or by the configs this one extends")
        kept.pop(key, None)
    return kept


def _apply(findings: Findings, path: str, inherited: Settings, layer: Layer) -> Settings:
    own, unset = layer.own, layer.unset
    unset_path = f"{path}.unset"
    return Settings(
        args=_without_unset(findings, f"{unset_path}.args", inherited.args, own.args, unset.args) | own.args,
        env=_without_unset(findings, f"{unset_path}.env", inherited.env, own.env, unset.env) | own.env,
        sim=_without_unset(findings, f"{unset_path}.sim", inherited.sim, own.sim, unset.sim) | own.sim,
    )


def _effective_settings(
    findings: Findings, common: Settings, layers: Mapping[str, Layer], chains: Mapping[str, tuple[str, ...]]
) -> dict[str, Settings]:
    """Each config's settings: common, then every config of its chain; each layer's unset checked once.
    None at all once they hold more than ``MAX_EXPANDED_VALUES`` values (reported)."""
    effective: dict[str, Settings] = {}
    values = 0
    for chain in chains.values():
        done = len(chain)  # the configs before ``done`` are expanded already
        while done and chain[done - 1] not in effective:
            done -= 1
        for name in chain[done:]:
            parent = layers[name].extends
            inherited = common if parent is None else effective[parent]
            effective[name] = _apply(findings, f"configs.{name}", inherited, layers[name])
            values += _value_count(effective[name])
            if values > MAX_EXPANDED_VALUES:
                findings.error(
                    "configs",
                    f"more than {MAX_EXPANDED_VALUES:,} flag values and variables once each config "
                    "repeats what it inherits: not a campaign file",
                )
                return {}
    return {name: effective[name] for name in chains}


def _scheduling(layers: Mapping[str, Layer], chains: Mapping[str, tuple[str, ...]]) -> dict[str, Scheduling]:
    """Each config's ``nodes`` and ``hosts``: its own where it sets them, else its parent's, else the
    defaults; like the settings, each config's worked out once."""
    scheduling: dict[str, Scheduling] = {}
    for chain in chains.values():
        done = len(chain)
        while done and chain[done - 1] not in scheduling:
            done -= 1
        for name in chain[done:]:
            parent = layers[name].extends
            inherited = Scheduling() if parent is None else scheduling[parent]
            scheduling[name] = layers[name].scheduling.over(inherited)
    return scheduling


def _own_disaggregation(
    layers: Mapping[str, Layer], chains: Mapping[str, tuple[str, ...]]
) -> dict[str, OwnDisaggregation | None]:
    """Each config's ``disaggregation``: that of the nearest config of its chain that sets it (itself
    first), None where none does."""
    return {
        name: next(
            (layers[link].disaggregation for link in reversed(chain) if layers[link].sets_disaggregation),
            None,
        )
        for name, chain in chains.items()
    }


def _value_count(settings: Settings) -> int:
    """The words a config's flags and variables take on its command line and in its environment."""
    flags = [*settings.args.values(), *settings.sim.values()]
    return len(settings.env) + sum(len(value) if isinstance(value, tuple) else 1 for value in flags)


def _differences(common: Mapping[str, V], effective: Mapping[str, V]) -> dict[str, V]:
    return {
        key: value
        for key, value in effective.items()
        if key not in common or type(common[key]) is not type(value) or common[key] != value
    }


def _serving_config(
    campaign: str,
    engine: str,
    model: str,
    *,
    common: Settings,
    chain: Sequence[str],
    settings: Settings,
    scheduling: Scheduling,
    disaggregation: OwnDisaggregation | None,
) -> ServingConfig:
    name = chain[-1]
    sglang_argv = ("--model-path", model, *render_flags(settings.args))
    sim_argv = render_flags(settings.sim) if engine == "sim" else []
    gpus, gpus_formula = gpus_needed(settings.args)
    servers = None
    if disaggregation is not None:
        role_sim = settings.sim if engine == "sim" else None
        servers = disaggregate(campaign, name, disaggregation, args=settings.args, model=model, sim=role_sim)
        gpus, gpus_formula = servers.gpus, servers.gpus_formula()
    return ServingConfig(
        name=name,
        unit=unit_name(campaign, name),
        extends=tuple(reversed(chain[:-1])),
        args=settings.args,
        env=dict(sorted(settings.env.items())),
        sim=settings.sim,
        declared=Settings(
            args=_differences(common.args, settings.args),
            env=_differences(common.env, settings.env),
            sim=_differences(common.sim, settings.sim),
        ),
        unset=UnsetKeys(
            args=tuple(key for key in common.args if key not in settings.args),
            env=tuple(key for key in common.env if key not in settings.env),
            sim=tuple(key for key in common.sim if key not in settings.sim),
        ),
        sglang_argv=sglang_argv,
        argv=(*sglang_argv, *sim_argv),
        gpus=gpus,
        gpus_formula=gpus_formula,
        nodes=scheduling.nodes,
        # Where nodes does not divide gpus, the rules refuse the campaign: the floor only stands in.
        gpus_per_node=gpus // scheduling.nodes,
        hosts=scheduling.hosts,
        disaggregation=servers,
    )
