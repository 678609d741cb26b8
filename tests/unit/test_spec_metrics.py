"""A point's speculative decoding over its requests (metrics.spec_metrics): the token-weighted accept length,
the draft-weighted accept rate and the histogram of the requests' own accept lengths, over the ok requests
that reported their verify steps; nothing where none did. And the server's gauge, which SGLang writes as 0
without speculative decoding, read as no gauge."""

from __future__ import annotations

import pytest

from fairbench.measure.metrics import SPEC_HISTOGRAM_EDGES, spec_bin, spec_bin_label, spec_metrics
from fairbench.measure.records import RequestRecord
from fairbench.measure.server_metrics import PointScrapes, Scrape, point_fields

SPEC_KEYS = ["spec_requests", "spec_accept_length", "spec_accept_rate", "spec_accept_length_histogram"]


def spec(
    output_len: int, verify_ct: int | None, correct: int = 0, proposed: int = 0, *, error: str = ""
) -> RequestRecord:
    """A request of ``output_len`` tokens whose server reported ``verify_ct`` verify steps (None: nothing),
    as SGLang does: its accept length output_len / verify_ct, its rate correct / proposed."""
    record = RequestRecord(0, 8, output_len, 0, 10, [5], [output_len], output_len, 200, error)
    if verify_ct is not None:
        record.spec_verify_ct = verify_ct
        record.spec_accept_length = output_len / verify_ct
        record.spec_num_correct_drafts = correct
        record.spec_num_proposed_drafts = proposed
        record.spec_accept_rate = correct / proposed if proposed else None
    return record


def test_the_accept_length_weighs_by_tokens_and_the_rate_by_drafts() -> None:
    records = [
        spec(100, 50, correct=50, proposed=150),  # 2.0 tokens a step, a third of the drafts
        spec(30, 10, correct=20, proposed=30),  # 3.0 tokens a step, two thirds
        spec(12, 3, correct=9, proposed=9),  # 4.0, every draft
    ]
    found = spec_metrics(records)
    assert list(found) == SPEC_KEYS
    assert found["spec_requests"] == 3
    # sum(output) / sum(verify) = 142 / 63, not the requests' plain mean (2 + 3 + 4) / 3 = 3
    assert found["spec_accept_length"] == pytest.approx(142 / 63)
    # sum(correct) / sum(proposed) = 79 / 189, not the plain mean of 1/3, 2/3 and 1
    assert found["spec_accept_rate"] == pytest.approx(79 / 189)
    histogram = found["spec_accept_length_histogram"]
    assert isinstance(histogram, list) and len(histogram) == 15 and sum(histogram) == 3
    assert [histogram[spec_bin(value)] for value in (2.0, 3.0, 4.0)] == [1, 1, 1]


def test_only_ok_requests_that_reported_their_verify_steps_count() -> None:
    records = [
        spec(40, 20, correct=20, proposed=60),
        spec(40, 10, correct=30, proposed=30, error="HTTP 500"),  # failed: not counted
        spec(40, None),  # reported nothing (an OpenAI API): not counted
    ]
    found = spec_metrics(records)
    assert (found["spec_requests"], found["spec_accept_length"], found["spec_accept_rate"]) == (1, 2.0, 1 / 3)


def test_nothing_where_no_request_reported_any() -> None:
    assert spec_metrics([spec(40, None), spec(40, None)]) == {}
    assert spec_metrics([spec(40, 10, error="boom")]) == {}
    assert spec_metrics([]) == {}


def test_no_rate_where_no_request_said_what_it_proposed() -> None:
    record = spec(40, 20)
    record.spec_num_proposed_drafts = record.spec_num_correct_drafts = None
    found = spec_metrics([record])
    assert found["spec_accept_length"] == 2.0 and found["spec_accept_rate"] is None


@pytest.mark.parametrize(
    ("length", "index", "label"),
    [
        (0.5, 0, "<1.5"),
        (1.0, 0, "<1.5"),
        (1.4999, 0, "<1.5"),
        (1.5, 1, "1.5-2"),
        (2.0, 2, "2-2.5"),
        (2.4999, 2, "2-2.5"),
        (7.99, 13, "7.5-8"),
        (8.0, 14, ">=8"),
        (17.0, 14, ">=8"),
    ],
)
def test_the_bins_are_half_a_token_wide_from_1_5_to_8(length: float, index: int, label: str) -> None:
    assert (
        SPEC_HISTOGRAM_EDGES[0] == 1.5 and SPEC_HISTOGRAM_EDGES[-1] == 8.0 and len(SPEC_HISTOGRAM_EDGES) == 14
    )
    assert spec_bin(length) == index
    assert spec_bin_label(index) == label


def test_the_servers_gauge_at_0_is_no_speculation() -> None:
    """SGLang's sglang:spec_accept_length reads 0 on a server that does not speculate, and on one that has
    not logged a decode batch yet: only readings above 0 are averaged."""
    idle = [Scrape(1, {"spec_accept_length": 0.0}), Scrape(2, {"spec_accept_length": 0.0})]
    speculating = [*idle, Scrape(2, {"spec_accept_length": 2.5}), Scrape(2, {"spec_accept_length": 3.5})]
    for samples, expected in ((idle, None), (speculating, 3.0)):
        scrapes = PointScrapes(Scrape(0, {}), Scrape(3, {}), samples, [])
        assert point_fields(scrapes, window=None)["server_spec_accept_length"] == expected
