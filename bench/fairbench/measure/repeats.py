"""How often a level is measured: a fixed number of repeats, or automatic ones until its interval is narrow.

Under ``repeats: auto`` (or ``{min, max, half_width_pct}``) a level is measured at least ``min`` times, then
again while the 95 % confidence interval of its output throughput (``measure.stats.estimate``) is wider
than ``half_width_pct`` percent of its mean either side, at most ``max`` times. The sweep judges each
level of one server so (``measure.sweep``); a spread campaign judges each config's levels over its jobs,
one fresh server per repeat (``fleet.queue``). Both call :func:`stop_reason`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fairbench.measure.stats import estimate

AUTO = "auto"
"""The campaign's word for automatic repeats with the defaults of :class:`AutoRepeats`."""
JUDGED_METRIC = "output_throughput"
"""The metric whose interval decides: the one every comparison of the report starts from."""


@dataclass(frozen=True, slots=True)
class AutoRepeats:
    """Repeat a level until its throughput's interval is within ``half_width_pct`` % of its mean."""

    minimum: int = 3
    """At least two: one repeat has no interval. Three by default, as one outlier among two cannot be told."""
    maximum: int = 10
    half_width_pct: float = 2.0

    def to_json(self) -> dict[str, int | float]:
        return {"min": self.minimum, "max": self.maximum, "half_width_pct": self.half_width_pct}

    @classmethod
    def from_json(cls, value: Mapping[str, int | float]) -> AutoRepeats:
        return cls(int(value["min"]), int(value["max"]), float(value["half_width_pct"]))


Repeats = int | AutoRepeats
"""A campaign's ``repeats``: a fixed count, or automatic."""
DEFAULT_REPEATS: Repeats = 1


def repeats_from_json(value: object) -> Repeats:
    """``repeats`` as campaign.json and the sweep's settings hold it: an integer, or the mapping of
    :meth:`AutoRepeats.to_json`."""
    if isinstance(value, Mapping):
        return AutoRepeats.from_json(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"repeats: an integer or {{min, max, half_width_pct}}, got {value!r}")


def repeats_to_json(repeats: Repeats) -> int | dict[str, int | float]:
    return repeats.to_json() if isinstance(repeats, AutoRepeats) else repeats


def planned(repeats: Repeats) -> int:
    """The repeats measured whatever their outcome: all of a fixed count, the minimum of automatic ones."""
    return repeats.minimum if isinstance(repeats, AutoRepeats) else repeats


def most(repeats: Repeats) -> int:
    """The most repeats a level may get."""
    return repeats.maximum if isinstance(repeats, AutoRepeats) else repeats


def relative_half_width_pct(values: Sequence[float]) -> float | None:
    """100 x half-width / |mean| of the values' 95 % interval; None with fewer than two values or a zero
    mean (no relative width)."""
    found = estimate(values) if values else None
    if found is None or found.half_width is None or found.mean == 0:
        return None
    return 100 * found.half_width / abs(found.mean)


def stop_reason(values: Sequence[float], policy: AutoRepeats) -> str | None:
    """Why a level measured ``values`` (its repeats' throughputs, in order) needs no more repeats; None while
    it needs one: fewer than ``minimum``, or an interval wider than the target and fewer than ``maximum``."""
    count = len(values)
    if count < policy.minimum:
        return None
    width = relative_half_width_pct(values)
    shown = "no interval" if width is None else f"interval ±{width:.2f} %"
    if width is not None and width <= policy.half_width_pct:
        return f"{shown} within ±{policy.half_width_pct:g} % after {count} repeats"
    if count >= policy.maximum:
        target = f"target ±{policy.half_width_pct:g} %"
        return f"maximum of {policy.maximum} repeats reached with {shown} ({target})"
    return None
