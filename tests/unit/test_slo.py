"""Service-level objectives: parsing their keys, judging a point and its requests, and the goodput."""

from __future__ import annotations

import math

import pytest

from fairbench.measure.metrics import NS_PER_MS, meets_slo, slo_metrics
from fairbench.measure.records import RequestRecord
from fairbench.measure.slo import SloError, SloTarget, parse_slo, slo_to_json


def request(index: int, ttft_ms: float, gap_ms: float, tokens: int, *, error: str = "") -> RequestRecord:
    """A request sent at 0 whose first token came after ``ttft_ms`` and each later one ``gap_ms`` apart."""
    first = round(ttft_ms * NS_PER_MS)
    chunks = [first + round(i * gap_ms * NS_PER_MS) for i in range(tokens)]
    return RequestRecord(
        index=index,
        prompt_len=8,
        output_len_requested=tokens,
        start_ns=0,
        end_ns=chunks[-1],
        chunk_ns=chunks,
        chunk_tokens=[1] * tokens,
        output_len=0 if error else tokens,
        status=200,
        error=error,
    )


def test_keys_parse_to_metric_percentile_and_limit_and_back() -> None:
    targets = parse_slo({"ttft_p99_ms": 2000, "tpot_p50_ms": 12.5, "itl_p100_ms": 1, "e2e_latency_p1_ms": 9})
    assert targets[0] == SloTarget("ttft", 99, 2000.0)
    assert [target.key for target in targets] == [
        "ttft_p99_ms",
        "tpot_p50_ms",
        "itl_p100_ms",
        "e2e_latency_p1_ms",
    ]
    assert slo_to_json(targets) == {
        "ttft_p99_ms": 2000.0,
        "tpot_p50_ms": 12.5,
        "itl_p100_ms": 1.0,
        "e2e_latency_p1_ms": 9.0,
    }


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"ttft_p0_ms": 1}, "ttft_p0_ms: a key is <metric>_p<q>_ms"),
        ({"ttft_p101_ms": 1}, "ttft_p101_ms: a key is"),
        ({"latency_p99_ms": 1}, "latency_p99_ms: a key is"),
        ({"ttft_p99": 1}, "ttft_p99: a key is"),
        ({"ttft_p99_ms": 0}, "ttft_p99_ms: a limit is a positive, finite number of milliseconds, got 0"),
        ({"ttft_p99_ms": True}, "got True"),
        ({"ttft_p99_ms": math.inf}, "got inf"),
        ({"ttft_p99_ms": "2000"}, "got '2000'"),
    ],
)
def test_a_key_or_limit_that_is_none_is_refused_naming_it(entry: dict[str, object], message: str) -> None:
    with pytest.raises(SloError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_slo(entry)


def test_a_point_is_judged_at_its_percentile_and_each_request_on_its_own() -> None:
    # Ten requests, TTFT 100..1000 ms, 4 tokens 10 ms apart except the last, 30 ms apart.
    records = [request(i, 100 * (i + 1), 10, 4) for i in range(9)] + [request(9, 1000, 30, 4)]
    targets = parse_slo({"ttft_p50_ms": 600, "tpot_p90_ms": 20})
    figures = slo_metrics(records, 2.0, targets, gpus=4)
    # numpy's linear p50 of 100..1000 is 550; TPOT is 10 ms for nine, 30 ms for one: p90 = 10 + 0.1*20 = 12.
    assert figures["slo_measured"] == {
        "ttft_p50_ms": pytest.approx(550.0),
        "tpot_p90_ms": pytest.approx(12.0),
    }
    assert figures["slo_met"] is True
    # A request meets them alone when its TTFT <= 600 and its TPOT <= 20: the first six.
    assert [meets_slo(record, targets) for record in records] == [True] * 6 + [False] * 4
    assert figures["slo_attainment"] == pytest.approx(0.6)
    assert figures["goodput_request_throughput"] == pytest.approx(3.0)
    assert figures["goodput_output_throughput"] == pytest.approx(12.0)
    assert figures["goodput_output_throughput_per_gpu"] == pytest.approx(3.0)


def test_a_failed_request_counts_as_infinitely_slow_and_a_percentile_on_it_misses() -> None:
    records = [request(0, 100, 10, 4), request(1, 100, 10, 4, error="HTTP 500")]
    figures = slo_metrics(records, 1.0, parse_slo({"ttft_p99_ms": 1000, "itl_p50_ms": 50}))
    # p99 of (100 ms, inf) is inf: written as null, and not met. ITL gaps: 10 ms x3 and one inf: p50 is 10.
    assert figures["slo_measured"] == {"ttft_p99_ms": None, "itl_p50_ms": pytest.approx(10.0)}
    assert figures["slo_met"] is False
    assert figures["slo_attainment"] == 0.5
    assert "goodput_output_throughput_per_gpu" not in figures


def test_itl_per_request_is_its_own_percentile_and_no_objectives_give_no_figures() -> None:
    # Gaps 10, 10, 10, 100 ms: the p50 gap is 10 (met at 20), the p100 gap 100 (missed at 20).
    slow_tail = request(0, 5, 10, 5)
    slow_tail.chunk_ns[-1] += 90 * NS_PER_MS
    slow_tail.end_ns = slow_tail.chunk_ns[-1]
    assert meets_slo(slow_tail, parse_slo({"itl_p50_ms": 20}))
    assert not meets_slo(slow_tail, parse_slo({"itl_p100_ms": 20}))
    one_token = request(1, 5, 10, 1)  # no gaps, no TPOT: not judged on them
    assert meets_slo(one_token, parse_slo({"itl_p99_ms": 1, "tpot_p99_ms": 1}))
    assert slo_metrics([slow_tail], 1.0, ()) == {}
