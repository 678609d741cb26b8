"""status.json: how one config of a campaign run ended, beside its sweep's files.

Written once per config and run, on the control node, by the ``fairbench_status`` module (the bench role
calls it after a config's last stage, or for every config of a host whose deploy failed); read by the
report and by ``fairbench run``. Keys:

- ``status``: ``ok`` or ``failed``;
- ``stage`` and ``reason``: where and why it failed (one of ``STAGES``, and a sentence), both null when it
  did not;
- ``journal_tail``: the lines of the server's journal (``journal.log`` beside it) that say why it failed,
  its last traceback where it has one (``fairbench.measure.journal.excerpt``); empty when it did not fail;
- ``host``, ``config``, ``unit``, ``run_id``: what ran where;
- ``hosts``: every host a job of the directory ran on, rank 0 first (``host`` alone for a deploy failure);
- ``jobs``: one entry per job of this run that wrote into the directory (``JobStatus``): its ``job`` id,
  ``repeats``, ``hosts`` (rank 0 first), ``status``, ``stage``, ``reason`` and ``journal_tail`` as above,
  ``ranks`` (for a server over several hosts, each other rank's ``rank``, ``host`` and ``journal_tail``,
  quoted from ``ranks/<host>/journal.log``) and ``timeline`` (``fairbench.hosts.config_run``: epoch seconds
  on rank 0's host when its unit was started, answered healthy, got its first request and wrote its last
  point). The top-level status is failed when any job failed, with the first failed job's stage, reason and
  journal tail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fairbench.measure.journal import excerpt

STATUS_FILE = "status.json"
JOURNAL_FILE = "journal.log"
"""The server's journal of the run that measured the config's points, fetched beside status.json."""
JOURNAL_EXCERPT_LINES = 30
"""Journal lines a failed config's status quotes, and the report quotes from journal.log where it has no
status to quote: its last Python traceback, else its last lines."""
OK = "ok"
FAILED = "failed"
STAGES = ("deploy", "clean", "start", "health", "sweep", "stop", "fetch")
"""The stages of a config in a campaign run, in order; a failure names the one it happened in."""
SERVER_STAGES = STAGES[2:]
"""The stages with a server that may have run: only their failures quote a journal (a config whose deploy
failed, or whose host was not clean, started none, and an earlier run's journal.log in its directory says
nothing about this failure)."""
TIMELINE_KEYS = ("unit_started_at", "healthy_at", "first_request_at", "last_point_ended_at")
"""A job's ``timeline``: epoch seconds on its rank 0's host (``fairbench.hosts.config_run`` records them,
``fairbench.fleet.timeline`` measures the campaign's overhead from them)."""
RANKS_DIR = "ranks"
"""Under a config's directory, ``<host>/`` of each rank but rank 0 of a server over several hosts: its
journal.log and unit.service."""


@dataclass(frozen=True)
class Failure:
    stage: str
    reason: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Failure:
        return cls(str(data["stage"]), str(data["reason"]))


@dataclass(frozen=True)
class RankStatus:
    rank: int
    host: str
    journal_tail: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "journal_tail": list(self.journal_tail)}


@dataclass(frozen=True)
class JobStatus:
    """One job's share of a config's directory: its repeats, on its hosts, and how it ended."""

    job: str
    repeats: tuple[int, ...]
    hosts: tuple[str, ...]
    failure: Failure | None
    journal_tail: tuple[str, ...] = ()
    ranks: tuple[RankStatus, ...] = ()
    timeline: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "repeats": list(self.repeats),
            "hosts": list(self.hosts),
            **_outcome(self.failure, self.journal_tail),
            "ranks": [rank.to_json() for rank in self.ranks],
            "timeline": dict(self.timeline),
        }


def _outcome(failure: Failure | None, tail: Sequence[str]) -> dict[str, Any]:
    return {
        "status": FAILED if failure else OK,
        "stage": failure.stage if failure else None,
        "reason": failure.reason if failure else None,
        "journal_tail": list(tail),
    }


@dataclass(frozen=True)
class ConfigStatus:
    host: str
    config: str
    unit: str
    run_id: str
    failure: Failure | None
    journal_tail: tuple[str, ...] = ()
    jobs: tuple[dict[str, Any], ...] = ()
    """``JobStatus.to_json`` of each job of this run in the directory."""

    def to_json(self) -> dict[str, Any]:
        failed = next((job for job in self.jobs if job["status"] == FAILED), None)
        if self.failure or failed is None:
            outcome = _outcome(self.failure, self.journal_tail)
        else:
            outcome = {key: failed[key] for key in ("status", "stage", "reason", "journal_tail")}
        hosts = (
            [self.host]
            if not self.jobs
            else list(dict.fromkeys(h for job in self.jobs for h in job["hosts"]))
        )
        return {
            **outcome,
            "host": self.host,
            "config": self.config,
            "unit": self.unit,
            "run_id": self.run_id,
            "hosts": hosts,
            "jobs": list(self.jobs),
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


def with_job(config_dir: Path, status: ConfigStatus, job: JobStatus) -> ConfigStatus:
    """``status`` holding ``job`` and the other jobs of the same run already recorded in ``config_dir``'s
    status.json (a job recorded again replaces its earlier entry: a resume)."""
    try:
        previous = json.loads((config_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        previous = {}
    kept: list[dict[str, Any]] = []
    if isinstance(previous, dict) and previous.get("run_id") == status.run_id:
        kept = [
            entry
            for entry in previous.get("jobs") or []
            if isinstance(entry, dict) and entry.get("job") != job.job and "status" in entry
        ]
    return replace(status, failure=None, journal_tail=(), jobs=(*kept, job.to_json()))


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
