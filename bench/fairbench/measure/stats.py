"""Statistics across repeats of a point: Student-t confidence intervals, and whether two configs differ.

A point measured ``n`` times (the campaign's ``repeats``) gives ``n`` values of each metric. Their mean
is reported with a 95 % confidence interval, and two configs are compared with Welch's t-test, which
does not assume both have the same run-to-run spread. Both need the 0.975 quantile of Student's t
distribution, taken from a table (no scipy: the report must run wherever fairbench runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fairbench.measure.metrics import mean

T_975_BY_DF: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
    29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
"""t(0.975, df): every df from 1 to 30, then 40, 60 and 120, to three decimals (any statistics table)."""
NORMAL_975 = 1.959964
"""The limit of t(0.975, df) as df grows without bound: the standard normal's 0.975 quantile."""


def t_quantile_975(df: float) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom, for a two-sided 95 % interval.

    From :data:`T_975_BY_DF` at the largest tabulated df <= ``df`` (a fractional df, as Welch's test
    gives, is rounded down): between table rows the quantile of fewer degrees of freedom is taken,
    which is larger, so an interval is never narrower than the exact one by more than the table's
    rounding to three decimals. ``df = inf`` gives the normal limit :data:`NORMAL_975`.
    """
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if math.isinf(df):
        return NORMAL_975
    return T_975_BY_DF[max(row for row in T_975_BY_DF if row <= df)]


def sample_std(values: Sequence[float]) -> float:
    """The sample standard deviation (ddof=1): sqrt(sum((x - mean)^2) / (n - 1)); 0.0 for n < 2."""
    if len(values) < 2:
        return 0.0
    center = mean(values)
    return math.sqrt(math.fsum((value - center) ** 2 for value in values) / (len(values) - 1))


@dataclass(frozen=True)
class Estimate:
    """The mean of a metric over repeats, with its 95 % confidence interval when there are two or more."""

    mean: float
    half_width: float | None
    """t(0.975, n - 1) * s / sqrt(n), s the sample standard deviation; None when n < 2."""
    count: int


def estimate(values: Sequence[float]) -> Estimate:
    """Mean +- 95 % confidence half-width (Student t, n - 1 degrees of freedom) of ``values``."""
    if not values:
        raise ValueError("no values to estimate from")
    count = len(values)
    if count < 2:
        return Estimate(mean(values), None, count)
    half_width = t_quantile_975(count - 1) * sample_std(values) / math.sqrt(count)
    return Estimate(mean(values), half_width, count)


@dataclass(frozen=True)
class Comparison:
    """How config A's mean compares with config B's."""

    relative_pct: float
    """(mean_a - mean_b) / mean_b * 100; inf when mean_b is 0 and mean_a is not, 0 when both are 0."""
    significant: bool | None
    """Whether the 95 % interval of mean_a - mean_b excludes 0 (Welch); None when either has one value."""


def compare(values_a: Sequence[float], values_b: Sequence[float]) -> Comparison:
    """A against B with Welch's t-test at the 5 % level.

    With means m, sample variances s^2 and counts n: se = sqrt(s_a^2/n_a + s_b^2/n_b), the
    Welch-Satterthwaite df = se^4 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1)), and the
    difference is significant when |m_a - m_b| > t(0.975, df) * se. When both spreads are 0, any
    difference of the means is significant (every repeat measured the same, so nothing is noise).
    """
    mean_a, mean_b = mean(values_a), mean(values_b)
    relative = (mean_a - mean_b) / mean_b * 100 if mean_b else (0.0 if mean_a == mean_b else math.inf)
    if len(values_a) < 2 or len(values_b) < 2:
        return Comparison(relative, None)
    share_a = sample_std(values_a) ** 2 / len(values_a)
    share_b = sample_std(values_b) ** 2 / len(values_b)
    standard_error = math.sqrt(share_a + share_b)
    if standard_error == 0:
        return Comparison(relative, mean_a != mean_b)
    df = standard_error**4 / (share_a**2 / (len(values_a) - 1) + share_b**2 / (len(values_b) - 1))
    df = max(df, 1.0)  # >= min(n_a, n_b) - 1 >= 1 in exact arithmetic; rounding may dip below
    return Comparison(relative, abs(mean_a - mean_b) > t_quantile_975(df) * standard_error)
