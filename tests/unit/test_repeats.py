"""Automatic repeats: when a level's throughput interval is narrow enough, or the maximum is reached."""

from __future__ import annotations

import pytest

from fairbench.measure.repeats import (
    AutoRepeats,
    most,
    planned,
    relative_half_width_pct,
    repeats_from_json,
    repeats_to_json,
    stop_reason,
)
from fairbench.measure.stats import estimate


def test_fewer_than_the_minimum_always_continue_and_a_narrow_interval_stops() -> None:
    policy = AutoRepeats(minimum=3, maximum=10, half_width_pct=2.0)
    assert stop_reason([100.0, 100.0], policy) is None
    assert stop_reason([100.0, 100.5, 99.5], policy) == "interval ±1.24 % within ±2 % after 3 repeats"
    found = estimate([100.0, 100.5, 99.5])
    assert found.half_width is not None
    assert relative_half_width_pct([100.0, 100.5, 99.5]) == pytest.approx(100 * found.half_width / 100.0)


def test_a_wide_interval_continues_until_the_maximum() -> None:
    policy = AutoRepeats(minimum=2, maximum=4, half_width_pct=1.0)
    assert stop_reason([100.0, 110.0], policy) is None
    assert stop_reason([100.0, 110.0, 90.0], policy) is None
    reason = stop_reason([100.0, 110.0, 90.0, 105.0], policy)
    assert reason is not None and reason.startswith("maximum of 4 repeats reached with interval ±")
    assert reason.endswith("(target ±1 %)")
    # A zero mean (every point failed) has no relative width: it runs to the maximum.
    assert stop_reason([0.0, 0.0], AutoRepeats(2, 3, 1.0)) is None
    assert stop_reason([0.0, 0.0, 0.0], AutoRepeats(2, 3, 1.0)) == (
        "maximum of 3 repeats reached with no interval (target ±1 %)"
    )


def test_json_forms_and_counts() -> None:
    auto = AutoRepeats(2, 6, 1.5)
    assert repeats_from_json(repeats_to_json(auto)) == auto
    assert repeats_from_json(3) == 3
    assert (planned(auto), most(auto), planned(4), most(4)) == (2, 6, 4, 4)
    with pytest.raises(ValueError, match="repeats: an integer or"):
        repeats_from_json(True)
