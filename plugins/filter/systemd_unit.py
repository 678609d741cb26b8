"""Filters that write values into systemd unit files so that systemd reads back exactly the value, and
never a line the template did not write.

The argv and environment come from the campaign model already rendered; these only escape them for the
unit syntax (systemd.syntax(7), systemd.service(5) "Command lines"): quotes and backslashes, ``%``
specifiers, ``$`` variable expansion on command lines, and the characters systemd ends a line at
(newline, carriage return, NUL) or continues one with (a trailing backslash). ``fairbench validate``
refuses line ends in every campaign value; the escaping here keeps a unit rendered anyway to the
directives its template writes.
"""

from __future__ import annotations

import re
from typing import Any

# Words systemd reads back unchanged without quotes.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
# Written as C escapes, which quoted words and Environment= read back as the character.
_CONTROL_ESCAPES = {"\n": "\\n", "\r": "\\r", "\0": "\\x00", "\t": "\\t"}
_CONTROL = re.compile("[\n\r\0\t]")
_TRAILING_BACKSLASHES = re.compile(r"\\+$")


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _CONTROL.sub(lambda match: _CONTROL_ESCAPES[match[0]], escaped) + '"'


def systemd_line(value: Any) -> str:
    """The rest of a line (a plain value such as Description=, or a comment), read back as one line.

    Settings like Description= take text as it is, without C escapes: a line end is written as its
    escape, shown literally; ``%`` is doubled (specifiers); an odd run of trailing backslashes, which
    would join the next line to this one, gets one more.
    """
    text = _CONTROL.sub(lambda match: _CONTROL_ESCAPES[match[0]], str(value)).replace("%", "%%")
    trailing = _TRAILING_BACKSLASHES.search(text)
    return text + "\\" if trailing and len(trailing[0]) % 2 else text


def systemd_word(value: Any) -> str:
    """One word of a space-separated list (ReadWritePaths=): quoted if needed, ``%`` doubled."""
    text = str(value)
    word = text if _PLAIN_WORD.fullmatch(text) else _quoted(text)
    return word.replace("%", "%%")


def systemd_exec_arg(value: Any) -> str:
    """One ExecStart= word: a ``systemd_word`` with ``$`` doubled too (command lines expand variables)."""
    return systemd_word(value).replace("$", "$$")


def systemd_environment(item: Any) -> str:
    """The value of one Environment= line from a (name, value) pair: always quoted, ``%`` doubled."""
    name, value = item
    return _quoted(f"{name}={value}").replace("%", "%%")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "systemd_exec_arg": systemd_exec_arg,
            "systemd_environment": systemd_environment,
            "systemd_line": systemd_line,
            "systemd_word": systemd_word,
        }
