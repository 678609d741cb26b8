"""A config's accuracy score, its confidence interval, and its difference from the baseline config's.

With k right answers of n, p = k / n, and z the standard normal quantile of the two-sided level
(z = 1.959964 for 95 %, ``Z_95``):

- **Wilson score interval** of p (``Score.interval``; Wilson 1927; Newcombe 1998, method 3):
  centre = (p + z^2 / 2n) / (1 + z^2 / n),
  half width = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2),
  interval = centre -/+ half width. Unlike p -/+ z sqrt(p (1 - p) / n), it stays within 0 and 1 and does not
  shrink to a point at p = 0 or 1, where a server that is always right, or never, still leaves doubt.
- **Newcombe's hybrid score interval** of a difference p1 - p2 of two independent scores
  (``difference_interval``; Newcombe 1998, "Interval estimation for the difference between independent
  proportions", Statistics in Medicine 17, method 10), from each score's Wilson interval (l1, u1), (l2, u2):
  low = (p1 - p2) - sqrt((p1 - l1)^2 + (u2 - p2)^2),
  high = (p1 - p2) + sqrt((u1 - p1)^2 + (p2 - l2)^2).
- **Falls short** (``falls_short``): 100 (p_baseline - p) > max_drop_pct, on the point estimates, computed
  exactly (as fractions), so a score exactly max_drop_pct points below the baseline does not fall short.
  The interval of the difference is reported beside it, not used in the decision.

Scores of 0 answers are refused (ValueError): a config none of whose answers could be scored has no score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist

Z_95 = NormalDist().inv_cdf(0.975)
"""The standard normal quantile of a two-sided 95 % interval, 1.959964."""


def z_of(confidence: float) -> float:
    """z for a two-sided interval at ``confidence`` (0.95 -> 1.959964)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf((1 + confidence) / 2)


@dataclass(frozen=True)
class Score:
    """``correct`` right answers of ``total`` scored."""

    correct: int
    total: int

    def __post_init__(self) -> None:
        if self.total < 1:
            raise ValueError(f"a score needs at least one scored answer, got {self.correct} of {self.total}")
        if not 0 <= self.correct <= self.total:
            raise ValueError(f"correct must be from 0 to total, got {self.correct} of {self.total}")

    @property
    def share(self) -> float:
        """p = correct / total."""
        return self.correct / self.total

    @property
    def interval(self) -> tuple[float, float]:
        """The 95 % Wilson score interval of the share (the module docstring's formula)."""
        return self.wilson(Z_95)

    def wilson(self, z: float) -> tuple[float, float]:
        """The Wilson score interval of the share for the normal quantile ``z`` (``z_of``)."""
        n, p = self.total, self.share
        denominator = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / denominator
        half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        # The bounds are 0 and 1 exactly where p is (the formula's rounding can miss them by an ulp).
        low = 0.0 if self.correct == 0 else max(0.0, centre - half)
        high = 1.0 if self.correct == self.total else min(1.0, centre + half)
        return low, high


def difference(score: Score, baseline: Score) -> float:
    """p - p_baseline, in shares (0.05 is 5 points)."""
    return score.share - baseline.share


def difference_interval(score: Score, baseline: Score, z: float = Z_95) -> tuple[float, float]:
    """Newcombe's hybrid score interval (method 10) of ``difference(score, baseline)``, in shares: 95 %
    unless ``z`` says otherwise (the module docstring's formula)."""
    p1, p2 = score.share, baseline.share
    l1, u1 = score.wilson(z)
    l2, u2 = baseline.wilson(z)
    estimate = p1 - p2
    low = estimate - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = estimate + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return low, high


def falls_short(score: Score, baseline: Score, max_drop_pct: float) -> bool:
    """Whether ``score``'s share is below ``baseline``'s by more than ``max_drop_pct`` percentage points
    (the point estimates, exactly). ValueError for a negative or non-finite margin."""
    if not math.isfinite(max_drop_pct) or max_drop_pct < 0:
        raise ValueError(f"max_drop_pct must be a finite number of points >= 0, got {max_drop_pct}")
    drop = Fraction(baseline.correct, baseline.total) - Fraction(score.correct, score.total)
    # The margin as written (2.1 is 21/10, not the float nearest it), so a drop of exactly it is within.
    return drop * 100 > Fraction(repr(float(max_drop_pct)))
