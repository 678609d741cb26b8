"""The word a comparison earns against the campaign's margin, the smallest difference that matters
(``decide: {margin_pct}``): for the verdict's comparisons, and for the repeats that stop once those are
decided.

A comparison is of config A against config B by the values of their repeats: d = m_A - m_B, and the margin
M = margin_pct / 100 x m_B, in the figure's own units. Three tests of d, each Welch's (unequal spreads), or
paired where the two configs' repeats ran in the same rounds (``stats.compare``):

- **difference**: H0: d = 0, two-sided (``stats.welch_p_value``);
- **superiority**: H0: d <= M', one-sided: A ahead of B by more than the margin (``stats.shifted_p_value``),
  M' = max(M, F / 100 x m_B), F the baseline's drift between its first and last round (``measure.rounds``),
  where it was measured: no difference smaller than the machines drifted is called ahead;
- **equivalence**: H0: |d| >= M, two one-sided tests (TOST, ``stats.equivalence_p_value``).

Comparisons judged together (the verdict's, or those of one run's queue) are one family: each test is
Holm-corrected over the family's comparisons (``stats.holm``), so the chance of any false word of a kind is
at most ALPHA. The words, from the tests rejected:

- ``AHEAD``: superiority: A is ahead by more than the margin;
- ``EQUIVALENT``: equivalence, and no difference: within +-M;
- ``BELOW_MARGIN``: equivalence and difference: a real difference, smaller than the margin;
- ``UNDECIDED``: none of these; ``repeats_to_decide`` estimates how many repeats would decide it.

A comparison A below B earns no word of its own: the verdict compares each config with one ranked below it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fairbench.measure.metrics import mean
from fairbench.measure.stats import (
    ALPHA,
    Sample,
    equivalence_p_value,
    holm,
    holm_adjusted,
    paired_differences,
    sample_std,
    sample_values,
    shifted_p_value,
    t_quantile,
    welch_p_value,
)

DECIDE_KEYS = ("margin_pct", "baseline")
"""The keys of a campaign's ``decide``."""


@dataclass(frozen=True, slots=True)
class DecideRule:
    """A campaign's ``decide``: what its verdict's words are judged against."""

    margin_pct: float
    """The smallest difference that matters, in % of the lower mean (``bounds.MARGIN_PCT``)."""
    baseline: str | None = None
    """The config every other is compared with, and the drift sentinel (``measure.rounds``); None: the
    campaign's first config (``baseline_of``)."""

    def to_json(self) -> dict[str, float | str]:
        return {"margin_pct": self.margin_pct, **({"baseline": self.baseline} if self.baseline else {})}


def decide_rule_from_json(value: object) -> DecideRule | None:
    """campaign.json's ``decide`` (``DecideRule.to_json``); None where it is null, absent (a campaign from
    before margins) or not of that shape (the report's campaign.json rules name it)."""
    if not isinstance(value, Mapping):
        return None
    margin = value.get("margin_pct")
    baseline = value.get("baseline")
    if isinstance(margin, int | float) and not isinstance(margin, bool) and 0 < margin < math.inf:
        return DecideRule(float(margin), baseline if isinstance(baseline, str) else None)
    return None


def baseline_of(campaign: Mapping[str, object]) -> str | None:
    """campaign.json's baseline config: its ``decide.baseline``, else its first config; None without
    configs."""
    rule = decide_rule_from_json(campaign.get("decide"))
    configs = campaign.get("configs")
    first = next(iter(configs), None) if isinstance(configs, Mapping) else None
    return rule.baseline if rule is not None and rule.baseline else first


AHEAD = "ahead"
EQUIVALENT = "equivalent"
BELOW_MARGIN = "below the margin"
UNDECIDED = "undecided"
WORDS = (AHEAD, EQUIVALENT, BELOW_MARGIN, UNDECIDED)
DECIDED = (AHEAD, EQUIVALENT, BELOW_MARGIN)
"""The words that need no more repeats."""
MOST_REPEATS_ESTIMATED = 10_000
"""Beyond this many repeats of each config, ``repeats_to_decide`` says none would decide it."""


@dataclass(frozen=True)
class MarginTests:
    """The raw p-values of one comparison's three tests (module docstring)."""

    difference: float
    superiority: float
    equivalence: float
    margin: float
    """M, in the figure's units."""


def margin_tests(
    sample_a: Sample, sample_b: Sample, margin_pct: float, ahead_floor_pct: float = 0.0
) -> MarginTests | None:
    """A against B with the margin ``margin_pct`` % of B's mean, each test by the samples' design (paired
    within rounds where they share them: ``stats.Sample``); superiority against the larger of the margin
    and ``ahead_floor_pct`` (the baseline's drift between rounds: no difference smaller than it is called
    ahead). None with fewer than two values on a side, or a B whose mean is 0 (no share of it)."""
    values_b = sample_values(sample_b)
    reference = abs(mean(values_b)) if values_b else 0.0
    margin = margin_pct / 100 * reference
    difference = welch_p_value(sample_a, sample_b)
    superiority = shifted_p_value(sample_a, sample_b, max(margin_pct, ahead_floor_pct) / 100 * reference)
    equivalence = equivalence_p_value(sample_a, sample_b, margin) if margin > 0 else None
    if difference is None or superiority is None or equivalence is None:
        return None
    return MarginTests(difference, superiority, equivalence, margin)


@dataclass(frozen=True)
class Decision:
    """One comparison's word, and the Holm-adjusted p-value (``stats.holm_adjusted``) of the test that gave
    it: superiority for ``AHEAD``, equivalence for ``EQUIVALENT``, difference for ``BELOW_MARGIN`` (its
    equivalence's too is below ALPHA); for ``UNDECIDED`` the smallest of superiority and equivalence."""

    word: str
    adjusted_p: float
    difference: bool
    """Whether the difference test rejected (after Holm)."""


def decide(found: Sequence[MarginTests | None], alpha: float = ALPHA) -> list[Decision | None]:
    """Each comparison's word, in ``found``'s order, each test Holm-corrected over the comparisons tested
    (None: untested, a side with one repeat)."""
    tested = [tests for tests in found if tests is not None]
    kinds = ("difference", "superiority", "equivalence")
    rejected = {kind: holm([getattr(tests, kind) for tests in tested], alpha) for kind in kinds}
    adjusted = {kind: holm_adjusted([getattr(tests, kind) for tests in tested]) for kind in kinds}
    decisions: list[Decision | None] = []
    index = 0
    for tests in found:
        if tests is None:
            decisions.append(None)
            continue
        different, superior, equivalent = (rejected[kind][index] for kind in kinds)
        p = {kind: adjusted[kind][index] for kind in kinds}
        if superior:
            decision = Decision(AHEAD, p["superiority"], different)
        elif equivalent:
            word, key = (BELOW_MARGIN, "difference") if different else (EQUIVALENT, "equivalence")
            decision = Decision(word, p[key], different)
        else:
            decision = Decision(UNDECIDED, min(p["superiority"], p["equivalence"]), different)
        decisions.append(decision)
        index += 1
    return decisions


def open_alpha(decisions: Sequence[Decision | None], alpha: float = ALPHA) -> float:
    """The level an undecided comparison's test must reach to decide it, for ``repeats_to_decide``: Holm's
    step once the decided comparisons have been rejected, alpha over the undecided ones (untested ones
    count as undecided)."""
    return alpha / max(1, sum(decision is None or decision.word == UNDECIDED for decision in decisions))


def repeats_to_decide(sample_a: Sample, sample_b: Sample, margin: float, alpha: float) -> int | None:
    """The repeats of each config after which an undecided comparison would be decided, were its means and
    spreads what they are now: the smallest n with gap / se(n) >= t(1 - alpha, df(n)), where gap = |d| - M
    (superiority) or M - |d| (equivalence, its nearer bound). Welch's: se(n) = sqrt((s_a^2 + s_b^2) / n) and
    df(n) Welch's for n values a side, (s_a^2 + s_b^2)^2 (n - 1) / (s_a^4 + s_b^4); paired (by round, two
    rounds or more shared), se(n) = s_d / sqrt(n) and df(n) = n - 1, s_d the spread of the within-round
    differences. ``alpha``: the level its test must reach (``open_alpha``). None where no number would (d
    exactly at the margin), nothing varies, or it would take more than MOST_REPEATS_ESTIMATED."""
    values_a, values_b = sample_values(sample_a), sample_values(sample_b)
    if len(values_a) < 2 or len(values_b) < 2:
        return None
    shared = paired_differences(sample_a, sample_b)
    if shared is not None:
        gap = abs(abs(mean(shared)) - margin)
        spread = sample_std(shared) ** 2

        def df_of(n: int) -> float:
            return float(n - 1)
    else:
        gap = abs(abs(mean(values_a) - mean(values_b)) - margin)
        var_a, var_b = sample_std(values_a) ** 2, sample_std(values_b) ** 2
        spread = var_a + var_b

        def df_of(n: int) -> float:
            return spread**2 * (n - 1) / (var_a**2 + var_b**2)

    if gap == 0 or spread == 0:
        return None

    def decides(n: int) -> bool:
        return gap / math.sqrt(spread / n) >= t_quantile(1 - alpha, max(df_of(n), 1.0))

    low = max(len(values_a), len(values_b), 2)
    if decides(low):
        return low
    high = low
    while not decides(high):
        if high >= MOST_REPEATS_ESTIMATED:
            return None
        low, high = high, min(2 * high, MOST_REPEATS_ESTIMATED)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if decides(middle) else (middle, high)
    return high
