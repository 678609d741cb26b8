"""Two starts' answers compared position by position (fairbench.answers.compare)."""

from __future__ import annotations

from typing import Any

import pytest

from fairbench.answers.compare import compare, compare_probe
from fairbench.answers.requests import CHARACTERS, TOKENS


def reply(ids: list[int] | None = None, logprobs: list[float] | None = None, **more: Any) -> dict[str, Any]:
    return {"token_ids": ids, "logprobs": logprobs, "tokens": None, "text": "", **more}


def test_identical_answers_have_no_divergence() -> None:
    found = compare_probe("p00", reply([1, 2, 3], [-0.1, -0.2, -0.3]), reply([1, 2, 3], [-0.1, -0.2, -0.3]))
    assert (found.identical, found.divergence, found.logprob_gap, found.unit) == (True, None, None, TOKENS)


def test_first_divergence_and_the_gap_between_the_chosen_tokens_log_probabilities_there() -> None:
    found = compare_probe(
        "p00", reply([1, 2, 3, 4], [-0.1, -0.2, -0.7, -0.1]), reply([1, 2, 9, 4], [-0.1, -0.2, -0.65, -2.0])
    )
    assert not found.identical
    assert found.divergence == 2
    assert found.logprob_gap == pytest.approx(0.05)


def test_an_answer_that_stops_early_diverges_where_it_stops_and_has_no_gap_there() -> None:
    found = compare_probe("p00", reply([1, 2, 3], [-0.1, -0.2, -0.3]), reply([1, 2], [-0.1, -0.2]))
    assert (found.identical, found.divergence, found.logprob_gap) == (False, 2, None)


def test_token_texts_where_a_side_lacks_ids_and_characters_where_it_lacks_both() -> None:
    by_text = compare_probe("p00", reply(None, tokens=[" a", " b"]), reply([5, 6], tokens=[" a", " c"]))
    assert (by_text.unit, by_text.divergence) == (TOKENS, 1)
    by_chars = compare_probe("p00", reply(None, text="hello world"), reply(None, text="hello there"))
    assert (by_chars.unit, by_chars.divergence, by_chars.logprob_gap) == (CHARACTERS, 6, None)


def test_starts_compared_by_probe_id_with_unanswered_probes_named() -> None:
    ours = {
        "probes": [
            {"id": "p01", **reply([1, 2])},
            {"id": "p02", **reply([3])},
            {"id": "p03", "error": "HTTP 500"},
        ]
    }
    theirs = {
        "probes": [{"id": "p02", **reply([4])}, {"id": "p01", **reply([1, 2])}, {"id": "p03", **reply([7])}]
    }
    found = compare(ours, theirs)
    assert [probe.id for probe in found.compared] == ["p01", "p02"]
    assert found.unanswered == ("p03",)
    assert (found.identical, found.share, found.divergences) == (1, 0.5, [0])
