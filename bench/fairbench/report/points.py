"""A config's points.jsonl as the report reads it, through the results format (``measure.results_format``):
each line that is no point named and skipped, each point's current line only, and of each point the
figures the report reads checked. Nothing is dropped silently: every problem names the file and the line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fairbench.measure.json_rules import (
    Rule,
    drop_broken,
    fields_of,
    is_finite,
    is_number,
    is_text,
    list_of,
    object_of,
    or_null,
    parse_object,
    shown,
    whole,
)
from fairbench.measure.results_format import POINT_RULES, Numbered, current_lines, point_errors, split_lines
from fairbench.report.figures import (
    ACCEPT_LENGTH,
    ACHIEVED_RATE,
    CHECK_NUMBERS,
    CLIENT_PROCESSES,
    CLIENT_USE,
    FIGURES,
    FLAGS,
    GPU_STATE,
    OBSERVATIONS,
    SERVER_ERROR,
    SERVER_FAILURES,
    SERVER_SAMPLES,
    SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPT_RATE,
    SPEC_HISTOGRAM,
    SPEC_REQUESTS,
    THROUGHPUT,
    non_finite_text,
)

_PLACING = {rule.key for rule in POINT_RULES}
FIGURE_RULES: tuple[Rule, ...] = (
    Rule(THROUGHPUT, "a number", is_number, True),
    *(Rule(key, "a number", is_number, False) for key in sorted(FIGURES - _PLACING - {THROUGHPUT})),
    Rule(ACHIEVED_RATE, "null or a number", or_null(is_number), False),
)
"""The figures the report reads of a point, beyond those that place and count it (``POINT_RULES``): every
point the sweep writes has the throughput; without it, or with a figure that is not a number, a line is
skipped."""
FLAG_FIELDS = {"flag": is_text, "on": list_of(is_text), "reason": is_text}
"""A flag of a point (measure/point_flags.py)."""
GPU_STATE_FIELDS = {"index": whole(0), "sm_clock_mhz_min": or_null(is_finite)}
"""What the report reads of a GPU's state over a point (measure/gpu_state.py)."""
OBSERVATION_FIELDS = {"observation": is_text, "reason": is_text}
"""An observation of a point (measure/point_flags.py)."""
CHECK_RULES: tuple[Rule, ...] = (
    Rule(FLAGS, "a list of {flag, on, reason}", list_of(fields_of(FLAG_FIELDS)), False),
    Rule(OBSERVATIONS, "a list of {observation, reason}", list_of(fields_of(OBSERVATION_FIELDS)), False),
    Rule(GPU_STATE, "a list of {index, sm_clock_mhz_min, ...}", list_of(fields_of(GPU_STATE_FIELDS)), False),
    *(Rule(key, "null or a finite number", or_null(is_finite), False) for key in CHECK_NUMBERS),
    *(Rule(key, "a whole number", whole(0), False) for key in (SERVER_SAMPLES, SERVER_FAILURES)),
    Rule(SERVER_ERROR, "null or a string", or_null(is_text), False),
    Rule(CLIENT_PROCESSES, "a whole number of at least 1", whole(1), False),
    Rule(CLIENT_USE, "a list of objects of finite numbers", list_of(object_of(or_null(is_finite))), False),
)
"""A point's measurement checks: one that breaks its rule counts as not measured, and is named."""
SPEC_RULES: tuple[Rule, ...] = (
    Rule(SPEC_REQUESTS, "a whole number", whole(0), False),
    *(
        Rule(key, "null or a finite number", or_null(is_finite), False)
        for key in (SPEC_ACCEPT_LENGTH, SPEC_ACCEPT_RATE, ACCEPT_LENGTH)
    ),
    Rule(SPEC_HISTOGRAM, "a list of whole numbers", list_of(whole(0)), False),
)
"""A point's speculative decoding figures (the Speculative decoding section): one that breaks its rule is
left out, and named; the server's gauge is among ``CHECK_RULES``."""


def read_points(
    path: Path, data: bytes | None, placed: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The usable points of ``path`` holding ``data`` (None: absent), its problems and its notes.

    Each point's current line only (``results_format.current_lines``), in the order the points were first
    measured; another line of a point already there is named and not counted. A measurement check breaking
    its rule (``CHECK_RULES``), or a speculative decoding figure its own (``SPEC_RULES``), is left out of its
    point, and named. An incomplete last line, what an interrupted write leaves, is a note: the sweep's
    --resume drops it too. ``placed``: the identity keys
    (measure.results.RunIdentity) the tree gives these points, checked against those their lines name
    (``_named_elsewhere``).
    """
    if data is None:
        return [], [], []
    lines, torn = split_lines(data)
    notes = (
        [
            f"{path}:{torn}: incomplete last line skipped (an interrupted write; "
            "`fairbench sweep --resume` measures that point again)"
        ]
        if torn
        else []
    )
    problems: list[str] = []
    found: list[Numbered] = []
    for number, line in lines:
        try:
            found.append((number, _point(line)))
        except ValueError as exc:
            problems.append(f"{path}:{number}: {exc}; line skipped")
    current, again = current_lines(found)
    problems += [
        f"{path}:{number}: point {pid} again (first on line {first}); not counted"
        for number, pid, first in again
    ]
    kept: list[Numbered] = []
    for pid, (number, point) in current.items():
        problems += _non_finite(path, number, point)
        rules = (*CHECK_RULES, *SPEC_RULES)
        kept.append((number, drop_broken(point, rules, f"{path}:{number}: point {pid}: ", problems)))
    problems += _named_elsewhere(path, kept, placed)
    return [point for _, point in kept], problems, notes


def _point(line: bytes) -> dict[str, Any]:
    """One line of points.jsonl as a point; ``ValueError`` saying why it is not one."""
    point = parse_object(line)
    errors = point_errors(point, FIGURE_RULES)
    if errors:
        raise ValueError("; ".join(errors))
    return point


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
