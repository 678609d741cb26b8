"""The Speculative decoding section: per config and level, how many tokens a verify step gave, measured
three ways, the share of draft tokens accepted, and how the requests' own accept lengths spread
(docs/metrics.md, "Speculative decoding"). Each figure is the point's own, estimated over the level's
repeats; the histogram's counts are summed over them. Only configs whose points have any of them."""

from __future__ import annotations

from collections.abc import Sequence

from fairbench.measure.metrics import SPEC_HISTOGRAM_EDGES, spec_bin_label
from fairbench.report.blocks import Block, Heading, Paragraph, Table
from fairbench.report.figures import (
    ACCEPT_LENGTH,
    SERVER_SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPT_RATE,
    SPEC_HISTOGRAM,
    SPEC_REQUESTS,
)
from fairbench.report.formatting import Label, figure
from fairbench.report.summary import Headline, Level, estimate_of, loop_of

SPEC_FIGURES = (SPEC_ACCEPT_LENGTH, SERVER_SPEC_ACCEPT_LENGTH, ACCEPT_LENGTH, SPEC_ACCEPT_RATE)
"""The figures any of which puts a level in the section."""
SPEC_HEADER = (
    "requests",
    "accept length, requests",
    "server gauge",
    "/server_info",
    "accept rate %",
    "requests by accept length",
)
SPEC_NOTE = (
    "Tokens per verify step of each speculative level, mean ± 95 % CI over its repeats. **accept length, "
    "requests**: over the level's own requests, their output tokens over their verify steps (SGLang's "
    "`/generate` reports each request's; the OpenAI APIs do not, `-`); each request's first token came "
    "from the prefill, so it stands a little above the server's. **server gauge**: the mean of the "
    "server's `sglang:spec_accept_length` over the point's scrapes (all its requests, `--enable-metrics`). "
    "**/server_info**: its `avg_spec_accept_length` once the point ended, over everything since the server "
    "started (warmups and earlier levels too). **accept rate %**: draft tokens accepted over those "
    "proposed, over the level's requests. **requests by accept length**: how many requests (summed over "
    "the repeats, **requests** in all) had an accept length in each bin of half a token, `2-2.5` from 2 "
    "to below 2.5. On random token ids, or past where the model would have stopped (`ignore_eos`), "
    "drafts are accepted at rates real text does not give."
)


def spec_histogram(level: Level) -> list[int] | None:
    """The level's requests per accept length bin, summed over its repeats; None where no repeat has a
    histogram of the bins this version writes (``SPEC_HISTOGRAM_EDGES``)."""
    bins = len(SPEC_HISTOGRAM_EDGES) + 1
    found = [
        counts
        for point in level.points
        if isinstance(counts := point.get(SPEC_HISTOGRAM), list)
        if len(counts) == bins
    ]
    return [sum(column) for column in zip(*found, strict=True)] if found else None


def histogram_text(counts: Sequence[int] | None) -> str:
    """``1.5-2: 3, 2-2.5: 40, 2.5-3: 12``: each bin from the first that holds a request to the last, empty
    ones between included (a gap shows); ``-`` for none."""
    held = [index for index, count in enumerate(counts or ()) if count]
    if counts is None or not held:
        return "-"
    return ", ".join(f"{spec_bin_label(index)}: {counts[index]:,}" for index in range(held[0], held[-1] + 1))


def spec_values(level: Level, key: str) -> list[float]:
    """Each repeat's ``key``, where it has one; of the server's gauge only a reading above 0 (SGLang writes
    0 without speculative decoding, and points written before fairbench left it out kept that 0)."""
    values = level.values(key)
    return [value for value in values if value > 0] if key == SERVER_SPEC_ACCEPT_LENGTH else values


def _requests(level: Level) -> str:
    counts = [int(value) for value in level.values(SPEC_REQUESTS)]
    return f"{sum(counts):,}" if counts else "-"


def _rate(level: Level) -> str:
    return figure(estimate_of([100 * value for value in spec_values(level, SPEC_ACCEPT_RATE)]), 1)


def spec_row(level: Level) -> list[str] | None:
    """A level's cells after its label; None where none of its points has a speculative figure."""
    if not any(spec_values(level, key) for key in SPEC_FIGURES) and spec_histogram(level) is None:
        return None
    return [
        str(len(level.points)),
        _requests(level),
        *(
            figure(estimate_of(spec_values(level, key)), 2)
            for key in (SPEC_ACCEPT_LENGTH, SERVER_SPEC_ACCEPT_LENGTH, ACCEPT_LENGTH)
        ),
        _rate(level),
        histogram_text(spec_histogram(level)),
    ]


def spec_blocks(headlines: Sequence[Headline], label: Label) -> list[Block]:
    """The Speculative decoding section: a table per config, a row per level with a speculative figure;
    nothing where no config has one (no config speculates)."""
    tables: list[Block] = []
    for line in headlines:
        loop = loop_of(line.levels)
        rows = [[loop.cell(level), *row] for level in line.levels if (row := spec_row(level)) is not None]
        if rows:
            header = [loop.symbol, "repeats", *SPEC_HEADER]
            numeric = [True] * (len(header) - 1) + [False]
            tables += [Heading(3, label(line.result)), Table(header, rows, numeric)]
    return [Heading(2, "Speculative decoding"), Paragraph(SPEC_NOTE), *tables] if tables else []
