"""Each ``args`` flag, judged where it is written (``common.args.X`` or ``configs.NAME.args.X``).

The campaign's own rules come first: flags it refuses (``REJECTED_ARGS``), flags it warns about
(``DEPRECATED_ARGS``), and the parallel sizes and ``max-running-requests``, whose ranges
(``BOUNDED_ARGS``) its GPU count and capacity warning rely on. Every other flag is checked against
SGLang's flag table that the simulator ships (``fairbench/sim/sglang_flags.json``): its name, whether it
takes values and how many, their type and their choices, as its rendered ``--key value`` would be parsed
by ``sglang.launch_server`` and by ``fairbench sim`` alike. SGLang's own parser remains the stronger judge
(``fairbench validate --sglang-parser``), but this check needs no SGLang install.

That judge (``check_flag``) takes any tool's flag table recorded from its argparse parser (``FlagTable``):
sglang-router's flags are judged by it too (``fairbench.campaign.router_flags``).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from fairbench.campaign.checks import bound_problem, finite_problem, one_of
from fairbench.campaign.findings import Findings, describe
from fairbench.campaign.model import ArgValue, Scalar, within
from fairbench.measure.bounds import GPUS, RUNNING_REQUESTS
from fairbench.sim.args import CONVERTERS, VALUED_ACTIONS, flag_table, sglang_version

# Flags the campaign must not carry: gone from SGLang 0.5.23, ambiguous there, set
# elsewhere (the multi-node flags differ per host), or aliases (one spelling per flag keeps configs
# comparable key by key).
REJECTED_ARGS = {
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
    **dict.fromkeys(
        ("nnodes", "node-rank", "dist-init-addr", "nccl-init-addr"),
        "rendered per host by fairbench for a server over several hosts: use the config's nodes: instead",
    ),
    "disaggregation-mode": "set per server by fairbench from the config's disaggregation key",
    "disaggregation-bootstrap-port": "set per prefill server by fairbench (the serving role's ports)",
}
DEPRECATED_ARGS = {
    "disable-cuda-graph": "deprecated in SGLang 0.5.23: use cuda-graph-backend-decode: disabled "
    "and cuda-graph-backend-prefill: disabled",
}
BOUNDED_ARGS = {
    "tp-size": GPUS,
    "ep-size": GPUS,
    "pp-size": GPUS,
    "dp-size": GPUS,
    "max-running-requests": RUNNING_REQUESTS,
}
"""SGLang takes any integer for these; the campaign's GPU count and capacity warning read them."""
# argparse, SGLang's parser and sglang-router's, takes a word after a flag that starts with '-' for another
# flag, unless it reads as a negative number (argparse's own pattern) or holds a space.
_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")
_VALUE_COUNTS = {None: "one value", 1: "one value", "?": "at most one value", "+": "one or more values"}
"""What a valued flag takes, by its ``nargs`` in the flag table (``*`` takes any number: every shape; ``1``,
sglang-router's ``--decode``, exactly one, as ``None`` does)."""
_TABLE_VALUED_ACTIONS = (*VALUED_ACTIONS, "append")
"""The actions whose flag is followed by values: the simulator's, and sglang-router's ``append`` (its
``--prefill`` and ``--decode``), which takes values as ``store`` does when the flag is rendered once."""
_VALUE_KINDS = {"int": "an integer", "float": "a number", "loads": "JSON"}
"""The flag table's value types whose converters fail with a bare ValueError, in words (the others'
errors say what is wrong themselves)."""


def check_arg(findings: Findings, path: str, key: str, value: ArgValue) -> None:
    """The rules on one flag. A flag that breaks one of the campaign's own is not also judged by the flag
    table: one message per mistake, the more specific one."""
    if key in DEPRECATED_ARGS:
        findings.warn(path, DEPRECATED_ARGS[key])
    if key in REJECTED_ARGS:
        findings.error(path, REJECTED_ARGS[key])
    elif key in BOUNDED_ARGS and not within(value, BOUNDED_ARGS[key]):
        findings.error(path, bound_problem(BOUNDED_ARGS[key], value))
    else:
        check_flag(findings, path, key, value, _sglang_table())


@dataclass(frozen=True)
class FlagTable:
    """A tool's flags as its own argparse parser takes them, with the words its messages use: one judge
    (``check_flag``) for every tool whose flags a campaign may set."""

    flags: Mapping[str, Mapping[str, Any]]
    """Each option of the table by its campaign spelling (``flags_by_spelling``)."""
    suggestions: tuple[str, ...]
    """The flags an unknown one may be taken for: never one the campaign rejects."""
    unknown: str
    """The message for a flag the tool lacks, before its did-you-mean."""
    parser: str
    """Whose parser a value would reach, for a value it would take for a flag."""


def flags_by_spelling(options: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A flag table's options by their campaign spelling (no ``--``), every alias and ``no-`` form
    included."""
    return {
        option_string.removeprefix("--"): option
        for option in options
        for option_string in option["option_strings"]
    }


@cache
def sglang_flags() -> dict[str, dict[str, Any]]:
    """SGLang's flags from the simulator's flag table, by their campaign spelling."""
    return flags_by_spelling(flag_table()["options"])


@cache
def _suggested_flags() -> tuple[str, ...]:
    """The flags an unknown one may be taken for: never one the campaign rejects."""
    return tuple(flag for flag in sglang_flags() if flag not in REJECTED_ARGS)


@cache
def _sglang_table() -> FlagTable:
    """SGLang's flags for ``check_flag``, the messages naming SGLang's version as the table records it."""
    return FlagTable(
        flags=sglang_flags(),
        suggestions=_suggested_flags(),
        unknown=f"unknown SGLang {sglang_version()} flag",
        parser="SGLang's parser",
    )


def check_flag(findings: Findings, path: str, key: str, value: ArgValue, table: FlagTable) -> None:
    """``--key value`` as rendered, judged the way the table's tool would parse it: one error per
    mistake."""
    option = table.flags.get(key)
    if option is None:
        findings.error(path, table.unknown + findings.did_you_mean(key, table.suggestions))
    elif option["action"] not in _TABLE_VALUED_ACTIONS:
        if not isinstance(value, bool):
            findings.error(path, f"must be true or false, got {describe(value)}")
    elif not _takes(option["nargs"], value):
        findings.error(path, f"takes {_VALUE_COUNTS[option['nargs']]}, got {describe(value)}")
    else:
        for item_path, item in _rendered_values(path, value):
            problem = _value_problem(option, item, table.parser)
            if problem is not None:
                findings.error(item_path, problem)


def _takes(nargs: str | int | None, value: ArgValue) -> bool:
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


def _value_problem(option: Mapping[str, Any], value: Scalar, parser: str) -> str | None:
    """What the tool's parser would object to in one rendered value: taken for a flag, not of the flag's
    type (converted by the simulator's copies of the tools' converters), or not among its choices."""
    word = str(value)
    if word.startswith("-") and not _NEGATIVE_NUMBER.fullmatch(word) and " " not in word:
        return f"{describe(value)} starts with '-': {parser} would take it for a flag"
    kind = option["type"] or "str"
    try:
        converted = CONVERTERS[kind](word)
    except argparse.ArgumentTypeError as exc:
        return str(exc)
    except (TypeError, ValueError):
        return f"must be {_VALUE_KINDS.get(kind, f'a {kind} value')}, got {describe(value)}"
    if isinstance(converted, float) and (problem := finite_problem(converted, value)) is not None:
        return problem
    choices = option["choices"]
    if choices is not None and converted not in choices:
        return one_of(choices, value)
    return None
