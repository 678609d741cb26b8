"""The open loop: arrival schedules, requests timed from their scheduled send, and the loop itself
against the streaming test server on loopback."""

from __future__ import annotations

import asyncio
import math
import re
import statistics
from collections.abc import Sequence
from itertools import pairwise
from time import perf_counter, perf_counter_ns

import pytest
from tests.support.sse_server import RunningServer, StartServer

from fairbench.measure.arrivals import (
    MOST_WAITING,
    OpenLoopResult,
    achieved_rate,
    arrival_offsets_s,
    run_open_loop,
)
from fairbench.measure.client import ApiFormat, StreamClient
from fairbench.measure.closed_loop import ERROR_RATE_MIN_REQUESTS, PreparedRequest
from fairbench.measure.records import RequestRecord
from fairbench.measure.workload import Prompt

OUTPUT_LEN = 3
GAPS = 50_000
"""Gaps per statistical check: the standard errors below are computed for this many."""


def gaps_of(offsets: Sequence[float]) -> list[float]:
    return [later - earlier for earlier, later in pairwise(offsets)]


def cv_standard_error(shape: float, n: int) -> float:
    """Standard error of the sample coefficient of variation of n Gamma(shape) draws, by the delta method:
    Var(s / m) ~ (CV^2 (kurtosis - 1) / 4 - skewness CV^3 + CV^4) / n, which for Gamma(k) (CV = 1/sqrt(k),
    skewness 2/sqrt(k), kurtosis 3 + 6/k) is (1 + 1/k) / (2 n k)."""
    return math.sqrt((1 + 1 / shape) / (2 * n * shape))


# --- the schedule ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arrival", "burstiness"), [("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)])
def test_the_mean_gap_is_one_over_the_rate(arrival: str, burstiness: float) -> None:
    rate = 20.0
    gaps = gaps_of(arrival_offsets_s(GAPS + 1, rate, arrival=arrival, burstiness=burstiness, seed=7))
    assert len(gaps) == GAPS
    # A gap's std is CV / rate = 1 / (rate sqrt(k)); the mean of n of them is within 5 standard errors
    # but for about one seed in 1.7 million.
    standard_error = 1 / (rate * math.sqrt(burstiness) * math.sqrt(GAPS))
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, abs=5 * standard_error)


@pytest.mark.parametrize(("arrival", "burstiness"), [("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)])
def test_the_gaps_coefficient_of_variation_is_one_over_the_root_of_the_burstiness(
    arrival: str, burstiness: float
) -> None:
    gaps = gaps_of(arrival_offsets_s(GAPS + 1, 5.0, arrival=arrival, burstiness=burstiness, seed=11))
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    # 2 for burstiness 0.25 (burstier than Poisson), 1 for Poisson, 0.5 for 4 (more regular).
    assert cv == pytest.approx(1 / math.sqrt(burstiness), abs=5 * cv_standard_error(burstiness, GAPS))


def test_gamma_with_burstiness_one_is_poisson() -> None:
    poisson = arrival_offsets_s(1000, 5.0, seed=3)
    gamma = arrival_offsets_s(1000, 5.0, arrival="gamma", burstiness=1.0, seed=3)
    # The same draws: Gamma(1, 1 / rate) is the exponential of mean 1 / rate.
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(gamma, poisson, strict=True))


def test_the_first_request_goes_out_at_the_start_and_offsets_never_go_back() -> None:
    offsets = arrival_offsets_s(100, 50.0, arrival="gamma", burstiness=0.1, seed=0)
    assert len(offsets) == 100
    assert offsets[0] == 0.0
    assert all(later >= earlier for earlier, later in pairwise(offsets))
    assert arrival_offsets_s(1, 50.0, seed=0) == [0.0]
    assert arrival_offsets_s(0, 50.0, seed=0) == []


def test_a_schedule_is_its_seed_s() -> None:
    first = arrival_offsets_s(200, 10.0, arrival="gamma", burstiness=0.5, seed=42)
    assert arrival_offsets_s(200, 10.0, arrival="gamma", burstiness=0.5, seed=42) == first
    assert arrival_offsets_s(200, 10.0, arrival="gamma", burstiness=0.5, seed=43) != first
    assert arrival_offsets_s(200, 10.0, seed=42) != arrival_offsets_s(200, 10.0, seed=43)


@pytest.mark.parametrize(
    ("count", "rate", "arrival", "burstiness", "message"),
    [
        (-1, 1.0, "poisson", 1.0, "count must be >= 0, got -1"),
        (10, 0.0, "poisson", 1.0, "rate must be a positive finite number of requests per second, got 0.0"),
        (10, -2.0, "poisson", 1.0, "rate must be a positive finite number"),
        (10, math.inf, "poisson", 1.0, "rate must be a positive finite number"),
        (10, math.nan, "poisson", 1.0, "rate must be a positive finite number"),
        (10, 1.0, "gamma", 0.0, "burstiness must be a positive finite number, got 0.0"),
        (10, 1.0, "gamma", -1.0, "burstiness must be a positive finite number"),
        (10, 1.0, "gamma", math.inf, "burstiness must be a positive finite number"),
        (10, 1.0, "gamma", math.nan, "burstiness must be a positive finite number"),
        (10, 1.0, "uniform", 1.0, "arrival must be one of poisson, gamma, got 'uniform'"),
        (10, 1.0, "poisson", 0.5, "burstiness 0.5 needs arrival 'gamma'"),
    ],
)
def test_a_schedule_that_breaks_a_rule_is_refused_naming_it(
    count: int, rate: float, arrival: str, burstiness: float, message: str
) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        arrival_offsets_s(count, rate, arrival=arrival, burstiness=burstiness, seed=0)


def test_the_achieved_rate_counts_the_gaps_between_sends() -> None:
    second = 1_000_000_000
    assert achieved_rate([5 * second, 6 * second]) == 1.0  # two sends 1 s apart: 1 request per second
    assert achieved_rate([3 * second, 0, second, 2 * second]) == 1.0  # in any order
    assert achieved_rate([0, second // 4, second // 2]) == 4.0
    assert achieved_rate([7, 7]) == math.inf
    with pytest.raises(ValueError, match=r"^an achieved rate needs at least 2 sends, got 1$"):
        achieved_rate([0])


# --- requests timed from their scheduled send -----------------------------------------------------------


def prepared(count: int, prefix: str = "ol") -> list[PreparedRequest]:
    api = ApiFormat("completions", "m")
    requests = []
    for index in range(count):
        prompt = Prompt(index, [1 + index, 2, 3, 4], 4, OUTPUT_LEN)
        rid = f"{prefix}-{index}"
        requests.append(PreparedRequest(prompt, rid, api.body(prompt, rid)))
    return requests


def client_for(server: RunningServer, concurrency: int) -> StreamClient:
    return StreamClient(server.url, ApiFormat("completions", "m"), concurrency=concurrency)


def test_a_scheduled_request_is_timed_from_its_schedule(sse_server: StartServer) -> None:
    server = sse_server(first_token_ms=20)
    (request,) = prepared(1)

    async def send() -> tuple[RequestRecord, RequestRecord, int, int, int]:
        async with client_for(server, 1) as client:
            before = perf_counter_ns()
            plain = await client.request(request.prompt, request.body, request.rid)
            after = perf_counter_ns()
            scheduled = perf_counter_ns() - 50_000_000  # its time came 50 ms ago
            late = await client.request(request.prompt, request.body, request.rid, scheduled_ns=scheduled)
            return plain, late, before, after, scheduled

    plain, late, before, after, scheduled = asyncio.run(send())
    assert plain.success and late.success
    assert plain.send_delay_ns == 0 and before <= plain.start_ns <= after
    assert late.start_ns == scheduled
    assert late.send_delay_ns >= 50_000_000
    # TTFT counts the wait: the server's 20 ms to the first token come on top of the 50 ms late send.
    assert late.ttft_ns >= late.send_delay_ns + 20_000_000
    sent_ns = late.start_ns + late.send_delay_ns
    assert server.send_times()[-1]["arrival_ns"] >= sent_ns  # it truly went out that late


def test_a_requests_file_from_before_send_delays_read_as_no_delay() -> None:
    record = RequestRecord(0, 8, 4, 10, 50, [20, 30], [1, 3], 4, 200, "", rid="r", send_delay_ns=5)
    assert RequestRecord.from_json(record.to_json()) == record
    old = record.to_json()
    del old["send_delay_ns"]
    assert RequestRecord.from_json(old).send_delay_ns == 0


# --- the open loop --------------------------------------------------------------------------------------


def run(
    server: RunningServer,
    requests: Sequence[PreparedRequest],
    offsets: Sequence[float],
    max_in_flight: int,
    max_error_rate: float | None = None,
) -> tuple[OpenLoopResult, list[RequestRecord]]:
    done: list[RequestRecord] = []

    async def loop() -> OpenLoopResult:
        async with client_for(server, max_in_flight) as client:
            return await run_open_loop(
                client,
                requests=requests,
                offsets_s=offsets,
                max_in_flight=max_in_flight,
                on_done=done.append,
                max_error_rate=max_error_rate,
            )

    return asyncio.run(loop()), done


def most_in_flight(records: Sequence[RequestRecord]) -> int:
    """The most requests between their actual send and their end at any send."""
    sends = [record.start_ns + record.send_delay_ns for record in records]
    spans = [(sent, record.end_ns) for sent, record in zip(sends, records, strict=True)]
    return max(sum(sent <= instant < end for sent, end in spans) for instant in sends)


def test_a_server_slower_than_the_offered_rate_shows_as_growing_ttft(sse_server: StartServer) -> None:
    # About 80 ms a request (40 ms to the first token, then 2 gaps of 20 ms), 2 at a time: the server
    # takes about 25 requests per second, a quarter of the 100 offered.
    server = sse_server(first_token_ms=40, chunk_gap_ms=20)
    rate, count = 100.0, 24
    offsets = arrival_offsets_s(count, rate, seed=5)
    result, done = run(server, prepared(count), offsets, max_in_flight=2)

    assert len(result.records) == count and all(record.success for record in result.records)
    assert done == result.records and not result.stopped_early
    assert most_in_flight(result.records) <= 2
    by_index = sorted(result.records, key=lambda record: record.index)
    # Each is timed from its scheduled send, however late it went out.
    assert [record.start_ns for record in by_index] == [
        result.start_ns + round(offset * 1e9) for offset in offsets
    ]
    assert result.send_ns == sorted(record.start_ns + record.send_delay_ns for record in by_index)
    assert achieved_rate(result.send_ns) < rate / 2
    # The queue grows: the last requests waited for a slot hundreds of milliseconds, and TTFT says so.
    ttfts_s = [record.ttft_ns / 1e9 for record in by_index]
    assert statistics.fmean(ttfts_s[-6:]) > statistics.fmean(ttfts_s[:6]) + 0.3
    assert by_index[-1].send_delay_ns > by_index[0].send_delay_ns + 300_000_000
    # What grew is the wait: from its actual send, each request took the server's own time.
    assert all(record.ttft_ns - record.send_delay_ns < 200_000_000 for record in by_index)
    arrivals = {entry["id"]: entry["arrival_ns"] for entry in server.send_times()}
    assert all(arrivals[record.rid] >= record.start_ns + record.send_delay_ns for record in by_index)


def test_a_backlog_beyond_the_started_tasks_bound_is_still_sent_in_order(sse_server: StartServer) -> None:
    """Every request due at once, one slot: a backlog past MOST_WAITING started tasks still goes out
    whole, in its schedule's order, each request timed from its due time."""
    server = sse_server()
    count = MOST_WAITING + 200
    result, _ = run(server, prepared(count), [0.0] * count, max_in_flight=1)
    assert len(result.records) == count and all(record.success for record in result.records)
    sent = sorted(result.records, key=lambda record: record.start_ns + record.send_delay_ns)
    assert [record.index for record in sent] == list(range(count))
    assert {record.start_ns for record in sent} == {result.start_ns}


def test_a_server_faster_than_the_offered_rate_is_sent_the_target_rate(sse_server: StartServer) -> None:
    server = sse_server(process=True)  # no delays, and its own interpreter: the client alone keeps time
    # Nearly regular arrivals (burstiness 100: gaps of CV 0.1), so the schedule's own rate is within
    # 0.1 / sqrt(199) = 0.7 % of the target and the check is of the loop's sends, not of the draw.
    rate, count = 200.0, 200
    offsets = arrival_offsets_s(count, rate, arrival="gamma", burstiness=100.0, seed=1)
    result, _ = run(server, prepared(count), offsets, max_in_flight=32)

    assert len(result.records) == count and all(record.success for record in result.records)
    assert achieved_rate(result.send_ns) == pytest.approx(rate, rel=0.05)
    scheduled_rate = (count - 1) / (offsets[-1] - offsets[0])
    assert achieved_rate(result.send_ns) == pytest.approx(scheduled_rate, rel=0.03)
    delays_ms = [record.send_delay_ns / 1e6 for record in result.records]
    assert min(delays_ms) >= 0  # never before its time
    assert statistics.median(delays_ms) < 5


def test_a_failing_server_stops_the_loop_without_waiting_out_its_schedule(sse_server: StartServer) -> None:
    server = sse_server(faults=["http_error"])
    # Ten at once, then the rest a minute later: the stop must not sleep towards them.
    offsets = [0.0] * 10 + [60.0] * 10
    began = perf_counter()
    result, _ = run(server, prepared(20), offsets, max_in_flight=10, max_error_rate=0.5)

    assert perf_counter() - began < 10
    assert result.stopped_early
    assert ERROR_RATE_MIN_REQUESTS <= len(result.records) == 10
    assert all(record.status == 500 for record in result.records)


def test_failures_stop_nothing_without_a_limit(sse_server: StartServer) -> None:
    server = sse_server(faults=["http_error"])
    result, _ = run(server, prepared(12), [index / 100 for index in range(12)], max_in_flight=4)
    assert not result.stopped_early
    assert len(result.records) == 12


def test_a_loop_refuses_a_schedule_that_does_not_fit_its_requests(sse_server: StartServer) -> None:
    server = sse_server()
    with pytest.raises(ValueError, match=r"^offsets_s has 2 offsets for 3 requests$"):
        run(server, prepared(3), [0.0, 0.1], max_in_flight=1)
    with pytest.raises(ValueError, match=r"^max_in_flight must be at least 1, got 0$"):
        run(server, prepared(1), [0.0], max_in_flight=0)
