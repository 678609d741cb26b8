"""The figures of a report: each config's points by level, its headline, and comparisons.

A level is a concurrency (a closed loop) or a target request rate (an open loop): ``results.load_of``;
``Loop`` names it. Every figure is a metric of ``points.jsonl`` (``measure.metrics``) estimated over the
repeats of its level (measure/stats.py); nothing here recomputes a metric from requests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from fairbench.measure.json_rules import is_whole
from fairbench.measure.results_format import is_open_loop, load_of
from fairbench.measure.stats import Comparison, Estimate, Sample, compare, estimate, sample_values
from fairbench.report.figures import ACHIEVED_RATE, OF_COMPLETED, PER_GPU, THROUGHPUT
from fairbench.report.tree import ConfigResult, ConfigRun


def estimate_of(values: Sequence[float]) -> Estimate | None:
    """The estimate of ``values``; None for none. With a value that is not finite, that value without an
    interval: their sum, which is NaN when one is NaN or both infinities occur, else that infinity."""
    if not values:
        return None
    odd = [value for value in values if not math.isfinite(value)]
    return Estimate(sum(odd), None, len(values)) if odd else estimate(values)


def compare_of(sample_a: Sample, sample_b: Sample) -> Comparison | None:
    """A against B (``stats.compare``); None when a side has no values or one that is not finite."""
    values = [*sample_values(sample_a), *sample_values(sample_b)]
    if not sample_a or not sample_b or not all(map(math.isfinite, values)):
        return None
    return compare(sample_a, sample_b)


LEVEL_SOURCE = "level_source"
BISECT = "bisect"
"""``level_source`` of a point the sweep's search measured between two listed levels (``listed`` otherwise;
a point from before searches has no ``level_source`` and was listed)."""
SLO_MET = "slo_met"
REPEATS_STOPPED = "repeats_stopped"


@dataclass(frozen=True)
class Loop:
    """How the report names the levels of a closed loop (concurrency: ``C=16``) or of an open loop (target
    request rate: ``2.5 req/s``); the one place that says so."""

    open: bool

    @property
    def symbol(self) -> str:
        """What column titles call a level: ``C`` (``peak at C``), ``req/s``."""
        return "req/s" if self.open else "C"

    @property
    def noun(self) -> str:
        """``concurrency``, ``request rate``."""
        return "request rate" if self.open else "concurrency"

    @property
    def axis(self) -> str:
        """A plot's x axis: the levels on a log2 scale."""
        what = "request rate (req/s" if self.open else "concurrency (requests in flight"
        return f"{what}, log2 scale)"

    def value(self, load: float) -> str:
        """A level under a column titled ``symbol``: ``16``, ``2.5`` (as point ids spell rates,
        ``results.level_tag``)."""
        return f"{load:g}" if self.open else str(int(load))

    def label(self, load: float) -> str:
        """A level named on its own: ``C=16``, ``2.5 req/s``."""
        return f"{load:g} req/s" if self.open else f"C={int(load)}"

    def cell(self, level: Level) -> str:
        """``level`` under a column titled ``symbol``; by its own label where it is of the other loop (a
        tree whose points mix both)."""
        return self.value(level.load) if level.open_loop == self.open else level.label


CLOSED_LOOP = Loop(open=False)
OPEN_LOOP = Loop(open=True)


def loop_of(found: Iterable[Level]) -> Loop:
    """The loop of ``found``: open when every level is an open loop's (and there is one), else closed."""
    flags = [level.open_loop for level in found]
    return OPEN_LOOP if flags and all(flags) else CLOSED_LOOP


BEHIND = 0.95
"""An open loop's point whose requests went out at less than this share of the target rate fell behind."""


@dataclass(frozen=True)
class Level:
    """One level of a config: one point per repeat."""

    load: float
    """Its concurrency, or an open loop's target request rate (``results.load_of``)."""
    points: tuple[dict[str, Any], ...]
    open_loop: bool = False
    """Whether its points were measured in an open loop (``results.is_open_loop``)."""

    @property
    def loop(self) -> Loop:
        return OPEN_LOOP if self.open_loop else CLOSED_LOOP

    @property
    def label(self) -> str:
        """``C=16``, ``2.5 req/s`` (``Loop.label``)."""
        return self.loop.label(self.load)

    @property
    def load_key(self) -> str:
        """The key of its points that names its level: ``max_concurrency``, or an open loop's
        ``request_rate``."""
        return "request_rate" if self.open_loop else "max_concurrency"

    @property
    def key(self) -> tuple[bool, float]:
        """What tells two levels apart: C=16 is not 16 req/s."""
        return self.open_loop, self.load

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

    @property
    def behind(self) -> int:
        """An open loop's repeats whose requests went out at less than ``BEHIND`` of the target rate
        (``achieved_request_rate`` < 0.95 x ``request_rate``): the client or the server did not keep up,
        or over few requests the random schedule itself ran slow. 0 for a closed loop."""
        if not self.open_loop:
            return 0
        return sum(achieved < BEHIND * self.load for achieved in self.values(ACHIEVED_RATE))

    def _measured(self, key: str) -> Iterator[tuple[dict[str, Any], float]]:
        """Each point with a ``key``, and its value: a statistic of the completed requests has none at a
        point where nothing completed."""
        for point in self.points:
            if point.get(key) is not None and not (key in OF_COMPLETED and point.get("completed") == 0):
                yield point, float(point[key])

    def values(self, key: str) -> list[float]:
        """Each repeat's ``key``, where it has one (``_measured``)."""
        return [value for _, value in self._measured(key)]

    def by_repeat(self, key: str) -> dict[int, float]:
        """Each repeat's ``key`` by its repeat number (under spread, its round), where it has one
        (``_measured``)."""
        return {int(point.get("repeat", 0)): value for point, value in self._measured(key)}

    def estimate(self, key: str) -> Estimate | None:
        return estimate_of(self.values(key))


def levels(points: Sequence[dict[str, Any]]) -> list[Level]:
    """Points grouped by their level (``results.load_of``: the concurrency, or an open loop's target rate),
    lowest first (a closed loop's before an open loop's, where a tree mixes them), repeats in order."""
    grouped: dict[tuple[bool, float], list[dict[str, Any]]] = {}
    for point in sorted(points, key=lambda point: (*_key(point), point.get("repeat", 0))):
        grouped.setdefault(_key(point), []).append(point)
    return [Level(load, tuple(group), open_loop) for (open_loop, load), group in grouped.items()]


def _key(point: dict[str, Any]) -> tuple[bool, float]:
    return is_open_loop(point), load_of(point)


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
    return list(per_gpu_by_repeat(level, gpus).values())


def per_gpu_by_repeat(level: Level, gpus: int | None) -> dict[int, float]:
    """:func:`per_gpu` by repeat number (``Level.by_repeat``)."""
    measured = level.by_repeat(PER_GPU)
    if measured or gpus is None:
        return measured
    return {repeat: value / gpus for repeat, value in level.by_repeat(THROUGHPUT).items()}


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
        """``C=32``, ``at least C=64`` (no limit found; ``at least 8 req/s``), or ``no level``."""
        if self.level is None:
            return "no level"
        return f"{'' if self.limit_found else 'at least '}{self.level.label}"


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
    """The lowest listed level measured (C=1 in every campaign that includes it)."""
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

    def per_gpu_by_repeat(self, level: Level) -> dict[int, float]:
        """Output tok/s per GPU by repeat (:func:`per_gpu_by_repeat`)."""
        return per_gpu_by_repeat(level, self.gpus)

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
    """``first`` or ``peak``: which level of each config is compared (each at its own)."""
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
    """One config on two hosts at one level: the hardware comparison (every-host)."""

    a: Headline
    b: Headline
    level: Level
    """A's level; B's is the one of the same ``Level.key``."""
    comparison: Comparison | None
    """A's output throughput against B's; None where a value is not finite (``compare_of``)."""


def host_comparisons(headlines: Sequence[Headline]) -> list[HostComparison]:
    """Output throughput of each config on every pair of the hosts that ran it and finished, at every
    level both measured: by config, then pair of hosts, then level."""
    by_config: dict[str, list[Headline]] = {}
    for line in measured(headlines):
        by_config.setdefault(line.result.name, []).append(line)
    found = []
    for lines in by_config.values():
        for a, b in itertools.combinations(lines, 2):
            levels_b = {level.key: level for level in b.levels}
            found += [
                HostComparison(
                    a,
                    b,
                    level,
                    compare_of(level.values(THROUGHPUT), levels_b[level.key].values(THROUGHPUT)),
                )
                for level in a.levels
                if level.key in levels_b
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
