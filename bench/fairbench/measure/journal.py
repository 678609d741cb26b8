"""The lines of a server's journal that say why it failed, for status.json and the report.

A server that crashes usually says why in a Python traceback, then logs its shutdown (SGLang: "SIGQUIT
received", crash diagnostics, killing its process tree) and systemd logs the unit's end: the journal's last
lines are then that noise. So the excerpt is the last traceback, ending with its exception line, when the
journal has one; else the journal's last lines.
"""

from __future__ import annotations

from collections.abc import Sequence

TRACEBACK = "Traceback (most recent call last):"


def _message(line: str) -> str:
    """The message of a ``journalctl --output=short-iso`` line (``<time> <host> <ident>[<pid>]: <message>``);
    a line of another shape is its own message."""
    prefix, separator, message = line.partition("]: ")
    return message if separator and " " in prefix else line


def _exception_line(lines: Sequence[str], header: int) -> int | None:
    """Index of the exception line closing the traceback that starts at ``header``: the first line after
    it that is not a frame (frames and their code are indented)."""
    for index in range(header + 1, len(lines)):
        message = _message(lines[index])
        if message.strip() and not message[0].isspace():
            return index
    return None


def excerpt(lines: Sequence[str], limit: int) -> list[str]:
    """At most ``limit`` lines: the last traceback (its header, then its innermost frames and the exception),
    or the last ``limit`` lines where the journal has no complete traceback."""
    headers = [index for index, line in enumerate(lines) if _message(line).rstrip().endswith(TRACEBACK)]
    end = _exception_line(lines, headers[-1]) if headers else None
    if end is None or limit < 2:
        return list(lines[-limit:]) if limit > 0 else []
    header = headers[-1]
    if end - header + 1 <= limit:
        return list(lines[header : end + 1])
    return [lines[header], *lines[end + 2 - limit : end + 1]]
