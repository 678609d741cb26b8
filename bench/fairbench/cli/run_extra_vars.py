"""``fairbench run -e``, as ansible-playbook reads ``-e``: ``KEY=VALUE`` (several, space-separated), ``@FILE``
(YAML or JSON) or an inline YAML/JSON mapping. Each is handed on as given, a file as its absolute path
(ansible-playbook runs in the project directory), once no variable it sets is one fairbench sets itself.

ansible-playbook lets the last ``-e`` win, and fairbench's own come after these: a vault-encrypted file,
whose variables cannot be read here, cannot override them either.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from fairbench.cli.usage import UsageError

OPTION = "-e/--extra-var"


class _AnyTagLoader(yaml.SafeLoader):
    """YAML with Ansible's tags (``!vault``, ``!unsafe``): only the variables' names are needed here."""


_AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def passed_on(values: list[str], reserved: Mapping[str, str]) -> list[str]:
    """ansible-playbook's ``-e`` arguments for these values; UsageError naming the first that cannot be
    handed on, or that sets a ``reserved`` variable (name: the argument of fairbench that sets it)."""
    passed: list[str] = []
    for value in values:
        if not value:
            continue  # ansible-playbook skips an empty one too
        if value.startswith("@"):
            path = Path(value[1:]).expanduser()
            for name in _reserved(_file_names(value, path), reserved):
                raise UsageError(f"{OPTION}: {value} sets {name}, which {reserved[name]} sets")
            passed += ["-e", f"@{path.absolute()}"]
            continue
        if value[0] in "/.":
            # ansible-playbook refuses it too, asking for the '@'.
            raise UsageError(f"{OPTION}: {value!r} names a file: write -e @{value}")
        names = _mapping_names(value) if value[0] in "[{" else _pairs_names(value)
        for name in _reserved(names, reserved):
            raise UsageError(f"{OPTION}: {name} is set by {reserved[name]}")
        passed += ["-e", value]
    return passed


def _reserved(names: list[str], reserved: Mapping[str, str]) -> list[str]:
    return [name for name in names if name in reserved]


def _pairs_names(value: str) -> list[str]:
    from ansible.parsing.splitter import parse_kv  # type: ignore[import-untyped]  # noqa: PLC0415 - heavy

    pairs: dict[str, Any] = parse_kv(value)
    # A word without '=' would become a variable named _raw_params.
    if "_raw_params" in pairs or not all(name.isidentifier() for name in pairs):
        raise UsageError(f"{OPTION}: {value!r} is not KEY=VALUE with KEY a variable name")
    return list(pairs)


def _mapping_names(value: str) -> list[str]:
    try:
        data = yaml.load(value, Loader=_AnyTagLoader)
    except yaml.YAMLError as exc:
        raise UsageError(f"{OPTION}: {value!r} is not YAML: {_problem(exc)}") from None
    return _names(data, repr(value))


def _file_names(value: str, path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"{OPTION}: {value}: cannot read: {why}") from None
    if text.startswith("$ANSIBLE_VAULT"):
        return []  # encrypted: its names cannot be read here (and fairbench's own win anyway)
    try:
        data = yaml.load(text, Loader=_AnyTagLoader)
    except yaml.YAMLError as exc:
        raise UsageError(f"{OPTION}: {value}: not YAML: {_problem(exc)}") from None
    return _names(data, value)


def _names(data: object, source: str) -> list[str]:
    if not isinstance(data, dict):  # ansible-playbook refuses an empty one too
        raise UsageError(f"{OPTION}: {source} is not a mapping of variables")
    return [str(name) for name in data]


def _problem(exc: yaml.YAMLError) -> str:
    return str(getattr(exc, "problem", None) or exc).splitlines()[0]
