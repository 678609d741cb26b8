"""The report's plots, as PNG files: throughput, per-user speed against throughput per GPU, latency.

matplotlib is imported only here, and only when a plot is drawn (``fairbench sweep`` never imports it);
figures are drawn on the Agg canvas directly, without pyplot's global state. Each config keeps one colour
in every plot; a second host or run of the same config keeps the colour and changes the line style.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from fairbench.measure.slo import SloTarget
from fairbench.measure.stats import Estimate
from fairbench.report.figures import PER_USER, THROUGHPUT
from fairbench.report.flags import MARK, raised
from fairbench.report.summary import Level, Loop, estimate_of, loop_of, pareto_frontier, per_gpu

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLORS = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
"""matplotlib's tab10, red moved second so that the first two configs never pair blue with orange."""
LINE_STYLES = ("-", "--", ":", "-.")
DPI = 110


@dataclass(frozen=True)
class Line:
    """One config (on one host, of one run) as the plots draw it."""

    label: str
    color: str
    style: str
    levels: list[Level]
    gpus: int | None = None
    """GPUs per server, for the throughput per GPU where the points lack it (``summary.per_gpu``)."""

    def series(self, key: str) -> tuple[list[float], list[Estimate]]:
        """The levels (concurrency, or request rate) that have a finite ``key``, and its estimate at each
        (the report's tables show the values that are not finite)."""
        found = [(level.load, level.estimate(key)) for level in self.levels]
        pairs = [(load, value) for load, value in found if _drawable(value)]
        return [load for load, _ in pairs], [value for _, value in pairs]


def _drawable(value: Estimate | None) -> TypeGuard[Estimate]:
    return value is not None and math.isfinite(value.mean)


def color_of(config: str, configs: Sequence[str]) -> str:
    """The colour of ``config``: by its place among the campaign's configs."""
    index = list(configs).index(config) if config in configs else len(configs)
    return COLORS[index % len(COLORS)]


def _figure(width: float, height: float, columns: int = 1) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure  # noqa: PLC0415 - lazy: see the module docstring

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = figure.subplots(1, columns, squeeze=False)[0]
    return figure, list(axes)


def _loop(lines: Sequence[Line]) -> Loop:
    """Whether the lines' levels are concurrencies or request rates (``summary.loop_of``)."""
    return loop_of(level for line in lines for level in line.levels)


def _load_axis(axes: Axes, lines: Sequence[Line]) -> None:
    """The x axis: each level measured, concurrency or request rate, on a log2 scale."""
    loop = _loop(lines)
    loads = sorted({level.load for line in lines for level in line.levels})
    axes.set_xscale("log", base=2)
    axes.set_xticks(loads, [loop.value(load) for load in loads])
    axes.minorticks_off()
    axes.set_xlabel(loop.axis)
    axes.grid(True, which="major", alpha=0.3)


def _draw(axes: Axes, line: Line, key: str, *, marker: str = "o") -> None:
    loads, estimates = line.series(key)
    errors = [value.half_width or 0.0 for value in estimates]
    axes.errorbar(
        loads,
        [value.mean for value in estimates],
        yerr=errors if any(errors) else None,
        color=line.color,
        linestyle=line.style,
        marker=marker,
        markersize=4,
        capsize=3,
        label=line.label,
    )


def _save(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI)
    return path


def throughput_plot(lines: Sequence[Line], path: Path) -> Path:
    figure, (axes,) = _figure(8, 5)
    for line in lines:
        _draw(axes, line, THROUGHPUT)
    _load_axis(axes, lines)
    axes.set_ylabel("aggregate output throughput (tokens/s)")
    axes.set_ylim(bottom=0)
    axes.set_title(f"Output throughput against {_loop(lines).noun} (mean, 95 % CI with repeats)")
    axes.legend()
    return _save(figure, path)


def _per_gpu_axis(lines: Sequence[Line]) -> bool:
    """Whether every line has a throughput per GPU, so the Pareto plot's x can be it."""
    return all(any(per_gpu(level, line.gpus) for level in line.levels) for line in lines)


def _slo_lines(axes: Axes, targets: Sequence[SloTarget]) -> None:
    """Each TPOT objective as the per-user speed it allows: 1000 / limit tok/s per user (the y axis is
    1000 / median TPOT, so for a p50 objective a level above the line met it; for another percentile the
    line is where the median would sit at the limit)."""
    for target in targets:
        if target.metric != "tpot":
            continue
        speed = 1000 / target.limit_ms
        axes.axhline(
            speed,
            color="dimgray",
            linestyle=":",
            linewidth=1.2,
            label=f"SLO {target.key} ≤ {target.limit_ms:g} ms: {speed:,.1f} tok/s per user",
        )


def pareto_flagged(level: Level) -> bool:
    """Whether a flag of a measurement check doubts a figure the Pareto plot draws the level at: its
    throughput, or its per-user speed."""
    return bool(raised(level, THROUGHPUT) or raised(level, PER_USER))


def _pareto_label(level: Level) -> str:
    """``C=64``, or ``C=64 ⚑`` where ``pareto_flagged``."""
    return f"{level.label} {MARK}" if pareto_flagged(level) else level.label


def pareto_plot(lines: Sequence[Line], path: Path, slo: Sequence[SloTarget] = ()) -> Path:
    """Per-user speed (y) against output throughput per GPU (x; aggregate unless every line has it), one
    point per level, labelled (``_pareto_label``); with an SLO, a level that met it on every repeat
    filled, one that did not hollow."""
    figure, (axes,) = _figure(8, 5.5)
    by_gpu = _per_gpu_axis(lines)
    every_point = []
    judged = False
    for line in lines:
        levels = [
            (
                level,
                estimate_of(per_gpu(level, line.gpus)) if by_gpu else level.estimate(THROUGHPUT),
                level.estimate(PER_USER),
            )
            for level in line.levels
        ]
        drawn = [(level, x.mean, y.mean) for level, x, y in levels if _drawable(x) and _drawable(y)]
        every_point += [(x, y) for _, x, y in drawn]
        axes.plot(
            [x for _, x, _ in drawn],
            [y for _, _, y in drawn],
            color=line.color,
            linestyle=line.style,
            label=line.label,
        )
        for missed in (False, True):
            chosen = [(x, y) for level, x, y in drawn if (level.slo_met is False) == missed]
            axes.plot(
                [x for x, _ in chosen],
                [y for _, y in chosen],
                color=line.color,
                linestyle="none",
                marker="o",
                markersize=5,
                markerfacecolor="none" if missed else line.color,
            )
        judged = judged or any(level.slo_met is not None for level, _, _ in drawn)
        for level, x, y in drawn:
            axes.annotate(
                _pareto_label(level),
                (x, y),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
                color=line.color,
            )
    frontier = pareto_frontier(every_point)
    axes.plot(
        [x for x, _ in frontier],
        [y for _, y in frontier],
        color="black",
        linestyle="--",
        linewidth=1,
        label="Pareto frontier (all configs)",
        zorder=0,
    )
    _slo_lines(axes, slo)
    if judged:
        axes.plot([], [], "o", color="black", label="met the SLO on every repeat")
        axes.plot([], [], "o", color="black", markerfacecolor="none", label="missed it on a repeat")
    axes.set_xlabel(
        "output throughput per GPU (tokens/s)" if by_gpu else "aggregate output throughput (tokens/s)"
    )
    axes.set_ylabel("per-user decode speed (tokens/s per user, 1000 / median TPOT)")
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.set_title(f"Per-user speed against throughput (each point one {_loop(lines).noun} level)")
    axes.legend(fontsize=8)
    return _save(figure, path)


def latency_plot(lines: Sequence[Line], path: Path) -> Path:
    figure, axes_row = _figure(15, 4.8, columns=3)
    panels = [
        ("median_ttft_ms", "TTFT p50 (ms, log scale)", "Time to first token, median"),
        ("p99_ttft_ms", "TTFT p99 (ms, log scale)", "Time to first token, 99th percentile"),
        ("median_tpot_ms", "TPOT p50 (ms per output token)", "Time per output token, median"),
    ]
    for axes, (key, label, title) in zip(axes_row, panels, strict=True):
        for line in lines:
            _draw(axes, line, key)
        _load_axis(axes, lines)
        if "ttft" in key:
            axes.set_yscale("log")
        else:
            axes.set_ylim(bottom=0)
        axes.set_ylabel(label)
        axes.set_title(title)
    axes_row[0].legend()
    return _save(figure, path)


PLOTS = ("throughput.png", "pareto.png", "latency.png")


def render_plots(lines: Sequence[Line], plots_dir: Path, slo: Sequence[SloTarget] = ()) -> list[Path]:
    """Every plot of ``lines`` into ``plots_dir``, ``slo``'s objectives on the Pareto plot; none when no
    line has a point."""
    drawn = [line for line in lines if line.levels]
    if not drawn:
        return []
    return [
        throughput_plot(drawn, plots_dir / PLOTS[0]),
        pareto_plot(drawn, plots_dir / PLOTS[1], slo),
        latency_plot(drawn, plots_dir / PLOTS[2]),
    ]
