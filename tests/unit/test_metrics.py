"""Every metric against numbers worked out by hand on tiny, hand-built records.

Times are chosen in whole milliseconds (or seconds) so each expected value can be checked on paper; the
arithmetic is written next to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairbench.measure.metrics import (
    chunk_itls_ns,
    mean,
    median,
    peak_per_second,
    percentile,
    point_metrics,
    std,
    steady_window,
    token_itls_ns,
    tokens_in_window,
    tpot_ns,
)
from fairbench.measure.records import RequestRecord

MS = 1_000_000
S = 1_000_000_000


def request(
    start: float,
    chunks: Sequence[tuple[float, int]],
    end: float,
    *,
    unit: int = MS,
    prompt_len: int = 8,
    output_len: int | None = None,
    error: str = "",
) -> RequestRecord:
    """A record from times in ``unit`` (ms by default) and (arrival, tokens) chunks."""
    return RequestRecord(
        index=0,
        prompt_len=prompt_len,
        output_len_requested=sum(tokens for _, tokens in chunks),
        start_ns=round(start * unit),
        end_ns=round(end * unit),
        chunk_ns=[round(arrival * unit) for arrival, _ in chunks],
        chunk_tokens=[tokens for _, tokens in chunks],
        output_len=sum(tokens for _, tokens in chunks) if output_len is None else output_len,
        status=200 if not error else 500,
        error=error,
    )


# --- statistics -------------------------------------------------------------------------------------


def test_mean_median_std_of_odd_count() -> None:
    values = [100, 50, 80]
    assert mean(values) == pytest.approx(230 / 3)
    assert median(values) == 80
    # deviations from 230/3: 70/3, -80/3, 10/3; squares sum to 11400/9; divided by n=3 (not n-1).
    assert std(values) == pytest.approx(math.sqrt(3800 / 9))


def test_median_of_even_count_is_mean_of_middle_pair() -> None:
    assert median([30, 15, 20, 15]) == 17.5


def test_std_is_population_not_sample() -> None:
    # mean 5; squared deviations 9+1+1+1+0+0+4+16 = 32 (classic example): 32/8 = 4 -> 2 (sample: 2.138).
    assert std([2, 4, 4, 4, 5, 5, 7, 9]) == 2.0


def test_percentile_interpolates_linearly_between_neighbours() -> None:
    # v = (n-1) * q/100 = 4 * 0.9 = 3.6 -> 40 + (50-40) * 0.6 = 46.
    assert percentile([50, 10, 40, 20, 30], 90) == pytest.approx(46.0)
    # v = 3 * 0.5 = 1.5 -> 2 + (3-2) * 0.5
    assert percentile([4, 3, 2, 1], 50) == 2.5
    # v = 0.75 -> 1 + 0.75
    assert percentile([1, 2], 75) == 1.75
    # v = 1 * 0.99 -> 0 + 100 * 0.99
    assert percentile([0, 100], 99) == pytest.approx(99.0)


def test_percentile_ends_and_single_value() -> None:
    assert percentile([3, 1, 2], 0) == 1
    assert percentile([3, 1, 2], 100) == 3
    assert percentile([7], 99) == 7


def test_percentile_rounds_like_numpy_on_both_sides_of_the_midpoint() -> None:
    # numpy's linear method interpolates from the nearer neighbour: low + (high-low)*w for w < 0.5,
    # high - (high-low)*(1-w) from w = 0.5 on. The two differ in the last bit, one way or the other:
    # [0.1, 0.7] at p30 (w = 0.3): 0.1 + 0.6*0.3 = 0.28; from the high side 0.27999999999999997.
    assert percentile([0.1, 0.7], 30) == 0.28
    # p70 (w = 0.7, and 1 - 0.7 = 0.30000000000000004): 0.7 - 0.6*that = 0.5199999999999999; from the
    # low side 0.52.
    assert percentile([0.1, 0.7], 70) == 0.5199999999999999
    # p50 (w = 0.5) is the high side's: 0.7 - 0.3 = 0.39999999999999997; from the low side 0.4.
    assert percentile([0.1, 0.7], 50) == 0.39999999999999997
    # [0.2, 0.7] at p90 (w = 0.9, high - low = 0.49999999999999994): 0.65; from the low side
    # 0.6499999999999999.
    assert percentile([0.2, 0.7], 90) == 0.65


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.floats(-1e9, 1e9, allow_nan=False) | st.integers(-(10**6), 10**6), max_size=40),
    q=st.floats(0, 100) | st.sampled_from([50, 90, 95, 99]),
)
def test_percentile_is_numpys_linear_method_bit_for_bit(values: list[float], q: float) -> None:
    # numpy itself as the reference (it comes with matplotlib, of the report extra): the same float in
    # every last bit, on either side of w = 0.5, for numpy's 0.0 of no values too.
    assert percentile(values, q) == numpy.percentile(values or [0.0], q)


def test_empty_values_give_zero_like_numpy_of_zero() -> None:
    assert mean([]) == 0.0
    assert median([]) == 0.0
    assert std([]) == 0.0
    assert percentile([], 99) == 0.0


# --- per-request quantities -------------------------------------------------------------------------


def test_tpot_divides_decode_time_by_tokens_after_the_first() -> None:
    # ttft 100, latency 160 -> (160 - 100) / (4 - 1) = 20 ms.
    record = request(0, [(100, 1), (120, 1), (150, 2)], 160)
    assert tpot_ns(record) == 20 * MS


def test_tpot_uses_server_output_len_not_chunk_count() -> None:
    # Two chunks but the server counted 5 tokens: (90 - 50) / 4 = 10 ms.
    record = request(0, [(50, 1), (80, 1)], 90, output_len=5)
    assert tpot_ns(record) == 10 * MS


def test_tpot_is_undefined_for_a_single_token() -> None:
    assert tpot_ns(request(0, [(80, 1)], 100)) is None


def test_chunk_itl_is_one_gap_per_chunk_after_the_first() -> None:
    record = request(0, [(100, 3), (130, 1), (190, 3), (200, 2)], 210)
    assert chunk_itls_ns(record) == [30 * MS, 60 * MS, 10 * MS]


def test_token_itl_spreads_a_chunk_gap_over_its_tokens() -> None:
    # 130: 1 token after 30 ms; 190: 3 tokens after 60 ms -> 20 each; 200: 2 tokens after 10 -> 5 each.
    # The first chunk's 3 tokens add no gaps (they arrived inside the TTFT).
    record = request(0, [(100, 3), (130, 1), (190, 3), (200, 2)], 210)
    assert token_itls_ns(record) == [30 * MS, 20 * MS, 20 * MS, 20 * MS, 5 * MS, 5 * MS]


def test_token_itl_of_single_token_chunks_is_the_chunk_itl() -> None:
    record = request(0, [(100, 1), (125, 1), (175, 1)], 180)
    assert token_itls_ns(record) == [25 * MS, 50 * MS]


def test_token_itl_merges_a_zero_token_chunk_into_the_next() -> None:
    # The gap 100 -> 130 is spread over the 2 tokens that arrived at 130.
    record = request(0, [(100, 1), (110, 0), (130, 2)], 140)
    assert token_itls_ns(record) == [15 * MS, 15 * MS]


def test_itls_of_a_request_with_one_chunk_are_empty() -> None:
    record = request(0, [(100, 4)], 120)
    assert chunk_itls_ns(record) == []
    assert token_itls_ns(record) == []


# --- sglang's 1-second buckets ----------------------------------------------------------------------


def test_peak_buckets_count_chunk_events_per_second() -> None:
    records = [
        request(0, [(0.5, 1), (1.2, 1), (1.4, 1), (2.1, 1)], 2.2, unit=S),
        # Its chunk at exactly 1.0 s belongs to bucket [1 s, 2 s).
        request(0.9, [(1.0, 4), (1.1, 1), (1.5, 1)], 1.6, unit=S),
        request(2.5, [(2.6, 1)], 3.0, unit=S),
        # Failed: neither its events nor its activity count.
        request(1.0, [(1.05, 1), (1.06, 1), (1.07, 1)], 1.08, unit=S, error="reset"),
    ]
    # Buckets from t0 = 0: ceil(3.0) + 1 = 4. Events: b0 {0.5} = 1; b1 {1.2, 1.4, 1.0, 1.1, 1.5} = 5
    # (chunks, not tokens: the 4-token chunk is one event); b2 {2.1, 2.6} = 2; b3 none.
    # Active: first [b0, b2], second [b0, b1], third [b2, b3] -> at most 2.
    assert peak_per_second(records) == (5.0, 2)


def test_peak_buckets_count_a_request_active_in_its_end_second() -> None:
    # One ends at 1.1 s (bucket 1, counted), the other starts at 1.5 s (bucket 1): 2 active in bucket 1.
    records = [request(0.0, [(0.3, 1)], 1.1, unit=S), request(1.5, [(1.6, 1)], 2.5, unit=S)]
    assert peak_per_second(records) == (1.0, 2)


def test_peak_buckets_include_the_second_a_point_ends_on() -> None:
    # Ends at exactly 1.0 s: ceil(1.0) + 1 = 2 buckets, so the events at 1.0 s land in bucket 1 (2 of
    # them, against 1 in bucket 0) instead of past the last bucket.
    records = [
        request(0.0, [(0.1, 1)], 1.0, unit=S),
        request(0.5, [(1.0, 1)], 1.0, unit=S),
        request(0.6, [(1.0, 1)], 1.0, unit=S),
    ]
    assert peak_per_second(records) == (2.0, 3)


def test_peak_buckets_start_at_the_earliest_successful_start() -> None:
    # The failed request at 0 s does not move the origin: buckets start at t0 = 0.6 s.
    records = [
        request(0.0, [], 0.1, unit=S, error="HTTP 500"),
        request(0.6, [(0.65, 1), (1.5, 1), (1.7, 1)], 1.8, unit=S),
        request(0.7, [(0.9, 1), (1.55, 1)], 1.9, unit=S),
    ]
    # From t0 = 0.6: b0 = [0.6, 1.6) holds 0.65, 1.5, 0.9, 1.55 -> 4; b1 holds 1.7 -> 1.
    # (From t0 = 0 it would be b0 {0.65, 0.9} = 2 and b1 {1.5, 1.7, 1.55} = 3.)
    assert peak_per_second(records) == (4.0, 2)


def test_peak_buckets_place_a_request_without_content_at_its_start() -> None:
    # sglang: ttft stays 0, so its one event is start + 0.
    assert peak_per_second([request(0.0, [], 0.5, unit=S, output_len=0)]) == (1.0, 1)


def test_peak_buckets_of_no_success_are_zero() -> None:
    assert peak_per_second([request(0, [(1, 1)], 2, error="boom")]) == (0.0, 0)


# --- steady state -----------------------------------------------------------------------------------


def steady_records(*, third_failed: bool = False) -> list[RequestRecord]:
    """A C=2 closed loop: the third request replaces the first at 100 ms, the fourth the second at 150."""
    return [
        request(0, [(2, 1), (50, 2)], 100),
        request(5, [(60, 1), (140, 3)], 150),
        request(100, [(120, 1), (205, 4)], 210, error="reset" if third_failed else ""),
        request(150, [(180, 1), (210, 2), (250, 1)], 260),
    ]


def test_steady_window_runs_from_cth_start_to_first_end_after_last_start() -> None:
    # Starts 0, 5, 100, 150: the 2nd is 5. Last start 150; ends after it: 210, 260 -> 210.
    assert steady_window(steady_records(), 2) == (5 * MS, 210 * MS)
    # C = 4: from the 4th start, 150, to 210.
    assert steady_window(steady_records(), 4) == (150 * MS, 210 * MS)


def test_steady_window_needs_c_requests() -> None:
    assert steady_window(steady_records(), 5) is None


def test_steady_window_is_none_when_nothing_ends_after_the_last_start() -> None:
    assert steady_window([request(10, [], 10, error="refused")], 1) is None


def test_tokens_in_window_are_counted_per_chunk_arrival_half_open() -> None:
    window = (5 * MS, 210 * MS)
    # In [5, 210): 50 (2), 60 (1), 140 (3), 120 (1), 205 (4), 180 (1) = 12.
    # Out: 2 (before the window), 210 (at its end), 250.
    assert tokens_in_window(steady_records(), window) == 12
    # The failed third request's 1 + 4 tokens do not count.
    assert tokens_in_window(steady_records(third_failed=True), window) == 7


def test_steady_throughput_in_point_metrics() -> None:
    metrics = point_metrics(steady_records(), duration_s=0.3, concurrency=2)
    assert metrics["steady_duration"] == pytest.approx(0.205)
    assert metrics["steady_output_throughput"] == pytest.approx(12 / 0.205)
    # C = 4: [150, 210): 205 (4) + 180 (1) = 5 tokens in 60 ms.
    metrics = point_metrics(steady_records(), duration_s=0.3, concurrency=4)
    assert metrics["steady_output_throughput"] == pytest.approx(5 / 0.06)


def test_no_steady_window_leaves_the_throughput_out() -> None:
    metrics = point_metrics(steady_records(), duration_s=0.3, concurrency=5)
    assert metrics["steady_duration"] == 0.0
    assert "steady_output_throughput" not in metrics


# --- the whole point --------------------------------------------------------------------------------


def mixed_point() -> list[RequestRecord]:
    return [
        # ttft 100, e2e 160, tpot (160-100)/3 = 20, chunk itl 20, 30, token itl 20, 15, 15.
        request(0, [(100, 1), (120, 1), (150, 2)], 160, prompt_len=10),
        # ttft 50, e2e 90, tpot (90-50)/1 = 40, chunk and token itl 30.
        request(10, [(60, 1), (90, 1)], 100, prompt_len=20),
        # ttft 80, e2e 100, one token: no tpot, no itl.
        request(100, [(180, 1)], 200, prompt_len=30),
        # Failed after 2 tokens: excluded everywhere but failed/error_rate (would add ttft 5, itl 10).
        request(110, [(115, 1), (125, 1)], 130, prompt_len=40, error="connection reset"),
    ]


def test_point_metrics_sglang_keys() -> None:
    metrics = point_metrics(mixed_point(), duration_s=0.25, concurrency=2)
    expected = {
        "duration": 0.25,
        "completed": 3,
        "total_input_tokens": 60,
        "total_input_text_tokens": 60,
        "total_input_vision_tokens": 0,
        "total_output_tokens": 7,  # 4 + 2 + 1; the failed request's 2 count 0
        "request_throughput": 12.0,  # 3 / 0.25
        "input_throughput": 240.0,
        "output_throughput": 28.0,
        "total_throughput": 268.0,  # (60 + 7) / 0.25
        # e2e 160, 90, 100: deviations from 350/3 are 130/3, -80/3, -50/3 -> variance 25800/27.
        "mean_e2e_latency_ms": 350 / 3,
        "median_e2e_latency_ms": 100.0,
        "std_e2e_latency_ms": math.sqrt(25800 / 27),
        "p90_e2e_latency_ms": 148.0,  # sorted 90, 100, 160; v = 1.8 -> 100 + 60 * 0.8
        "p95_e2e_latency_ms": 154.0,  # v = 1.9
        "p99_e2e_latency_ms": 158.8,  # v = 1.98
        # ttft 100, 50, 80: deviations from 230/3 are 70/3, -80/3, 10/3 -> variance 11400/27.
        "mean_ttft_ms": 230 / 3,
        "median_ttft_ms": 80.0,
        "std_ttft_ms": math.sqrt(11400 / 27),
        "p90_ttft_ms": 96.0,  # sorted 50, 80, 100; v = 1.8 -> 80 + 20 * 0.8
        "p95_ttft_ms": 98.0,
        "p99_ttft_ms": 99.6,
        # tpot 20, 40 (the one-token request has none).
        "mean_tpot_ms": 30.0,
        "median_tpot_ms": 30.0,
        "std_tpot_ms": 10.0,
        "p90_tpot_ms": 38.0,  # v = 0.9 -> 20 + 20 * 0.9
        "p95_tpot_ms": 39.0,
        "p99_tpot_ms": 39.8,
        # chunk itl 20, 30, 30: deviations from 80/3 are -20/3, 10/3, 10/3 -> variance 600/27.
        "mean_itl_ms": 80 / 3,
        "median_itl_ms": 30.0,
        "std_itl_ms": math.sqrt(600 / 27),
        "p90_itl_ms": 30.0,
        "p95_itl_ms": 30.0,
        "p99_itl_ms": 30.0,
        "max_itl_ms": 30.0,
        "concurrency": 1.4,  # (160 + 90 + 100) ms / 250 ms
        # All in bucket 0: 3 + 2 + 1 chunk events (not 7 tokens), 3 requests active.
        "max_output_tokens_per_s": 6.0,
        "max_concurrent_requests": 3,
    }
    assert list(metrics)[: len(expected)] == list(expected)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value), key
    assert isinstance(metrics["completed"], int)
    assert isinstance(metrics["max_concurrent_requests"], int)


def test_point_metrics_extras() -> None:
    metrics = point_metrics(mixed_point(), duration_s=0.25, concurrency=2, gpus=4)
    expected = {
        # token itl 20, 15, 15 (the 2-token chunk after 30 ms) and 30: mean 20, sorted 15, 15, 20, 30.
        "mean_token_itl_ms": 20.0,
        "median_token_itl_ms": 17.5,
        "std_token_itl_ms": math.sqrt((25 + 25 + 0 + 100) / 4),
        "p95_token_itl_ms": 28.5,  # v = 3 * 0.95 = 2.85 -> 20 + 10 * 0.85
        "p99_token_itl_ms": 29.7,
        "per_user_tps": 1000 / 30,
        "output_throughput_per_gpu": 7.0,  # 28 / 4
        # Starts 0, 10, 100, 110: from the 2nd (10) to the first end after 110, the failed one's 130.
        "steady_duration": 0.12,
        # [10, 130): 100 (1) and 120 (1) of the first, 60 and 90 of the second; the failed one's excluded.
        "steady_output_throughput": 4 / 0.12,
        "failed": 1,
        "error_rate": 0.25,
    }
    assert list(metrics)[-len(expected) :] == list(expected)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value), key


def test_point_metrics_key_order_without_gpus() -> None:
    metrics = point_metrics(mixed_point(), duration_s=0.25, concurrency=2)
    stats = ("mean", "median", "std", "p90", "p95", "p99")
    assert list(metrics) == [
        "duration",
        "completed",
        "total_input_tokens",
        "total_input_text_tokens",
        "total_input_vision_tokens",
        "total_output_tokens",
        "request_throughput",
        "input_throughput",
        "output_throughput",
        "total_throughput",
        *(f"{stat}_e2e_latency_ms" for stat in stats),
        *(f"{stat}_ttft_ms" for stat in stats),
        *(f"{stat}_tpot_ms" for stat in stats),
        *(f"{stat}_itl_ms" for stat in stats),
        "max_itl_ms",
        "concurrency",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
        *(f"{stat}_token_itl_ms" for stat in ("mean", "median", "std", "p95", "p99")),
        "per_user_tps",
        "steady_duration",
        "steady_output_throughput",
        "failed",
        "error_rate",
    ]


def test_point_metrics_of_multi_token_chunks_differ_between_chunk_and_token_itl() -> None:
    # 8 tokens per chunk every 80 ms after a 1-token first chunk: chunk itl 80, token itl 10.
    chunks = [(100 + 80 * i, 1 if i == 0 else 8) for i in range(4)]
    metrics = point_metrics([request(0, chunks, 345)], duration_s=1.0, concurrency=1)
    assert metrics["mean_itl_ms"] == pytest.approx(80.0)
    assert metrics["mean_token_itl_ms"] == pytest.approx(10.0)
    assert metrics["p99_token_itl_ms"] == pytest.approx(10.0)
    # tpot = (345 - 100) / (25 - 1); per-user speed from it.
    assert metrics["median_tpot_ms"] == pytest.approx(245 / 24)
    assert metrics["per_user_tps"] == pytest.approx(1000 / (245 / 24))


def test_point_metrics_of_one_token_chunks_give_equal_chunk_and_token_itl() -> None:
    records = [request(0, [(100, 1), (125, 1), (175, 1)], 180), request(0, [(50, 1), (60, 1)], 70)]
    metrics = point_metrics(records, duration_s=0.2, concurrency=2)
    # Gaps 25, 50, 10: mean 85/3; deviations -10/3, 65/3, -55/3 -> variance 7350/27; sorted 10, 25, 50.
    expected = {"mean": 85 / 3, "median": 25.0, "std": math.sqrt(7350 / 27), "p95": 47.5, "p99": 49.5}
    for stat, value in expected.items():
        assert metrics[f"{stat}_itl_ms"] == pytest.approx(value), stat
        assert metrics[f"{stat}_token_itl_ms"] == pytest.approx(value), stat


def test_point_metrics_of_single_tokens_have_no_tpot_and_zero_per_user_tps() -> None:
    metrics = point_metrics([request(0, [(40, 1)], 50)], duration_s=0.1, concurrency=1)
    assert metrics["mean_tpot_ms"] == 0.0
    assert metrics["p99_tpot_ms"] == 0.0
    assert metrics["per_user_tps"] == 0.0
    assert metrics["mean_itl_ms"] == 0.0
    assert metrics["max_itl_ms"] == 0.0


def test_point_metrics_of_only_failures_are_zeros() -> None:
    records = [request(0, [(10, 1)], 20, error="HTTP 503"), request(5, [], 6, error="HTTP 503")]
    metrics = point_metrics(records, duration_s=0.5, concurrency=2)
    assert metrics["completed"] == 0
    assert metrics["total_output_tokens"] == 0
    assert metrics["output_throughput"] == 0.0
    assert metrics["mean_e2e_latency_ms"] == 0.0
    assert metrics["p99_ttft_ms"] == 0.0
    assert metrics["concurrency"] == 0.0
    assert metrics["max_output_tokens_per_s"] == 0.0
    assert metrics["max_concurrent_requests"] == 0
    assert metrics["failed"] == 2
    assert metrics["error_rate"] == 1.0
    # Both failed requests held a slot: from the 2nd start (5) to the first end after it (6), with no
    # successful tokens in it.
    assert metrics["steady_duration"] == pytest.approx(0.001)
    assert metrics["steady_output_throughput"] == 0.0


def test_point_metrics_of_no_records() -> None:
    metrics = point_metrics([], duration_s=1.0, concurrency=1)
    assert metrics["completed"] == 0
    assert metrics["mean_ttft_ms"] == 0.0
    assert metrics["failed"] == 0
    assert metrics["error_rate"] == 0.0
    assert metrics["steady_duration"] == 0.0


@pytest.mark.parametrize(
    ("duration_s", "concurrency", "gpus"), [(0.0, 1, None), (-1.0, 1, None), (1.0, 0, None), (1.0, 1, 0)]
)
def test_point_metrics_rejects_impossible_inputs(
    duration_s: float, concurrency: int, gpus: int | None
) -> None:
    with pytest.raises(ValueError):
        point_metrics([], duration_s=duration_s, concurrency=concurrency, gpus=gpus)
