"""The By turn section of a multi-turn workload's report: per config and level, each turn's median TTFT,
input tokens and cached tokens (docs/metrics.md, "Multi-turn points"), each the mean over the level's
repeats. Where the prefix cache does its job, a later turn's first token comes about as soon as the first
turn's and most of its input is cached, however long the conversation has grown."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import mean

from fairbench.measure.json_rules import is_number
from fairbench.report.blocks import Block, Heading, Paragraph, Table
from fairbench.report.formatting import Label
from fairbench.report.summary import Headline, Level, loop_of

TURN_FIGURES = (
    ("TTFT p50 ms", "median_ttft_ms_by_turn"),
    ("input tokens", "mean_input_tokens_by_turn"),
    ("cached tokens", "mean_cached_tokens_by_turn"),
)
"""Each column's title (turn 1 first) and the point's list it reads, one value per turn."""
TURNS_NOTE = (
    "Each multi-turn level's figures by turn, turn 1 first, each the mean over the level's repeats of the "
    "point's own figure for that turn: its requests' median TTFT, their mean input tokens (the server's "
    "count) and their mean cached tokens (the server's report). `-`: no repeat has the figure for that turn "
    "(none of its requests succeeded, or the server reported no cached tokens)."
)


def turn_means(level: Level, key: str) -> list[float | None]:
    """Each turn's mean over ``level``'s repeats of their ``key`` list (a point's value per turn); None for
    a turn no repeat has a finite number for. A point whose ``key`` is not a list counts for no turn."""
    lists = [value for point in level.points if isinstance(value := point.get(key), list)]
    turns = max((len(values) for values in lists), default=0)
    means: list[float | None] = []
    for turn in range(turns):
        found = [float(values[turn]) for values in lists if turn < len(values) and _finite(values[turn])]
        means.append(mean(found) if found else None)
    return means


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and is_number(value) and math.isfinite(value)


def _turns_cell(means: Sequence[float | None]) -> str:
    """``412 / 95 / 101``: each turn's value, rounded to a whole number; ``-`` for a turn without one."""
    return " / ".join("-" if value is None else f"{value:,.0f}" for value in means)


def turn_blocks(headlines: Sequence[Headline], label: Label) -> list[Block]:
    """The By turn section: one table per config, a row per level whose points have figures by turn;
    nothing where no point has any (a workload that is not multi-turn)."""
    tables: list[Block] = []
    for line in headlines:
        loop = loop_of(line.levels)
        rows = []
        for level in line.levels:
            cells = [turn_means(level, key) for _, key in TURN_FIGURES]
            if any(cells):
                rows.append([loop.cell(level), str(len(level.points)), *map(_turns_cell, cells)])
        if rows:
            header = [loop.symbol, "repeats", *(f"{title}, by turn" for title, _ in TURN_FIGURES)]
            tables += [Heading(3, label(line.result)), Table(header, rows, [True] * len(header))]
    return [Heading(2, "By turn"), Paragraph(TURNS_NOTE), *tables] if tables else []
