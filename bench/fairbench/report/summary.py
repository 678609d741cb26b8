"""The figures of a report: each config's points by concurrency level, its headline, and comparisons.

Every figure is a metric of ``points.jsonl`` (see metrics.py) estimated over the repeats of its level
(stats.py); nothing here recomputes a metric from requests.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fairbench.report.load import ConfigResult
from fairbench.stats import Comparison, Estimate, compare, estimate

THROUGHPUT = "output_throughput"
PER_GPU = "output_throughput_per_gpu"


@dataclass(frozen=True)
class Level:
    """One concurrency level of a config: one point per repeat."""

    concurrency: int
    points: tuple[dict[str, Any], ...]

    def values(self, key: str) -> list[float]:
        return [float(point[key]) for point in self.points if point.get(key) is not None]

    def estimate(self, key: str) -> Estimate | None:
        values = self.values(key)
        return estimate(values) if values else None


def levels(points: Sequence[dict[str, Any]]) -> list[Level]:
    """Points grouped by ``max_concurrency``, lowest first, repeats in order."""
    grouped: dict[int, list[dict[str, Any]]] = {}
    for point in sorted(points, key=lambda point: (point["max_concurrency"], point.get("repeat", 0))):
        grouped.setdefault(int(point["max_concurrency"]), []).append(point)
    return [Level(concurrency, tuple(group)) for concurrency, group in grouped.items()]


def serving_gpus(server_info: dict[str, Any] | None) -> int | None:
    """GPUs one server uses, from its /server_info: tp_size * pp_size, times dp_size unless data-parallel
    attention runs the dp ranks inside the tp group (then they share its GPUs). None without the info."""
    if not server_info or not isinstance(server_info.get("tp_size"), int):
        return None
    replicas = 1 if server_info.get("enable_dp_attention") else int(server_info.get("dp_size") or 1)
    return int(server_info["tp_size"]) * int(server_info.get("pp_size") or 1) * replicas


@dataclass(frozen=True)
class Headline:
    """What the headline table shows of one config: its lowest level, its peak, its errors."""

    result: ConfigResult
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
    found = level.estimate(THROUGHPUT)
    return found.mean if found else 0.0


def headline(result: ConfigResult) -> Headline:
    config_levels = levels(result.points)
    peak = max(config_levels, key=_mean_throughput, default=None)
    sweep_gpus = (result.sweep_settings or {}).get("gpus")
    return Headline(
        result=result,
        levels=config_levels,
        first=config_levels[0] if config_levels else None,
        peak=peak,
        errors=sum(int(point.get("failed", 0)) for point in result.points),
        gpus=int(sweep_gpus) if sweep_gpus else serving_gpus(result.server_info),
    )


@dataclass(frozen=True)
class PairComparison:
    a: Headline
    b: Headline
    figure: str
    """``first`` or ``peak``: which level of each config is compared (each at its own concurrency)."""
    comparison: Comparison


def pairwise(headlines: Sequence[Headline]) -> list[PairComparison]:
    """Output throughput of every pair of configs that finished, at the lowest level and at each one's peak.

    A failed config is left out: its points stop where it failed, so its peak is not its peak.
    """
    measured = [line for line in headlines if line.result.ok and line.peak is not None]
    comparisons = []
    for a, b in itertools.combinations(measured, 2):
        for figure in ("first", "peak"):
            values_a, values_b = (line.level(figure).values(THROUGHPUT) for line in (a, b))
            comparisons.append(PairComparison(a, b, figure, compare(values_a, values_b)))
    return comparisons


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
