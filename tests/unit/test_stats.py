"""Confidence intervals, Welch's comparison, p-values, Holm's correction and the Pareto frontier used by
the report.

Expected t quantiles and probabilities come from integrating Student's t density here (Simpson's rule)
and inverting its CDF by bisection, not from stats.py's table or its incomplete beta function; Welch's
standard error and degrees of freedom are recomputed here from the samples with the statistics module.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import pytest

from fairbench.measure.stats import (
    NORMAL_975,
    compare,
    difference_interval_pct,
    estimate,
    holm,
    holm_adjusted,
    regularized_incomplete_beta,
    sample_std,
    t_cdf,
    t_quantile,
    t_quantile_975,
    t_two_sided_p,
    welch_p_value,
)
from fairbench.report.summary import pareto_frontier

TABLE_ROWS = (*range(1, 31), 40, 60, 120)
"""The degrees of freedom stats.py documents its t table for; a df between rows takes the row below."""
SIMPSON_STEP = 0.01
"""Simpson's rule spacing on the t axis: quantiles come out within 1e-5 even for df 1 (t = 12.7)."""


def _t_density(df: float) -> Callable[[float], float]:
    """Student's t density with ``df`` degrees of freedom (the standard normal's for df = inf):
    Gamma((df+1)/2) / (sqrt(df pi) Gamma(df/2)) * (1 + x^2/df)^(-(df+1)/2)."""
    if math.isinf(df):
        return lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    log_constant = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - math.log(df * math.pi) / 2
    return lambda x: math.exp(log_constant - (df + 1) / 2 * math.log1p(x * x / df))


def _simpson(function: Callable[[float], float], low: float, high: float) -> float:
    intervals = 2 * max(2, math.ceil((high - low) / SIMPSON_STEP / 2))
    step = (high - low) / intervals
    inner = math.fsum((4 if k % 2 else 2) * function(low + k * step) for k in range(1, intervals))
    return (function(low) + inner + function(high)) * step / 3


@cache
def _exact_t_975(df: float) -> float:
    """The t with CDF(t) = 0.975, i.e. the density's integral from 0 to t is 0.475 (it is symmetric).

    Bisection on [0, 16] (t(0.975, 1) = 12.7 is the largest); each step integrates only the stretch
    between the bracket's lower end, whose integral is known, and the midpoint.
    """
    density = _t_density(df)
    low, high, area_to_low = 0.0, 16.0, 0.0
    while high - low > 1e-9:
        middle = (low + high) / 2
        area_to_middle = area_to_low + _simpson(density, low, middle)
        if area_to_middle < 0.475:
            low, area_to_low = middle, area_to_middle
        else:
            high = middle
    return (low + high) / 2


def _row_at_or_below(df: float) -> int:
    return max(row for row in TABLE_ROWS if row <= df)


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


@pytest.mark.parametrize("df", TABLE_ROWS)
def test_each_tabulated_t_quantile_is_the_exact_one_to_three_decimals(df: int) -> None:
    assert t_quantile_975(df) == round(_exact_t_975(df), 3)


# Between two rows the table is off by at most the step down to the next row; the widest steps are
# from 1.980 (df 120) to the normal's 1.960, and just below df 60 (2.021 against t(59.9) = 2.000).
BEYOND_ROWS_MARGIN = 0.021


@pytest.mark.parametrize("df", [*range(31, 40), 45, 100, 500, 10**6, math.inf])
def test_between_and_beyond_the_rows_the_t_quantile_is_conservative_and_close(df: float) -> None:
    used = t_quantile_975(df)
    exact = _exact_t_975(df)
    assert exact <= used <= exact + BEYOND_ROWS_MARGIN
    if math.isinf(df):
        assert used == pytest.approx(exact, abs=1e-6)
    else:
        assert used == round(_exact_t_975(_row_at_or_below(df)), 3)


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


# --- Welch's test at its boundary ------------------------------------------------------------------------


@dataclass(frozen=True)
class Spreads:
    """Two samples' sizes and standard deviations; their means are set per case."""

    count_a: int
    std_a: float
    count_b: int
    std_b: float


SPREADS = {
    # Equal n, unequal spreads: df 50/17 = 2.94, row 2 (4.303).
    "small equal samples": Spreads(3, 2.0, 3, 1.0),
    # The larger sample is the noisier: df 9.57 (row 9), and pooling weighs the noisy side too much.
    "many noisy against few steady": Spreads(10, 10.0, 3, 1.0),
    # The smaller sample is the noisier: df 2.01 (row 2), and pooling weighs it too little.
    "few noisy against many steady": Spreads(3, 10.0, 10, 1.0),
    # df 67.9, past the row for 60 and short of the next (120).
    "mid-sized samples": Spreads(40, 1.0, 40, 1.5),
    # df 205, past the last row (120), where the table stays at 1.980 above the normal's 1.960.
    "large samples": Spreads(200, 1.0, 150, 2.0),
}
BASELINE = 1000.0
"""Sample B's mean (positive, so the relative change is defined)."""
MARGIN = 1e-3
"""How far (relatively) a case's difference sits from the critical one: wider than the table's rounding
(at most 0.0005 / 1.96 = 2.6e-4), narrower than the closest a wrong rule below comes to the critical
difference where it differs at all (0.24 %: the unrounded df 67.9 against the row for 60)."""


def _sample(count: int, std: float, center: float) -> list[float]:
    """``count`` evenly spaced values with mean ``center`` and sample standard deviation ``std``."""
    offsets = [k - (count - 1) / 2 for k in range(count)]
    scale = std / math.sqrt(count * (count + 1) / 12)  # the offsets' sample variance is n(n+1)/12
    return [center + scale * offset for offset in offsets]


@dataclass(frozen=True)
class Welch:
    standard_error: float
    df: float


def _welch(values_a: Sequence[float], values_b: Sequence[float]) -> Welch:
    share_a = statistics.variance(values_a) / len(values_a)
    share_b = statistics.variance(values_b) / len(values_b)
    df = (share_a + share_b) ** 2 / (share_a**2 / (len(values_a) - 1) + share_b**2 / (len(values_b) - 1))
    return Welch(math.sqrt(share_a + share_b), df)


def _critical_difference(values_a: Sequence[float], values_b: Sequence[float]) -> float:
    """t(0.975, df) * se, df Welch-Satterthwaite's rounded down to the table's row."""
    welch = _welch(values_a, values_b)
    return _exact_t_975(_row_at_or_below(welch.df)) * welch.standard_error


def _pair(spreads: Spreads, ratio: float, sign: float) -> tuple[list[float], list[float]]:
    """Samples A and B whose means differ by ``ratio`` times the critical difference, A above B when
    ``sign`` is +1, below when -1 (a common shift leaves both spreads as they are)."""
    values_b = _sample(spreads.count_b, spreads.std_b, BASELINE)
    critical = _critical_difference(_sample(spreads.count_a, spreads.std_a, BASELINE), values_b)
    return _sample(spreads.count_a, spreads.std_a, BASELINE + sign * ratio * critical), values_b


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["A above B", "A below B"])
@pytest.mark.parametrize("spreads", SPREADS.values(), ids=SPREADS.keys())
def test_welch_is_significant_just_beyond_the_critical_difference_and_noise_just_short_of_it(
    spreads: Spreads, sign: float
) -> None:
    for ratio, significant in ((1 + MARGIN, True), (1 - MARGIN, False)):
        values_a, values_b = _pair(spreads, ratio, sign)
        found = compare(values_a, values_b)
        assert found.significant is significant, (ratio, _welch(values_a, values_b))
        relative = (statistics.mean(values_a) - BASELINE) / BASELINE * 100
        assert found.relative_pct == pytest.approx(relative, rel=1e-9)


def _pooled_se(values_a: Sequence[float], values_b: Sequence[float]) -> float:
    count_a, count_b = len(values_a), len(values_b)
    pooled = (
        (count_a - 1) * statistics.variance(values_a) + (count_b - 1) * statistics.variance(values_b)
    ) / (count_a + count_b - 2)
    return math.sqrt(pooled * (1 / count_a + 1 / count_b))


Rule = Callable[[Sequence[float], Sequence[float]], float]
"""A critical difference of the means: significant above it."""
WRONG_RULES: dict[str, Rule] = {
    "normal cut-off 1.96": lambda a, b: 1.959964 * _welch(a, b).standard_error,
    "pooled variance, df n_a + n_b - 2": lambda a, b: (
        _exact_t_975(_row_at_or_below(len(a) + len(b) - 2)) * _pooled_se(a, b)
    ),
    "Welch's se, df n_a + n_b - 2": lambda a, b: (
        _exact_t_975(_row_at_or_below(len(a) + len(b) - 2)) * _welch(a, b).standard_error
    ),
    "Welch's se, df min(n) - 1": lambda a, b: (
        _exact_t_975(_row_at_or_below(min(len(a), len(b)) - 1)) * _welch(a, b).standard_error
    ),
    "Welch's df rounded to the nearest row": lambda a, b: (
        _exact_t_975(_row_at_or_below(round(_welch(a, b).df))) * _welch(a, b).standard_error
    ),
    "Welch's df, unrounded": lambda a, b: _exact_t_975(_welch(a, b).df) * _welch(a, b).standard_error,
}


@pytest.mark.parametrize("rule", WRONG_RULES.values(), ids=WRONG_RULES.keys())
def test_the_boundary_cases_tell_welchs_rule_from_each_wrong_one(rule: Rule) -> None:
    """Some case's two samples (just beyond, just short) are decided otherwise by ``rule``."""
    decided_otherwise = []
    for name, spreads in SPREADS.items():
        for ratio, significant in ((1 + MARGIN, True), (1 - MARGIN, False)):
            values_a, values_b = _pair(spreads, ratio, 1.0)
            difference = statistics.mean(values_a) - statistics.mean(values_b)
            if (difference > rule(values_a, values_b)) != significant:
                decided_otherwise.append((name, ratio))
    assert decided_otherwise


def test_welch_with_one_steady_sample_has_the_other_samples_n_minus_1_df() -> None:
    # se^4 / ((s_a^2/n_a)^2 / (n_a - 1)) = n_a - 1 = 4 when B does not vary: critical t(4) * s_a / sqrt(5).
    critical = _exact_t_975(4) * 3.0 / math.sqrt(5)
    steady = [BASELINE] * 3
    assert compare(_sample(5, 3.0, BASELINE + critical * (1 + MARGIN)), steady).significant is True
    assert compare(_sample(5, 3.0, BASELINE + critical * (1 - MARGIN)), steady).significant is False


# --- Student's t distribution and p-values ----------------------------------------------------------------

PROBABILITY_TOLERANCE = 1e-6
"""Simpson's rule at SIMPSON_STEP integrates the density to well within this (its error falls as the
step's fourth power); the incomplete beta's continued fraction is good to about 1e-14."""


def _integrated_cdf(t: float, df: float) -> float:
    """P(T <= t) as 1/2 plus the density's integral from 0 to t (it is symmetric about 0)."""
    area = _simpson(_t_density(df), 0.0, abs(t)) if t else 0.0
    return 0.5 + math.copysign(area, t)


@pytest.mark.parametrize("df", [1, 2, 3, 4.5, 10, 29.3, 120, math.inf])
@pytest.mark.parametrize("t", [-3.0, -0.7, 0.0, 0.4, 1.5, 2.5, 6.0])
def test_the_t_cdf_is_the_integral_of_the_t_density(t: float, df: float) -> None:
    assert t_cdf(t, df) == pytest.approx(_integrated_cdf(t, df), abs=PROBABILITY_TOLERANCE)
    assert t_two_sided_p(t, df) == pytest.approx(2 * (1 - _integrated_cdf(abs(t), df)), abs=2e-6)


@pytest.mark.parametrize("t", [0.1, 1.0, 2.0, 12.706, 100.0])
def test_the_t_cdf_matches_the_closed_forms_of_one_and_two_degrees_of_freedom(t: float) -> None:
    # df 1 is Cauchy's: 1/2 + atan(t)/pi; df 2: 1/2 + t / (2 sqrt(2 + t^2)).
    assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
    assert t_cdf(-t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


@pytest.mark.parametrize("df", TABLE_ROWS)
def test_the_exact_t_quantile_inverts_the_cdf_and_rounds_to_the_table(df: int) -> None:
    assert t_cdf(_exact_t_975(df), df) == pytest.approx(0.975, abs=PROBABILITY_TOLERANCE)
    assert t_quantile(0.975, df) == pytest.approx(_exact_t_975(df), abs=1e-6)
    assert round(t_quantile(0.975, df), 3) == t_quantile_975(df)
    assert t_quantile(0.025, df) == -t_quantile(0.975, df)


def test_the_incomplete_beta_matches_its_closed_forms() -> None:
    for x in (0.0, 0.01, 0.3, 0.5, 0.77, 0.999, 1.0):
        assert regularized_incomplete_beta(x, 2.5, 1) == pytest.approx(x**2.5, abs=1e-12)
        assert regularized_incomplete_beta(x, 1, 3.5) == pytest.approx(1 - (1 - x) ** 3.5, abs=1e-12)
    assert regularized_incomplete_beta(0.5, 7.3, 7.3) == pytest.approx(0.5, abs=1e-12)
    with pytest.raises(ValueError, match="0 <= x <= 1"):
        regularized_incomplete_beta(1.5, 1, 1)


@pytest.mark.parametrize("spreads", SPREADS.values(), ids=SPREADS.keys())
def test_welchs_p_value_is_the_t_tail_beyond_the_samples_t(spreads: Spreads) -> None:
    values_b = _sample(spreads.count_b, spreads.std_b, BASELINE)
    values_a = _sample(spreads.count_a, spreads.std_a, BASELINE + 2.5 * spreads.std_a)
    welch = _welch(values_a, values_b)
    t = (statistics.mean(values_a) - statistics.mean(values_b)) / welch.standard_error
    expected = 2 * (1 - _integrated_cdf(abs(t), welch.df))
    assert welch_p_value(values_a, values_b) == pytest.approx(expected, abs=2e-6)
    assert compare(values_a, values_b).p_value == welch_p_value(values_a, values_b)


@pytest.mark.parametrize("spreads", SPREADS.values(), ids=SPREADS.keys())
def test_the_difference_interval_excludes_0_exactly_when_p_is_below_5_percent(spreads: Spreads) -> None:
    values_b = _sample(spreads.count_b, spreads.std_b, BASELINE)
    welch = _welch(_sample(spreads.count_a, spreads.std_a, BASELINE), values_b)
    # The critical difference at the unrounded df and the exact quantile (not the table's).
    critical = _exact_t_975(welch.df) * welch.standard_error
    for ratio, below_5_percent in ((1 + MARGIN, True), (1 - MARGIN, False)):
        values_a = _sample(spreads.count_a, spreads.std_a, BASELINE + ratio * critical)
        p_value = welch_p_value(values_a, values_b)
        interval = difference_interval_pct(values_a, values_b)
        assert p_value is not None and interval is not None
        assert (p_value < 0.05) is below_5_percent
        assert (interval[0] > 0) is below_5_percent
        middle = (statistics.mean(values_a) - BASELINE) / BASELINE * 100
        assert (interval[0] + interval[1]) / 2 == pytest.approx(middle, rel=1e-9)
        assert interval[1] - interval[0] == pytest.approx(2 * critical / BASELINE * 100, rel=1e-5)


def test_without_two_repeats_or_spread_the_p_value_and_interval_say_so() -> None:
    assert welch_p_value([1.0], [1.0, 2.0]) is None
    assert difference_interval_pct([1.0, 2.0], [1.0]) is None
    assert difference_interval_pct([1.0, 2.0], [0.0, 0.0]) is None  # no percentage of 0
    assert welch_p_value([5.0, 5.0], [4.0, 4.0]) == 0.0
    assert welch_p_value([5.0, 5.0], [5.0, 5.0]) == 1.0
    assert difference_interval_pct([5.0, 5.0], [4.0, 4.0]) == (25.0, 25.0)
    assert compare([110.0], [100.0]).p_value is None


# --- Holm-Bonferroni --------------------------------------------------------------------------------------


def test_holm_rejects_the_smallest_p_values_while_each_is_within_alpha_over_the_hypotheses_left() -> None:
    # Sorted: 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2: stop; 0.04 is kept though <= 0.05/1.
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # The first failure stops it: 0.02 > 0.05/3 keeps all three, though 0.02 <= 0.05/1.
    assert holm([0.02, 0.02, 0.02]) == [False, False, False]
    assert holm([0.02, 0.02, 0.02], alpha=0.06) == [True, True, True]
    # One hypothesis: the test alone.
    assert holm([0.049]) == [True] and holm([0.051]) == [False]
    assert holm([]) == [] and holm_adjusted([]) == []


def test_holm_rejects_exactly_where_its_adjusted_p_value_is_within_alpha() -> None:
    cases = [
        [0.001, 0.2, 0.012, 0.013, 0.04, 0.0125],
        [0.5, 0.5, 0.0001],
        [0.01, 0.01, 0.01, 0.011],
        [k / 97 for k in range(1, 12)],
    ]
    for p_values in cases:
        adjusted = holm_adjusted(p_values)
        for alpha in (0.01, 0.05, 0.1):
            assert holm(p_values, alpha) == [value <= alpha for value in adjusted]
        # Holm never rejects what the uncorrected test keeps, and rejects what Bonferroni does.
        assert all(p <= q <= 1 for p, q in zip(p_values, adjusted, strict=True))
        assert all(q <= min(1.0, len(p_values) * p) for p, q in zip(p_values, adjusted, strict=True))


def test_the_pareto_frontier_keeps_the_points_nothing_beats_in_both_coordinates() -> None:
    points = [(100.0, 50.0), (200.0, 40.0), (150.0, 30.0), (300.0, 10.0), (90.0, 45.0)]
    assert pareto_frontier(points) == [(100.0, 50.0), (200.0, 40.0), (300.0, 10.0)]
