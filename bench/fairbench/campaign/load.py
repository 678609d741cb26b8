"""The campaign model: a campaign file parsed, checked and expanded into typed configs.

A campaign says what to compare (``configs``) and how (``workload``); DESIGN.md,
"Campaign file", shows one. ``load_campaign`` returns a ``Campaign`` whose configs
are fully expanded: ``common``, then each config of its ``extends`` chain (root
first), each level first removing the keys it ``unset``s and then setting its own;
every config's launch arguments and environment rendered. The model runs nothing.

Every broken rule is collected, and all are raised together as one ``CampaignError``.
Each message starts with the file name, then the key path, then the rule::

    campaigns/x.yml: configs.ep4.args.ep-size: 3 does not divide tp-size 8

Every ``args`` flag is checked, where it is written (``common.args.X`` or ``configs.NAME.args.X``), against
SGLang's flag table that the simulator ships (``fairbench/sim/sglang_flags.json``): its name, whether it
takes values and how many, their type and their choices, as its rendered ``--key value`` would be parsed
by ``sglang.launch_server`` and by ``fairbench sim`` alike. SGLang's own parser remains the stronger
judge (``fairbench validate --sglang-parser``), but this check needs no SGLang install.

The numbers the campaign reads itself (the workload's, ``start_timeout_s``, the parallel sizes and
``max-running-requests``) are held to their ranges in ``fairbench.measure.bounds``; no number may be NaN or
infinite, and no value that reaches a systemd unit (names, model, flag values, variables, the campaign's
own path) may hold a line end. A file beyond ``MAX_CAMPAIGN_BYTES``, ``MAX_CAMPAIGN_NODES`` (aliases
expanded) or ``MAX_EXPANDED_VALUES`` is refused as no campaign: any input is judged within a second.

Beyond DESIGN.md's example the file accepts:

- ``sim:`` beside ``args:`` and ``env:`` (in ``common`` and in a config): flags of
  the simulator alone, spelled as on its command line without ``--`` (e.g.
  ``sim-profile: kimi-k2.6``). They are appended to the argv when ``engine: sim``
  and kept out of ``sglang_argv``, so SGLang's own parser can judge every campaign.
- ``unset: {args: [KEY, ...], env: [...], sim: [...]}`` in a config.
- ``start_timeout_s``: how long a server may take to become healthy (optional; absent,
  the serving role's default applies).
- an ``args`` value may be a list of numbers or strings: ``--key v1 v2 ...``.

``repeats`` and ``seed`` of the workload default to 1; ``vocab_size`` (optional) fixes the range of random
token ids, which the sweep otherwise learns from the served model's files; every other workload key is
required.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import stat
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

import yaml

from fairbench.measure.bounds import (
    CONCURRENCY,
    COUNT_FACTOR,
    GPUS,
    REPEATS,
    REQUESTS,
    RUNNING_REQUESTS,
    SEED,
    START_TIMEOUT_S,
    TOKENS,
    VOCABULARY,
    Bound,
    unit_text_problem,
)
from fairbench.sim.args import CONVERTERS, VALUED_ACTIONS, flag_table, sglang_version

ENGINES = ("sglang", "sim")
APIS = ("completions", "chat", "generate")
RANDOM_IDS = "random-ids"
MIN_PROMPTS_PER_LEVEL = 16
SECTIONS = ("args", "env", "sim")
UNIT_NAME_MAX = 255
"""systemd's limit on the length of a unit name."""
MAX_CAMPAIGN_BYTES = 256 * 1024
"""Campaign files are a few KB. PyYAML's pure-Python parser reads about 1 MiB a second: this limit leaves
a hundred times a real campaign's size and keeps any file's answer well under a second."""
MAX_CAMPAIGN_NODES = 10_000
"""The shipped campaigns have about a hundred YAML nodes. An alias counts as every node it repeats, so
aliases of aliases (a "billion laughs") are refused here instead of expanding into billions of values."""
MAX_EXPANDED_VALUES = 100_000
"""Every config repeats what it inherits: its flags' values and its variables, summed over the configs, stay
below this (about a hundred in a shipped campaign), or a small file would take seconds and gigabytes."""

Scalar = str | int | float
ArgValue = bool | Scalar | tuple[Scalar, ...]

_TOP_REQUIRED = ("name", "engine", "model", "configs", "workload")
_TOP_KEYS = (*_TOP_REQUIRED, "common", "start_timeout_s")
_CONFIG_KEYS = ("extends", *SECTIONS, "unset")
_WORKLOAD_REQUIRED = (
    "api",
    "dataset",
    "input_len",
    "output_len",
    "concurrency",
    "prompts_per_level",
    "warmup",
)
_WORKLOAD_KEYS = (*_WORKLOAD_REQUIRED, "repeats", "seed", "vocab_size")

_UNIT_NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_FLAG_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIMES_CONCURRENCY = re.compile(r"([1-9][0-9]{0,99})x")
"""``Nx``; N of a hundred digits at most, which ``int`` reads at once (it refuses thousands)."""

# Flags the campaign must not carry: gone from SGLang 0.5.23, ambiguous there, set
# elsewhere, or aliases (one spelling per flag keeps configs comparable key by key).
_REJECTED_ARGS = {
    "enable-ep-moe": "SGLang 0.5.23 no longer has this flag: use ep-size",
    "cuda-graph-max-bs": "an ambiguous prefix in SGLang 0.5.23 (-decode, -prefill): "
    "use cuda-graph-max-bs-decode",
    "model-path": "set by the campaign's model key",
    "model": "set by the campaign's model key",
    "host": "set per host by the serving role, not by the campaign",
    "port": "set per host by the serving role, not by the campaign",
    "tensor-parallel-size": "an alias: spell it tp-size",
    "expert-parallel-size": "an alias: spell it ep-size",
    "ep": "an alias: spell it ep-size",
    "pipeline-parallel-size": "an alias: spell it pp-size",
    "data-parallel-size": "an alias: spell it dp-size",
}
_DEPRECATED_ARGS = {
    "disable-cuda-graph": "deprecated in SGLang 0.5.23: use cuda-graph-backend-decode: disabled "
    "and cuda-graph-backend-prefill: disabled",
}
_BOUNDED_ARGS = {
    "tp-size": GPUS,
    "ep-size": GPUS,
    "pp-size": GPUS,
    "dp-size": GPUS,
    "max-running-requests": RUNNING_REQUESTS,
}
"""SGLang takes any integer for these; the campaign's GPU count and capacity warning read them."""
_SGLANG_DEFAULTS = {"tp-size": 1, "ep-size": 1}
# argparse, SGLang's parser, takes a word after a flag that starts with '-' for another flag, unless it
# reads as a negative number (argparse's own pattern) or holds a space.
_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")
_VALUE_COUNTS = {None: "one value", "?": "at most one value", "+": "one or more values"}
"""What a valued flag takes, by its ``nargs`` in the flag table (``*`` takes any number: every shape)."""
_VALUE_KINDS = {"int": "an integer", "float": "a number", "loads": "JSON"}
"""The flag table's value types whose converters fail with a bare ValueError, in words (the others'
errors say what is wrong themselves)."""

T = TypeVar("T")
V = TypeVar("V")


class CampaignError(Exception):
    """A campaign broke one or more rules; ``messages`` holds every one, each starting with the file name."""

    def __init__(self, messages: Sequence[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = list(messages)


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
class LevelCount:
    """Requests per concurrency level: ``count``, or ``count`` times the level (``"10x"``)."""

    count: int
    times_concurrency: bool

    def at(self, concurrency: int) -> int:
        return self.count * concurrency if self.times_concurrency else self.count

    def to_json(self) -> int | str:
        """The campaign file's spelling, which ``fairbench sweep`` also takes."""
        return f"{self.count}x" if self.times_concurrency else self.count


@dataclass(frozen=True)
class Workload:
    """How every config is driven: the same requests at the same concurrency levels."""

    api: str
    dataset: str
    """``random-ids``, or the absolute path of a local ShareGPT-style JSON file."""
    input_len: int
    output_len: int
    concurrency: tuple[int, ...]
    prompts_per_level: LevelCount
    warmup: LevelCount
    repeats: int
    seed: int
    vocab_size: int | None = None
    """Random token ids from ``[0, vocab_size)``; None: learned from the served model's files."""

    def prompts_at(self, concurrency: int) -> int:
        return max(self.prompts_per_level.at(concurrency), MIN_PROMPTS_PER_LEVEL)

    def warmup_at(self, concurrency: int) -> int:
        return self.warmup.at(concurrency)

    def to_json(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "dataset": self.dataset,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "concurrency": list(self.concurrency),
            "prompts_per_level": self.prompts_per_level.to_json(),
            "warmup": self.warmup.to_json(),
            "repeats": self.repeats,
            "seed": self.seed,
            # Absent rather than null: the campaign file's spelling, where the key is optional.
            **({} if self.vocab_size is None else {"vocab_size": self.vocab_size}),
        }

    @classmethod
    def from_json(cls, data: object, source: str) -> Workload:
        """A workload from ``to_json`` data (e.g. module arguments); ``source`` starts the error messages."""
        findings = _Findings(source)
        workload = _workload(findings, "workload", data, Path())
        findings.raise_errors()
        return workload


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

    def to_json(self) -> dict[str, Any]:
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
    workload: Workload
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The expanded campaign as plain data: campaign.json, and the Ansible module's facts."""
        return {
            "name": self.name,
            "source": self.source,
            "engine": self.engine,
            "model": self.model,
            "start_timeout_s": self.start_timeout_s,
            "common": self.common.to_json(),
            "configs": {name: config.to_json() for name, config in self.configs.items()},
            "workload": self.workload.to_json(),
            "warnings": list(self.warnings),
        }


def load_campaign(path: str | Path) -> Campaign:
    """Read, check and expand a campaign file; raises ``CampaignError``."""
    source = str(path)
    _check_source(source)
    try:
        # Without a writer, a FIFO would block the open (and the read) forever: O_NONBLOCK, then only
        # a regular file is read.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise CampaignError([f"{source}: not a regular file"])
            data = file.read(MAX_CAMPAIGN_BYTES + 1)  # no more: a huge file is refused unread
    except OSError as exc:
        raise CampaignError([f"{source}: cannot read: {exc.strerror or exc}"]) from None
    if len(data) > MAX_CAMPAIGN_BYTES:
        raise _too_large(source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CampaignError([f"{source}: not UTF-8 text: {exc.reason} at byte {exc.start}"]) from None
    return _parse(text, source, Path(path).parent)


def parse_campaign(text: str, source: str, base_dir: Path) -> Campaign:
    """Check and expand campaign YAML; ``source`` starts every message, ``base_dir`` anchors dataset paths."""
    _check_source(source)
    return _parse(text, source, base_dir)


def _check_source(source: str) -> None:
    """The serving role writes the campaign's path into each unit's comment: it must be one line of text.
    The message quotes it, as the path itself would break the message's line."""
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:  # a file name of bytes that are not UTF-8, as Python passes them on
        problem: str | None = "is not UTF-8 text"
    else:
        problem = unit_text_problem(source)
    if problem is not None:
        raise CampaignError([f"{source!r}: the campaign's path {problem}"])


def _parse(text: str, source: str, base_dir: Path) -> Campaign:
    # Each character takes at least a byte: only a text that may fit is encoded to be measured.
    if len(text) > MAX_CAMPAIGN_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_CAMPAIGN_BYTES:
        raise _too_large(source)
    findings = _Findings(source)
    campaign = _campaign(findings, _parse_yaml(text, source), base_dir)
    findings.raise_errors()
    return campaign


def _too_large(source: str) -> CampaignError:
    return CampaignError([f"{source}: larger than {MAX_CAMPAIGN_BYTES // 1024} KiB: not a campaign file"])


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
    replicas = () if args.get("enable-dp-attention") is True else ("dp-size",)
    sizes = {key: args.get(key, 1) for key in ("tp-size", "pp-size", *replicas)}
    counted = {key: size if _within(size, GPUS) else 1 for key, size in sizes.items()}
    formula = " x ".join(f"{key} {size}" for key, size in counted.items() if key == "tp-size" or size > 1)
    return math.prod(counted.values()), formula


def unit_name(campaign: str, config: str) -> str:
    return f"fairbench-{campaign}-{config}.service"


# --- collecting findings --------------------------------------------------------------------------


class _Findings:
    """Errors and warnings, each formatted as ``<source>: <key path>: <rule>``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self._comparisons_left = _SUGGESTION_COMPARISONS

    def error(self, path: str, rule: str) -> None:
        self.errors.append(self._format(path, rule))

    def warn(self, path: str, rule: str) -> None:
        self.warnings.append(self._format(path, rule))

    def raise_errors(self) -> None:
        if self.errors:
            raise CampaignError(self.errors)

    def _format(self, path: str, rule: str) -> str:
        if (
            unit_text_problem(path) is not None
        ):  # a key holding a line end: quoted, the message stays one line
            path = repr(path)
        return f"{self.source}: {path}: {rule}" if path else f"{self.source}: {rule}"

    def did_you_mean(self, word: str, choices: Collection[str]) -> str:
        """The closest choice, as a message's ending; nothing once the comparisons are spent."""
        if len(choices) > self._comparisons_left:
            return ""
        self._comparisons_left -= len(choices)
        close = difflib.get_close_matches(word, list(choices), n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""


_SUGGESTION_COMPARISONS = 20_000
"""Comparing a word with a choice takes up to 10 us: dozens of suggestions among SGLang's 550 flags, or
among every config's name, and a file with thousands of unknown names is still checked in a moment."""


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(value: object) -> str:
    """A value as the message shows it, in YAML's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__} value"


# --- YAML -----------------------------------------------------------------------------------------


class _CampaignLoader(yaml.SafeLoader):
    """PyYAML's safe loader, where every failure is a YAML error with a line, a repeated key included, and
    a document of more than ``MAX_CAMPAIGN_NODES`` nodes, aliases expanded, is one."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._expanded_sizes: dict[yaml.Node, int] = {}  # by node, aliases expanded: what an alias adds

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        """Each node counts as it is composed, an alias as every node it repeats."""
        alias = self.check_event(yaml.AliasEvent)
        event = self.current_event  # the one check_event peeked at: the node's first
        start = self._nodes
        node = super().compose_node(parent, index)  # its children are counted as they are composed
        if node is None:
            return None
        if not alias:
            self._nodes += 1
            self._expanded_sizes[node] = self._nodes - start
        elif node in self._expanded_sizes:
            self._nodes += self._expanded_sizes[node]
        else:
            raise yaml.composer.ComposerError(
                problem=f"alias {event.anchor!r} inside the node it names: the value would hold itself",
                problem_mark=event.start_mark,
            )
        if self._nodes > MAX_CAMPAIGN_NODES:
            raise yaml.composer.ComposerError(
                problem=f"more than {MAX_CAMPAIGN_NODES:,} YAML nodes, an alias counted as every node it "
                "repeats: not a campaign file",
                problem_mark=event.start_mark,
            )
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """An explicit tag can fail in Python (``!!int x``, ``!!int`` alone): a YAML error with its line."""
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # PyYAML's constructors fail on odd tagged values in many ways
            raise yaml.constructor.ConstructorError(
                problem=f"invalid {node.tag.rsplit(':', 1)[-1]} value: {exc}", problem_mark=node.start_mark
            ) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        first_line: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else []:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            identity = (key_node.tag, key_node.value)
            if identity in first_line:
                raise yaml.constructor.ConstructorError(
                    problem=f"duplicate key {key_node.value!r} (first at line {first_line[identity]})",
                    problem_mark=key_node.start_mark,
                )
            first_line[identity] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def _parse_yaml(text: str, source: str) -> object:
    try:
        return yaml.load(text, Loader=_CampaignLoader)
    except yaml.MarkedYAMLError as exc:
        raise CampaignError([_yaml_error_message(source, exc)]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise CampaignError([f"{source}:{line}: character #x{exc.character:04x}: {exc.reason}"]) from None
    except RecursionError:
        raise CampaignError([f"{source}: nested too deeply"]) from None


def _yaml_error_message(source: str, exc: yaml.MarkedYAMLError) -> str:
    where = f"{source}:{exc.problem_mark.line + 1}" if exc.problem_mark else source
    message = f"{where}: {exc.problem or 'invalid YAML'}"
    if exc.context:
        context_line = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
        message += f" ({exc.context}{context_line})"
    return message


# --- generic checks: each reports what is wrong and returns a value of the right type -------------
#
# A campaign with any error is never returned, so a stand-in value only keeps later checks going.


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_scalar(value: object) -> TypeGuard[Scalar]:
    return isinstance(value, str | float) or _is_int(value)


def _keyed(findings: _Findings, path: str, value: object) -> dict[str, object]:
    """A mapping with string keys; other keys are reported and dropped."""
    if not isinstance(value, dict):
        findings.error(path, f"must be a mapping, got {_describe(value)}")
        return {}
    result: dict[str, object] = {}
    for key, item in value.items():
        if isinstance(key, str):
            result[key] = item
        else:
            findings.error(path, f"key {_describe(key)} must be a string")
    return result


class _Fields:
    """The known keys of one mapping, each read through a check."""

    def __init__(self, findings: _Findings, path: str, entries: dict[str, object]) -> None:
        self._findings = findings
        self._path = path
        self._entries = entries

    def get(self, key: str, check: Callable[[_Findings, str, object], T], default: T) -> T:
        """``check`` applied to the key's value; ``default`` when the key is absent."""
        if key not in self._entries:
            return default
        return check(self._findings, _join(self._path, key), self._entries[key])


def _mapping(
    findings: _Findings, path: str, value: object, known: Sequence[str], required: Sequence[str] = ()
) -> _Fields:
    """A mapping of the known keys: unknown and missing ones are reported."""
    entries = _keyed(findings, path, value)
    for key in [key for key in entries if key not in known]:
        del entries[key]
        expected = f"expected one of {', '.join(known)}{findings.did_you_mean(key, known)}"
        findings.error(_join(path, key), f"unknown key; {expected}")
    if isinstance(value, dict):
        for key in required:
            if key not in value:
                findings.error(_join(path, key), "required key is missing")
    return _Fields(findings, path, entries)


def _within(value: object, bound: Bound) -> TypeGuard[int]:
    """Whether ``value`` is an integer inside ``bound``."""
    return _is_int(value) and bound.low <= value <= bound.high


def _bound_problem(bound: Bound, value: object) -> str:
    """Why ``value`` is outside ``bound``, naming the value even when it is no number."""
    problem = bound.problem(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    return problem or f"must be {bound.describe()}, got {_describe(value)}"


def _bounded(bound: Bound) -> Callable[[_Findings, str, object], int]:
    """The check of an integer inside ``bound``."""

    def check(findings: _Findings, path: str, value: object) -> int:
        if _within(value, bound):
            return value
        findings.error(path, _bound_problem(bound, value))
        return int(bound.low)

    return check


def _unit_string(findings: _Findings, path: str, value: object) -> str:
    """A non-empty string that is written into a systemd unit."""
    text = value if isinstance(value, str) else ""
    problem = unit_text_problem(text)  # first: a line end is the more specific mistake than blankness
    if problem is None and not text.strip():
        problem = f"must be a non-empty string, got {_describe(value)}"
    if problem is not None:
        findings.error(path, problem)
        return ""
    return text


def _finite_problem(number: float, value: object) -> str | None:
    """Why a value read as ``number`` is refused: NaN and the infinities are no setting of a real run."""
    return None if math.isfinite(number) else f"must be a finite number, got {_describe(value)}"


def _value_problem_in_unit(value: bool | Scalar) -> str | None:
    """What keeps a flag's or a variable's value out of a systemd unit: a line end, or no finite number."""
    if isinstance(value, float):
        return _finite_problem(value, value)
    return unit_text_problem(value) if isinstance(value, str) else None


def _fits_a_unit(findings: _Findings, path: str, value: bool | Scalar) -> bool:
    problem = _value_problem_in_unit(value)
    if problem is not None:
        findings.error(path, problem)
    return problem is None


def _one_of(choices: Sequence[object], value: object) -> str:
    return f"must be one of {', '.join(map(str, choices))}, got {_describe(value)}"


def _choice(choices: Sequence[str]) -> Callable[[_Findings, str, object], str]:
    def check(findings: _Findings, path: str, value: object) -> str:
        if isinstance(value, str) and value in choices:
            return value
        findings.error(path, _one_of(choices, value))
        return choices[0]

    return check


def _unit_name_part(findings: _Findings, path: str, value: object) -> str:
    if isinstance(value, str) and _UNIT_NAME_PART.fullmatch(value):
        return value
    problem = unit_text_problem(value) if isinstance(value, str) else None
    if problem is not None:  # the more specific rule
        findings.error(path, problem)
        return "invalid"
    findings.error(
        path,
        f"{_describe(value)} is not a valid systemd unit name part: use letters, digits, '-', '_' and '.', "
        "starting with a letter or digit",
    )
    return "invalid"


# --- settings: args, env, sim ---------------------------------------------------------------------


def _flags(findings: _Findings, path: str, value: object) -> dict[str, ArgValue]:
    """Command-line flags spelled without ``--``, with their values."""
    flags: dict[str, ArgValue] = {}
    for key, item in _keyed(findings, path, value).items():
        key_path = _join(path, key)
        if not _FLAG_NAME.fullmatch(key):
            findings.error(
                key_path, "is not a flag as on the command line: lowercase words joined by '-', no '--'"
            )
        elif isinstance(item, bool) or _is_scalar(item):
            if _fits_a_unit(findings, key_path, item):
                flags[key] = item
        elif isinstance(item, list) and item and all(_is_scalar(element) for element in item):
            fits = [_fits_a_unit(findings, f"{key_path}[{i}]", element) for i, element in enumerate(item)]
            if all(fits):
                flags[key] = tuple(item)
        else:
            findings.error(
                key_path,
                "must be true, false, a number, a string or a non-empty list of numbers and strings, "
                f"got {_describe(item)}",
            )
    return flags


def _sglang_args(findings: _Findings, path: str, value: object) -> dict[str, ArgValue]:
    """``_flags``, plus the rules on single SGLang flags, checked where the flag is written.

    The campaign's own rules come first, and a flag that breaks one is not also judged by the flag table:
    one message per mistake, the more specific one.
    """
    args = _flags(findings, path, value)
    for key, item in args.items():
        key_path = _join(path, key)
        if key in _DEPRECATED_ARGS:
            findings.warn(key_path, _DEPRECATED_ARGS[key])
        if key in _REJECTED_ARGS:
            findings.error(key_path, _REJECTED_ARGS[key])
        elif key in _BOUNDED_ARGS and not _within(item, _BOUNDED_ARGS[key]):
            findings.error(key_path, _bound_problem(_BOUNDED_ARGS[key], item))
        else:
            _check_sglang_flag(findings, key_path, key, item)
    return args


@cache
def _sglang_flags() -> dict[str, dict[str, Any]]:
    """SGLang's flags from the simulator's flag table, by their campaign spelling (no ``--``), every alias
    and ``no-`` form included."""
    return {
        option_string.removeprefix("--"): option
        for option in flag_table()["options"]
        for option_string in option["option_strings"]
    }


@cache
def _suggested_flags() -> tuple[str, ...]:
    """The flags an unknown one may be taken for: never one the campaign rejects."""
    return tuple(flag for flag in _sglang_flags() if flag not in _REJECTED_ARGS)


def _check_sglang_flag(findings: _Findings, path: str, key: str, value: ArgValue) -> None:
    """``--key value`` as rendered, judged the way SGLang's parser would judge it."""
    option = _sglang_flags().get(key)
    if option is None:
        suggestion = findings.did_you_mean(key, _suggested_flags())
        findings.error(path, f"unknown SGLang {sglang_version()} flag{suggestion}")
    elif option["action"] not in VALUED_ACTIONS:
        if not isinstance(value, bool):
            findings.error(path, f"must be true or false, got {_describe(value)}")
    elif not _takes(option["nargs"], value):
        findings.error(path, f"takes {_VALUE_COUNTS[option['nargs']]}, got {_describe(value)}")
    else:
        for item_path, item in _rendered_values(path, value):
            problem = _value_problem(option, item)
            if problem is not None:
                findings.error(item_path, problem)


def _takes(nargs: str | None, value: ArgValue) -> bool:
    """Whether a valued flag takes a value of this shape. A boolean renders the flag bare (true) or leaves
    it out (false), which suits only a flag whose value is optional; a list suits only a flag of several."""
    if isinstance(value, bool):
        return nargs in ("?", "*")
    if isinstance(value, tuple):
        return nargs in ("+", "*")
    return True


def _rendered_values(path: str, value: ArgValue) -> list[tuple[str, Scalar]]:
    """The values ``render_flags`` puts after the flag, each with its key path (``path[i]`` in a list)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, tuple):
        return [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    return [(path, value)]


def _value_problem(option: Mapping[str, Any], value: Scalar) -> str | None:
    """What SGLang's parser would object to in one rendered value: taken for a flag, not of the flag's
    type (converted by the simulator's copies of SGLang's converters), or not among its choices."""
    word = str(value)
    if word.startswith("-") and not _NEGATIVE_NUMBER.fullmatch(word) and " " not in word:
        return f"{_describe(value)} starts with '-': SGLang's parser would take it for a flag"
    kind = option["type"] or "str"
    try:
        converted = CONVERTERS[kind](word)
    except argparse.ArgumentTypeError as exc:
        return str(exc)
    except (TypeError, ValueError):
        return f"must be {_VALUE_KINDS.get(kind, f'a {kind} value')}, got {_describe(value)}"
    if isinstance(converted, float) and (problem := _finite_problem(converted, value)) is not None:
        return problem
    choices = option["choices"]
    if choices is not None and converted not in choices:
        return _one_of(choices, value)
    return None


def _env(findings: _Findings, path: str, value: object) -> dict[str, str]:
    """Environment variables; numbers become strings."""
    env: dict[str, str] = {}
    for key, item in _keyed(findings, path, value).items():
        key_path = _join(path, key)
        if not _ENV_NAME.fullmatch(key):
            findings.error(key_path, "is not an environment variable name: letters, digits and '_'")
        elif _is_scalar(item):
            if _fits_a_unit(findings, key_path, item):
                env[key] = str(item)
        else:
            findings.error(
                key_path,
                f"must be a string or a number, got {_describe(item)} "
                "(quote words YAML reads as booleans: yes, no, on, off)",
            )
    return env


def _settings(fields: _Fields) -> Settings:
    return Settings(
        args=fields.get("args", _sglang_args, {}),
        env=fields.get("env", _env, {}),
        sim=fields.get("sim", _flags, {}),
    )


def _common(findings: _Findings, path: str, value: object) -> Settings:
    return _settings(_mapping(findings, path, value, SECTIONS))


def _key_list(findings: _Findings, path: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        findings.error(path, f"must be a list of keys, got {_describe(value)}")
        return ()
    keys: dict[str, None] = {}  # ordered, and a repeat is found at once
    for index, item in enumerate(value):
        if not isinstance(item, str):
            findings.error(f"{path}[{index}]", f"must be a key, got {_describe(item)}")
        elif item in keys:
            findings.error(f"{path}[{index}]", f"{item!r} is listed twice")
        else:
            keys[item] = None
    return tuple(keys)


def _unset(findings: _Findings, path: str, value: object) -> UnsetKeys:
    sections = _mapping(findings, path, value, SECTIONS)
    return UnsetKeys(
        args=sections.get("args", _key_list, ()),
        env=sections.get("env", _key_list, ()),
        sim=sections.get("sim", _key_list, ()),
    )


# --- configs: one layer each, then expanded along their extends chains ----------------------------


@dataclass(frozen=True)
class _Layer:
    """What one config's own entry says."""

    extends: str | None
    own: Settings
    unset: UnsetKeys


def _parent_name(findings: _Findings, path: str, value: object) -> str | None:
    if isinstance(value, str):
        return value
    findings.error(path, f"must name a config, got {_describe(value)}")
    return None


def _layer(findings: _Findings, path: str, value: object) -> _Layer:
    fields = _mapping(findings, path, value, _CONFIG_KEYS)
    return _Layer(
        extends=fields.get("extends", _parent_name, None),
        own=_settings(fields),
        unset=fields.get("unset", _unset, UnsetKeys()),
    )


def _layers(findings: _Findings, path: str, value: object) -> dict[str, _Layer]:
    entries = _keyed(findings, path, value)
    if isinstance(value, dict) and not value:
        findings.error(path, "must name at least one config")
    layers: dict[str, _Layer] = {}
    for name, entry in entries.items():
        config_path = _join(path, name)
        _unit_name_part(findings, config_path, name)
        layers[name] = _layer(findings, config_path, entry)
    return layers


def _extends_chains(findings: _Findings, layers: Mapping[str, _Layer]) -> dict[str, tuple[str, ...]]:
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
    findings: _Findings, path: str, inherited: Mapping[str, V], own: Mapping[str, V], unset: Sequence[str]
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


def _apply(findings: _Findings, path: str, inherited: Settings, layer: _Layer) -> Settings:
    own, unset = layer.own, layer.unset
    unset_path = f"{path}.unset"
    return Settings(
        args=_without_unset(findings, f"{unset_path}.args", inherited.args, own.args, unset.args) | own.args,
        env=_without_unset(findings, f"{unset_path}.env", inherited.env, own.env, unset.env) | own.env,
        sim=_without_unset(findings, f"{unset_path}.sim", inherited.sim, own.sim, unset.sim) | own.sim,
    )


def _effective_settings(
    findings: _Findings, common: Settings, layers: Mapping[str, _Layer], chains: Mapping[str, tuple[str, ...]]
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
    campaign: str, engine: str, model: str, *, common: Settings, chain: Sequence[str], settings: Settings
) -> ServingConfig:
    name = chain[-1]
    sglang_argv = ("--model-path", model, *render_flags(settings.args))
    sim_argv = render_flags(settings.sim) if engine == "sim" else []
    gpus, gpus_formula = gpus_needed(settings.args)
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
    )


# --- rules across keys ----------------------------------------------------------------------------
#
# Checked on each config's expanded settings; a config is blamed only for a problem its parent lacks,
# so a mistake in one config is not reported again for every config that extends it.


@dataclass(frozen=True)
class _Problem:
    key: str
    """Its path below the config, e.g. ``args.ep-size``."""
    rule: str
    warning: bool = False


def _parallelism_problems(args: Mapping[str, ArgValue]) -> list[_Problem]:
    tp_size = args.get("tp-size", _SGLANG_DEFAULTS["tp-size"])
    ep_size = args.get("ep-size", _SGLANG_DEFAULTS["ep-size"])
    default_note = "" if "tp-size" in args else " (SGLang's default)"
    problems = []
    if _within(tp_size, GPUS) and _within(ep_size, GPUS) and tp_size % ep_size:
        problems.append(
            _Problem("args.ep-size", f"{ep_size} does not divide tp-size {tp_size}{default_note}")
        )
    if args.get("enable-eplb") is True and _within(ep_size, GPUS) and ep_size <= 1:
        problems.append(_Problem("args.enable-eplb", f"needs ep-size > 1, and ep-size is {ep_size}"))
    return problems


def _sim_flag_problems(config: ServingConfig) -> list[_Problem]:
    return [
        _Problem(f"sim.{key}", "is also an SGLang flag in args: give each flag once")
        for key in sorted(config.sim.keys() & config.args.keys())
    ]


def _cuda_graph_problems(config: ServingConfig) -> list[_Problem]:
    """The unfair TP8 baseline of DESIGN.md: CUDA graph settings must be the same for every config."""
    rule = "CUDA graph settings differ from common: the comparison is unfair unless that is its point"
    return [
        _Problem(f"args.{key}", rule, warning=True)
        for key in sorted({*config.declared.args, *config.unset.args})
        if "cuda-graph" in key
    ]


def _report_problems(
    findings: _Findings, configs: Mapping[str, ServingConfig], layers: Mapping[str, _Layer]
) -> None:
    problems = {
        name: [
            *_parallelism_problems(config.args),
            *_sim_flag_problems(config),
            *_cuda_graph_problems(config),
        ]
        for name, config in configs.items()
    }
    for name, config_problems in problems.items():
        parent = layers[name].extends
        inherited = set(problems[parent]) if parent is not None else set()
        for problem in config_problems:
            if problem not in inherited:
                report = findings.warn if problem.warning else findings.error
                report(f"configs.{name}.{problem.key}", problem.rule)


def _warn_unused_sim_flags(findings: _Findings, common: Settings, layers: Mapping[str, _Layer]) -> None:
    if common.sim:
        findings.warn("common.sim", "ignored: the engine is sglang")
    for name, layer in layers.items():
        if layer.own.sim or layer.unset.sim:
            findings.warn(f"configs.{name}.sim", "ignored: the engine is sglang")


def _warn_concurrency_above_capacity(
    findings: _Findings, workload: Workload, configs: Mapping[str, ServingConfig]
) -> None:
    """Levels above max-running-requests queue in the server: the client's concurrency is not the server's."""
    configs_by_limit: dict[int, list[str]] = {}
    largest_level = max(workload.concurrency, default=0)
    for config in configs.values():
        limit = config.args.get("max-running-requests")
        if _within(limit, RUNNING_REQUESTS) and largest_level > limit:
            configs_by_limit.setdefault(limit, []).append(config.name)
    for limit, names in configs_by_limit.items():
        above = ", ".join(str(level) for level in workload.concurrency if level > limit)
        findings.warn(
            "workload.concurrency",
            f"{above} above max-running-requests {limit} of {', '.join(names)}: the excess requests queue",
        )


def _expand(
    findings: _Findings,
    campaign: str,
    engine: str,
    model: str,
    *,
    common: Settings,
    layers: Mapping[str, _Layer],
) -> dict[str, ServingConfig]:
    chains = _extends_chains(findings, layers)
    effective = _effective_settings(findings, common, layers, chains)
    configs = {
        name: _serving_config(campaign, engine, model, common=common, chain=chains[name], settings=settings)
        for name, settings in effective.items()
    }
    for name, config in configs.items():
        if len(config.unit) > UNIT_NAME_MAX:
            findings.error(
                f"configs.{name}", f"unit name {config.unit} is longer than {UNIT_NAME_MAX} characters"
            )
    _report_problems(findings, configs, layers)
    if engine == "sglang":
        _warn_unused_sim_flags(findings, common, layers)
    return configs


# --- workload -------------------------------------------------------------------------------------


def _dataset(base_dir: Path) -> Callable[[_Findings, str, object], str]:
    def check(findings: _Findings, path: str, value: object) -> str:
        if value == RANDOM_IDS:
            return RANDOM_IDS
        rule = f"must be {RANDOM_IDS} or the path of a local ShareGPT-style .json file"
        if not isinstance(value, str) or not value.endswith(".json"):
            findings.error(path, f"{rule}, got {_describe(value)}")
            return RANDOM_IDS
        file = base_dir / value
        try:
            found = file.is_file()
        except (OSError, ValueError):
            found = False
        if not found:
            findings.error(path, f"{rule}: {str(file)!r} is not a file")
        return str(file.absolute())

    return check


def _concurrency(findings: _Findings, path: str, value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        findings.error(path, f"must be a non-empty list of positive integers, got {_describe(value)}")
        return ()
    levels: dict[int, None] = {}  # ordered, and a repeat is found at once
    for index, item in enumerate(value):
        if not _within(item, CONCURRENCY):
            findings.error(f"{path}[{index}]", _bound_problem(CONCURRENCY, item))
        elif item in levels:
            findings.error(f"{path}[{index}]", f"{item} is listed twice")
        else:
            levels[item] = None
    return tuple(levels)


def _level_count(minimum: int, largest_level: int) -> Callable[[_Findings, str, object], LevelCount]:
    """Requests per level, at least ``minimum``, as many as ``REQUESTS`` allows at the largest level."""

    def check(findings: _Findings, path: str, value: object) -> LevelCount:
        match = _TIMES_CONCURRENCY.fullmatch(value) if isinstance(value, str) else None
        if _is_int(value) and value >= minimum:
            count = LevelCount(value, times_concurrency=False)
        elif match:
            count = LevelCount(int(match[1]), times_concurrency=True)
        else:
            rule = f"must be an integer >= {minimum} or Nx (N times the concurrency)"
            findings.error(path, f"{rule}, got {_describe(value)}")
            return LevelCount(minimum, times_concurrency=False)
        problem = _request_count_problem(count, largest_level)
        if problem is not None:
            findings.error(path, problem)
        return count

    return check


def _request_count_problem(count: LevelCount, largest_level: int) -> str | None:
    """Why ``count`` is no real run's: N of ``Nx`` beyond ``COUNT_FACTOR``, or too many requests per level."""
    if count.times_concurrency and not _within(count.count, COUNT_FACTOR):
        return f"N of {count.to_json()} {_bound_problem(COUNT_FACTOR, count.count)}"
    requests = count.at(largest_level)
    if _within(requests, REQUESTS):
        return None
    problem = _bound_problem(REQUESTS, requests)
    return f"{count.to_json()} at level {largest_level}: {problem}" if count.times_concurrency else problem


def _workload(findings: _Findings, path: str, value: object, base_dir: Path) -> Workload:
    fields = _mapping(findings, path, value, _WORKLOAD_KEYS, required=_WORKLOAD_REQUIRED)
    stand_in = _STAND_IN_WORKLOAD
    api = fields.get("api", _choice(APIS), stand_in.api)
    dataset = fields.get("dataset", _dataset(base_dir), stand_in.dataset)
    input_len = fields.get("input_len", _bounded(TOKENS), stand_in.input_len)
    output_len = fields.get("output_len", _bounded(TOKENS), stand_in.output_len)
    concurrency = fields.get("concurrency", _concurrency, stand_in.concurrency)
    largest_level = max(concurrency, default=1)
    return Workload(
        api=api,
        dataset=dataset,
        input_len=input_len,
        output_len=output_len,
        concurrency=concurrency,
        prompts_per_level=fields.get(
            "prompts_per_level", _level_count(1, largest_level), stand_in.prompts_per_level
        ),
        warmup=fields.get("warmup", _level_count(0, largest_level), stand_in.warmup),
        repeats=fields.get("repeats", _bounded(REPEATS), stand_in.repeats),
        seed=fields.get("seed", _bounded(SEED), stand_in.seed),
        vocab_size=fields.get("vocab_size", _bounded(VOCABULARY), stand_in.vocab_size),
    )


_STAND_IN_WORKLOAD = Workload(
    api=APIS[0],
    dataset=RANDOM_IDS,
    input_len=1,
    output_len=1,
    concurrency=(),
    prompts_per_level=LevelCount(1, times_concurrency=False),
    warmup=LevelCount(0, times_concurrency=False),
    repeats=1,
    seed=1,
)
"""Stands in for a missing workload and a missing key; ``repeats`` and ``seed`` are also the defaults."""


def _warn_levels_without_their_concurrency(findings: _Findings, workload: Workload) -> None:
    short = [level for level in workload.concurrency if workload.prompts_at(level) < level]
    if short:
        findings.warn(
            "workload.prompts_per_level",
            f"fewer prompts than the concurrency at level {', '.join(map(str, short))}: "
            "such a level never has that many requests in flight",
        )


# --- the campaign ---------------------------------------------------------------------------------


def _campaign(findings: _Findings, document: object, base_dir: Path) -> Campaign:
    top = _mapping(findings, "", document, _TOP_KEYS, required=_TOP_REQUIRED)
    name = top.get("name", _unit_name_part, "invalid")
    engine = top.get("engine", _choice(ENGINES), ENGINES[0])
    model = top.get("model", _unit_string, "")
    common = top.get("common", _common, Settings({}, {}, {}))
    layers: dict[str, _Layer] = top.get("configs", _layers, {})
    workload = top.get("workload", lambda f, p, v: _workload(f, p, v, base_dir), _STAND_IN_WORKLOAD)
    start_timeout_s = top.get("start_timeout_s", _bounded(START_TIMEOUT_S), None)
    configs = _expand(findings, name, engine, model, common=common, layers=layers)
    _warn_concurrency_above_capacity(findings, workload, configs)
    _warn_levels_without_their_concurrency(findings, workload)
    return Campaign(
        source=findings.source,
        name=name,
        engine=engine,
        model=model,
        start_timeout_s=start_timeout_s,
        common=common,
        configs=configs,
        workload=workload,
        warnings=tuple(findings.warnings),
    )
