"""What an earlier run of a campaign recorded of its own times, for the plan of the next one.

From a run's directory (``results/<campaign>/<run_id>/``, docs/results.md): each config's status.json (its
jobs' timelines, ``fleet.timeline``) and points.jsonl (each point's measured ``duration``), read as the
report reads them but keeping only what a time estimate needs. Per config:

- ``load_s``: the mean of its jobs' ``healthy_at - unit_started_at`` (its server's start);
- ``sweep_factor``: sum over its timed jobs of ``last_point_ended_at - first_request_at`` over the sum of the
  ``duration`` of those jobs' points: what warmups, primers and the client's time between points add to the
  points' own measured time;
- per workload and level (``results_format.level_tag``): the mean ``duration`` of its listed points, and
  the mean ``(num_prompts + warmup_requests) / num_prompts`` of them (the stand-in for the factor where no
  job was timed).

And for the run: ``between_jobs_s``, the mean campaign overhead between two jobs of a host
(``fleet.timeline.overhead_s``); ``shared``, the groups of its hosts that shared a machine and took their
jobs in turn (fleet.json's ``machines``, ``fleet.sharing.serialised``), the same hosts' next run's too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any, TypeGuard

from fairbench.campaign.model import workload_dir
from fairbench.fleet.queue import FLEET_FILE
from fairbench.fleet.sharing import serialised
from fairbench.fleet.timeline import Timeline, host_overheads
from fairbench.measure.json_rules import rule_errors
from fairbench.measure.results_format import (
    JOB_RULES,
    LISTED,
    POINTS_FILE,
    STATUS_FILE,
    current_lines,
    is_open_loop,
    level_tag,
    load_of,
    read_status,
    split_lines,
)


@dataclass(frozen=True)
class LevelTimes:
    """A config's points at one level of one workload in the earlier run."""

    duration_s: float
    """The mean measured ``duration`` of its listed points."""
    with_warmup: float
    """The mean ``(num_prompts + warmup_requests) / num_prompts``: its warmup, at the point's own pace."""


@dataclass(frozen=True)
class ConfigTimes:
    """What the earlier run recorded of one config (module docstring)."""

    load_s: float | None = None
    starts: int = 0
    """How many of its servers' starts ``load_s`` is the mean of."""
    sweep_factor: float | None = None
    levels: dict[tuple[str, str], LevelTimes] = field(default_factory=dict)
    """(workload, level tag) -> its points' times."""

    def point_s(self, workload: str, tag: str) -> float | None:
        """A point's time in the earlier run: ``duration x sweep_factor``, or, where no job of the config
        was timed, ``duration x with_warmup``; None where it has no such point."""
        times = self.levels.get((workload, tag))
        if times is None:
            return None
        factor = self.sweep_factor if self.sweep_factor is not None else times.with_warmup
        return times.duration_s * factor


@dataclass(frozen=True)
class History:
    """An earlier run's times (module docstring)."""

    run_dir: Path
    configs: dict[str, ConfigTimes]
    between_jobs_s: float | None
    """The mean campaign overhead between two jobs of a host; None where the run timed none."""
    shared: list[list[str]] = field(default_factory=list)
    """The groups of hosts that shared a machine and took their jobs in turn; none where the run's
    fleet.json says none (or predates ``machines``)."""


def read_history(run_dir: Path, workloads: Sequence[str]) -> History:
    """The times ``run_dir`` recorded of its configs, for the campaign's ``workloads`` (names,
    ``campaign.model.SINGLE_WORKLOAD`` for a campaign of one); what cannot be read is left out."""
    loads: dict[str, list[float]] = {}
    swept: dict[str, list[float]] = {}
    measured: dict[str, list[float]] = {}
    levels: dict[str, dict[tuple[str, str], list[tuple[float, float]]]] = {}
    by_host: dict[str, list[tuple[str, Timeline]]] = {}
    for status_path in sorted(run_dir.glob(f"*/*/{STATUS_FILE}")):
        config_dir = status_path.parent
        config, host = config_dir.name, config_dir.parent.name
        status = read_status(config_dir) or {}
        # An entry status.json's rules would not use is left out (measure.results_format.JOB_RULES).
        listed = status.get("jobs")
        jobs = [
            job
            for job in (listed if isinstance(listed, list) else [])
            if isinstance(job, dict) and not rule_errors(job, JOB_RULES)
        ]
        points = {name: _points(workload_dir(config_dir, name)) for name in workloads}
        for job in jobs:
            timeline = Timeline.from_json(job.get("timeline") or {})
            by_host.setdefault(host, []).append((str(job.get("job")), timeline))
            if timeline.load_s is not None:
                loads.setdefault(config, []).append(timeline.load_s)
            repeats = set(job.get("repeats") or [])
            if timeline.first_request_at is None or timeline.last_point_ended_at is None:
                continue
            durations = [
                point["duration"]
                for found in points.values()
                for point in found
                if point.get("repeat") in repeats
            ]
            if durations:
                swept.setdefault(config, []).append(timeline.last_point_ended_at - timeline.first_request_at)
                measured.setdefault(config, []).append(sum(durations))
        for name, found in points.items():
            for point in found:
                if point.get("level_source", LISTED) != LISTED:
                    continue
                tag = level_tag(load_of(point), open_loop=is_open_loop(point))
                warmup = (point["num_prompts"] + point.get("warmup_requests", 0)) / point["num_prompts"]
                levels.setdefault(config, {}).setdefault((name, tag), []).append((point["duration"], warmup))
    overheads = [
        item.overhead_s
        for jobs in by_host.values()
        for item in host_overheads(jobs)
        if item.overhead_s is not None
    ]
    configs = {}
    for config in sorted({*loads, *levels}):
        seconds = sum(measured.get(config, []))
        configs[config] = ConfigTimes(
            load_s=fmean(loads[config]) if config in loads else None,
            starts=len(loads.get(config, [])),
            sweep_factor=sum(swept[config]) / seconds if seconds > 0 else None,
            levels={
                key: LevelTimes(fmean(d for d, _ in pairs), fmean(w for _, w in pairs))
                for key, pairs in levels.get(config, {}).items()
            },
        )
    return History(run_dir, configs, fmean(overheads) if overheads else None, _shared(run_dir))


def _shared(run_dir: Path) -> list[list[str]]:
    """The run's hosts that took turns (fleet.json's ``machines``); none where it cannot be read."""
    try:
        fleet = json.loads((run_dir / FLEET_FILE).read_bytes())
        return serialised(fleet.get("machines") if isinstance(fleet, dict) else None)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []


def _points(directory: Path) -> list[dict[str, Any]]:
    """The current lines of ``directory``'s points.jsonl that hold what a time needs: a repeat, a finite
    positive duration, a level, and the requests measured."""
    try:
        data = (directory / POINTS_FILE).read_bytes()
    except OSError:
        return []
    numbered = []
    for number, line in split_lines(data)[0]:
        try:
            point = json.loads(line)
        except ValueError:
            continue
        if _usable(point):
            numbered.append((number, point))
    return [point for _, point in current_lines(numbered)[0].values()]


def _usable(point: object) -> bool:
    if not isinstance(point, dict) or not isinstance(point.get("point_id"), str):
        return False
    duration, prompts, warmup = (
        point.get("duration"),
        point.get("num_prompts"),
        point.get("warmup_requests", 0),
    )
    if not (
        _number(duration) and _number(prompts) and _number(warmup) and _number(point.get("max_concurrency"))
    ):
        return False
    return math.isfinite(duration) and duration > 0 and prompts > 0 and isinstance(point.get("repeat"), int)


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def earlier_run(campaign_dir: Path, *, besides: Path | None = None) -> Path | None:
    """The run of ``campaign_dir`` (``results/<campaign>/``) whose status.json files were written last, but
    ``besides``; None when none holds one."""
    newest: tuple[float, Path] | None = None
    try:
        runs = [path for path in campaign_dir.iterdir() if path.is_dir()]
    except OSError:
        return None
    for run in runs:
        if besides is not None and run.resolve() == besides.resolve():
            continue
        written = [_mtime(path) for path in run.glob(f"*/*/{STATUS_FILE}")]
        if written and (newest is None or max(written) > newest[0]):
            newest = (max(written), run)
    return newest[1] if newest else None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
