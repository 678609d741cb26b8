"""status.json: how one config of a campaign run ended, beside its sweep's files.

Its keys and what a usable entry is are ``measure.results_format``'s. ``record_status`` is its one writer,
on the control node: the ``fairbench_status`` module calls it for the bench role (after each job's fetch,
or for every config of a host whose deploy failed), and tests build their results trees with it. It is
read by the report and by ``fairbench run``. ``journal_tail`` holds the lines of the server's journal
(``journal.log`` beside it) that say why it failed, its last traceback where it has one
(``fairbench.measure.journal.excerpt``); each job's ``ranks`` (a server over several hosts) quote each other
rank's ``ranks/<host>/journal.log`` so. The top-level outcome is failed when any job failed, with the first
failed job's stage, reason and journal tail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fairbench.measure.journal import excerpt
from fairbench.measure.results_format import FAILED, OK, OUTCOME_KEYS, STATUS_FILE, read_status

JOURNAL_FILE = "journal.log"
"""The server's journal of the run that measured the config's points, fetched beside status.json."""
JOURNAL_EXCERPT_LINES = 30
"""Journal lines a failed config's status quotes, and the report quotes from journal.log where it has no
status to quote: its last Python traceback, else its last lines."""
STAGES = ("deploy", "clean", "start", "health", "sweep", "stop", "fetch")
"""The stages of a config in a campaign run, in order; a failure names the one it happened in."""
SERVER_STAGES = STAGES[2:]
"""The stages with a server that may have run: only their failures quote a journal (a config whose deploy
failed, or whose host was not clean, started none, and an earlier run's journal.log in its directory says
nothing about this failure)."""
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
    stage, reason = (failure.stage, failure.reason) if failure else (None, None)
    return dict(zip(OUTCOME_KEYS, (FAILED if failure else OK, stage, reason, list(tail)), strict=True))


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
            outcome = {key: failed[key] for key in OUTCOME_KEYS}
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


@dataclass(frozen=True)
class JobRan:
    """A job that ran in a config's directory, as the bench role hands it over."""

    id: str
    repeats: tuple[int, ...]
    hosts: tuple[str, ...]
    """Rank 0 (the directory's host) first."""
    timeline: Mapping[str, float | None] = field(default_factory=dict)
    """``results_format.TIMELINE_KEYS`` (``fairbench.hosts.config_run``)."""


def _journal_tail(config_dir: Path, failure: Failure | None, lines: int) -> tuple[str, ...]:
    """The excerpt of ``config_dir``'s journal.log that a failed config's status quotes: none for a config
    that did not fail, failed at deploy, or has no journal."""
    if failure is None or failure.stage not in SERVER_STAGES:
        return ()
    try:
        journal = (config_dir / JOURNAL_FILE).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ()
    return tuple(excerpt(journal.splitlines(), lines))


def _with_job(config_dir: Path, status: ConfigStatus, job: JobStatus) -> ConfigStatus:
    """``status`` holding ``job`` and the other jobs of the same run already recorded in ``config_dir``'s
    status.json (a job recorded again replaces its earlier entry: a resume)."""
    previous = read_status(config_dir) or {}
    kept: list[dict[str, Any]] = []
    if previous.get("run_id") == status.run_id:
        kept = [
            entry
            for entry in previous.get("jobs") or []
            if isinstance(entry, dict) and entry.get("job") != job.job and "status" in entry
        ]
    return replace(status, failure=None, journal_tail=(), jobs=(*kept, job.to_json()))


def _write(config_dir: Path, status: ConfigStatus, *, check: bool) -> bool:
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


def record_status(
    config_dir: Path,
    *,
    host: str,
    config: str,
    unit: str,
    run_id: str,
    failure: Failure | None,
    job: JobRan | None = None,
    journal_lines: int = JOURNAL_EXCERPT_LINES,
    check: bool = False,
) -> tuple[bool, dict[str, Any]]:
    """Record in ``config_dir``/status.json how ``config`` ended on ``host`` in run ``run_id``: with ``job``,
    that job's entry joins those of the run's other jobs there; without, the config's outcome alone (a
    failed deploy, a run by hand). A failure quotes ``journal_lines`` of the journal, and of each other
    rank's. Returns whether the file changed (``check``: would change) and what it holds. ``ValueError``
    for a failure at no known stage, before anything is written."""
    if failure and failure.stage not in STAGES:
        raise ValueError(f"failure.stage: {failure.stage!r} is none of {', '.join(STAGES)}")
    tail = _journal_tail(config_dir, failure, journal_lines)
    status = ConfigStatus(host, config, unit, run_id, failure, tail)
    if job:
        ranks = tuple(
            RankStatus(rank, other, _journal_tail(config_dir / RANKS_DIR / other, failure, journal_lines))
            for rank, other in enumerate(job.hosts)
            if rank > 0
        )
        ended = JobStatus(job.id, job.repeats, job.hosts, failure, tail, ranks, dict(job.timeline))
        status = _with_job(config_dir, status, ended)
    return _write(config_dir, status, check=check), status.to_json()


def quoted_journal(config_dir: Path, shown: int) -> Sequence[str]:
    """The last ``shown`` journal lines a config's status.json quotes; none when it is unreadable."""
    tail = (read_status(config_dir) or {}).get("journal_tail")
    return [str(line) for line in tail[-shown:]] if isinstance(tail, list) else []
