"""Confidence intervals, Welch's comparison and the Pareto frontier used by the report."""

from __future__ import annotations

import math

import pytest

from fairbench.report.summary import pareto_frontier
from fairbench.stats import NORMAL_975, compare, estimate, sample_std, t_quantile_975


def test_t_quantiles_come_from_the_table_and_round_down_between_rows() -> None:
    assert t_quantile_975(1) == 12.706
    assert t_quantile_975(4) == 2.776
    assert t_quantile_975(30) == 2.042
    assert t_quantile_975(4.9) == 2.776  # Welch's fractional df: the smaller df, the wider interval
    assert t_quantile_975(45) == 2.021
    assert t_quantile_975(1000) == 1.980
    assert t_quantile_975(math.inf) == NORMAL_975
    with pytest.raises(ValueError, match="at least 1"):
        t_quantile_975(0.5)


def test_an_estimate_is_the_mean_with_a_student_t_half_width() -> None:
    values = [10.0, 12.0, 14.0]
    found = estimate(values)
    assert found.mean == 12.0
    assert sample_std(values) == 2.0
    assert found.half_width == pytest.approx(4.303 * 2.0 / math.sqrt(3))
    assert estimate([5.0]).half_width is None


def test_welch_says_significant_only_when_the_difference_exceeds_the_noise() -> None:
    clear = compare([110.0, 111.0, 109.0], [100.0, 101.0, 99.0])
    assert clear.relative_pct == pytest.approx(10.0)
    assert clear.significant is True
    noisy = compare([110.0, 90.0, 130.0], [100.0, 80.0, 120.0])
    assert noisy.significant is False
    assert compare([110.0], [100.0]).significant is None
    assert compare([5.0, 5.0], [4.0, 4.0]).significant is True


def test_the_pareto_frontier_keeps_the_points_nothing_beats_in_both_coordinates() -> None:
    points = [(100.0, 50.0), (200.0, 40.0), (150.0, 30.0), (300.0, 10.0), (90.0, 45.0)]
    assert pareto_frontier(points) == [(100.0, 50.0), (200.0, 40.0), (300.0, 10.0)]
