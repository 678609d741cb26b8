"""The checks of single values: each reports what is wrong and returns a value of the right type.

A campaign with any error is never returned, so a stand-in value only keeps later checks going. A check
takes the findings, the value's key path and the value: ``Fields.get`` applies one to a key of a mapping.

The numbers the campaign reads itself (the workload's, ``start_timeout_s``, the parallel sizes and
``max-running-requests``) are held to their ranges in ``fairbench.measure.bounds``; no number may be NaN or
infinite, and no value that reaches a systemd unit (names, model, flag values, variables, the campaign's
own path) may hold a line end.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import TypeGuard, TypeVar

from fairbench.campaign.findings import Findings, describe, join_path
from fairbench.campaign.model import Scalar, is_int, within
from fairbench.measure.bounds import Bound, unit_text_problem

UNIT_NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""The campaign's name and each config's: parts of a systemd unit's name."""

T = TypeVar("T")


def is_scalar(value: object) -> TypeGuard[Scalar]:
    return isinstance(value, str | float) or is_int(value)


def keyed(findings: Findings, path: str, value: object) -> dict[str, object]:
    """A mapping with string keys; other keys are reported and dropped."""
    if not isinstance(value, dict):
        findings.error(path, f"must be a mapping, got {describe(value)}")
        return {}
    result: dict[str, object] = {}
    for key, item in value.items():
        if isinstance(key, str):
            result[key] = item
        else:
            findings.error(path, f"key {describe(key)} must be a string")
    return result


def named_entries(findings: Findings, path: str, value: object, noun: str) -> dict[str, object]:
    """A mapping of at least one entry by name (``keyed``): ``configs``, ``workloads``."""
    entries = keyed(findings, path, value)
    if isinstance(value, dict) and not value:
        findings.error(path, f"must name at least one {noun}")
    return entries


class Fields:
    """The known keys of one mapping, each read through a check."""

    def __init__(self, findings: Findings, path: str, entries: dict[str, object]) -> None:
        self._findings = findings
        self._path = path
        self._entries = entries

    def __contains__(self, key: str) -> bool:
        """Whether the mapping has the key (its value may be null)."""
        return key in self._entries

    def get(self, key: str, check: Callable[[Findings, str, object], T], default: T) -> T:
        """``check`` applied to the key's value; ``default`` when the key is absent."""
        if key not in self._entries:
            return default
        return check(self._findings, join_path(self._path, key), self._entries[key])


def mapping(
    findings: Findings, path: str, value: object, known: Sequence[str], required: Sequence[str] = ()
) -> Fields:
    """A mapping of the known keys: unknown and missing ones are reported."""
    entries = keyed(findings, path, value)
    for key in [key for key in entries if key not in known]:
        del entries[key]
        expected = f"expected one of {', '.join(known)}{findings.did_you_mean(key, known)}"
        findings.error(join_path(path, key), f"unknown key; {expected}")
    if isinstance(value, dict):
        for key in required:
            if key not in value:
                findings.error(join_path(path, key), "required key is missing")
    return Fields(findings, path, entries)


def bound_problem(bound: Bound, value: object) -> str:
    """Why ``value`` is outside ``bound``, naming the value even when it is no number."""
    problem = bound.problem(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    return problem or f"must be {bound.describe()}, got {describe(value)}"


def number_in(bound: Bound, stand_in: float) -> Callable[[Findings, str, object], float]:
    """The check of a number (an integer too, not a boolean) inside ``bound``, as a float."""

    def check(findings: Findings, path: str, value: object) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool) and bound.problem(value) is None:
            return float(value)
        findings.error(path, bound_problem(bound, value))
        return stand_in

    return check


def bounded(bound: Bound) -> Callable[[Findings, str, object], int]:
    """The check of an integer inside ``bound``."""

    def check(findings: Findings, path: str, value: object) -> int:
        if within(value, bound):
            return value
        findings.error(path, bound_problem(bound, value))
        return int(bound.low)

    return check


def unit_string(findings: Findings, path: str, value: object) -> str:
    """A non-empty string that is written into a systemd unit."""
    text = value if isinstance(value, str) else ""
    problem = unit_text_problem(text)  # first: a line end is the more specific mistake than blankness
    if problem is None and not text.strip():
        problem = f"must be a non-empty string, got {describe(value)}"
    if problem is not None:
        findings.error(path, problem)
        return ""
    return text


def finite_problem(number: float, value: object) -> str | None:
    """Why a value read as ``number`` is refused: NaN and the infinities are no setting of a real run."""
    return None if math.isfinite(number) else f"must be a finite number, got {describe(value)}"


def _value_problem_in_unit(value: bool | Scalar) -> str | None:
    """What keeps a flag's or a variable's value out of a systemd unit: a line end, or no finite number."""
    if isinstance(value, float):
        return finite_problem(value, value)
    return unit_text_problem(value) if isinstance(value, str) else None


def fits_a_unit(findings: Findings, path: str, value: bool | Scalar) -> bool:
    problem = _value_problem_in_unit(value)
    if problem is not None:
        findings.error(path, problem)
    return problem is None


def one_of(choices: Sequence[object], value: object) -> str:
    return f"must be one of {', '.join(map(str, choices))}, got {describe(value)}"


def choice(choices: Sequence[str]) -> Callable[[Findings, str, object], str]:
    def check(findings: Findings, path: str, value: object) -> str:
        if isinstance(value, str) and value in choices:
            return value
        findings.error(path, one_of(choices, value))
        return choices[0]

    return check


def unit_name_part(findings: Findings, path: str, value: object) -> str:
    if isinstance(value, str) and UNIT_NAME_PART.fullmatch(value):
        return value
    problem = unit_text_problem(value) if isinstance(value, str) else None
    if problem is not None:  # the more specific rule
        findings.error(path, problem)
        return "invalid"
    findings.error(
        path,
        f"{describe(value)} is not a valid systemd unit name part: use letters, digits, '-', '_' and '.', "
        "starting with a letter or digit",
    )
    return "invalid"
