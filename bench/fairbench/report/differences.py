"""What differed: every effective setting that differs between two config results, and who declared it.

Settings come from four files of each config (docs/results.md), flattened to dotted names:

- ``server``: the server's ``/server_info`` (server_info.json): every launch argument with its effective
  value, so the defaults nobody set (CUDA graph settings, attention backend, ...) are compared too, and
  the SGLang version;
- ``environment``: the unit's ``Environment=`` lines (unit.service): NCCL_* and everything else;
- ``host``: host.json: OS, kernel, driver, GPUs, the Python and fairbench versions;
- ``sweep``: sweep.json: the workload the sweep ran.

A difference is *intended* when the campaign declared it: between two configs of a run, a key that
either config sets or unsets differently from ``common`` (campaign.json's ``declared`` and ``unset``);
between two runs, a key whose value differs between the two runs' campaign.json. A server field is
matched to a declared SGLang flag by argparse's rule (``--ep-size`` is ``ep_size``), nested fields
included (``--cuda-graph-config`` covers ``cuda_graph_config.decode.backend``); two configs whose
``nodes`` differ declare the fields that follow from it (``NODES_FIELDS``), and a disaggregated config
declares the flags its roles set over its own (its server_info.json is its first decode server's).
*Derived* differences are values the server computes from its GPUs' memory and the parallel layout,
unless a flag that sets the value explicitly differs between the two launch commands without the campaign
declaring it. Every other difference is a *threat* to the comparison.

Which pairs are compared follows the run's placement: under ``spread`` every pair of configs, each merged
over its hosts, with the settings files of its first directory (its rank-0 host's); under ``every-host``
every pair of configs on one host, and each config on every pair of its hosts (the hardware comparison).
A host fact the campaign accepted differing between the hosts of a pool (fleet.json's
``equivalence.accepted``) is a threat to every pair whose hosts do not all agree on it.

``/server_info`` also lists each DP rank's scheduler state (``internal_states``): the settings as that
scheduler resolved them (a ``/set_internal_state`` override included), then its own figures. A rank's
field is compared as ``internal_states.<rank>.<field>`` only where it departs from the top-level field
of the same name; elsewhere it repeats it, and counts as that value.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from fairbench.campaign.model import DEFAULT_NODES, EVERY_HOST, SPREAD
from fairbench.report.fleet_file import Fleet
from fairbench.report.load import Run
from fairbench.report.tree import ConfigResult, ConfigRun

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
        "last_gen_throughput": "a DP rank's last decode throughput: a live counter",
        "step_time_dict": "a DP rank's recorded step times: live measurements",
        "avg_spec_accept_length": "speculative decoding's acceptance so far: a live measurement",
        "dspark_info_record": "DSpark's records of the requests served so far",
        "rust_mm_transport": "the Rust server's transfer counters: live measurements",
        "rust_server_startup_time": "how long the Rust server's start took: a measurement",
        "memory_usage.startup_available": "device memory free when the rank started: a measurement of "
        "the moment, whose effect on the KV cache is compared as a derived value",
        "memory_usage.weight": "the drop in free memory while the weights loaded: a measurement; what "
        "sets the weights (model, format, dtype, quantization) is compared",
        "sim.profile_description": "the text of sim.profile, which is compared",
        "sim.layout": "the simulator's model, derived from the SGLang flags compared as fields",
        "sim.performance_model": "the simulator's model, derived from the SGLang flags compared as fields",
        "sim.scheduler": "the simulator's model, derived from the SGLang flags compared as fields",
        "sim.modelled_flags": "the simulator's own list, the same for every server of one version",
        "sim.not_modelled_flags": "which set flags the simulator ignores: follows from the flags compared",
        "dist_init_addr": "where the nodes of a server over several hosts meet: rank 0's address and a "
        "free port, set per start by the serving role",
        "node_rank": "which node of its server a host is: set per host by the serving role",
    },
    "host": {
        "hostname": "names the host: two hosts differ in it by definition",
        "gpu.gpus.*.uuid": "names one GPU: two GPUs differ in it by definition",
        "gpu.gpus.*.pci_bus_id": "where a GPU sits on its host's PCI bus, which the link matrix describes",
    },
}
"""Fields that differ between runs or hosts by their nature, with the reason each is not compared. A
server field's entry holds for every DP rank's copy too (``internal_states.<rank>.<field>``)."""


@dataclass(frozen=True)
class Derived:
    """A server field SGLang computes at start from the device's memory and the layout."""

    reason: str
    flags: tuple[str, ...] = ()
    """The flags that set it explicitly; one of them set differently makes the difference a setting's."""


_DECODE_GRAPH_FLAGS = ("--cuda-graph-config", "--cuda-graph-max-bs-decode", "--cuda-graph-bs-decode")
_PREFILL_GRAPH_FLAGS = ("--cuda-graph-config", "--cuda-graph-max-bs-prefill", "--cuda-graph-bs-prefill")
DERIVED_FIELDS = {
    "max_total_num_tokens": Derived("the KV cache's capacity, from device memory left after the weights"),
    "max_req_input_len": Derived("follows from the KV cache's capacity and the context length"),
    "mem_fraction_static": Derived(
        "when not set, from the device's memory size, the chunked prefill size and the layout",
        ("--mem-fraction-static",),
    ),
    "chunked_prefill_size": Derived(
        "when not set, from the device's memory size: 2048 below 20 GiB up to 16384 from 160 GiB",
        ("--chunked-prefill-size",),
    ),
    "cuda_graph_config.decode.max_bs": Derived(
        "when not set, from the device's memory size and tp-size, capped by max-running-requests",
        _DECODE_GRAPH_FLAGS,
    ),
    "cuda_graph_config.decode.bs": Derived(
        "when not set, the batch sizes up to decode.max_bs", _DECODE_GRAPH_FLAGS
    ),
    "decode_cuda_graph_bs": Derived("the decode batch sizes a DP rank captured", _DECODE_GRAPH_FLAGS),
    "cuda_graph_config.prefill.max_bs": Derived(
        "when not set, the chunked prefill size, capped by max-total-tokens", _PREFILL_GRAPH_FLAGS
    ),
    "cuda_graph_config.prefill.bs": Derived(
        "when not set, the batch sizes up to prefill.max_bs", _PREFILL_GRAPH_FLAGS
    ),
    "torch_compile_max_bs": Derived(
        "on a CPU, when not set, the decode CUDA graph's max_bs", ("--torch-compile-max-bs",)
    ),
    "world_size": Derived(
        "a rank's GPUs: tp-size x pp-size (x dp-size)", ("--tp-size", "--pp-size", "--dp-size")
    ),
    "sim.numerics_family.name": Derived(
        "the simulator's name for the numerics its launch flags give (sim.numerics_family.flags)"
    ),
    "effective_max_running_requests_per_dp": Derived(
        "a DP rank's running-request limit, from its KV cache's capacity and max-running-requests"
    ),
    "pp_max_micro_batch_size": Derived(
        "when not set, a DP rank's running-request limit over pp-size", ("--pp-max-micro-batch-size",)
    ),
    "memory_usage.kvcache": Derived("a DP rank's KV cache in GB, from the memory left after the weights"),
    "memory_usage.token_capacity": Derived("a DP rank's KV cache in tokens: max_total_num_tokens"),
    "memory_usage.token_capacity_swa": Derived("a DP rank's sliding-window KV cache in tokens"),
    "memory_usage.graph": Derived("the memory a DP rank's CUDA graphs took, from their batch sizes"),
    "decode_cuda_graph_memory_gb": Derived("the memory a DP rank's decode CUDA graphs took"),
}
"""Server fields SGLang computes from the device's memory and the layout: shown, but not threats. A
field's entry holds for every DP rank's copy too. As SGLang 0.5.23 derives them (sglang/srt/:
``arg_groups/memory_hook.py``, and the scheduler's ``managers/scheduler_components/internal_state.py``)."""

PER_RANK = "internal_states"
"""The /server_info field that lists each DP rank's scheduler state."""
_RANK_PREFIX = re.compile(rf"{PER_RANK}\.\d+\.")
"""How a DP rank's field name starts: ``internal_states.0.``."""

SIM_FLAG_FIELDS = {
    "sim-profile": "sim.profile",
    "sim-time-scale": "sim.time_scale",
    "sim-load-seconds": "sim.load_seconds",
    "sim-fault": "sim.faults",
    "sim-noise": "sim.noise_pct",
}
"""The simulator's own flags and the /server_info fields that report them."""

NODES_FIELDS = ("nnodes", "sim.nodes")
"""The /server_info fields a config's ``nodes`` sets: fairbench renders ``--nnodes`` from it, and the
simulator reports its nodes under ``sim.nodes``."""
DISAGGREGATION_FIELDS = ("disaggregation_*", "sim.disaggregation", "disable_radix_cache")
"""The /server_info fields a config's ``disaggregation`` sets: fairbench renders ``--disaggregation-mode``
and the bootstrap port per server, SGLang's decode server turns its radix cache off unless
``disaggregation-decode-enable-radix-cache`` says otherwise, and the simulator reports its transfer model
under ``sim.disaggregation``."""

GPU_FLAGS = frozenset({"tp-size", "pp-size", "dp-size", "enable-dp-attention", "device"})
"""The flags a server's GPU count follows from (``campaign.model.gpus_needed``)."""
ABSENT = "(absent)"
"""Stands in for a setting one side does not have."""


@dataclass(frozen=True)
class Declared:
    """The keys a campaign declared different between the two sides of a comparison."""

    args: frozenset[str] = frozenset()
    env: frozenset[str] = frozenset()
    sim: frozenset[str] = frozenset()
    workload: bool = False
    nodes: bool = False
    """Whether the two sides' ``nodes`` (the hosts one server spans) differ."""
    disaggregation: bool = False
    """Whether either side is a disaggregated config (its server_info.json a decode server's)."""

    @property
    def sets_gpus(self) -> bool:
        """Whether the declared differences change a server's GPU count (``campaign.model.gpus_needed``)."""
        return self.disaggregation or bool(self.args & GPU_FLAGS)

    def covers(self, source: str, name: str) -> bool:
        if source == "environment":
            return name in self.env
        if source == "sweep":
            # The GPUs each point is divided by follow from the layout the campaign declared.
            return self.workload or (name == "gpus" and self.sets_gpus)
        if source != "server":
            return False
        fields = [key.replace("-", "_") for key in self.args]
        fields += [SIM_FLAG_FIELDS[key] for key in self.sim if key in SIM_FLAG_FIELDS]
        fields += list(NODES_FIELDS) if self.nodes else []
        fields += list(DISAGGREGATION_FIELDS) if self.disaggregation else []
        # The simulator reports the numerics flags it was launched with under its numerics family.
        fields += [f"sim.numerics_family.flags.{key.replace('-', '_')}" for key in self.args]
        return _matches(fields, setting_name(name))


@dataclass(frozen=True)
class SettingDifference:
    source: str
    name: str
    value_a: Any
    value_b: Any
    verdict: str
    """``intended``, ``derived`` or ``threat``."""


@dataclass(frozen=True)
class Lacking:
    """A source one side of a comparison does not have: its file is missing or unreadable."""

    source: str
    result: ConfigResult

    @property
    def why(self) -> str:
        """``server_info.json missing``, or ``... unreadable``."""
        file = SOURCE_FILES[self.source]
        return f"{file} {'unreadable' if file in self.result.unreadable else 'missing'}"


@dataclass(frozen=True)
class AcceptedDifference:
    """A host fact the campaign accepted differing between the hosts of a pool (fleet.json), touching one
    comparison: the hosts of its two sides do not all agree on it."""

    pool: str
    fact: str
    values_a: dict[str, Any]
    """Each host of side A that the pool's check saw -> its value."""
    values_b: dict[str, Any]


@dataclass(frozen=True)
class PairDifferences:
    a: ConfigResult
    b: ConfigResult
    differences: list[SettingDifference]
    not_compared: list[Lacking]
    """Each source missing on either side: none of its settings were compared."""
    accepted: list[AcceptedDifference] = field(default_factory=list)
    """The accepted host differences that touch the pair: threats, though declared."""

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


def setting_name(name: str) -> str:
    """The top-level field a DP rank's field repeats: ``internal_states.0.port`` is ``port``."""
    prefix = _RANK_PREFIX.match(name)
    return name[prefix.end() :] if prefix else name


def _matches(patterns: Iterable[str], name: str) -> bool:
    """``name`` is one of ``patterns`` (``*`` allowed), or a field nested in one."""
    return any(fnmatchcase(name, pattern) or name.startswith(pattern + ".") for pattern in patterns)


def _ignored(source: str, name: str) -> bool:
    return _matches(IGNORED_FIELDS.get(source, {}), setting_name(name) if source == "server" else name)


def _same(value_a: Any, value_b: Any) -> bool:
    """Equal and of one type, down to each item of a list: ``1`` is neither ``true`` nor ``1.0``."""
    if type(value_a) is not type(value_b):
        return False
    if isinstance(value_a, list):
        return len(value_a) == len(value_b) and all(map(_same, value_a, value_b))
    if isinstance(value_a, Mapping):
        return value_a.keys() == value_b.keys() and all(_same(value_a[key], value_b[key]) for key in value_a)
    return bool(value_a == value_b)


def _server_fields(info: Mapping[str, Any]) -> dict[str, Any]:
    """/server_info flattened, with each DP rank's fields that depart from the top level's."""
    fields = flatten({key: value for key, value in info.items() if key != PER_RANK})
    ranks = info.get(PER_RANK)
    for rank, state in enumerate(ranks if isinstance(ranks, list) else []):
        for name, value in flatten(state if isinstance(state, Mapping) else {}).items():
            if name not in fields or not _same(fields[name], value):
                fields[f"{PER_RANK}.{rank}.{name}"] = value
    return fields


def _gpus_by_index(host_info: Mapping[str, Any]) -> Mapping[str, Any]:
    """host.json with its GPU list keyed by GPU index, so that each GPU's fields compare one by one."""
    gpu = host_info.get("gpu")
    if not isinstance(gpu, Mapping) or not isinstance(gpu.get("gpus"), list):
        return host_info
    gpus = {
        str(entry.get("index", number) if isinstance(entry, Mapping) else number): entry
        for number, entry in enumerate(gpu["gpus"])
    }
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
        else {
            name: value
            for name, value in (_server_fields(data) if source == "server" else flatten(data)).items()
            if not _ignored(source, name)
        }
        for source, data in raw.items()
    }


LaunchFlags = Mapping[str, tuple[str, ...]]
"""Each flag of a launch command with the words that follow it."""


def launch_flags(server_info: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """The flags of /server_info's ``launch_command`` with the words that follow each. SGLang joins its
    argv with spaces unquoted, so a value holding spaces spans words; the words stay together all the
    same, up to the next ``--`` word."""
    flags: dict[str, tuple[str, ...]] = {}
    flag = None
    for word in str((server_info or {}).get("launch_command") or "").split():
        if word.startswith("--"):
            flag, _, value = word.partition("=")
            flags[flag] = (value,) if value else ()
        elif flag is not None:
            flags[flag] += (word,)
    return flags


def _side_value(side: Mapping[str, Any], name: str) -> Any:
    """A side's value of ``name``; a DP rank's field left out for repeating the top level is that value."""
    return side.get(name, side.get(setting_name(name), ABSENT))


def _derived(name: str) -> Derived | None:
    field = setting_name(name)
    return next((derived for pattern, derived in DERIVED_FIELDS.items() if _matches([pattern], field)), None)


def _verdict(source: str, name: str, declared: Declared, flags: tuple[LaunchFlags, LaunchFlags]) -> str:
    if declared.covers(source, name):
        return "intended"
    derived = _derived(name) if source == "server" else None
    if derived is None:
        return "threat"
    # Derived unless a flag that sets the field explicitly differs: then it is that flag's setting.
    flags_a, flags_b = flags
    differing = {flag for flag in derived.flags if flags_a.get(flag) != flags_b.get(flag)}
    if not differing:
        return "derived"
    return "intended" if differing <= {f"--{arg}" for arg in declared.args} else "threat"


def compare_settings(a: ConfigResult, b: ConfigResult, declared: Declared) -> PairDifferences:
    settings_a, settings_b = settings(a), settings(b)
    flags = (launch_flags(a.server_info), launch_flags(b.server_info))
    differences = []
    not_compared: list[Lacking] = []
    for source in SOURCES:
        side_a, side_b = settings_a[source], settings_b[source]
        if side_a is None or side_b is None:
            not_compared += [
                Lacking(source, result) for result, side in ((a, side_a), (b, side_b)) if side is None
            ]
            continue
        for name in sorted(side_a.keys() | side_b.keys()):
            value_a, value_b = _side_value(side_a, name), _side_value(side_b, name)
            if _same(value_a, value_b):
                continue
            verdict = _verdict(source, name, declared, flags)
            differences.append(SettingDifference(source, name, value_a, value_b, verdict))
    return PairDifferences(a, b, differences, not_compared)


def _keys(entry: Mapping[str, Any], part: str, section: str) -> set[str]:
    return set(entry.get(part, {}).get(section, []))


def declared_between_configs(run: Run, a: str, b: str) -> Declared:
    """What sets config ``a`` and config ``b`` apart by the campaign: their own args, env and unset keys,
    and the hosts their servers span."""
    entries = [run.declared(a), run.declared(b)]

    def section_keys(section: str) -> frozenset[str]:
        return frozenset(
            key for entry in entries for part in ("declared", "unset") for key in _keys(entry, part, section)
        )

    return Declared(
        args=section_keys("args") | _role_keys(entries[0]) | _role_keys(entries[1]),
        env=section_keys("env"),
        sim=section_keys("sim"),
        nodes=_nodes(entries[0]) != _nodes(entries[1]),
        disaggregation=any(entry.get("disaggregation") for entry in entries),
    )


def _role_keys(entry: Mapping[str, Any]) -> frozenset[str]:
    """A disaggregated config's flags its roles set over its own (``disaggregation-mode``, ``base-gpu-id``,
    each role's args): declared by its ``disaggregation`` key, since its server_info.json is one of those
    servers'."""
    args = entry.get("args") or {}
    servers = (entry.get("disaggregation") or {}).get("servers") or []
    return frozenset(
        key
        for server in servers
        for key, value in (server.get("args") or {}).items()
        if args.get(key) != value
    )


def _nodes(entry: Mapping[str, Any]) -> int:
    return int(entry.get("nodes", DEFAULT_NODES))


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
        nodes=_nodes(entry_a) != _nodes(entry_b),
    )


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def accepted_between(
    fleet: Fleet | None, hosts_a: Sequence[str], hosts_b: Sequence[str]
) -> list[AcceptedDifference]:
    """The accepted host differences of ``fleet`` on which the hosts of two sides do not all agree."""
    found = []
    for difference in fleet.accepted if fleet else ():
        values_a, values_b = (
            {host: difference.values[host] for host in hosts if host in difference.values}
            for hosts in (hosts_a, hosts_b)
        )
        if len({_json(value) for value in [*values_a.values(), *values_b.values()]}) > 1:
            found.append(AcceptedDifference(difference.pool, difference.fact, values_a, values_b))
    return found


def config_pairs(run: Run) -> list[tuple[ConfigRun, ConfigRun]]:
    """The pairs of configs the run compares, in its order: under spread every pair, else every pair on
    one host."""
    pairs = itertools.combinations(run.configs, 2)
    return [(a, b) for a, b in pairs if run.placement == SPREAD or a.host == b.host]


def host_pairs(run: Run) -> list[tuple[ConfigRun, ConfigRun]]:
    """Under every-host, each config on every pair of its hosts (the hardware comparison); else none."""
    if run.placement == SPREAD:
        return []
    pairs = itertools.combinations(run.configs, 2)
    return [(a, b) for a, b in pairs if a.name == b.name and a.host != b.host]


def _compared(a: ConfigRun, b: ConfigRun, declared: Declared, fleet: Fleet | None) -> PairDifferences:
    pair = compare_settings(a.files, b.files, declared)
    return PairDifferences(
        pair.a, pair.b, pair.differences, pair.not_compared, accepted_between(fleet, a.hosts, b.hosts)
    )


def config_differences(run: Run) -> list[PairDifferences]:
    """Every pair the run compares (``config_pairs``, then ``host_pairs``), in the run's order. Between two
    hosts of one config the campaign declared nothing."""
    return [
        _compared(a, b, declared_between_configs(run, a.name, b.name), run.fleet)
        for a, b in config_pairs(run)
    ] + [_compared(a, b, Declared(), run.fleet) for a, b in host_pairs(run)]


def matched_configs(run_a: Run, run_b: Run) -> list[tuple[ConfigRun, ConfigRun]]:
    """Each config of run A with the same config of run B: the same host and config when both ran every
    config on every host, else the same config, merged over its hosts."""
    by_host = run_a.placement == run_b.placement == EVERY_HOST

    def key(config: ConfigRun) -> tuple[str, str]:
        return (config.host if by_host else "", config.name)

    in_b: dict[tuple[str, str], ConfigRun] = {}
    for config in run_b.configs:
        in_b.setdefault(key(config), config)
    return [(a, in_b[key(a)]) for a in run_a.configs if key(a) in in_b]


def run_differences(run_a: Run, run_b: Run) -> list[PairDifferences]:
    """Each config present in both runs against itself (``matched_configs``)."""
    return [
        compare_settings(a.files, b.files, declared_between_runs(run_a, run_b, a.name))
        for a, b in matched_configs(run_a, run_b)
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


@dataclass(frozen=True)
class AcceptedThreat:
    """One accepted host difference, with every host's value among the pairs it touches and those pairs."""

    pool: str
    fact: str
    values: dict[str, Any]
    """Host -> value."""
    pairs: list[PairDifferences]


def accepted_threats(pairs: Iterable[PairDifferences]) -> list[AcceptedThreat]:
    """The accepted host differences touching any of ``pairs``, each once, in the order pairs show them."""
    found: dict[tuple[str, str], AcceptedThreat] = {}
    for pair in pairs:
        for difference in pair.accepted:
            threat = found.setdefault(
                (difference.pool, difference.fact), AcceptedThreat(difference.pool, difference.fact, {}, [])
            )
            threat.values.update({**difference.values_a, **difference.values_b})
            threat.pairs.append(pair)
    return list(found.values())
