"""The campaign model: the campaign file's keys, and the typed values a checked, expanded campaign is.

A campaign file is one YAML mapping. It says what to compare (``configs``) and how (``workload``):

- ``name``: the campaign's name, part of every unit's name (letters, digits, ``-``, ``_`` and ``.``,
  starting with a letter or digit); required.
- ``engine``: ``sglang``, or ``sim`` (the simulator, which takes SGLang's flags); required.
- ``model``: the model id or path every config serves, ``--model-path``; required.
- ``common``: the ``args``, ``env`` and ``sim`` every config starts from (optional).
- ``configs``: at least one, by name (a unit name part, as ``name``); each holds any of ``extends`` (the
  name of the config it inherits from), ``args``, ``env``, ``sim``, ``unset``, the fleet keys ``nodes``
  and ``hosts``, and ``disaggregation`` (prefill and decode servers behind a router,
  ``fairbench.campaign.disaggregation``); required.
- ``workload``: how every config is driven (below); or ``workloads``: several, by name (letters, digits,
  ``-`` and ``_``, not ``ranks``: ``workload.WORKLOAD_NAME``), each config measured on each by one server
  start, each with its own verdict; exactly one of the two is required. Several workloads share their
  ``repeats``.
- ``slo``: service-level objectives, ``<metric>_p<q>_ms: limit`` (``fairbench.measure.slo``); each point is
  judged against them and its goodput counted. Optional; empty or absent, there are none.
- ``start_timeout_s``: how long a server may take to become healthy (optional; absent, the serving role's
  default applies).
- ``expected_start_s``: how long a server is expected to take to become healthy, for the plan's estimate of
  the campaign's cost (``fairbench.fleet.forecast``); optional, at most ``start_timeout_s``.
- ``placement``: ``spread`` or ``every-host`` (``PLACEMENTS``), how the configs' servers are placed on the
  hosts of their pools; default ``spread``.
- ``accept_host_differences``: host facts that may differ between the hosts of a pool; default none.
- ``isolated_hosts``: true declares that hosts found to share a machine do not disturb each other, so they
  take jobs at the same time; default false: they take them one at a time.
- ``decide``: how the verdict decides, ``{margin_pct}``: the smallest difference that matters
  (``fairbench.campaign.decide``); absent, none.
- ``answers`` and ``accuracy``: what each server start answers before its sweep, probes compared across
  configs and a task with known answers (``fairbench.campaign.answers``).

The fleet keys (``placement``, ``accept_host_differences``, ``isolated_hosts``, and each config's
``nodes``: the hosts its server spans, default 1, and ``hosts``: the inventory group it is pinned to,
default null, the campaign's pool) are described in ``fairbench.campaign.fleet``.

The settings sections, in ``common`` and in a config:

- ``args``: SGLang's launch flags, spelled as on its command line without ``--`` (``tp-size: 8``). A value
  is ``true`` (the bare flag), ``false`` (left out), a number, a string, or a non-empty list of numbers
  and strings (``--key v1 v2 ...``).
- ``env``: the server's environment variables; a number becomes a string.
- ``sim``: flags of the simulator alone, spelled and valued as ``args`` (``sim-profile: kimi-k2.6``). They
  are appended to the argv when ``engine: sim`` and kept out of ``sglang_argv``, so SGLang's own parser can
  judge every campaign.
- ``unset: {args: [KEY, ...], env: [...], sim: [...]}``, in a config only: keys it removes from what it
  inherits.

The workload's keys:

- ``api``: ``completions`` (token-id prompts), ``chat`` (text) or ``generate`` (SGLang's native API).
- ``dataset``: ``random-ids``, ``shared-prefix``, or the path of a local ShareGPT-style ``.json`` file,
  relative to the campaign file's directory.
- ``shared_prefix`` (with ``dataset: shared-prefix`` only): groups of requests sharing
  a system prompt, sglang.bench_serving's generated-shared-prefix options (``measure.workload.SharedPrefix``):
  ``groups``, ``prompts_per_group``, ``system_prompt_len``, ``question_len`` (tokens, exact), and ``order``,
  ``shuffled`` or ``grouped``; each absent, sglang's default (``DEFAULT_SHARED_PREFIX``: 64 groups of 16,
  2048 and 128 tokens, shuffled).
- ``multi_turn`` (with ``dataset: multi-turn`` only): conversations whose every turn sends the conversation
  so far, the server's own replies included (``measure.workload.MultiTurn``): ``turns``, ``user_len``,
  ``system_prompt_len`` (0: none), ``system_prompts``, ``think_time_s`` and ``sharegpt`` (a ShareGPT-style
  file whose human turns are the user turns, relative to the campaign file's directory); each absent,
  ``DEFAULT_MULTI_TURN``'s. Its load is ``concurrency``, the conversations in flight; its token ids need
  ``api: generate``.
- ``input_len``, ``output_len``: each request's exact prompt and output lengths in tokens. A shared-prefix
  workload's ``input_len`` is its system prompt's and question's lengths together, a multi-turn one's its
  first turn's (system prompt and user turn): left out, or that sum.
- ``cache_state``: what the server's prefix cache holds when each point's measurement starts
  (``measure.workload.CACHE_STATES``): ``carried`` (the default: what the previous point left), ``flushed``
  (``/flush_cache`` before the warm-up) or ``primed`` (flushed, then each group's system prompt sent once;
  shared-prefix workloads only).
- The load, exactly one of:

  - ``concurrency``: a closed loop's levels, a non-empty list of distinct positive integers: C requests in
    flight, each replaced the moment it ends;
  - ``request_rate``: an open loop's levels, a non-empty list of distinct positive numbers of requests per
    second, sent at their times whatever the server's pace, with ``arrival`` (``poisson``, the default, or
    ``gamma``), ``burstiness`` (gamma's shape, default 1.0: below 1 burstier than poisson) and
    ``max_concurrency`` (the bound on requests in flight; required).

- ``prompts_per_level``: requests measured per level, ``N`` or ``Nx`` (N times the level: the concurrency,
  or the rate, N seconds of arrivals, rounded up); at least ``MIN_PROMPTS_PER_LEVEL`` are sent.
- ``warmup``: warmup requests per level, ``N`` or ``Nx``; 0 is none.
- ``repeats``: how often every level is measured: a count (default 1), or automatic repeats
  (``fairbench.measure.repeats``): ``auto``, or a mapping of any of ``min``, ``max``, ``half_width_pct``.
- ``search_resolution`` (optional, closed loop with ``slo`` only): after the listed levels, bisect between
  the last level that met the objectives and the first that did not, until they are this close.
- ``seed``: the seed prompts are drawn from; default 1.
- ``vocab_size`` (optional): random token ids from ``[0, vocab_size)``; absent, the sweep learns the range
  from the served model's files.

Every other workload key is required. Each config is expanded from ``common``, then each config of its
``extends`` chain, root first: each level first removes the keys it ``unset``s, then sets its own. A
config's ``nodes`` and ``hosts`` are its own where it sets them, else those of the config it extends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeGuard

from fairbench.answers.plan import AnswersPlan
from fairbench.measure.bounds import GPUS, Bound
from fairbench.measure.decision import DecideRule
from fairbench.measure.repeats import Repeats, repeats_to_json
from fairbench.measure.slo import SloTarget, slo_to_json
from fairbench.measure.workload import (
    DEFAULT_ARRIVAL,
    DEFAULT_BURSTINESS,
    DEFAULT_CACHE_STATE,
    LevelCount,
    MultiTurn,
    SharedPrefix,
    TraceWindow,
    prompts_at,
)

ENGINES = ("sglang", "sim")
DATASET_SUFFIX = ".json"
"""What a dataset file's name ends with: a ShareGPT-style JSON file."""
SECTIONS = ("args", "env", "sim")
UNIT_PREFIX = "fairbench-"
"""What every fairbench server unit's name starts with: ``fairbench-<campaign>-<config>.service``."""
UNIT_NAME_MAX = 255
"""systemd's limit on the length of a unit name."""

SPREAD = "spread"
"""Each config, and each repeat of it, on one host of its pool: the next free host takes the next job."""
EVERY_HOST = "every-host"
"""Every config on every host of its pool: a comparison of the hosts."""
PLACEMENTS = (SPREAD, EVERY_HOST)
DEFAULT_PLACEMENT = SPREAD
DEFAULT_ISOLATED_HOSTS = False
"""Hosts found to share a machine take jobs one at a time unless the campaign says ``isolated_hosts``."""
DEFAULT_NODES = 1
"""Hosts a config's server spans when neither it nor a config it extends says."""
SCHEDULING_KEYS = ("nodes", "hosts")
"""A config's keys that place its server on hosts rather than configure it; ``common`` takes neither."""

TOP_REQUIRED = ("name", "engine", "model", "configs")
TOP_KEYS = (
    *TOP_REQUIRED,
    "workload",
    "workloads",
    "common",
    "start_timeout_s",
    "expected_start_s",
    "placement",
    "accept_host_differences",
    "isolated_hosts",
    "slo",
    "decide",
    "answers",
    "accuracy",
)
WORKLOAD_TOP_KEYS = ("workload", "workloads")
"""One of them is required: the campaign's one workload, or its named workloads."""
SINGLE_WORKLOAD = ""
"""The name ``Campaign.workloads`` gives a campaign's one ``workload``: its sweeps write into each config's
directory itself, a named workload's into the config directory's ``<name>/`` (``workload_dir``)."""
DISAGGREGATION_KEY = "disaggregation"
"""A config's prefill and decode servers and their router (``fairbench.campaign.disaggregation``)."""
CONFIG_KEYS = ("extends", *SECTIONS, "unset", *SCHEDULING_KEYS, DISAGGREGATION_KEY)
WORKLOAD_REQUIRED = ("api", "dataset", "input_len", "output_len", "prompts_per_level", "warmup")
"""Required always (``input_len`` but where ``shared_prefix`` makes it; none of ``TRACE_SETS`` with a
trace); the load is also required: ``concurrency``, ``request_rate`` or ``trace_speedup`` (``LOADS``)."""
TRACE_SETS = ("input_len", "output_len", "prompts_per_level", "arrival", "burstiness")
"""What a replayed trace sets itself (its requests' lengths, its window's count, its arrivals): refused
beside ``dataset: trace``."""
OPEN_LOOP_KEYS = ("request_rate", "arrival", "burstiness", "max_concurrency")
"""An open loop's keys: ``request_rate`` is its levels, the others how requests arrive and how many may be
in flight. None of them has a meaning beside ``concurrency``."""
LOADS = ("concurrency", "request_rate", "trace_speedup")
"""The keys of a workload's levels, one of which it sets: a closed loop's, an open loop's, or a replayed
trace's (an open loop at its window's own rate times each speedup)."""
WORKLOAD_KEYS = (
    "api",
    "dataset",
    "shared_prefix",
    "multi_turn",
    "trace",
    "trace_speedup",
    "input_len",
    "output_len",
    "cache_state",
    "concurrency",
    *OPEN_LOOP_KEYS,
    "prompts_per_level",
    "warmup",
    "repeats",
    "search_resolution",
    "seed",
    "vocab_size",
)
Scalar = str | int | float
ArgValue = bool | Scalar | tuple[Scalar, ...]


def is_int(value: object) -> TypeGuard[int]:
    """An integer of the campaign: YAML's ``true`` is none, though Python's ``bool`` is an ``int``."""
    return isinstance(value, int) and not isinstance(value, bool)


def within(value: object, bound: Bound) -> TypeGuard[int]:
    """Whether ``value`` is an integer inside ``bound``."""
    return is_int(value) and bound.low <= value <= bound.high


@dataclass(frozen=True)
class Settings:
    """Launch flags, environment and simulator flags: of ``common``, of a config, or a difference."""

    args: dict[str, ArgValue]
    env: dict[str, str]
    sim: dict[str, ArgValue]

    def to_json(self) -> dict[str, Any]:
        return {"args": _flags_json(self.args), "env": dict(self.env), "sim": _flags_json(self.sim)}


def _flags_json(flags: Mapping[str, ArgValue]) -> dict[str, Any]:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in flags.items()}


@dataclass(frozen=True)
class UnsetKeys:
    """Keys removed from what ``common`` (or a parent config) set."""

    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    sim: tuple[str, ...] = ()

    def to_json(self) -> dict[str, list[str]]:
        return {"args": list(self.args), "env": list(self.env), "sim": list(self.sim)}


@dataclass(frozen=True)
class Workload:
    """How every config is driven: the same requests at the same levels, of concurrency (a closed loop) or
    of request rate (an open loop)."""

    api: str
    dataset: str
    """``random-ids``, ``shared-prefix``, or the absolute path of a local ShareGPT-style JSON file."""
    input_len: int
    output_len: int
    concurrency: tuple[int, ...]
    """A closed loop's levels; empty for an open loop."""
    prompts_per_level: LevelCount
    warmup: LevelCount
    repeats: Repeats
    """A fixed count, or ``AutoRepeats``."""
    seed: int
    vocab_size: int | None = None
    """Random token ids from ``[0, vocab_size)``; None: learned from the served model's files."""
    request_rate: tuple[float, ...] = ()
    """An open loop's levels, requests per second; empty for a closed loop."""
    arrival: str = DEFAULT_ARRIVAL
    """One of ``ARRIVALS``: how an open loop's requests are spaced."""
    burstiness: float = DEFAULT_BURSTINESS
    """The shape of gamma arrivals; no effect with poisson."""
    max_concurrency: int | None = None
    """An open loop's bound on requests in flight; None for a closed loop, whose levels are the bound."""
    search_resolution: int | None = None
    """After the listed concurrency levels, bisect for the highest meeting the SLO until the last that met
    it and the first that did not are at most this far apart; None: no search."""
    shared_prefix: SharedPrefix | None = None
    """The groups of a ``shared-prefix`` dataset; None for any other."""
    cache_state: str = DEFAULT_CACHE_STATE
    """What the prefix cache holds when a point's measurement starts (``measure.workload.CACHE_STATES``)."""
    trace: TraceWindow | None = None
    """The window of a ``trace`` dataset replayed; None for any other."""
    trace_speedup: tuple[float, ...] = ()
    """A replayed trace's levels as given: its ``request_rate`` is the window's own rate times each
    (``measure.trace_replay.replay_rates``)."""
    multi_turn: MultiTurn | None = None
    """The conversations of a ``multi-turn`` dataset; None for any other."""

    @property
    def file(self) -> str | None:
        """The local file the workload reads, which every host needs a copy of: a ShareGPT-style dataset
        or a trace; None for a generated dataset."""
        if self.trace is not None:
            return self.trace.path
        if self.multi_turn is not None:
            return self.multi_turn.sharegpt
        return self.dataset if self.dataset.endswith(DATASET_SUFFIX) else None

    @property
    def open_loop(self) -> bool:
        return bool(self.request_rate)

    @property
    def levels(self) -> tuple[float, ...]:
        """The levels in the order they are measured: the request rates, or the concurrency levels."""
        return self.request_rate or self.concurrency

    def prompts_at(self, level: float) -> int:
        """Requests measured at a level (a concurrency, or a request rate), at least
        ``MIN_PROMPTS_PER_LEVEL``."""
        return prompts_at(self.prompts_per_level, level)

    def warmup_at(self, level: float) -> int:
        """Warmup requests at a level (a concurrency, or a request rate)."""
        return self.warmup.at(level)

    def to_json(self) -> dict[str, Any]:
        """The campaign file's spelling. Each optional key is absent rather than null when unset, and a
        closed loop's workload holds no open-loop key: campaign.json is as it was before open loops."""
        if self.trace is not None:
            return self._trace_json()
        if self.open_loop:
            load: dict[str, Any] = {
                "request_rate": list(self.request_rate),
                "arrival": self.arrival,
                "burstiness": self.burstiness,
                "max_concurrency": self.max_concurrency,
            }
        else:
            load = {"concurrency": list(self.concurrency)}
        return {
            "api": self.api,
            "dataset": self.dataset,
            **({} if self.shared_prefix is None else {"shared_prefix": self.shared_prefix.to_json()}),
            **({} if self.multi_turn is None else {"multi_turn": self.multi_turn.to_json()}),
            "input_len": self.input_len,
            "output_len": self.output_len,
            **({} if self.cache_state == DEFAULT_CACHE_STATE else {"cache_state": self.cache_state}),
            **load,
            "prompts_per_level": self.prompts_per_level.to_json(),
            "warmup": self.warmup.to_json(),
            "repeats": repeats_to_json(self.repeats),
            "seed": self.seed,
            **({} if self.vocab_size is None else {"vocab_size": self.vocab_size}),
            **({} if self.search_resolution is None else {"search_resolution": self.search_resolution}),
        }

    def _trace_json(self) -> dict[str, Any]:
        """A replayed trace's spelling: its window and speedups; what the trace sets (its lengths, count,
        arrivals and rates) is derived from it again where it is read."""
        assert self.trace is not None
        return {
            "api": self.api,
            "dataset": self.dataset,
            "trace": {key: value for key, value in asdict(self.trace).items() if value is not None},
            **({} if self.cache_state == DEFAULT_CACHE_STATE else {"cache_state": self.cache_state}),
            "trace_speedup": list(self.trace_speedup),
            "max_concurrency": self.max_concurrency,
            "warmup": self.warmup.to_json(),
            "repeats": repeats_to_json(self.repeats),
            "seed": self.seed,
            **({} if self.vocab_size is None else {"vocab_size": self.vocab_size}),
        }


PREFILL = "prefill"
DECODE = "decode"
ROLES = (PREFILL, DECODE)
"""The server groups of a disaggregated config, in the order their servers take GPUs and ports."""
ROUTER = "router"


@dataclass(frozen=True)
class RoleServer:
    """One prefill or decode server of a disaggregated config, expanded."""

    role: str
    index: int
    """Its place among its role's servers: ``prefill-0``, ``prefill-1``..."""
    unit: str
    args: dict[str, ArgValue]
    """The config's args, the role's over them, then ``disaggregation-mode`` and ``base-gpu-id``."""
    sglang_argv: tuple[str, ...]
    """``sglang.launch_server`` arguments: ``--model-path MODEL`` then ``args``."""
    argv: tuple[str, ...]
    """The engine's arguments as a single server's: ``sglang_argv``, then the sim flags when the engine is
    sim."""
    gpus: int
    gpu_ids: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "unit": self.unit,
            "args": {
                key: list(value) if isinstance(value, tuple) else value for key, value in self.args.items()
            },
            "argv": list(self.argv),
            "gpus": self.gpus,
            "gpu_ids": list(self.gpu_ids),
        }


@dataclass(frozen=True)
class Disaggregation:
    """A config's servers, prefill first, and its router's args."""

    servers: tuple[RoleServer, ...]
    router_args: dict[str, ArgValue]

    @property
    def gpus(self) -> int:
        return sum(server.gpus for server in self.servers)

    def gpus_formula(self) -> str:
        """``prefill 1 x 4 GPUs + decode 1 x 4 GPUs``, for messages."""
        return " + ".join(
            f"{role} {len(group)} x {group[0].gpus} GPUs"
            for role in ROLES
            if (group := [server for server in self.servers if server.role == role])
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "servers": [server.to_json() for server in self.servers],
            "router": {"args": dict(self.router_args)},
        }


@dataclass(frozen=True)
class ServingConfig:
    """One configuration, expanded: what its server is launched with."""

    name: str
    unit: str
    """The systemd unit: ``fairbench-<campaign>-<config>.service``."""
    extends: tuple[str, ...]
    """The configs it inherits from, nearest first."""
    args: dict[str, ArgValue]
    env: dict[str, str]
    sim: dict[str, ArgValue]
    declared: Settings
    """The entries that differ from ``common``: what makes this config itself."""
    unset: UnsetKeys
    """The keys of ``common`` this config removed: deliberate differences too."""
    sglang_argv: tuple[str, ...]
    """``sglang.launch_server`` arguments: ``--model-path MODEL`` then ``args``, sorted by key."""
    argv: tuple[str, ...]
    """The engine's arguments: ``sglang_argv``, then the ``sim`` flags when the engine is sim."""
    gpus: int
    """GPUs its server occupies (``gpus_needed``): the campaign's preflight and per-GPU throughput use it."""
    gpus_formula: str
    """How ``gpus`` follows from the args, for messages: ``tp-size 2 x dp-size 4``."""
    nodes: int
    """Hosts its server spans; fairbench renders SGLang's ``--nnodes``, ``--node-rank`` and
    ``--dist-init-addr`` per host."""
    gpus_per_node: int
    """GPUs its server occupies on each of its hosts: ``gpus / nodes``."""
    hosts: str | None
    """The inventory group it is pinned to; None: the campaign's pool."""
    disaggregation: Disaggregation | None = None
    """Its prefill and decode servers and router (``campaign.disaggregation.Disaggregation``); None: one
    server. ``gpus`` is then theirs together."""

    def to_json(self) -> dict[str, Any]:
        disaggregation = (
            {} if self.disaggregation is None else {DISAGGREGATION_KEY: self.disaggregation.to_json()}
        )
        return {
            "name": self.name,
            "unit": self.unit,
            "extends": list(self.extends),
            "argv": list(self.argv),
            "sglang_argv": list(self.sglang_argv),
            "env": dict(self.env),
            "args": _flags_json(self.args),
            "sim": _flags_json(self.sim),
            "declared": self.declared.to_json(),
            "unset": self.unset.to_json(),
            "gpus": self.gpus,
            "gpus_formula": self.gpus_formula,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "hosts": self.hosts,
            **disaggregation,
        }


@dataclass(frozen=True)
class Campaign:
    """A campaign file, checked and expanded."""

    source: str
    """The campaign file as named by the caller."""
    name: str
    engine: str
    model: str
    start_timeout_s: int | None
    common: Settings
    configs: dict[str, ServingConfig]
    """In the file's order."""
    workloads: dict[str, Workload]
    """By name, in the file's order; a ``workload:`` campaign's one is ``SINGLE_WORKLOAD``."""
    slo: tuple[SloTarget, ...]
    """The service-level objectives, in the file's order; empty: none."""
    warnings: tuple[str, ...]
    placement: str
    """One of ``PLACEMENTS``."""
    accept_host_differences: tuple[str, ...]
    """Host facts that may differ between the hosts of a pool (names of
    ``fairbench.campaign.fleet_facts.FACTS``)."""
    expected_start_s: float | None = None
    """How long a server is expected to take to become healthy, seconds; None: not declared."""
    decide: DecideRule | None = None
    """The verdict's margin; None: none (significant or within noise)."""
    isolated_hosts: bool = DEFAULT_ISOLATED_HOSTS
    """Whether hosts found to share a machine take jobs at the same time (fairbench.fleet.sharing)."""
    answers: AnswersPlan | None = None
    """What each server start answers before its sweep (``campaign.answers``); None: nothing."""

    def to_json(self) -> dict[str, Any]:
        """The expanded campaign as plain data: campaign.json, and the Ansible module's facts."""
        return {
            "name": self.name,
            "source": self.source,
            "engine": self.engine,
            "model": self.model,
            "start_timeout_s": self.start_timeout_s,
            # Only where declared: campaign.json stays as it was for a campaign without it.
            **({} if self.expected_start_s is None else {"expected_start_s": self.expected_start_s}),
            "placement": self.placement,
            "accept_host_differences": list(self.accept_host_differences),
            # Only when true: campaign.json stays as it was for a campaign that leaves it out.
            **({"isolated_hosts": True} if self.isolated_hosts else {}),
            "common": self.common.to_json(),
            "configs": {name: config.to_json() for name, config in self.configs.items()},
            **workloads_to_json(self.workloads),
            # Only where set: campaign.json stays as it was for a campaign without it, and its run resumes.
            **({"decide": self.decide.to_json()} if self.decide else {}),
            **({"answers": self.answers.to_json()} if self.answers else {}),
            "slo": slo_to_json(self.slo),
            "warnings": list(self.warnings),
        }


def workloads_to_json(workloads: Mapping[str, Workload]) -> dict[str, Any]:
    """campaign.json's ``workload`` for a campaign's one, as before named workloads existed; else its
    ``workloads`` by name."""
    if list(workloads) == [SINGLE_WORKLOAD]:
        return {"workload": workloads[SINGLE_WORKLOAD].to_json()}
    return {"workloads": {name: workload.to_json() for name, workload in workloads.items()}}


def workloads_json(campaign: Mapping[str, Any]) -> dict[str, Any]:
    """campaign.json's workloads by name (``workloads_to_json`` read back): ``SINGLE_WORKLOAD``'s alone, or
    each named one."""
    if "workloads" in campaign:
        return dict(campaign["workloads"])
    return {SINGLE_WORKLOAD: campaign["workload"]}


def repeats_json(campaign: Mapping[str, Any]) -> Any:
    """campaign.json's ``repeats``: its workloads share them (``check_workloads``)."""
    return next(iter(workloads_json(campaign).values()))["repeats"]


def workload_path(workload: str) -> str:
    """A workload's key path in a campaign file and in campaign.json: ``workload`` for ``SINGLE_WORKLOAD``,
    else ``workloads.<name>``."""
    return "workload" if workload == SINGLE_WORKLOAD else f"workloads.{workload}"


def workload_dir(config_dir: Path, workload: str) -> Path:
    """Where a workload's sweep of a config writes: the config's directory for ``SINGLE_WORKLOAD``, else
    its ``<workload>/`` (the server's own files stay in the config's directory)."""
    return config_dir / workload if workload != SINGLE_WORKLOAD else config_dir


def render_flags(flags: Mapping[str, ArgValue]) -> list[str]:
    """Arguments sorted by key: ``true`` gives a bare flag, ``false`` nothing, a value ``--key value...``."""
    argv: list[str] = []
    for key in sorted(flags):
        value = flags[key]
        if isinstance(value, bool):
            argv.extend([f"--{key}"] if value else [])
        elif isinstance(value, tuple):
            argv.extend([f"--{key}", *map(str, value)])
        else:
            argv.extend([f"--{key}", str(value)])
    return argv


def gpus_needed(args: Mapping[str, ArgValue]) -> tuple[int, str]:
    """GPUs one server of ``args`` occupies, and the formula that says why.

    SGLang 0.5.23's world size (``compute_world_size`` in sglang/srt/server_args.py):
    GPUs = tp-size x pp-size x dp-size, each 1 when absent. dp-size counts model replicas, except with the
    deprecated ``enable-dp-attention``, which makes dp-size the number of attention-DP groups inside the
    TP group (SGLang resolves it to ``attn-dp-size``): those add no GPUs. ep-size, attn-dp-size and the
    other widths split the TP group and add none either. A value that breaks a rule (reported elsewhere)
    counts as 1. A server with ``device: cpu`` occupies no GPU.
    """
    if args.get("device") == "cpu":
        return 0, "device cpu"
    replicas = ("dp-size",) if dp_size_counts_replicas(args) else ()
    sizes = {key: args.get(key, 1) for key in ("tp-size", "pp-size", *replicas)}
    counted = {key: size if within(size, GPUS) else 1 for key, size in sizes.items()}
    formula = " x ".join(f"{key} {size}" for key, size in counted.items() if key == "tp-size" or size > 1)
    return math.prod(counted.values()), formula


def dp_size_counts_replicas(args: Mapping[str, ArgValue]) -> bool:
    """Whether ``dp-size`` counts model replicas: not with the deprecated ``enable-dp-attention``, where it
    counts attention-DP groups inside the TP group (``gpus_needed``)."""
    return args.get("enable-dp-attention") is not True


def unit_name(campaign: str, config: str) -> str:
    return f"{UNIT_PREFIX}{campaign}-{config}.service"
