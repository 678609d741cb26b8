"""A run's results tree read into memory: ``results/<campaign>/<run_id>/`` (docs/results.md).

``Run.results`` holds one ``ConfigResult`` per ``<host>/<config>/`` directory; ``Run.configs`` holds what
the report compares, one ``ConfigRun`` each, by the campaign's ``placement``:

- ``spread``: one per config, merging every host directory that holds a job of it (a config's repeats may
  run on several hosts; a server over several nodes keeps its other ranks' files under ``ranks/<host>/``
  of its rank-0 host's directory);
- ``every-host`` (also a campaign.json from before placements existed): one per host and config.

Every config the campaign names appears, even when its directory is missing or holds no points: under
``every-host`` on every host that ran any config, under ``spread`` once. A report never drops a config
silently. Nor does it drop a damaged file silently: what cannot be used of a config's files is named
(file, and line of points.jsonl, or key path of status.json's ``jobs``) in its ``problems``, and the rest
is read; so is what cannot be used of a host's nccl.json and of the run's fleet.json (file, and key path).
A campaign.json the report cannot use is a ``ResultsError``.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from fairbench.campaign.model import DEFAULT_NODES, EVERY_HOST, PLACEMENTS, SPREAD
from fairbench.fleet.timeline import Timeline
from fairbench.measure.journal import excerpt
from fairbench.measure.results import (
    CAMPAIGN_FILE,
    POINTS_FILE,
    SUPERSEDES,
    SWEEP_FILE,
    ResultsError,
    is_open_loop,
    load_of,
    point_id,
)
from fairbench.measure.status import (
    JOURNAL_EXCERPT_LINES,
    JOURNAL_FILE,
    OK,
    RANKS_DIR,
    STATUS_FILE,
    TIMELINE_KEYS,
)
from fairbench.nccl.runner import DECODE, PREFILL
from fairbench.nccl.runner import RESULT_FILE as NCCL_FILE
from fairbench.report.figures import (
    ACHIEVED_RATE,
    CHECK_NUMBERS,
    CLIENT_PROCESSES,
    CLIENT_USE,
    FIGURES,
    FLAGS,
    SERVER_ERROR,
    SERVER_FAILURES,
    SERVER_SAMPLES,
    THROUGHPUT,
    non_finite_text,
)
from fairbench.report.fleet_file import Fleet, load_fleet
from fairbench.report.rules import (
    FileReader,
    Rule,
    checked_element,
    drop_broken,
    element,
    fields_of,
    is_byte_count,
    is_finite,
    is_host_list,
    is_list,
    is_mapping,
    is_number,
    is_placement,
    is_positive,
    is_repeats,
    is_text,
    list_of,
    object_of,
    or_null,
    parse_object,
    rule_errors,
    shown,
    whole,
)

SERVER_INFO_FILE = "server_info.json"
HOST_FILE = "host.json"
UNIT_FILE = "unit.service"
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
    nccl.json files (``load_run``)."""
    notes: tuple[str, ...] = ()
    """An incomplete last line of points.jsonl, skipped: what an interrupted write leaves."""
    unreadable: frozenset[str] = field(default_factory=frozenset)
    """The files present but unusable; any other that gave None is missing."""
    jobs: tuple[Job, ...] = ()
    """The jobs that ran here (status.json's ``jobs``); for a status.json without any, one job of every
    point here on this host, without a timeline; none without a usable status.json."""
    ranks: tuple[RankFiles, ...] = ()
    """The files of a multi-node server's ranks >= 1, by ``ranks/<host>/``."""

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
    merged, under ``every-host`` one host's directory (the module docstring)."""

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


@dataclass(frozen=True)
class Run:
    path: Path
    campaign: dict[str, Any]
    """campaign.json, with every key the report reads checked (``CAMPAIGN_RULES``)."""
    results: list[ConfigResult]
    """One per config directory: by host, then in the campaign's config order, then configs the campaign
    does not name."""
    nccl: dict[str, dict[str, Any]]
    """Each host's nccl.json (``fairbench nccl``), by host, holding only what is well-formed of it
    (``load_nccl``)."""
    fleet: Fleet | None = None
    """fleet.json; None for a run without one (before campaigns ran over fleets), or one unusable."""

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def placement(self) -> str:
        """``spread`` or ``every-host`` (``_placement``)."""
        return _placement(self.campaign, self.fleet)

    @cached_property
    def configs(self) -> list[ConfigRun]:
        """What the report compares (the module docstring): under spread one per config in the
        campaign's order, else one per directory, in ``results``' order."""
        if self.placement != SPREAD:
            return [ConfigRun.of(result) for result in self.results]
        by_name: dict[str, list[ConfigResult]] = {}
        for result in self.results:
            by_name.setdefault(result.name, []).append(result)
        order = [
            *self.campaign["configs"],
            *(name for name in by_name if name not in self.campaign["configs"]),
        ]
        return [
            merged(name, by_name[name], int(self.declared(name).get("nodes", DEFAULT_NODES)))
            for name in order
            if name in by_name
        ]

    @property
    def name(self) -> str:
        return str(self.campaign["name"])

    def declared(self, config: str) -> dict[str, Any]:
        """The config's entry in campaign.json (``declared``, ``unset``, ``args``, ...); {} if not named."""
        entry: dict[str, Any] = self.campaign["configs"].get(config, {})
        return entry


_SECTIONS = ("args", "env", "sim")
CAMPAIGN_RULES: tuple[Rule, ...] = (
    Rule("name", "a string", is_text, True),
    Rule("engine", "a string", is_text, True),
    Rule("model", "a string", is_text, True),
    Rule("configs", "an object", is_mapping, True),
    Rule("workload", "an object", is_mapping, True),
    Rule("workload.api", "a string", is_text, True),
    Rule("workload.input_len", "a whole number", whole(0), True),
    Rule("workload.output_len", "a whole number", whole(0), True),
    # A closed loop's levels, or an open loop's rates: the campaign package refuses a workload with neither.
    Rule("workload.concurrency", "a list of whole numbers of at least 1", list_of(whole(1)), False),
    Rule("workload.request_rate", "a list of positive numbers", list_of(is_positive), False),
    Rule(
        "workload.repeats", "a whole number of at least 1, or {min, max, half_width_pct}", is_repeats, False
    ),
    Rule("slo", "an object", is_mapping, False),
    Rule("warnings", "a list of strings", list_of(is_text), False),
    Rule("placement", " or ".join(PLACEMENTS), is_placement, False),
    Rule("accept_host_differences", "a list of strings", list_of(is_text), False),
)
CONFIG_RULES: tuple[Rule, ...] = (
    *(Rule(section, "an object", is_mapping, False) for section in _SECTIONS),
    Rule("declared", "an object", is_mapping, False),
    *(Rule(f"declared.{section}", "an object", is_mapping, False) for section in _SECTIONS),
    Rule("unset", "an object", is_mapping, False),
    *(Rule(f"unset.{section}", "a list of strings", list_of(is_text), False) for section in _SECTIONS),
    Rule("nodes", "a whole number of at least 1", whole(1), False),
    Rule("gpus_per_node", "null or a whole number", or_null(whole(0)), False),
    Rule("hosts", "null or a string", or_null(is_text), False),
)
"""What each entry of campaign.json's ``configs`` must hold where it holds it."""
_COUNTS = {"max_concurrency": 1, "repeat": 0, "completed": 0, "failed": 0}
POINT_RULES: tuple[Rule, ...] = (
    Rule("point_id", "a string", is_text, True),
    *(Rule(key, f"a whole number of at least {least}", whole(least), True) for key, least in _COUNTS.items()),
    Rule(THROUGHPUT, "a number", is_number, True),
    *(Rule(key, "a number", is_number, False) for key in sorted(FIGURES - _COUNTS.keys() - {THROUGHPUT})),
    Rule(ACHIEVED_RATE, "null or a number", or_null(is_number), False),
    Rule(SUPERSEDES, "an object", is_mapping, False),
    Rule(f"{SUPERSEDES}.line", "a whole number of at least 1", whole(1), True),
)
"""Every point the sweep writes has the required keys; without them a point cannot be placed or counted."""
FLAG_FIELDS = {"flag": is_text, "on": list_of(is_text), "reason": is_text}
"""A flag of a point (measure/point_flags.py)."""
CHECK_RULES: tuple[Rule, ...] = (
    Rule(FLAGS, "a list of {flag, on, reason}", list_of(fields_of(FLAG_FIELDS)), False),
    *(Rule(key, "null or a finite number", or_null(is_finite), False) for key in CHECK_NUMBERS),
    *(Rule(key, "a whole number", whole(0), False) for key in (SERVER_SAMPLES, SERVER_FAILURES)),
    Rule(SERVER_ERROR, "null or a string", or_null(is_text), False),
    Rule(CLIENT_PROCESSES, "a whole number of at least 1", whole(1), False),
    Rule(CLIENT_USE, "a list of objects of finite numbers", list_of(object_of(or_null(is_finite))), False),
)
"""A point's measurement checks: one that breaks its rule counts as not measured, and is named."""
STATUS_RULES: tuple[Rule, ...] = (
    Rule("status", "a string", is_text, True),
    Rule("jobs", "a list", is_list, False),
    Rule("hosts", "a list of strings", list_of(is_text), False),
)
_HOST_LIST = "a list of strings, at least one"
JOB_RULES: tuple[Rule, ...] = (
    Rule("job", "a string", is_text, True),
    Rule("repeats", "a list of whole numbers", list_of(whole(0)), True),
    Rule("hosts", _HOST_LIST, is_host_list, True),
    Rule("status", "a string", is_text, True),
    *(Rule(key, "null or a string", or_null(is_text), False) for key in ("stage", "reason")),
    Rule("journal_tail", "a list of strings", list_of(is_text), False),
    Rule("ranks", "a list", is_list, False),
    Rule("timeline", "null or an object", or_null(is_mapping), False),
    *(Rule(f"timeline.{key}", "null or a finite number", or_null(is_finite), False) for key in TIMELINE_KEYS),
)
"""Each entry of status.json's ``jobs``: one breaking a required rule is left out; a broken optional key
counts as absent."""
RANK_RULES: tuple[Rule, ...] = (
    Rule("rank", "a whole number of at least 1", whole(1), True),
    Rule("host", "a string", is_text, True),
    Rule("journal_tail", "a list of strings", list_of(is_text), False),
)
"""Each entry of a job's ``ranks``."""
SWEEP_RULES: tuple[Rule, ...] = (
    Rule("gpus", "null or a whole number of at least 1", or_null(whole(1)), False),
)
# nccl.json as fairbench/nccl/runner.py's ``assemble`` writes it, as far as the report reads it.
NCCL_RULES: tuple[Rule, ...] = (Rule("variants", "a list", is_list, True),)
NCCL_FACT_RULES: tuple[Rule, ...] = (
    *(Rule(key, "a whole number of at least 1", whole(1), False) for key in ("gpus", "hidden_size", "iters")),
    Rule("graph_ops", "null or a whole number of at least 1", or_null(whole(1)), False),
    *(Rule(key, "null or a string", or_null(is_text), False) for key in ("device", "torch", "nccl")),
)
"""What the section's heading paragraph says of the measurement; a key that breaks its rule is left out."""
NCCL_VARIANT_RULES: tuple[Rule, ...] = (
    Rule("name", "a string", is_text, True),
    Rule("env", "an object of strings", object_of(is_text), True),
    Rule("configs", "a list of strings", list_of(is_text), True),
    Rule("error", "null or a string", or_null(is_text), False),
    Rule("sizes", "a list", is_list, True),
)
NCCL_SIZE_RULES: tuple[Rule, ...] = (
    Rule("bytes", "a whole number of at least 1", is_byte_count, True),
    Rule("scale", f"{DECODE} or {PREFILL}", lambda value: value in (DECODE, PREFILL), True),
    Rule("tokens", "null or a whole number of at least 1", or_null(whole(1)), True),
)
NCCL_MODES = ("eager", "graph")
"""The launch modes of a size: each an object of figures, or null where not measured so."""
NCCL_TIMING_KEYS = ("median_us", "p10_us", "p90_us", "busbw_gbps")
NCCL_TIMING_RULES: tuple[Rule, ...] = tuple(
    Rule(key, "a positive number", is_positive, True) for key in NCCL_TIMING_KEYS
)


# --- one config's files ----------------------------------------------------------------------------------


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

    def points(self, placed: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Every usable point, its latest line only (measure.results.SUPERSEDES), in the order the points
        were first measured. A point_id seen before that does not supersede it (two writers) counts once; a
        measurement check breaking its rule (``CHECK_RULES``) is left out of its point, and named.
        ``placed``: the identity keys (measure.results.RunIdentity) the tree gives these points, checked
        against those their lines name (``_named_elsewhere``).
        """
        path = self.path / POINTS_FILE
        kept: dict[str, tuple[int, dict[str, Any]]] = {}
        for number, point in self._point_lines(path):
            pid = point["point_id"]
            if pid in kept and point.get(SUPERSEDES, {}).get("line") != kept[pid][0]:
                self.problems.append(
                    f"{path}:{number}: point {pid} again (first on line {kept[pid][0]}); not counted"
                )
                continue
            kept[pid] = (number, point)
        for pid, (number, point) in kept.items():
            self.problems += _non_finite(path, number, point)
            kept[pid] = (
                number,
                drop_broken(point, CHECK_RULES, f"{path}:{number}: point {pid}: ", self.problems),
            )
        self.problems += _named_elsewhere(path, list(kept.values()), placed or {})
        return [point for _, point in kept.values()]

    def _point_lines(self, path: Path) -> list[tuple[int, dict[str, Any]]]:
        """Each line of points.jsonl that is a point, with its number. An incomplete last line is what an
        interrupted write leaves: the sweep's --resume drops it too."""
        data = self.read(POINTS_FILE)
        if data is None:
            return []
        *lines, tail = data.split(b"\n")
        if tail.strip():
            self.notes.append(
                f"{path}:{len(lines) + 1}: incomplete last line skipped (an interrupted write; "
                "`fairbench sweep --resume` measures that point again)"
            )
        found = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                found.append((number, _point(line)))
            except ValueError as exc:
                self.problems.append(f"{path}:{number}: {exc}; line skipped")
        return found


def _non_finite(path: Path, number: int, point: dict[str, Any]) -> list[str]:
    return [
        f"{path}:{number}: point {point['point_id']}: {key} is {non_finite_text(point[key])}, shown as such"
        for key in sorted((FIGURES | {ACHIEVED_RATE}) & point.keys())
        if point[key] is not None and not math.isfinite(point[key])
    ]


def _named_elsewhere(
    path: Path, points: list[tuple[int, dict[str, Any]]], placed: Mapping[str, str]
) -> list[str]:
    """For each key of ``placed`` that lines name otherwise, one problem naming the first: the points are
    shown where they lie. Lines from before lines named their sweep name nothing, and pass."""
    problems = []
    for key, expected in placed.items():
        other = [(number, point[key]) for number, point in points if point.get(key) not in (None, expected)]
        if other:
            number, named = other[0]
            problems.append(
                f"{path}:{number}: {len(other)} point(s) name {key} {shown(named)} where the tree says "
                f"{shown(expected)}; shown as the tree says"
            )
    return problems


def _point(line: bytes) -> dict[str, Any]:
    """One line of points.jsonl as a point; ``ValueError`` saying why it is not one."""
    point = parse_object(line)
    errors = rule_errors(point, POINT_RULES)
    if errors:
        raise ValueError("; ".join(errors))
    open_loop = is_open_loop(point)
    expected = point_id(load_of(point), point["repeat"], open_loop=open_loop)
    if point["point_id"] != expected:
        level = (
            f"request_rate {point['request_rate']}"
            if open_loop
            else f"max_concurrency {point['max_concurrency']}"
        )
        raise ValueError(
            f"point_id {shown(point['point_id'])} is not {expected}, "
            f"as {level} and repeat {point['repeat']} make it"
        )
    return point


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


def load_config(host: str, name: str, path: Path, *, campaign: str | None = None) -> ConfigResult:
    """One config directory; ``campaign``: the run's campaign name, which its point lines must name too.
    The host is not checked against theirs: a sweep run by hand names the machine it ran on."""
    files = _Files(path)
    found = files.json_object(STATUS_FILE, STATUS_RULES)
    status = _status(found, files)
    placed = {"config": name} | ({"campaign": campaign} if campaign is not None else {})
    points = files.points(placed)
    journal = _journal_excerpt(status, path / JOURNAL_FILE) if status.get("status") != OK else []
    server_info = files.json_object(SERVER_INFO_FILE)
    host_info = files.json_object(HOST_FILE)
    environment = files.environment()
    sweep_settings = files.json_object(SWEEP_FILE, SWEEP_RULES)
    jobs = _jobs(files, found, host=host, name=name, points=points, journal=journal)
    ranks = _rank_files(path, files.problems)
    return ConfigResult(
        host=host,
        name=name,
        path=path,
        status=status,
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


def merged(name: str, parts: Sequence[ConfigResult], nodes: int = DEFAULT_NODES) -> ConfigRun:
    """The directories of one config (spread) as one: the one holding its earliest repeat first, then the
    others by their first repeat. A point id found in two directories is counted in the first only, and
    named: one job's points never split over two hosts, so two copies are two measurements of one point."""
    ordered = sorted(parts, key=lambda part: (part.first_repeat, part.host))
    points: list[dict[str, Any]] = []
    problems = []
    first_in: dict[str, Path] = {}
    for part in ordered:
        again = [point["point_id"] for point in part.points if point["point_id"] in first_in]
        if again:
            problems.append(
                f"{part.path / POINTS_FILE}: {len(again)} point(s) of {name} also in "
                f"{first_in[again[0]]} ({', '.join(again[:3])}{', ...' if len(again) > 3 else ''}); "
                "counted there only"
            )
        for point in part.points:
            if point["point_id"] not in first_in:
                first_in[point["point_id"]] = part.path / POINTS_FILE
                points.append(point)
    return ConfigRun(name, tuple(ordered), points, tuple(problems), nodes)


# --- a host's nccl.json ---------------------------------------------------------------------------------


def _nccl_timing(value: object, where: str, problems: list[str]) -> dict[str, Any] | None:
    """One launch mode's figures of one size; None where unmeasured (null) or unusable (named)."""
    if value is None:
        return None
    timing = element(value, NCCL_TIMING_RULES, where, "measurement", problems)
    if timing is not None:
        problems += [
            f"{where}.{key} is {non_finite_text(timing[key])}, shown as such"
            for key in NCCL_TIMING_KEYS
            if not math.isfinite(timing[key])
        ]
    return timing


def _nccl_size(value: object, where: str, problems: list[str]) -> dict[str, Any] | None:
    size = element(value, NCCL_SIZE_RULES, where, "size", problems)
    if size is None:
        return None
    timings = {mode: _nccl_timing(size.get(mode), f"{where}.{mode}", problems) for mode in NCCL_MODES}
    return {**size, **timings}


def _nccl_variant(value: object, where: str, problems: list[str]) -> dict[str, Any] | None:
    variant = element(value, NCCL_VARIANT_RULES, where, "variant", problems)
    if variant is None:
        return None
    sizes = [
        _nccl_size(size, f"{where}.sizes[{index}]", problems) for index, size in enumerate(variant["sizes"])
    ]
    return {**variant, "sizes": [size for size in sizes if size is not None]}


def _nccl_facts(document: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """``document`` without the facts that break their rule, each named."""
    kept = dict(document)
    for rule in NCCL_FACT_RULES:
        errors = rule_errors(document, [rule])
        if errors:
            problems += [f"{error}; not shown" for error in errors]
            del kept[rule.key]
    return kept


def load_nccl(host_dir: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """A host's nccl.json holding only its well-formed facts, variants, sizes and measurements (None when
    the file cannot be used at all), and the problems naming the file and the key path of the rest."""
    files = _Files(host_dir)
    document = files.json_object(NCCL_FILE, NCCL_RULES)
    if document is None:
        return None, files.problems
    problems: list[str] = []
    checked = _nccl_facts(document, problems)
    variants = [
        _nccl_variant(value, f"variants[{index}]", problems)
        for index, value in enumerate(document["variants"])
    ]
    checked["variants"] = [variant for variant in variants if variant is not None]
    return checked, [f"{host_dir / NCCL_FILE}: {problem}" for problem in problems]


def _run_nccl(run_dir: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every host's usable nccl.json, by host, and the problems of them all."""
    found: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for path in sorted(run_dir.glob(f"*/{NCCL_FILE}")):
        document, named = load_nccl(path.parent)
        problems += named
        if document is not None:
            found[path.parent.name] = document
    return found, problems


# --- the run ---------------------------------------------------------------------------------------------


def _listing(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such directory") from None
    except NotADirectoryError:
        raise ResultsError(f"{path}: not a directory: a run is results/<campaign>/<run_id>") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _campaign(run_dir: Path) -> dict[str, Any]:
    path = run_dir / CAMPAIGN_FILE
    try:
        campaign = parse_object(path.read_bytes())
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing: is {run_dir} a run (results/<campaign>/<run_id>)?") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ResultsError(f"{path}: {exc}") from None
    errors = rule_errors(campaign, CAMPAIGN_RULES)
    configs = campaign.get("configs")
    for name, entry in configs.items() if isinstance(configs, dict) else ():
        prefix = f"configs.{name}"
        errors += (
            rule_errors(entry, CONFIG_RULES, prefix + ".")
            if isinstance(entry, dict)
            else [f"{prefix}: {shown(entry)} is not an object"]
        )
    if errors:
        raise ResultsError(f"{path}: {'; '.join(errors)}")
    return campaign


def _is_config_dir(path: Path) -> bool:
    try:
        return path.is_dir() and any((path / name).exists() for name in (STATUS_FILE, POINTS_FILE))
    except OSError:
        return True  # unreadable: loading it names what cannot be read


def _placement(campaign: Mapping[str, Any], fleet: Fleet | None) -> str:
    """campaign.json's ``placement``, else fleet.json's; else ``every-host``: how every campaign ran
    before campaigns had a placement."""
    return str(campaign.get("placement") or (fleet.placement if fleet else None) or EVERY_HOST)


def load_run(path: Path) -> Run:
    """Read ``results/<campaign>/<run_id>``; ``ResultsError`` naming the path when it is not a run, or its
    campaign.json cannot be used."""
    children = _listing(path)
    campaign = _campaign(path)
    fleet, fleet_problems = load_fleet(path)
    named = list(campaign["configs"])
    config_dirs = {
        child.name: [grandchild.name for grandchild in _listing(child) if _is_config_dir(grandchild)]
        for child in children
        if child.is_dir()
    }
    hosts = [host for host, present in config_dirs.items() if present]
    results = []
    spread = _placement(campaign, fleet) == SPREAD
    # Every-host: every config on every host, a directory missing included; with no host directory at
    # all, the configs still appear, each as missing. Spread: the directories there are, then once each
    # config no host ran.
    for host in hosts or ([] if spread else [NO_HOST]):
        present = config_dirs.get(host, [])
        for name in [*named, *(name for name in present if name not in named)]:
            if not spread or name in present:
                results.append(load_config(host, name, path / host / name, campaign=campaign["name"]))
    ran = {result.name for result in results}
    results += [
        load_config(NO_HOST, name, path / NO_HOST / name, campaign=campaign["name"])
        for name in named
        if spread and name not in ran
    ]
    nccl, nccl_problems = _run_nccl(path)
    if results and (nccl_problems or fleet_problems):
        # The first screen names the problems of the configs' files; nccl.json and fleet.json lie beside
        # them.
        extra = (*nccl_problems, *fleet_problems)
        results[0] = replace(results[0], problems=(*results[0].problems, *extra))
    return Run(path=path, campaign=campaign, results=results, nccl=nccl, fleet=fleet)
