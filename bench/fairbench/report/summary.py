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


@dataclass(frozen=True)
class Level:
    """One concurrency level of a config: one point per repeat."""

    concurrency: int
    points: tuple[dict[str, Any], ...]

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


@dataclass(frozen=True)
class Headline:
    """What the headline table shows of one config: its lowest level, its peak, its errors."""

    result: ConfigRun
    levels: list[Level]
    first: Level | None
    """The lowest concurrency measured (C=1 in every campaign that includes it)."""
    peak: Level | None
    """The level of the highest mean output throughput."""
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
        """Output tok/s per GPU of each repeat: the point's own metric, else output_throughput / gpus."""
        measured = level.values(PER_GPU)
        if measured or self.gpus is None:
            return measured
        return [value / self.gpus for value in level.values(THROUGHPUT)]


def _mean_throughput(level: Level) -> float:
    """The level's mean output throughput; a level without one, or with NaN, is never the peak."""
    found = level.estimate(THROUGHPUT)
    return found.mean if found and not math.isnan(found.mean) else -math.inf


def headline(config: ConfigRun | ConfigResult) -> Headline:
    """The headline of one config; a directory (``ConfigResult``) counts as a config of its own."""
    result = config if isinstance(config, ConfigRun) else ConfigRun.of(config)
    config_levels = levels(result.points)
    peak = max(config_levels, key=_mean_throughput, default=None)
    sweep_gpus = (result.sweep_settings or {}).get("gpus")
    return Headline(
        result=result,
        levels=config_levels,
        first=config_levels[0] if config_levels else None,
        peak=peak,
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


def _measured(headlines: Sequence[Headline]) -> list[Headline]:
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
    for a, b in itertools.combinations(_measured(headlines), 2):
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
    for line in _measured(headlines):
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
