"""Accuracy scores: the Wilson interval, Newcombe's interval of a difference, and the margin rule, against
published values."""

from __future__ import annotations

import math

import pytest

from fairbench.answers.scores import Z_95, Score, difference, difference_interval, falls_short, z_of


@pytest.mark.parametrize(
    ("correct", "total", "low", "high"),
    [
        # Newcombe 1998, "Two-sided confidence intervals for the single proportion", Statistics in
        # Medicine 17, table I, method 3 (Wilson score).
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
        (8, 10, 0.4902, 0.9433),
    ],
)
def test_the_wilson_interval(correct: int, total: int, low: float, high: float) -> None:
    found = Score(correct, total).interval
    assert found == pytest.approx((low, high), abs=5e-5)


def test_the_wilson_interval_holds_the_share_and_stays_within_zero_and_one() -> None:
    for total in (1, 2, 7, 50, 1000):
        for correct in range(total + 1):
            score = Score(correct, total)
            low, high = score.interval
            assert 0.0 <= low <= score.share <= high <= 1.0
    assert Score(0, 10).interval[0] == 0.0
    assert Score(10, 10).interval[1] == 1.0
    # Nothing is certain at the extremes: the interval does not shrink to the point.
    assert Score(10, 10).interval[0] < 1.0


def test_the_wilson_interval_narrows_with_more_answers() -> None:
    widths = [Score(8 * n, 10 * n).interval for n in (1, 10, 100)]
    assert widths[0][1] - widths[0][0] > widths[1][1] - widths[1][0] > widths[2][1] - widths[2][0]


@pytest.mark.parametrize(
    ("a", "m", "b", "n", "expected"),
    [
        # Newcombe 1998, "Interval estimation for the difference between independent proportions:
        # comparison of eleven methods", Statistics in Medicine 17, table II, method 10.
        (56, 70, 48, 80, (0.0524, 0.3339)),
        (9, 10, 3, 10, (0.1705, 0.8090)),
        (5, 56, 0, 29, (-0.0381, 0.1926)),
        (0, 10, 0, 20, (-0.1611, 0.2775)),
        (10, 10, 0, 20, (0.6791, 1.0)),
    ],
)
def test_newcombes_interval_of_a_difference(
    a: int, m: int, b: int, n: int, expected: tuple[float, float]
) -> None:
    assert difference_interval(Score(a, m), Score(b, n)) == pytest.approx(expected, abs=5e-5)
    assert difference(Score(a, m), Score(b, n)) == pytest.approx(a / m - b / n)


def test_the_difference_the_other_way_round_is_its_mirror() -> None:
    low, high = difference_interval(Score(56, 70), Score(48, 80))
    assert difference_interval(Score(48, 80), Score(56, 70)) == pytest.approx((-high, -low))


def test_a_wider_level_gives_a_wider_interval() -> None:
    assert z_of(0.95) == Z_95 == pytest.approx(1.959964, abs=1e-6)
    assert z_of(0.99) == pytest.approx(2.575829, abs=1e-6)
    low95, high95 = difference_interval(Score(56, 70), Score(48, 80))
    low99, high99 = difference_interval(Score(56, 70), Score(48, 80), z_of(0.99))
    assert low99 < low95 and high99 > high95
    with pytest.raises(ValueError, match="confidence"):
        z_of(1.0)


@pytest.mark.parametrize(
    ("score", "baseline", "margin", "short"),
    [
        (Score(70, 100), Score(80, 100), 10.0, False),  # exactly the margin below: within it
        (Score(70, 100), Score(80, 100), 9.99, True),
        (Score(7, 10), Score(8, 10), 10, False),  # 0.8 - 0.7 is 0.1000...09 in floats
        (Score(79, 100), Score(80, 100), 0.0, True),
        (Score(80, 100), Score(80, 100), 0.0, False),
        (Score(90, 100), Score(80, 100), 0.0, False),  # above the baseline
        (Score(780, 1000), Score(80, 100), 2.0, False),
        (Score(779, 1000), Score(80, 100), 2.0, True),
        (Score(779, 1000), Score(80, 100), 2.1, False),  # 2.1 points as written, not the float near it
    ],
)
def test_falling_short_of_the_baseline(score: Score, baseline: Score, margin: float, short: bool) -> None:
    assert falls_short(score, baseline, margin) is short


def test_falls_short_on_the_point_estimate_whatever_the_interval() -> None:
    # 3 points below with a margin of 2 falls short, though the interval of so few answers holds 0.
    score, baseline = Score(47, 50), Score(97, 100)
    low, high = difference_interval(score, baseline)
    assert low < 0 < high
    assert falls_short(score, baseline, 2.0)


@pytest.mark.parametrize("margin", [-1.0, math.nan, math.inf])
def test_a_margin_must_be_finite_and_not_negative(margin: float) -> None:
    with pytest.raises(ValueError, match="max_drop_pct"):
        falls_short(Score(1, 2), Score(1, 2), margin)


@pytest.mark.parametrize(("correct", "total"), [(0, 0), (3, 2), (-1, 5)])
def test_a_score_needs_answers_and_a_count_within_them(correct: int, total: int) -> None:
    with pytest.raises(ValueError):
        Score(correct, total)
