"""The server's send time of a stream's first event: parsed from SGLang's /generate stream, put on the
client's clock in the record, and the point's send-gap figures computed from it."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from tests.support.sse_server import RunningServer, StartServer

from fairbench.measure.client import ApiFormat, StreamClient
from fairbench.measure.metrics import percentile, point_metrics, server_send_gap_ns
from fairbench.measure.records import RequestRecord
from fairbench.measure.workload import Prompt

DONE = b"data: [DONE]\n\n"
SEND_GAP_KEYS = ["server_send_gap_median_ms", "server_send_gap_p99_ms", "server_send_gap_max_ms"]


def generate_event(completion_tokens: int, **meta: Any) -> bytes:
    out = {"text": "x" * completion_tokens, "meta_info": {"completion_tokens": completion_tokens, **meta}}
    return b"data: " + json.dumps(out).encode() + b"\n\n"


def test_the_first_events_send_time_is_kept() -> None:
    reads = [
        (1, generate_event(1, response_sent_to_client_ts=1764650000.25)),
        (2, generate_event(2, response_sent_to_client_ts=1764650009.0) + DONE),
    ]
    assert ApiFormat("generate", "").parse(reads).server_sent_s == 1764650000.25


@pytest.mark.parametrize(
    "reads",
    [
        [(1, generate_event(1)), (2, generate_event(2, response_sent_to_client_ts=1764650000.5) + DONE)],
        [(1, generate_event(1, response_sent_to_client_ts="soon") + DONE)],
        [(1, generate_event(1, response_sent_to_client_ts=True) + DONE)],
    ],
    ids=["only on a later event", "not a number", "a boolean"],
)
def test_no_send_time_unless_the_first_event_gives_a_number(reads: list[tuple[int, bytes]]) -> None:
    assert ApiFormat("generate", "").parse(reads).server_sent_s is None


def test_openai_streams_carry_no_send_time() -> None:
    event = {"choices": [{"text": "a"}], "usage": {"completion_tokens": 1, "prompt_tokens": 2}}
    reads = [(1, b"data: " + json.dumps(event).encode() + b"\n\n" + DONE)]
    assert ApiFormat("completions", "m").parse(reads).server_sent_s is None


def test_records_from_before_the_send_time_read_back_without_it() -> None:
    record = RequestRecord(0, 8, 4, 10, 50, [20, 30], [1, 3], 4, 200, "", rid="r", server_sent_ns=18)
    assert RequestRecord.from_json(record.to_json()) == record
    old = record.to_json()
    del old["server_sent_ns"]
    assert RequestRecord.from_json(old).server_sent_ns is None


def send_one(server: RunningServer, *, wall_step_s: float = 0.0) -> RequestRecord:
    """One /generate request; the wall clock (of the client and of the in-process server alike) is
    stepped by ``wall_step_s`` once the client is open, as NTP may step it during a run."""
    api = ApiFormat("generate", "")

    async def send() -> RequestRecord:
        async with StreamClient(server.url, api, concurrency=1) as client:
            with pytest.MonkeyPatch.context() as clock:
                wall_s, wall_ns = time.time, time.time_ns
                clock.setattr(time, "time", lambda: wall_s() + wall_step_s)
                clock.setattr(time, "time_ns", lambda: wall_ns() + round(wall_step_s * 1e9))
                prompt = Prompt(0, [5, 6, 7], 3, 4)
                return await client.request(prompt, api.body(prompt, "gap-0"), "gap-0")

    return asyncio.run(send())


@pytest.mark.parametrize(
    "wall_step_s", [0.0, 1.0, -3600.0], ids=["steady", "stepped 1 s", "stepped back 1 h"]
)
def test_the_send_time_lands_on_the_clients_clock(sse_server: StartServer, wall_step_s: float) -> None:
    """The test server on this machine stamps /generate's first event with its scheduled send time in
    epoch seconds; on the client's perf_counter_ns clock it falls just before the server's own record of
    the send (CLOCK_MONOTONIC, the same clock), and before the client read it. A step of the wall clock
    after the client opened moves nothing: the stamp is put on the client's clock with the wall clock
    read when the stamp arrives."""
    server = sse_server(first_token_ms=30)
    record = send_one(server, wall_step_s=wall_step_s)
    assert record.success, record.error
    assert record.server_sent_ns is not None
    (sent,) = server.send_times()
    # The stamp is the schedule (arrival + 30 ms), written with microseconds; the send comes at or
    # after it, by the server's lateness.
    assert -1_000_000 < sent["first_chunk_ns"] - record.server_sent_ns < 20_000_000
    assert record.server_sent_ns - record.start_ns == pytest.approx(30e6, abs=20e6)
    gap = server_send_gap_ns(record)
    assert gap is not None and -1_000_000 < gap < 30_000_000


def sent_at(first_chunk_ms: float, gap_ms: float | None, *, error: str = "") -> RequestRecord:
    first_ns = round(first_chunk_ms * 1e6)
    sent = None if gap_ms is None else first_ns - round(gap_ms * 1e6)
    return RequestRecord(0, 8, 2, 0, first_ns + 10**6, [first_ns], [2], 2, 200, error, server_sent_ns=sent)


def test_send_gap_figures_over_the_ok_requests_that_have_a_send_time() -> None:
    records = [
        sent_at(10, 0.5),
        sent_at(11, 1.5),
        sent_at(12, 0.25),
        sent_at(13, 4.0),
        sent_at(14, None),  # no send time: not counted
        sent_at(15, 100.0, error="HTTP 500"),  # failed: not counted
    ]
    metrics = point_metrics(records, duration_s=1.0, concurrency=1)
    gaps_ms = [0.5, 1.5, 0.25, 4.0]
    assert metrics["server_send_gap_median_ms"] == pytest.approx(1.0)  # (0.5 + 1.5) / 2
    # numpy's linear p99: v = 3 * 0.99 = 2.97 between 1.5 and 4.0
    assert metrics["server_send_gap_p99_ms"] == pytest.approx(1.5 + 2.5 * 0.97)
    assert metrics["server_send_gap_p99_ms"] == pytest.approx(percentile(gaps_ms, 99))
    assert metrics["server_send_gap_max_ms"] == pytest.approx(4.0)
    keys = list(metrics)
    assert keys[keys.index("server_send_gap_median_ms") :] == [*SEND_GAP_KEYS, "failed", "error_rate"]


def test_no_send_gap_figures_without_a_send_time() -> None:
    metrics = point_metrics(
        [sent_at(10, None), sent_at(11, 2.0, error="boom")], duration_s=1.0, concurrency=1
    )
    assert not set(SEND_GAP_KEYS) & set(metrics)
    assert metrics["completed"] == 1


def test_a_record_without_chunks_has_no_send_gap() -> None:
    record = RequestRecord(0, 8, 2, 0, 5, server_sent_ns=3)
    assert server_send_gap_ns(record) is None
