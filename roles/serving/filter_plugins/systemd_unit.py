"""Filters that write values into systemd unit files so that systemd reads back exactly the value.

The argv and environment come from the campaign model already rendered; these only escape them for the
unit syntax (systemd.syntax(7), systemd.service(5) "Command lines"): quotes and backslashes, ``%``
specifiers, and ``$`` variable expansion on command lines.
"""

from __future__ import annotations

import re
from typing import Any

# Words systemd reads back unchanged without quotes.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def systemd_exec_arg(value: Any) -> str:
    """One ExecStart= word: ``%`` and ``$`` doubled (specifiers, variable expansion), quoted if needed."""
    text = str(value)
    word = text if _PLAIN_WORD.fullmatch(text) else _quoted(text)
    return word.replace("%", "%%").replace("$", "$$")


def systemd_environment(item: Any) -> str:
    """The value of one Environment= line from a (name, value) pair: always quoted, ``%`` doubled."""
    name, value = item
    return _quoted(f"{name}={value}").replace("%", "%%")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"systemd_exec_arg": systemd_exec_arg, "systemd_environment": systemd_environment}
