"""``journal_excerpt``: the lines of a server's journal that say why it failed (fairbench.hosts.journal)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fairbench.hosts.journal import excerpt


class FilterModule:
    """The bench role's filters; the control node runs Ansible from fairbench's venv."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"journal_excerpt": excerpt}
