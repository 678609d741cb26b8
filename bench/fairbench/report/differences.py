"""What differed: every effective setting that differs between two config results, and who declared it.

Settings come from four files of each config (DESIGN.md, "Results"), flattened to dotted names:

- ``server``: the server's ``/server_info`` (server_info.json): every launch argument with its effective
  value, so the defaults nobody set (CUDA graph settings, attention backend, ...) are compared too, and
  the SGLang version;
- ``environment``: the unit's ``Environment=`` lines (unit.service): NCCL_* and everything else;
- ``host``: host.json: OS, kernel, driver, GPUs, package versions;
- ``sweep``: sweep.json: the workload the sweep ran.

A difference is *intended* when the campaign declared it: between two configs of a run, a key that
either config sets or unsets differently from ``common`` (campaign.json's ``declared`` and ``unset``);
between two runs, a key whose value differs between the two runs' campaign.json. A server field is
matched to a declared SGLang flag by argparse's rule (``--ep-size`` is ``ep_size``), nested fields
included (``--cuda-graph-config`` covers ``cuda_graph_config.decode.backend``). *Derived* differences
are values the server computes from its GPUs' memory and the parallel layout. Every other difference is
a *threat* to the comparison.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from fairbench.report.load import ConfigResult, Run

SOURCES = ("server", "environment", "host", "sweep")
SOURCE_FILES = {
    "server": "server_info.json",
    "environment": "unit.service",
    "host": "host.json",
    "sweep": "sweep.json",
}

IGNORED_FIELDS: dict[str, dict[str, str]] = {
    "server": {
        "host": "the address the server listens on: set per host by the serving role",
        "port": "the port the server listens on: set per host by the serving role",
        "nccl_port": "SGLang picks a free port at random when it is not given",
        "random_seed": "SGLang draws one at random when it is not given; it decides sampled tokens, "
        "not timing, and the sweep fixes every output length",
        "launch_command": "the command line as one string: its flags are compared one by one as fields",
        "status": "the server's state when /server_info was read",
        "startup_time": "how long the start took: a measurement, not a setting",
        "internal_states": "per-rank copies of the fields compared here, plus live counters",
        "sim.profile_description": "the text of sim.profile, which is compared",
        "sim.layout": "the simulator's model, derived from the SGLang flags compared as fields",
        "sim.performance_model": "the simulator's model, derived from the SGLang flags compared as fields",
        "sim.scheduler": "the simulator's model, derived from the SGLang flags compared as fields",
        "sim.modelled_flags": "the simulator's own list, the same for every server of one version",
        "sim.not_modelled_flags": "which set flags the simulator ignores: follows from the flags compared",
    },
    "host": {
        "hostname": "names the host: two hosts differ in it by definition",
        "gpu.gpus.*.uuid": "names one GPU: two GPUs differ in it by definition",
        "gpu.gpus.*.pci_bus_id": "where a GPU sits on its host's PCI bus, which the link matrix describes",
    },
}
"""Fields that differ between runs or hosts by their nature, with the reason each is not compared."""

DERIVED_FIELDS = {
    "max_total_num_tokens": "the KV cache's capacity, from GPU memory left after the weights",
    "max_req_input_len": "follows from the KV cache's capacity and the context length",
}
"""Server fields SGLang computes from the GPUs' memory and the layout: shown, but not threats."""

SIM_FLAG_FIELDS = {
    "sim-profile": "sim.profile",
    "sim-time-scale": "sim.time_scale",
    "sim-load-seconds": "sim.load_seconds",
    "sim-fault": "sim.faults",
}
"""The simulator's own flags and the /server_info fields that report them."""

ABSENT = "(absent)"
"""Stands in for a setting one side does not have."""


@dataclass(frozen=True)
class Declared:
    """The keys a campaign declared different between the two sides of a comparison."""

    args: frozenset[str] = frozenset()
    env: frozenset[str] = frozenset()
    sim: frozenset[str] = frozenset()
    workload: bool = False

    def covers(self, source: str, name: str) -> bool:
        if source == "environment":
            return name in self.env
        if source == "sweep":
            return self.workload
        if source != "server":
            return False
        fields = [key.replace("-", "_") for key in self.args]
        fields += [SIM_FLAG_FIELDS[key] for key in self.sim if key in SIM_FLAG_FIELDS]
        return any(name == field or name.startswith(field + ".") for field in fields)


@dataclass(frozen=True)
class SettingDifference:
    source: str
    name: str
    value_a: Any
    value_b: Any
    verdict: str
    """``intended``, ``derived`` or ``threat``."""


@dataclass(frozen=True)
class PairDifferences:
    a: ConfigResult
    b: ConfigResult
    differences: list[SettingDifference]
    not_compared: list[str]
    """Sources missing on either side, e.g. ``server (no server_info.json for ep4)``."""

    def with_verdict(self, verdict: str) -> list[SettingDifference]:
        return [difference for difference in self.differences if difference.verdict == verdict]


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted names; lists and scalars are values. An empty mapping adds
    nothing, so ``{}`` and a missing mapping compare equal (the simulator reports no faults as ``{}``)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= flatten(value, name + ".")
        else:
            flat[name] = value
    return flat


def _ignored(source: str, name: str) -> bool:
    ignored = IGNORED_FIELDS.get(source, {})
    return any(fnmatchcase(name, field) or name.startswith(field + ".") for field in ignored)


def _gpus_by_index(host_info: Mapping[str, Any]) -> Mapping[str, Any]:
    """host.json with its GPU list keyed by GPU index, so that each GPU's fields compare one by one."""
    gpu = host_info.get("gpu")
    if not isinstance(gpu, Mapping) or not isinstance(gpu.get("gpus"), list):
        return host_info
    gpus = {str(entry.get("index", number)): entry for number, entry in enumerate(gpu["gpus"])}
    return {**host_info, "gpu": {**gpu, "gpus": gpus}}


def settings(result: ConfigResult) -> dict[str, dict[str, Any] | None]:
    """Each source's settings of one config result, ignored fields removed; None when its file is missing."""
    raw: dict[str, Mapping[str, Any] | None] = {
        "server": result.server_info,
        "environment": result.environment,
        "host": None if result.host_info is None else _gpus_by_index(result.host_info),
        "sweep": result.sweep_settings,
    }
    return {
        source: None
        if data is None
        else {name: value for name, value in flatten(data).items() if not _ignored(source, name)}
        for source, data in raw.items()
    }


def compare_settings(a: ConfigResult, b: ConfigResult, declared: Declared) -> PairDifferences:
    settings_a, settings_b = settings(a), settings(b)
    differences = []
    not_compared = []
    for source in SOURCES:
        side_a, side_b = settings_a[source], settings_b[source]
        if side_a is None or side_b is None:
            lacking = [result for result, side in ((a, side_a), (b, side_b)) if side is None]
            names = " and ".join(f"{result.host}/{result.name}" for result in lacking)
            not_compared.append(f"{source} (no {SOURCE_FILES[source]} for {names})")
            continue
        for name in sorted(side_a.keys() | side_b.keys()):
            value_a, value_b = side_a.get(name, ABSENT), side_b.get(name, ABSENT)
            if value_a == value_b and type(value_a) is type(value_b):
                continue
            if declared.covers(source, name):
                verdict = "intended"
            elif source == "server" and name in DERIVED_FIELDS:
                verdict = "derived"
            else:
                verdict = "threat"
            differences.append(SettingDifference(source, name, value_a, value_b, verdict))
    return PairDifferences(a, b, differences, not_compared)


def _keys(entry: Mapping[str, Any], part: str, section: str) -> set[str]:
    return set(entry.get(part, {}).get(section, []))


def declared_between_configs(run: Run, a: str, b: str) -> Declared:
    """What sets config ``a`` and config ``b`` apart by the campaign: their own args, env and unset keys."""
    entries = [run.declared(a), run.declared(b)]

    def section_keys(section: str) -> frozenset[str]:
        return frozenset(
            key for entry in entries for part in ("declared", "unset") for key in _keys(entry, part, section)
        )

    return Declared(args=section_keys("args"), env=section_keys("env"), sim=section_keys("sim"))


def declared_between_runs(run_a: Run, run_b: Run, config: str) -> Declared:
    """What the two runs' campaign.json say differently about one config and the workload."""
    entry_a, entry_b = run_a.declared(config), run_b.declared(config)

    def changed(section: str) -> frozenset[str]:
        values_a, values_b = entry_a.get(section, {}), entry_b.get(section, {})
        return frozenset(
            key for key in values_a.keys() | values_b.keys() if values_a.get(key) != values_b.get(key)
        )

    return Declared(
        args=changed("args"),
        env=changed("env"),
        sim=changed("sim"),
        workload=run_a.campaign.get("workload") != run_b.campaign.get("workload"),
    )


def config_differences(run: Run) -> list[PairDifferences]:
    """Every pair of config results of one run (configs and hosts), in the run's order."""
    return [
        compare_settings(a, b, declared_between_configs(run, a.name, b.name))
        for a, b in itertools.combinations(run.results, 2)
    ]


def run_differences(run_a: Run, run_b: Run) -> list[PairDifferences]:
    """Each host/config present in both runs against itself."""
    in_b = {(result.host, result.name): result for result in run_b.results}
    return [
        compare_settings(a, in_b[(a.host, a.name)], declared_between_runs(run_a, run_b, a.name))
        for a in run_a.results
        if (a.host, a.name) in in_b
    ]


@dataclass(frozen=True)
class Threat:
    """One setting that differs without the campaign declaring it, with each config's value."""

    source: str
    name: str
    values: list[tuple[ConfigResult, Any]]


def threats(pairs: Iterable[PairDifferences]) -> list[Threat]:
    """The threatening settings of all pairs, each once, with the value of every config that has it."""
    found: dict[tuple[str, str], dict[int, tuple[ConfigResult, Any]]] = {}
    for pair in pairs:
        for difference in pair.with_verdict("threat"):
            values = found.setdefault((difference.source, difference.name), {})
            values[id(pair.a)] = (pair.a, difference.value_a)
            values[id(pair.b)] = (pair.b, difference.value_b)
    return [Threat(source, name, list(values.values())) for (source, name), values in found.items()]
