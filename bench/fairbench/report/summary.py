"""The figures of a report: each config's points by concurrency level, its headline, and comparisons.

Every figure is a metric of ``points.jsonl`` (``measure.metrics``) estimated over the repeats of its level
(measure/stats.py); nothing here recomputes a metric from requests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from fairbench.measure.stats import Comparison, Estimate, compare, estimate
from fairbench.report.figures import OF_COMPLETED, PER_GPU, THROUGHPUT
from fairbench.report.load import ConfigResult, ConfigRun
from fairbench.report.rules import is_whole


def estimate_of(values: Sequence[float]) -> Estimate | None:
    """The estimate of ``values``; None for none. With a value that is not finite, that value without an
    interval: their sum, which is NaN when one is NaN or both infinities occur, else that infinity."""
    if not values:
        return None
    odd = [value for value in values if not math.isfinite(value)]
    return Estimate(sum(odd), None, len(values)) if odd else estimate(values)


def compare_of(values_a: Sequence[float], values_b: Sequence[float]) -> Comparison | None:
    """A against B (``stats.compare``); None when a side has no values or one that is not finite."""
    if not values_a or not values_b or not all(map(math.isfinite, [*values_a, *values_b])):
        return None
    return compare(values_a, values_b)


LEVEL_SOURCE = "level_source"
BISECT = "bisect"
"""``level_source`` of a point the sweep's search measured between two listed levels (``listed`` otherwise;
a point from before searches has no ``level_source`` and was listed)."""
SLO_MET = "slo_met"
REPEATS_STOPPED = "repeats_stopped"


@dataclass(frozen=True)
class Level:
    """One concurrency level of a config: one point per repeat."""

    concurrency: int
    points: tuple[dict[str, Any], ...]

    @property
    def listed(self) -> bool:
        """A level of the campaign's concurrency list, not one its SLO search chose (``BISECT``): a search
        probes each config at its own levels, so only listed levels line the configs up."""
        return any(point.get(LEVEL_SOURCE) != BISECT for point in self.points)

    @property
    def slo_met(self) -> bool | None:
        """Whether every repeat met the campaign's SLO (its point's ``slo_met``; a point without one counts
        as not met); None when no point of the level was judged against an SLO."""
        if not any(SLO_MET in point for point in self.points):
            return None
        return all(point.get(SLO_MET) is True for point in self.points)

    @property
    def repeats_stopped(self) -> str | None:
        """Why automatic repeats took no more of this level (its last point's ``repeats_stopped``)."""
        reasons = [
            point[REPEATS_STOPPED] for point in self.points if isinstance(point.get(REPEATS_STOPPED), str)
        ]
        return reasons[-1] if reasons else None

    def values(self, key: str) -> list[float]:
        """Each repeat's ``key``, where it has one: a statistic of the completed requests has none at a
        point where nothing completed."""
        return [
            float(point[key])
            for point in self.points
            if point.get(key) is not None and not (key in OF_COMPLETED and point.get("completed") == 0)
        ]

    def estimate(self, key: str) -> Estimate | None:
        return estimate_of(self.values(key))


def levels(points: Sequence[dict[str, Any]]) -> list[Level]:
    """Points grouped by ``max_concurrency``, lowest first, repeats in order."""
    grouped: dict[int, list[dict[str, Any]]] = {}
    for point in sorted(points, key=lambda point: (point["max_concurrency"], point.get("repeat", 0))):
        grouped.setdefault(int(point["max_concurrency"]), []).append(point)
    return [Level(concurrency, tuple(group)) for concurrency, group in grouped.items()]


def serving_gpus(server_info: dict[str, Any] | None) -> int | None:
    """GPUs one server uses, from its /server_info: tp_size * pp_size, times dp_size unless data-parallel
    attention runs the dp ranks inside the tp group (then they share its GPUs). None without the info."""
    if not server_info:
        return None
    sizes = [server_info.get("tp_size"), server_info.get("pp_size") or 1]
    if not server_info.get("enable_dp_attention"):
        sizes.append(server_info.get("dp_size") or 1)
    counts = [size for size in sizes if isinstance(size, int) and is_whole(size, 1)]
    return math.prod(counts) if len(counts) == len(sizes) else None


def per_gpu(level: Level, gpus: int | None) -> list[float]:
    """Output tok/s per GPU of each repeat: the point's own metric, else output_throughput / gpus; none
    without either."""
    measured = level.values(PER_GPU)
    if measured or gpus is None:
        return measured
    return [value / gpus for value in level.values(THROUGHPUT)]


@dataclass(frozen=True)
class SloReach:
    """How far a config's load went under the campaign's SLO, by the conservative rule of
    :func:`slo_reach`."""

    level: Level | None
    """The highest level at or below which every level met the SLO on every repeat; None when its lowest
    level did not."""
    limit_found: bool
    """Whether a measured level above ``level`` missed the SLO; False when ``level`` is the highest level
    measured: the sweep did not find the config's limit."""

    def text(self) -> str:
        """``C=32``, ``at least C=64`` (no limit found), or ``no level``."""
        if self.level is None:
            return "no level"
        return f"{'' if self.limit_found else 'at least '}C={self.level.concurrency}"


def slo_reach(config_levels: Sequence[Level]) -> SloReach | None:
    """The highest load a config sustained under the SLO: going up from its lowest level (listed or found
    by the search alike), the last level before the first that missed it (``Level.slo_met``). Conservative:
    a miss at a lower level caps the config there even when a higher level met the SLO, and a level none of
    whose points was judged counts as a miss. None when no point was judged against an SLO."""
    if all(level.slo_met is None for level in config_levels):
        return None
    reached = None
    for level in config_levels:
        if not level.slo_met:
            return SloReach(reached, True)
        reached = level
    return SloReach(reached, False)


@dataclass(frozen=True)
class Headline:
    """What the headline table shows of one config: its lowest level, its peak, its errors."""

    result: ConfigRun
    levels: list[Level]
    """Every level, the listed ones and those the SLO search chose."""
    first: Level | None
    """The lowest listed concurrency measured (C=1 in every campaign that includes it)."""
    peak: Level | None
    """The listed level of the highest mean output throughput (a config's searched levels are its own, so
    they are left out of what lines the configs up)."""
    errors: int
    """Failed requests over every point."""
    gpus: int | None
    """GPUs per server for the per-GPU throughput: the sweep's --gpus, else from /server_info."""

    def level(self, figure: str) -> Level:
        """The ``first`` or ``peak`` level; only for a config with points."""
        chosen = self.first if figure == "first" else self.peak
        if chosen is None:
            raise ValueError(f"{self.result.host}/{self.result.name} has no points")
        return chosen

    def per_gpu(self, level: Level) -> list[float]:
        """Output tok/s per GPU of each repeat (:func:`per_gpu`)."""
        return per_gpu(level, self.gpus)

    @property
    def slo(self) -> SloReach | None:
        """The highest load under the SLO (:func:`slo_reach`); None when no point was judged against one."""
        return slo_reach(self.levels)


def _mean_throughput(level: Level) -> float:
    """The level's mean output throughput; a level without one, or with NaN, is never the peak."""
    found = level.estimate(THROUGHPUT)
    return found.mean if found and not math.isnan(found.mean) else -math.inf


def headline(config: ConfigRun | ConfigResult) -> Headline:
    """The headline of one config; a directory (``ConfigResult``) counts as a config of its own."""
    result = config if isinstance(config, ConfigRun) else ConfigRun.of(config)
    config_levels = levels(result.points)
    listed = [level for level in config_levels if level.listed]
    sweep_gpus = (result.sweep_settings or {}).get("gpus")
    return Headline(
        result=result,
        levels=config_levels,
        first=listed[0] if listed else None,
        peak=max(listed, key=_mean_throughput, default=None),
        errors=sum(int(point.get("failed", 0)) for point in result.points),
        gpus=sweep_gpus if is_whole(sweep_gpus, 1) else serving_gpus(result.server_info),
    )


@dataclass(frozen=True)
class PairComparison:
    a: Headline
    b: Headline
    figure: str
    """``first`` or ``peak``: which level of each config is compared (each at its own concurrency)."""
    comparison: Comparison | None
    """None where a value is not finite (``compare_of``)."""


def measured(headlines: Sequence[Headline]) -> list[Headline]:
    """The configs that finished and have points. A failed config is left out of every comparison: its
    points stop where it failed, so its peak is not its peak."""
    return [line for line in headlines if line.result.ok and line.peak is not None]


def pairwise(
    headlines: Sequence[Headline], within: Callable[[Headline], Hashable] | None = None
) -> list[PairComparison]:
    """Output throughput of every pair of configs that finished, at the lowest level and at each one's peak;
    with ``within``, only of the pairs it gives one value (every-host: the configs of one host).
    """
    comparisons = []
    for a, b in itertools.combinations(measured(headlines), 2):
        if within is not None and within(a) != within(b):
            continue
        for figure in ("first", "peak"):
            values_a, values_b = (line.level(figure).values(THROUGHPUT) for line in (a, b))
            comparisons.append(PairComparison(a, b, figure, compare_of(values_a, values_b)))
    return comparisons


@dataclass(frozen=True)
class HostComparison:
    """One config on two hosts at one concurrency level: the hardware comparison (every-host)."""

    a: Headline
    b: Headline
    concurrency: int
    comparison: Comparison | None
    """A's output throughput against B's; None where a value is not finite (``compare_of``)."""


def host_comparisons(headlines: Sequence[Headline]) -> list[HostComparison]:
    """Output throughput of each config on every pair of the hosts that ran it and finished, at every
    concurrency level both measured: by config, then pair of hosts, then level."""
    by_config: dict[str, list[Headline]] = {}
    for line in measured(headlines):
        by_config.setdefault(line.result.name, []).append(line)
    found = []
    for lines in by_config.values():
        for a, b in itertools.combinations(lines, 2):
            levels_b = {level.concurrency: level for level in b.levels}
            found += [
                HostComparison(
                    a,
                    b,
                    level.concurrency,
                    compare_of(level.values(THROUGHPUT), levels_b[level.concurrency].values(THROUGHPUT)),
                )
                for level in a.levels
                if level.concurrency in levels_b
            ]
    return found


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats in both coordinates (higher is better in each), by ascending x.

    Scanning from the highest x down, a point is on the frontier when its y exceeds every y seen so far.
    """
    frontier = []
    best_y = float("-inf")
    for x, y in sorted(points, key=lambda point: (-point[0], -point[1])):
        if y > best_y:
            frontier.append((x, y))
            best_y = y
    return frontier[::-1]
