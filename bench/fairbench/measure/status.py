"""status.json: how one config of a campaign run ended, beside its sweep's files.

Written once per config and run, on the control node, by the ``fairbench_status`` module (the bench role
calls it after a config's last stage, or for every config of a host whose deploy failed); read by the
report and by ``fairbench run``. Keys:

- ``status``: ``ok`` or ``failed``;
- ``stage`` and ``reason``: where and why it failed (one of ``STAGES``, and a sentence), both null when it
  did not;
- ``journal_tail``: the lines of the server's journal (``journal.log`` beside it) that say why it failed,
  its last traceback where it has one (``fairbench.hosts.journal.excerpt``); empty when it did not fail;
- ``host``, ``config``, ``unit``, ``run_id``: what ran where.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairbench.hosts.journal import excerpt

STATUS_FILE = "status.json"
JOURNAL_FILE = "journal.log"
"""The server's journal of the run that measured the config's points, fetched beside status.json."""
JOURNAL_EXCERPT_LINES = 30
"""Journal lines a failed config's status quotes, and the report quotes from journal.log where it has no
status to quote: its last Python traceback, else its last lines."""
OK = "ok"
FAILED = "failed"
STAGES = ("deploy", "start", "health", "sweep", "fetch")
"""The stages of a config in a campaign run, in order; a failure names the one it happened in."""
SERVER_STAGES = STAGES[1:]
"""The stages with a server that may have run: only their failures quote a journal (a config whose deploy
failed has none, and an earlier run's journal.log in its directory says nothing about this failure)."""


@dataclass(frozen=True)
class Failure:
    stage: str
    reason: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Failure:
        return cls(str(data["stage"]), str(data["reason"]))


@dataclass(frozen=True)
class ConfigStatus:
    host: str
    config: str
    unit: str
    run_id: str
    failure: Failure | None
    journal_tail: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "status": FAILED if self.failure else OK,
            "stage": self.failure.stage if self.failure else None,
            "reason": self.failure.reason if self.failure else None,
            "journal_tail": list(self.journal_tail),
            "host": self.host,
            "config": self.config,
            "unit": self.unit,
            "run_id": self.run_id,
        }

    def render(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"


def journal_tail(config_dir: Path, failure: Failure | None, lines: int) -> tuple[str, ...]:
    """The excerpt of ``config_dir``'s journal.log that a failed config's status quotes: none for a config
    that did not fail, failed at deploy, or has no journal."""
    if failure is None or failure.stage not in SERVER_STAGES:
        return ()
    try:
        journal = (config_dir / JOURNAL_FILE).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ()
    return tuple(excerpt(journal.splitlines(), lines))


def write_status(config_dir: Path, status: ConfigStatus, *, check: bool = False) -> bool:
    """Write ``config_dir``/status.json (the directory is created); True when its content changed.
    ``check``: only say whether it would."""
    path = config_dir / STATUS_FILE
    content = status.render()
    try:
        changed = path.read_text(encoding="utf-8") != content
    except (FileNotFoundError, UnicodeDecodeError):
        changed = True
    if changed and not check:
        config_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".tmp")
        partial.write_text(content, encoding="utf-8")
        partial.replace(path)
    return changed


def quoted_journal(config_dir: Path, shown: int) -> Sequence[str]:
    """The last ``shown`` journal lines a config's status.json quotes; none when it is unreadable."""
    try:
        status = json.loads((config_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    tail = status.get("journal_tail") if isinstance(status, dict) else None
    return [str(line) for line in tail[-shown:]] if isinstance(tail, list) else []
