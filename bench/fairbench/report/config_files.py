"""One ``<host>/<config>/`` directory of a run's results tree read into a ``ConfigResult``: status.json and
points.jsonl through the results format (``measure.results_format``), the server's and host's files, and
each other rank's under ``ranks/<host>/``. What cannot be used of a file is named in the result's
``problems`` (the file, and the line of points.jsonl or the key path of status.json's ``jobs``), and the
rest is read.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fairbench.campaign.model import SINGLE_WORKLOAD, workload_dir
from fairbench.fleet.timeline import Timeline
from fairbench.measure.journal import excerpt
from fairbench.measure.json_rules import (
    FileReader,
    Rule,
    checked_element,
    is_host_list,
    or_null,
    shown,
    whole,
)
from fairbench.measure.results import SWEEP_FILE
from fairbench.measure.results_format import (
    HOST_FILE,
    JOB_RULES,
    OK,
    POINTS_FILE,
    RANK_RULES,
    SERVER_INFO_FILE,
    STATUS_FILE,
    STATUS_RULES,
    UNIT_FILE,
)
from fairbench.measure.status import JOURNAL_EXCERPT_LINES, JOURNAL_FILE, RANKS_DIR
from fairbench.report.points import read_points
from fairbench.report.tree import MISSING, UNREADABLE, ConfigResult, Job, RankFiles, RankStatus

SWEEP_RULES: tuple[Rule, ...] = (
    Rule("gpus", "null or a whole number of at least 1", or_null(whole(1)), False),
)


def unit_environment(unit_text: str) -> dict[str, str]:
    """The variables a systemd unit's ``Environment=`` lines set, later lines winning as in systemd.

    Each line holds space-separated ``NAME=value`` words, each possibly quoted; ``%%`` is a literal %.
    """
    environment: dict[str, str] = {}
    for line in unit_text.splitlines():
        key, _, value = line.strip().partition("=")
        if key != "Environment":
            continue
        for word in shlex.split(value.replace("%%", "%")):
            name, _, assigned = word.partition("=")
            environment[name] = assigned
    return environment


def _journal_excerpt(status: dict[str, Any], journal: Path) -> list[str]:
    tail = status.get("journal_tail")
    if isinstance(tail, list) and tail:
        return [str(line) for line in tail]
    try:
        lines = journal.read_text(encoding="utf-8", errors="replace").splitlines()
        return excerpt(lines, JOURNAL_EXCERPT_LINES)
    except OSError:
        return []


class _Files(FileReader):
    """One config directory's files as read, with what could not be used of them."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.notes: list[str] = []

    def environment(self) -> dict[str, str] | None:
        data = self.read(UNIT_FILE)
        if data is None:
            return None
        try:
            return unit_environment(data.decode("utf-8"))
        except ValueError as exc:  # not UTF-8, or an Environment= line shlex cannot split
            self._unusable(UNIT_FILE, f"cannot read its Environment= lines: {exc}")
            return None

    def points(self, name: str, placed: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every usable point of the points.jsonl at ``name`` (``report.points.read_points``)."""
        points, problems, notes = read_points(self.path / name, self.read(name), placed)
        self.problems += problems
        self.notes += notes
        return points


def _status(found: dict[str, Any] | None, files: _Files) -> dict[str, Any]:
    """status.json as read (``found``), or what stands for it when it is missing or unusable."""
    if found is not None:
        return found
    return {"status": UNREADABLE if STATUS_FILE in files.unreadable else MISSING}


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _rank(value: object, where: str, problems: list[str]) -> RankStatus | None:
    rank = checked_element(value, RANK_RULES, where, "rank", problems)
    if rank is None:
        return None
    return RankStatus(rank["rank"], rank["host"], tuple(rank.get("journal_tail", ())))


def _job(value: object, where: str, host: str, problems: list[str]) -> Job | None:
    """One entry of status.json's ``jobs``; None when it cannot be used (named)."""
    job = checked_element(value, JOB_RULES, where, "job", problems)
    if job is None:
        return None
    if job["hosts"][0] != host:
        problems.append(f"{where}.hosts: rank 0 is {shown(job['hosts'][0])}, but this is {host}'s directory")
    ranks = [
        _rank(entry, f"{where}.ranks[{index}]", problems) for index, entry in enumerate(job.get("ranks", []))
    ]
    timeline = job.get("timeline")
    return Job(
        id=job["job"],
        repeats=tuple(job["repeats"]),
        hosts=tuple(job["hosts"]),
        status=job["status"],
        stage=job.get("stage"),
        reason=job.get("reason"),
        journal_tail=tuple(job.get("journal_tail", ())),
        ranks=tuple(rank for rank in ranks if rank is not None),
        timeline=None if timeline is None else Timeline.from_json(timeline),
    )


def _jobs(
    files: _Files,
    status: dict[str, Any] | None,
    *,
    host: str,
    name: str,
    points: Sequence[dict[str, Any]],
    journal: list[str],
) -> tuple[Job, ...]:
    """status.json's jobs, each usable one; for a status.json without them (an older one, or one written
    for a deploy failure; or whose ``jobs`` is unusable), the one job it stands for: every point here, on
    its ``hosts`` or this host. None without a usable status.json."""
    if status is None:
        return ()
    listed = status.get("jobs")
    if isinstance(listed, list) and listed:
        problems: list[str] = []
        found = [_job(entry, f"jobs[{index}]", host, problems) for index, entry in enumerate(listed)]
        files.problems += [f"{files.path / STATUS_FILE}: {problem}" for problem in problems]
        return tuple(job for job in found if job is not None)
    hosts = status.get("hosts")
    return (
        Job(
            id=f"{name}@{host}",
            repeats=tuple(sorted({int(point["repeat"]) for point in points})),
            hosts=tuple(hosts) if is_host_list(hosts) else (host,),
            status=str(status["status"]),
            stage=_text(status.get("stage")),
            reason=_text(status.get("reason")),
            journal_tail=tuple(journal),
            recorded=False,
        ),
    )


def _rank_files(path: Path, problems: list[str]) -> tuple[RankFiles, ...]:
    """``ranks/<host>/`` of a multi-node config's directory: each rank's host.json, unit environment and
    journal excerpt, what cannot be used of them named in ``problems``."""
    try:
        rank_dirs = sorted(child for child in (path / RANKS_DIR).iterdir() if child.is_dir())
    except FileNotFoundError:
        return ()
    except OSError as exc:
        problems.append(f"{path / RANKS_DIR}: cannot read: {exc.strerror or exc}")
        return ()
    found = []
    for rank_dir in rank_dirs:
        files = _Files(rank_dir)
        journal = files.read(JOURNAL_FILE)
        lines = journal.decode("utf-8", errors="replace").splitlines() if journal is not None else []
        found.append(
            RankFiles(
                host=rank_dir.name,
                path=rank_dir,
                host_info=files.json_object(HOST_FILE),
                environment=files.environment(),
                journal_excerpt=excerpt(lines, JOURNAL_EXCERPT_LINES) if lines else [],
            )
        )
        problems += files.problems
    return tuple(found)


def load_config(
    host: str, name: str, path: Path, *, campaign: str | None = None, workload: str = SINGLE_WORKLOAD
) -> ConfigResult:
    """One config directory, with the points and sweep.json of its ``workload`` (``workload_dir``);
    ``campaign``: the run's campaign name, which its point lines must name too. The host is not checked
    against theirs: a sweep run by hand names the machine it ran on."""
    files = _Files(path)
    found = files.json_object(STATUS_FILE, STATUS_RULES)
    status = _status(found, files)
    placed = {"config": name} | ({"campaign": campaign} if campaign is not None else {})
    swept = workload_dir(Path(), workload)
    points = files.points(str(swept / POINTS_FILE), placed)
    journal = _journal_excerpt(status, path / JOURNAL_FILE) if status.get("status") != OK else []
    server_info = files.json_object(SERVER_INFO_FILE)
    host_info = files.json_object(HOST_FILE)
    environment = files.environment()
    sweep_settings = files.json_object(str(swept / SWEEP_FILE), SWEEP_RULES)
    jobs = _jobs(files, found, host=host, name=name, points=points, journal=journal)
    ranks = _rank_files(path, files.problems)
    return ConfigResult(
        host=host,
        name=name,
        path=path,
        status=status,
        workload=workload,
        points=points,
        server_info=server_info,
        host_info=host_info,
        environment=environment,
        sweep_settings=sweep_settings,
        journal_excerpt=journal,
        problems=tuple(files.problems),
        notes=tuple(files.notes),
        unreadable=frozenset(files.unreadable),
        jobs=jobs,
        ranks=ranks,
    )
