"""Service-level objectives: a latency limit at a percentile, one per key of a campaign's ``slo:``.

A key is ``<metric>_p<q>_ms``: ``ttft_p99_ms: 2000`` asks that the 99th percentile of the point's TTFT be at
most 2000 ms. The metrics are those of ``measure.metrics``: ``ttft``, ``tpot``, ``itl`` (the per-token
inter-token latency, ``token_itls_ns``) and ``e2e_latency``; q is an integer from 1 to 100. How a point
and a request are judged against them, and the goodput, are defined in ``metrics.slo_metrics``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

SLO_METRICS = ("ttft", "tpot", "itl", "e2e_latency")
"""The latencies an objective may limit, as ``measure.metrics`` names them."""
SLO_KEY = re.compile(r"(?P<metric>ttft|tpot|itl|e2e_latency)_p(?P<q>[1-9][0-9]?|100)_ms")
SLO_KEY_RULE = "a key is <metric>_p<q>_ms, metric one of ttft, tpot, itl, e2e_latency and q from 1 to 100"
SLO_LIMIT_RULE = "a limit is a positive, finite number of milliseconds"


class SloError(ValueError):
    """An objective that cannot be judged: the message names the key and the rule."""


@dataclass(frozen=True, slots=True)
class SloTarget:
    """One objective: the ``percentile``-th percentile of ``metric`` at most ``limit_ms``."""

    metric: str
    percentile: int
    limit_ms: float

    @property
    def key(self) -> str:
        return f"{self.metric}_p{self.percentile}_ms"


def limit_problem(value: object) -> str | None:
    """Why ``value`` is no limit (:data:`SLO_LIMIT_RULE`); None when it is one. A boolean is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return SLO_LIMIT_RULE
    try:
        number = float(value)
    except OverflowError:
        return SLO_LIMIT_RULE
    return None if math.isfinite(number) and number > 0 else SLO_LIMIT_RULE


def parse_target(key: str, limit: object) -> SloTarget:
    """The objective of one ``slo:`` entry; SloError naming the key and the rule it breaks."""
    match = SLO_KEY.fullmatch(key)
    # A key with a control character is quoted: the message stays one line.
    shown = key if key.isprintable() else repr(key)
    if match is None:
        raise SloError(f"{shown}: {SLO_KEY_RULE}")
    problem = limit_problem(limit)
    if problem is not None:
        raise SloError(f"{shown}: {problem}, got {limit!r}")
    assert isinstance(limit, int | float)
    return SloTarget(match["metric"], int(match["q"]), float(limit))


def parse_slo(entries: Mapping[str, object]) -> tuple[SloTarget, ...]:
    """Every objective of a ``slo:`` mapping, in its order; SloError at the first entry that is none."""
    return tuple(parse_target(key, limit) for key, limit in entries.items())


def slo_to_json(targets: tuple[SloTarget, ...]) -> dict[str, float]:
    """The ``slo:`` mapping the targets were parsed from: ``{key: limit_ms}``."""
    return {target.key: target.limit_ms for target in targets}


def search_probe(met: int, missed: int, resolution: int) -> int | None:
    """The SLO search's next concurrency between a level that met the SLO and the next that missed it:
    (met + missed) // 2 while they are more than ``resolution`` requests of concurrency apart, else None
    (the search is over)."""
    return None if missed - met <= resolution else (met + missed) // 2
