"""The ranges every number of a run is checked against, and their messages."""

from __future__ import annotations

import math

import pytest

from fairbench.measure.bounds import SEED, SHARE, TOKENS, unit_text_problem


@pytest.mark.parametrize(
    ("bound", "value", "message"),
    [
        (TOKENS, 0, "must be an integer from 1 to 10,000,000 tokens, got 0"),
        (TOKENS, 10**27, "must be an integer from 1 to 10,000,000 tokens, got 1e+27"),
        # Too large for a float: shown all the same.
        (TOKENS, 10**400, "must be an integer from 1 to 10,000,000 tokens, got 1e+400"),
        (TOKENS, 2.0, "must be an integer from 1 to 10,000,000 tokens, got 2.0"),
        (TOKENS, True, "must be an integer from 1 to 10,000,000 tokens"),
        (TOKENS, "8", "must be an integer from 1 to 10,000,000 tokens"),
        (SEED, -1, "must be an integer from 0 to 4,294,967,295 (a 32-bit seed), got -1"),
        (SHARE, 1.5, "must be a number from 0 to 1 (a share), got 1.5"),
        (SHARE, math.nan, "must be a finite number, got nan"),
        (SHARE, -math.inf, "must be a finite number, got -inf"),
    ],
)
def test_a_value_outside_its_bound_is_named_with_the_bound(
    bound: object, value: object, message: str
) -> None:
    assert bound.problem(value) == message  # type: ignore[attr-defined]


def test_the_ends_of_a_bound_are_inside_it() -> None:
    assert TOKENS.problem(1) is None and TOKENS.problem(10_000_000) is None
    assert SHARE.problem(0.0) is None and SHARE.problem(1) is None


@pytest.mark.parametrize("character", ["\n", "\r", "\0"])
def test_a_line_end_may_not_reach_a_unit(character: str) -> None:
    assert unit_text_problem(f"model{character}ExecStartPre=/x") == (
        f"holds {character!r}, which ends a line in a systemd unit"
    )
    assert unit_text_problem("model with spaces and \t tabs") is None
