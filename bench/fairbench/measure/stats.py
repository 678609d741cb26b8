"""Statistics across repeats of a point: Student-t confidence intervals, and whether two configs differ.

A point measured ``n`` times (the campaign's ``repeats``) gives ``n`` values of each metric. Their mean
is reported with a 95 % confidence interval, and two configs are compared with Welch's t-test, which
does not assume both have the same run-to-run spread, or, where their repeats ran in the same rounds, with
the paired t-test of their within-round differences. Both need the 0.975 quantile of Student's t
distribution, taken from a table (no scipy: the report must run wherever fairbench runs). A test's
p-value needs Student's t distribution itself: computed here from the regularized incomplete beta
function. Many tests at once (a verdict over every pair of configs) are corrected with Holm's method.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
    p_value: float | None = None
    """Welch's two-sided p-value (:func:`welch_p_value`); None when either has one value."""


@dataclass(frozen=True)
class _Difference:
    """mean_a - mean_b as the design measured it, with its standard error and degrees of freedom."""

    difference: float
    standard_error: float
    df: float


Sample = Sequence[float] | Mapping[int, float]
"""A config's values over its repeats: a sequence (independent repeats), or by round (a spread campaign's
repeats run in rounds: ``measure.rounds``), which two configs measured in the same rounds are compared by."""


def sample_values(sample: Sample) -> list[float]:
    """The sample's values, in its order (by round: its rounds' order)."""
    return list(sample.values()) if isinstance(sample, Mapping) else list(sample)


def _welch(values_a: Sequence[float], values_b: Sequence[float]) -> _Difference | None:
    """se = sqrt(s_a^2/n_a + s_b^2/n_b), df = se^4 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1));
    None with fewer than two values on a side; df infinite when both spreads are 0."""
    if len(values_a) < 2 or len(values_b) < 2:
        return None
    share_a = sample_std(values_a) ** 2 / len(values_a)
    share_b = sample_std(values_b) ** 2 / len(values_b)
    standard_error = math.sqrt(share_a + share_b)
    difference = mean(values_a) - mean(values_b)
    if standard_error == 0:
        return _Difference(difference, 0.0, math.inf)
    df = standard_error**4 / (share_a**2 / (len(values_a) - 1) + share_b**2 / (len(values_b) - 1))
    # >= min(n_a, n_b) - 1 >= 1 in exact arithmetic; rounding may dip below
    return _Difference(difference, standard_error, max(df, 1.0))


def _paired(differences: Sequence[float]) -> _Difference:
    """Within-round differences d_r = a_r - b_r over n >= 2 shared rounds: their mean, se = s_d / sqrt(n),
    df = n - 1 (infinite when every d_r is the same)."""
    standard_error = sample_std(differences) / math.sqrt(len(differences))
    df = float(len(differences) - 1) if standard_error else math.inf
    return _Difference(mean(differences), standard_error, df)


def paired_differences(sample_a: Sample, sample_b: Sample) -> list[float] | None:
    """a_r - b_r for each round r both were measured in, earliest first, where both are by round and share
    two rounds or more; else None (compared unpaired)."""
    if not isinstance(sample_a, Mapping) or not isinstance(sample_b, Mapping):
        return None
    shared = sorted(sample_a.keys() & sample_b.keys())
    return [sample_a[index] - sample_b[index] for index in shared] if len(shared) >= 2 else None


def _difference(sample_a: Sample, sample_b: Sample) -> _Difference | None:
    """A against B by their design: paired (:func:`_paired`) where they share rounds
    (:func:`paired_differences`), so what a round did to every config it measured (the machines' drift
    between rounds) cancels; else Welch's over all their values (:func:`_welch`)."""
    shared = paired_differences(sample_a, sample_b)
    if shared is not None:
        return _paired(shared)
    return _welch(sample_values(sample_a), sample_values(sample_b))


def compare(sample_a: Sample, sample_b: Sample) -> Comparison:
    """A against B at the 5 % level, by their design (:func:`_difference`: Welch's t-test, or paired
    within rounds).

    Welch's, with means m, sample variances s^2 and counts n: se = sqrt(s_a^2/n_a + s_b^2/n_b), the
    Welch-Satterthwaite df = se^4 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1)), and the
    difference d = m_a - m_b is significant when |d| > t(0.975, df) * se; paired, d the mean of the
    within-round differences, se their standard error and df = n - 1. When se is 0, any difference is
    significant (every repeat measured the same, so nothing is noise). The p-value is
    :func:`welch_p_value`'s. ``relative_pct`` is of all values' means either way.
    """
    mean_a, mean_b = mean(sample_values(sample_a)), mean(sample_values(sample_b))
    relative = (mean_a - mean_b) / mean_b * 100 if mean_b else (0.0 if mean_a == mean_b else math.inf)
    found = _difference(sample_a, sample_b)
    if found is None:
        return Comparison(relative, None)
    p_value = _p_value(found)
    if found.standard_error == 0:
        return Comparison(relative, found.difference != 0, p_value)
    significant = abs(found.difference) > t_quantile_975(found.df) * found.standard_error
    return Comparison(relative, significant, p_value)


# --- p-values ------------------------------------------------------------------------------------------

_FRACTION_TERMS = 500
"""Most terms of the continued fraction: it converges in O(sqrt(max(a, b))) terms, a few dozen here."""
_FRACTION_EPSILON = 1e-15
"""Stop when a term changes the fraction by less than this, relatively (double precision)."""
_TINY = 1e-300
"""What the modified Lentz method puts for a denominator that would be 0."""


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction 1 / (1 + d_1 / (1 + d_2 / (1 + ...))) of
    :func:`regularized_incomplete_beta`, by the modified Lentz method: f_k = C_k D_k f_(k-1) with
    D_k = 1 / (1 + d_k D_(k-1)) and C_k = 1 + d_k / C_(k-1), each 0 replaced by a tiny number."""

    def nonzero(value: float) -> float:
        return value if abs(value) > _TINY else _TINY

    upper = 1.0
    lower = 1.0 / nonzero(1.0 - (a + b) * x / (a + 1.0))  # d_1 = -(a + b) x / (a + 1)
    fraction = lower
    for m in range(1, _FRACTION_TERMS + 1):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))  # d_(2m)
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))  # d_(2m+1)
        for term in (even, odd):
            lower = 1.0 / nonzero(1.0 + term * lower)
            upper = nonzero(1.0 + term / upper)
            fraction *= lower * upper
        if abs(lower * upper - 1.0) < _FRACTION_EPSILON:
            return fraction
    raise ArithmeticError(f"the incomplete beta's continued fraction did not converge for {x=}, {a=}, {b=}")


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) = (1 / B(a, b)) * integral from 0 to x of t^(a-1) (1 - t)^(b-1) dt, for 0 <= x <= 1 and
    a, b > 0 (B the beta function).

    By its continued fraction (Abramowitz & Stegun 26.5.8):
    I_x(a, b) = x^a (1 - x)^b / (a B(a, b)) * 1 / (1 + d_1 / (1 + d_2 / (1 + ...))), with
    d_(2m+1) = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)) and
    d_(2m) = m (b - m) x / ((a + 2m - 1)(a + 2m)),
    which converges quickly for x < (a + 1) / (a + b + 2); above that, I_x(a, b) = 1 - I_(1-x)(b, a).
    """
    if not (0.0 <= x <= 1.0 and a > 0 and b > 0):
        raise ValueError(f"the incomplete beta needs 0 <= x <= 1 and a, b > 0, got {x=}, {a=}, {b=}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's T with ``df`` degrees of freedom: I_(df / (df + t^2))(df / 2, 1 / 2)
    (A&S 26.7.1); for df = inf the normal's erfc(|t| / sqrt(2))."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(t):
        return 0.0
    if math.isinf(df):
        return math.erfc(abs(t) / math.sqrt(2))
    return regularized_incomplete_beta(df / (df + t * t), df / 2, 0.5)


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's T with ``df`` degrees of freedom: 1 - p / 2 for t >= 0 and p / 2 below,
    p = :func:`t_two_sided_p` (the distribution is symmetric about 0)."""
    half_tail = t_two_sided_p(t, df) / 2
    return 1.0 - half_tail if t >= 0 else half_tail


def t_quantile(probability: float, df: float) -> float:
    """The t with P(T <= t) = ``probability`` (0 < probability < 1) for Student's T with ``df`` degrees
    of freedom: by bisection on :func:`t_cdf`, which rises with t, to a relative 1e-12 (the quantile of
    1 - probability is its negative, by symmetry)."""
    if not 0 < probability < 1:
        raise ValueError(f"a quantile needs 0 < probability < 1, got {probability}")
    if probability < 0.5:
        return -t_quantile(1 - probability, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < probability:
        low, high = high, 2 * high
    while high - low > 1e-12 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, df) < probability else (low, middle)
    return (low + high) / 2


def _p_value(found: _Difference) -> float:
    if found.standard_error == 0:
        return 0.0 if found.difference else 1.0
    return t_two_sided_p(found.difference / found.standard_error, found.df)


def welch_p_value(sample_a: Sample, sample_b: Sample) -> float | None:
    """The two-sided p-value of the t-test of equal means, by the samples' design (:func:`_difference`):
    with t = d / se and its df (Welch-Satterthwaite's unrounded, as :func:`compare` gives them, or n - 1
    paired), p = P(|T_df| >= |t|). When se is 0: 0 when d is not, 1 when it is. None with fewer than two
    values on a side."""
    found = _difference(sample_a, sample_b)
    return None if found is None else _p_value(found)


def shifted_p_value(sample_a: Sample, sample_b: Sample, shift: float) -> float | None:
    """The one-sided p-value of the test of H0: d <= ``shift`` against d > shift (d = m_a - m_b, by the
    samples' design as in :func:`welch_p_value`): p = P(T_df >= (d - shift) / se). When se is 0: 0 when
    d > shift, else 1. None with fewer than two values on a side. H0: d >= shift against d < shift is the
    same test of B against A with -shift."""
    found = _difference(sample_a, sample_b)
    if found is None:
        return None
    excess = found.difference - shift
    if found.standard_error == 0:
        return 0.0 if excess > 0 else 1.0
    t = excess / found.standard_error
    tail = t_two_sided_p(t, found.df) / 2  # P(T >= |t|), exact to the smallest p
    return tail if t >= 0 else 1.0 - tail


def equivalence_p_value(sample_a: Sample, sample_b: Sample, margin: float) -> float | None:
    """Two one-sided tests (TOST) that the means are within ``margin`` (> 0) of each other: H0: d <= -margin
    and H0: d >= margin, each by :func:`shifted_p_value` (the second as B against A); p = the larger of the
    two, so that rejecting at level alpha rejects both, and d lies within +-margin at that level. None with
    fewer than two values on a side."""
    below = shifted_p_value(sample_a, sample_b, -margin)
    above = shifted_p_value(sample_b, sample_a, -margin)
    if below is None or above is None:
        return None
    return max(below, above)


def difference_interval_pct(sample_a: Sample, sample_b: Sample) -> tuple[float, float] | None:
    """The 95 % confidence interval of d = mean_a - mean_b (by the samples' design, :func:`_difference`) as
    a percentage of mean_b: 100 * (d -+ t(0.975, df) * se) / m_b, low first, with se and the unrounded df
    as in :func:`welch_p_value` and the exact quantile (:func:`t_quantile`), so the interval excludes 0
    exactly when that p-value is below 0.05. (``compare``'s table t, at the df rounded down to a table row,
    is no smaller but for the table's rounding, so its test is a little stricter near the boundary.) None
    with fewer than two values on a side, or when mean_b is 0 (no percentage of it)."""
    found = _difference(sample_a, sample_b)
    reference = mean(sample_values(sample_b))
    if found is None or reference == 0:
        return None
    half_width = 0.0 if found.standard_error == 0 else t_quantile(0.975, found.df) * found.standard_error
    bounds = sorted(100 * (found.difference + sign * half_width) / reference for sign in (-1, 1))
    return bounds[0], bounds[1]


# --- many tests at once --------------------------------------------------------------------------------

ALPHA = 0.05
"""The family-wise error rate of :func:`holm`: the chance that any of its rejections is a false one."""


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm-Bonferroni: which hypotheses to reject, in the input's order, so that the chance of any false
    rejection among all m is at most ``alpha``.

    Sort the p-values ascending, p_(1) <= ... <= p_(m); reject p_(i) while p_(i) <= alpha / (m - i + 1)
    for i = 1, 2, ..., and stop at the first that is not (it and every larger one are kept).
    """
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    rejected = [False] * len(p_values)
    for rank, index in enumerate(order, start=1):
        if not p_values[index] <= alpha / (len(p_values) - rank + 1):
            break
        rejected[index] = True
    return rejected


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the input's order: p~_(i) = max over j <= i of min(1, (m - j + 1) p_(j))
    for the ascending p_(1) <= ... <= p_(m). :func:`holm` rejects exactly those with p~ <= alpha."""
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order, start=1):
        running = max(running, min(1.0, (len(p_values) - rank + 1) * p_values[index]))
        adjusted[index] = running
    return adjusted
