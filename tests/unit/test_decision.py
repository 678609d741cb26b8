"""A comparison against the campaign's margin (fairbench.measure.decision): the one-sided and TOST tests
against the t distribution integrated numerically, each word from samples built to earn it, Holm over a
family, and the repeats that would decide an undecided pair checked against the tests themselves."""

from __future__ import annotations

import statistics

import pytest
from tests.unit.test_report_verdict import spread
from tests.unit.test_stats import _integrated_cdf

from fairbench.measure.decision import (
    AHEAD,
    BELOW_MARGIN,
    EQUIVALENT,
    UNDECIDED,
    DecideRule,
    MarginTests,
    decide,
    decide_rule_from_json,
    margin_tests,
    repeats_to_decide,
)
from fairbench.measure.stats import (
    _welch,
    equivalence_p_value,
    shifted_p_value,
    welch_p_value,
)

A = spread(102.0, 0.01, 4)
B = spread(100.0, 0.012, 5)


@pytest.mark.parametrize("shift", [-1.0, 0.0, 1.0, 2.0, 3.5])
def test_the_one_sided_p_value_is_the_t_tail_beyond_the_shifted_difference(shift: float) -> None:
    welch = _welch(A, B)
    assert welch is not None
    t = (statistics.mean(A) - statistics.mean(B) - shift) / welch.standard_error
    assert shifted_p_value(A, B, shift) == pytest.approx(1 - _integrated_cdf(t, welch.df), abs=2e-6)


def test_unshifted_the_one_sided_p_value_is_half_the_two_sided_one_and_tost_is_its_larger_side() -> None:
    two_sided, low, high = welch_p_value(A, B), shifted_p_value(A, B, -3.0), shifted_p_value(B, A, -3.0)
    assert two_sided is not None and low is not None and high is not None
    assert shifted_p_value(A, B, 0.0) == pytest.approx(two_sided / 2)
    assert shifted_p_value(A, B, 2.0) == pytest.approx(0.5)  # the difference itself
    tost = equivalence_p_value(A, B, 3.0)
    assert tost == max(low, high)
    assert equivalence_p_value(B, A, 3.0) == pytest.approx(tost)  # symmetric
    # Steady repeats: a sure answer either way; one repeat: none.
    assert shifted_p_value([2.0, 2.0], [1.0, 1.0], 0.5) == 0.0
    assert shifted_p_value([2.0, 2.0], [1.0, 1.0], 1.0) == 1.0
    assert shifted_p_value([2.0], B, 0.0) is None and equivalence_p_value(A, [1.0], 1.0) is None


@pytest.mark.parametrize(
    ("above", "below", "word", "different"),
    [
        # 5 % ahead, steady: beyond the 1 % margin.
        (spread(105.0, 0.005, 4), spread(100.0, 0.005, 4), AHEAD, True),
        # 0.2 % apart, a noise of 0.2 %: no difference seen, and surely within 1 %.
        (spread(100.2, 0.002, 4), spread(100.0, 0.002, 4), EQUIVALENT, False),
        # 0.5 % apart, a noise of 0.1 %: a real difference, surely within 1 %.
        (spread(100.5, 0.001, 5), spread(100.0, 0.001, 5), BELOW_MARGIN, True),
        # 1 % apart, a noise of 2 % over three repeats: nothing can be said.
        (spread(101.0, 0.02, 3), spread(100.0, 0.02, 3), UNDECIDED, False),
    ],
)
def test_each_word_is_earned_by_its_tests(
    above: list[float], below: list[float], word: str, different: bool
) -> None:
    tests = margin_tests(above, below, 1.0)
    assert tests is not None and tests.margin == pytest.approx(1.0)
    [found] = decide([tests])
    assert found is not None and (found.word, found.difference) == (word, different)
    expected_p = {
        AHEAD: tests.superiority,
        EQUIVALENT: tests.equivalence,
        BELOW_MARGIN: tests.difference,
        UNDECIDED: min(tests.superiority, tests.equivalence),
    }[word]
    assert found.adjusted_p == pytest.approx(expected_p)  # a family of one: Holm changes nothing


def test_holm_over_the_family_can_leave_a_pair_undecided_that_alone_would_be_ahead() -> None:
    # Alone, 2.6 % over 1 % noise in four repeats is ahead of a 1 % margin at p ~ 0.03; beside two other
    # comparisons, Holm asks it for 0.05 / 3 first.
    close = margin_tests(spread(102.6, 0.01, 4), spread(100.0, 0.01, 4), 1.0)
    assert close is not None and 0.0167 < close.superiority < 0.05
    [alone] = decide([close])
    assert alone is not None and alone.word == AHEAD
    family = decide([close, close, None])
    assert [found.word if found else None for found in family] == [UNDECIDED, UNDECIDED, None]


def _word(tests: MarginTests | None) -> str | None:
    """The word of one comparison judged alone."""
    [found] = decide([tests])
    return None if found is None else found.word


def test_the_repeats_to_decide_are_the_fewest_after_which_the_test_decides() -> None:
    for center, word in ((103.0, AHEAD), (100.3, EQUIVALENT)):
        above, below = spread(center, 0.02, 3), spread(100.0, 0.02, 3)
        tests = margin_tests(above, below, 1.0)
        assert tests is not None and _word(tests) == UNDECIDED
        needed = repeats_to_decide(above, below, tests.margin, 0.05)
        assert needed is not None and needed > 3
        # The same means and spreads over that many repeats decide it; over one fewer they do not.
        for count, decided in ((needed, word), (needed - 1, UNDECIDED)):
            more = margin_tests(spread(center, 0.02, count), spread(100.0, 0.02, count), 1.0)
            assert _word(more) == decided, (center, count)


def test_no_number_of_repeats_decides_a_difference_at_the_margin_or_without_spread() -> None:
    at_margin = spread(101.0, 0.01, 3)
    assert repeats_to_decide(at_margin, spread(100.0, 0.01, 3), 1.0, 0.05) is None
    assert repeats_to_decide([101.5, 101.5], [100.0, 100.0], 1.0, 0.05) is None
    assert repeats_to_decide(spread(100.001, 0.5, 3), spread(100.0, 0.5, 3), 0.001, 0.05) is None  # too many


def test_campaign_json_decide_reads_back_its_rule_and_nothing_else() -> None:
    assert decide_rule_from_json(DecideRule(1.5).to_json()) == DecideRule(1.5)
    for value in (None, {}, {"margin_pct": "1"}, {"margin_pct": True}, {"margin_pct": -1}, [1]):
        assert decide_rule_from_json(value) is None
