"""A request's speculative decoding as SGLang 0.5.23's /generate reports it: the spec_* keys of its last
event's meta_info (TokenizerManager._calculate_spec_decoding_metrics, run once the request finished) read
into the request's record, kept in the record files, absent on the OpenAI APIs and in older files."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from fairbench.measure.client import ApiFormat, SpecCounts, StreamClient
from fairbench.measure.records import RequestRecord
from fairbench.measure.workload import Prompt

DONE = b"data: [DONE]\n\n"
DRAFT_TOKENS = 4
"""The server's speculative-num-draft-tokens: each verify step proposes 3 draft tokens."""
STEPS = [2, 1, 1]
"""Draft tokens accepted at each verify step of the request below; each step adds one more (the bonus)."""
OUTPUT = 1 + sum(correct + 1 for correct in STEPS)
"""The prefill's token and each step's: 8."""


def sglang_meta(completion_tokens: int, *, finished: bool, speculative: bool = True) -> dict[str, Any]:
    """meta_info as tokenizer_manager.py builds it for a streamed /generate request: every event's keys in
    its order, the finished event's finish_reason and e2e_latency, then, with a speculative algorithm,
    _calculate_spec_decoding_metrics's keys (the proposed drafts are verify_ct x (draft tokens - 1))."""
    meta: dict[str, Any] = {
        "id": "fairbench-x-c1-r0-measure-0",
        "finish_reason": {"type": "length", "length": completion_tokens} if finished else None,
        "prompt_tokens": 3,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": completion_tokens,
        "cached_tokens": 0,
    }
    if finished:
        meta["e2e_latency"] = 0.125
        if speculative:
            verify_ct, correct = len(STEPS), sum(STEPS)
            proposed = verify_ct * (DRAFT_TOKENS - 1)
            meta["spec_accept_rate"] = correct / proposed
            meta["spec_accept_length"] = completion_tokens / verify_ct
            meta["spec_num_correct_drafts"] = correct
            meta["spec_num_proposed_drafts"] = proposed
            meta["spec_verify_ct"] = verify_ct
            meta["spec_correct_drafts_histogram"] = [0, 2, 1, 0]
    return meta


def sglang_stream(*, speculative: bool = True, last: dict[str, Any] | None = None) -> bytes:
    """A speculative request's /generate stream: the prefill's token, then a chunk per verify step (each
    its accepted drafts and the bonus token), cumulative text and ids, then [DONE]; ``last`` replaces keys
    of the last event's meta_info."""
    counts = [1]
    for correct in STEPS:
        counts.append(counts[-1] + correct + 1)
    events = []
    for index, count in enumerate(counts):
        finished = index == len(counts) - 1
        meta = sglang_meta(count, finished=finished, speculative=speculative)
        if index == 0:
            meta["response_sent_to_client_ts"] = 1764650000.25
        if finished:
            meta |= last or {}
        event = {"text": "ab" * count, "output_ids": [7] * count, "meta_info": meta}
        events.append(b"data: " + json.dumps(event).encode() + b"\n\n")
    return b"".join(events) + DONE


def parsed(stream: bytes, api: str = "generate") -> SpecCounts | None:
    return ApiFormat(api, "m").parse([(1, stream)]).spec


def test_the_last_events_spec_keys_are_read() -> None:
    counts = ApiFormat("generate", "").parse([(1, sglang_stream())])
    assert counts.output_len == OUTPUT
    assert counts.spec == SpecCounts(
        accept_length=OUTPUT / 3, accept_rate=4 / 9, verify_ct=3, num_correct_drafts=4, num_proposed_drafts=9
    )


def test_a_server_without_speculation_reports_none() -> None:
    assert parsed(sglang_stream(speculative=False)) is None


def test_the_openai_apis_carry_no_meta_info_and_report_none() -> None:
    event = {"choices": [{"text": "ab"}], "usage": {"completion_tokens": 1, "prompt_tokens": 3}}
    assert parsed(b"data: " + json.dumps(event).encode() + b"\n\n" + DONE, api="completions") is None


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        ({"spec_verify_ct": 0}, {"verify_ct": None}),
        ({"spec_verify_ct": True}, {"verify_ct": None}),
        ({"spec_num_correct_drafts": -1}, {"num_correct_drafts": None}),
        ({"spec_num_proposed_drafts": 9.0}, {"num_proposed_drafts": None}),
        ({"spec_accept_length": "2.7"}, {"accept_length": None}),
        ({"spec_accept_rate": None}, {"accept_rate": None}),
        ({"spec_accept_rate": -0.5}, {"accept_rate": None}),
    ],
    ids=["no verify step", "a boolean", "negative", "not whole", "a string", "null", "a negative rate"],
)
def test_a_value_that_is_not_one_is_left_out_and_the_rest_kept(
    last: dict[str, Any], expected: dict[str, None]
) -> None:
    whole = parsed(sglang_stream())
    assert whole is not None
    found = parsed(sglang_stream(last=last))
    assert found is not None
    assert {name: getattr(found, name) for name in expected} == expected
    assert [getattr(found, name) for name in SpecCounts.__slots__ if name not in expected] == [
        getattr(whole, name) for name in SpecCounts.__slots__ if name not in expected
    ]


async def _serve_once(stream: bytes) -> tuple[asyncio.Server, str]:
    """A server that answers one POST with ``stream`` as a chunked 200 response, as uvicorn sends it."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(
                b":"
            )[1]
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(stream), stream))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def send(stream: bytes) -> RequestRecord:
    async def run() -> RequestRecord:
        server, url = await _serve_once(stream)
        api = ApiFormat("generate", "")
        try:
            async with StreamClient(url, api, concurrency=1) as client:
                prompt = Prompt(0, [5, 6, 7], 3, OUTPUT)
                return await client.request(prompt, api.body(prompt, "spec-0"), "spec-0")
        finally:
            server.close()
            await server.wait_closed()

    return asyncio.run(run())


def test_the_record_of_a_speculative_request_keeps_what_the_server_said() -> None:
    record = send(sglang_stream())
    assert record.success, record.error
    assert record.chunk_tokens == [1, 3, 2, 2]
    assert (record.spec_accept_length, record.spec_accept_rate) == (OUTPUT / 3, 4 / 9)
    assert (record.spec_verify_ct, record.spec_num_correct_drafts, record.spec_num_proposed_drafts) == (
        3,
        4,
        9,
    )
    assert RequestRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


def test_the_record_of_a_request_without_speculation_has_none() -> None:
    record = send(sglang_stream(speculative=False))
    assert record.success, record.error
    assert record.spec_verify_ct is None and record.spec_accept_length is None


def test_records_from_before_the_spec_fields_read_back_without_them() -> None:
    record = RequestRecord(0, 8, 4, 10, 50, [20, 30], [1, 3], 4, 200, "", rid="r", spec_verify_ct=2)
    old = record.to_json()
    for key in [key for key in old if key.startswith("spec_")]:
        del old[key]
    back = RequestRecord.from_json(old)
    assert back.spec_verify_ct is None and back.spec_accept_rate is None
    assert RequestRecord.from_json(record.to_json()) == record
