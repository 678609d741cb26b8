"""The report's model of a run's results tree: each ``<host>/<config>/`` directory as read (``ConfigResult``,
its ``Job``s and ranks), and each config as the report compares it (``ConfigRun``). ``report.load`` reads a
tree into them, ``report.placement`` makes the configs of the directories.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairbench.campaign.model import DEFAULT_NODES, SINGLE_WORKLOAD, workload_dir
from fairbench.fleet.timeline import Timeline
from fairbench.measure.results_format import OK, POINTS_FILE

NO_HOST = "(no host)"
MISSING = "missing"
"""The status of a config the campaign names but the tree has no status.json for."""
UNREADABLE = "unreadable"
"""The status of a config whose status.json cannot be used."""


@dataclass(frozen=True)
class RankStatus:
    """A rank >= 1 of a job's server over several nodes, as status.json's ``jobs[].ranks`` names it."""

    rank: int
    host: str
    journal_tail: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    """One job that ran in a config directory: one server's life, started clean, swept, stopped
    (status.json's ``jobs``, docs/results.md)."""

    id: str
    """``tp8#r0`` (spread), ``tp8@lab1`` (every-host)."""
    repeats: tuple[int, ...]
    hosts: tuple[str, ...]
    """Rank order, rank 0 (the directory's host) first."""
    status: str
    stage: str | None = None
    reason: str | None = None
    journal_tail: tuple[str, ...] = ()
    ranks: tuple[RankStatus, ...] = ()
    """Ranks >= 1, for a server over several nodes."""
    timeline: Timeline | None = None
    """Epoch seconds on the rank-0 host's clock (fleet.timeline); None where not recorded."""
    recorded: bool = True
    """False for the one job an older status.json without ``jobs`` stands for."""

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclass(frozen=True)
class RankFiles:
    """What a rank >= 1 of a multi-node server left under its rank-0 directory's ``ranks/<host>/``."""

    host: str
    path: Path
    host_info: dict[str, Any] | None
    environment: dict[str, str] | None
    journal_excerpt: list[str]


@dataclass(frozen=True)
class ConfigResult:
    """One config on one host, as fetched; a file that is absent or unusable is None (or empty)."""

    host: str
    name: str
    path: Path
    status: dict[str, Any]
    points: list[dict[str, Any]]
    server_info: dict[str, Any] | None
    host_info: dict[str, Any] | None
    environment: dict[str, str] | None
    """The unit's Environment= assignments."""
    sweep_settings: dict[str, Any] | None
    journal_excerpt: list[str]
    problems: tuple[str, ...] = ()
    """What of its files could not be used, or holds a figure that is not a finite number: each names
    the file (and the line of points.jsonl). The run's first config also carries those of the hosts'
    nccl.json files (``report.load.load_run``)."""
    notes: tuple[str, ...] = ()
    """An incomplete last line of points.jsonl, skipped: what an interrupted write leaves."""
    unreadable: frozenset[str] = field(default_factory=frozenset)
    """The files present but unusable; any other that gave None is missing."""
    jobs: tuple[Job, ...] = ()
    """The jobs that ran here (status.json's ``jobs``); for a status.json without any, one job of every
    point here on this host, without a timeline; none without a usable status.json."""
    ranks: tuple[RankFiles, ...] = ()
    """The files of a multi-node server's ranks >= 1, by ``ranks/<host>/``."""
    workload: str = SINGLE_WORKLOAD
    """The workload whose points these are (``campaign.model.workload_dir``)."""

    @property
    def points_path(self) -> Path:
        return workload_dir(self.path, self.workload) / POINTS_FILE

    @property
    def ok(self) -> bool:
        return self.status.get("status") == OK

    @property
    def state(self) -> str:
        return str(self.status.get("status") or UNREADABLE)

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host its jobs ran on, rank order, first job first; else its own host."""
        found = tuple(dict.fromkeys(host for job in self.jobs for host in job.hosts))
        return found or (() if self.host == NO_HOST else (self.host,))

    @property
    def first_repeat(self) -> float:
        """The lowest repeat it ran (its jobs', else its points'); infinite for none."""
        repeats = [repeat for job in self.jobs for repeat in job.repeats]
        repeats += [int(point["repeat"]) for point in self.points]
        return float(min(repeats, default=math.inf))


@dataclass(frozen=True)
class ConfigRun:
    """One config as the report shows and compares it: under ``spread`` every host directory of it
    merged, under ``every-host`` one host's directory (``report.placement``)."""

    name: str
    parts: tuple[ConfigResult, ...]
    """Its directories, at least one: under spread, the one holding its earliest repeat first."""
    points: list[dict[str, Any]]
    """Every part's points; a point id in two parts counts once, the first part's (named in ``problems``)."""
    problems: tuple[str, ...] = ()
    """What merging its parts could not use; each part names its own files' problems."""
    nodes: int = DEFAULT_NODES
    """Hosts one server of it spans, as campaign.json declares."""

    @classmethod
    def of(cls, result: ConfigResult) -> ConfigRun:
        """One directory as a config of its own."""
        return cls(result.name, (result,), result.points)

    @property
    def files(self) -> ConfigResult:
        """The directory whose settings files stand for the config: the first part (its rank-0 host's)."""
        return self.parts[0]

    @property
    def host(self) -> str:
        return self.files.host

    @property
    def path(self) -> Path:
        return self.files.path

    @property
    def server_info(self) -> dict[str, Any] | None:
        return self.files.server_info

    @property
    def sweep_settings(self) -> dict[str, Any] | None:
        return self.files.sweep_settings

    @property
    def jobs(self) -> tuple[Job, ...]:
        """Every part's jobs, by their first repeat."""
        jobs = [job for part in self.parts for job in part.jobs]
        return tuple(sorted(jobs, key=lambda job: min(job.repeats, default=math.inf)))

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host it ran on (every rank), rank order, first job first."""
        return tuple(dict.fromkeys(host for part in self.parts for host in part.hosts))

    @property
    def repeat_hosts(self) -> tuple[str, ...]:
        """The rank-0 hosts whose directories hold its points: more than one puts host-to-host
        variation into its confidence intervals."""
        return tuple(dict.fromkeys(part.host for part in self.parts if part.points))

    @property
    def state(self) -> str:
        """``ok`` when every part is, else the first other part's state."""
        return next((part.state for part in self.parts if not part.ok), OK)

    @property
    def ok(self) -> bool:
        return self.state == OK
