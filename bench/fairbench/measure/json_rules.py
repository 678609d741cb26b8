"""Shapes of JSON documents, checked key by key: ``Rule``, and what checks them.

The results format (``measure.results_format``) states what a usable points.jsonl line and status.json entry
are with them, and the report checks every file it reads by them. A file that is not a JSON object, or
breaks a required rule, cannot be used; a broken optional rule is a problem naming the file and the key
path, and what else the file holds is used. Nothing here raises on a file's content but ``ValueError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard


def is_whole(value: object, least: int = 0) -> bool:
    """An integer (not a boolean) of at least ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def is_number(value: object) -> bool:
    """A JSON number the report can compute with: not a boolean, nor an integer too large for a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def is_positive(value: object) -> bool:
    """A number above 0, or one that is not finite (shown as such, compared with nothing)."""
    return isinstance(value, int | float) and is_number(value) and (not math.isfinite(value) or value > 0)


def is_byte_count(value: object) -> bool:
    return is_whole(value, 1) and is_number(value)


def is_text(value: object) -> bool:
    return isinstance(value, str)


def is_mapping(value: object) -> bool:
    return isinstance(value, dict)


def is_list(value: object) -> bool:
    return isinstance(value, list)


def list_of(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, list) and all(map(check, value))


def object_of(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, dict) and all(map(check, value.values()))


def fields_of(checks: Mapping[str, Callable[[object], bool]]) -> Callable[[object], bool]:
    """An object holding every key of ``checks``, each passing its check (other keys are not looked at)."""
    return lambda value: (
        isinstance(value, dict) and all(key in value and check(value[key]) for key, check in checks.items())
    )


def whole(least: int) -> Callable[[object], bool]:
    return lambda value: is_whole(value, least)


def or_null(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or check(value)


def is_finite(value: object) -> bool:
    return isinstance(value, int | float) and is_number(value) and math.isfinite(value)


def is_host_list(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and bool(value) and all(map(is_text, value))


class Rule(NamedTuple):
    key: str
    """Dotted when nested: ``workload.repeats``."""
    expected: str
    """What the value must be, as the error says it: ``a string``."""
    check: Callable[[object], bool]
    required: bool


def shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def rule_errors(data: Mapping[str, Any], rules: Sequence[Rule], prefix: str = "") -> list[str]:
    """What breaks ``rules`` in ``data``, a key under a parent that is absent or broken not checked."""
    errors = []
    for key, expected, check, required in rules:
        *parents, last = key.split(".")
        holder: object = data
        for parent in parents:
            holder = holder.get(parent) if isinstance(holder, dict) else None
        if not isinstance(holder, dict):
            continue
        if last not in holder:
            if required:
                errors.append(f"{prefix}{key}: required key is missing")
        elif not check(holder[last]):
            errors.append(f"{prefix}{key}: {shown(holder[last])} is not {expected}")
    return errors


class NotJson(ValueError):
    """``data`` is not JSON; ``detail`` is the decoder's own words."""

    def __init__(self, detail: str, *, nested: bool = False) -> None:
        super().__init__("not JSON: nested too deeply" if nested else f"not JSON ({detail})")
        self.detail = detail


def json_value(data: bytes) -> object:
    """``data`` decoded as JSON (UTF-8, or the UTF-16/32 that ``json.loads`` recognises); ``NotJson``."""
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise NotJson(str(exc), nested=True) from None
    except ValueError as exc:
        raise NotJson(str(exc)) from None


def parse_object(data: bytes) -> dict[str, Any]:
    """``data`` as a JSON object; ``ValueError`` saying why it is not one."""
    value = json_value(data)
    if not isinstance(value, dict):
        raise ValueError(f"{shown(value)} is not a JSON object")
    return value


def element(
    value: object, rules: Sequence[Rule], where: str, what: str, problems: list[str]
) -> dict[str, Any] | None:
    """``value`` when it is an object keeping ``rules``; else None, with a problem naming ``where``."""
    if not isinstance(value, dict):
        problems.append(f"{where}: {shown(value)} is not an object; {what} not shown")
        return None
    errors = rule_errors(value, rules, f"{where}.")
    if errors:
        problems.append(f"{'; '.join(errors)}; {what} not shown")
        return None
    return value


def drop_broken(
    data: dict[str, Any], rules: Sequence[Rule], prefix: str, problems: list[str]
) -> dict[str, Any]:
    """``data`` without the keys that break their (optional) rule, each named; the parts changed are
    copies. A rule of a nested key comes after its parent's."""
    kept = dict(data)
    for rule in rules:
        errors = rule_errors(data, [rule], prefix)
        if not errors:
            continue
        problems += [f"{error}; not used" for error in errors]
        *parents, last = rule.key.split(".")
        holder = kept
        for parent in parents:
            holder[parent] = dict(holder[parent])
            holder = holder[parent]
        holder.pop(last, None)
    return kept


def checked_element(
    value: object, rules: Sequence[Rule], where: str, what: str, problems: list[str]
) -> dict[str, Any] | None:
    """``value`` when it is an object keeping the required ``rules``, without the optional keys breaking
    theirs; None when it cannot be used (``element``). Each problem names ``where``."""
    found = element(value, [rule for rule in rules if rule.required], where, what, problems)
    if found is None:
        return None
    return drop_broken(found, [rule for rule in rules if not rule.required], f"{where}.", problems)


class FileReader:
    """A directory's files as read, with what could not be used of them: each problem names its file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []
        self.unreadable: set[str] = set()

    def _unusable(self, name: str, what: str) -> None:
        self.problems.append(f"{self.path / name}: {what}")
        self.unreadable.add(name)

    def read(self, name: str) -> bytes | None:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._unusable(name, f"cannot read: {exc.strerror or exc}")
            return None

    def json_object(self, name: str, rules: Sequence[Rule] = ()) -> dict[str, Any] | None:
        """The file's JSON object; None when it is missing or unusable: not a JSON object, or breaking a
        required rule. A broken optional rule is a problem, and the file is still used."""
        data = self.read(name)
        if data is None:
            return None
        try:
            found = parse_object(data)
        except ValueError as exc:
            self._unusable(name, str(exc))
            return None
        fatal = rule_errors(found, [rule for rule in rules if rule.required])
        if fatal:
            self._unusable(name, "; ".join(fatal))
            return None
        optional = rule_errors(found, [rule for rule in rules if not rule.required])
        self.problems += [f"{self.path / name}: {error}" for error in optional]
        return found
