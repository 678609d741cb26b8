"""Stream parsing: timestamped reads of SGLang's formats -> content chunks and token counts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fairbench.measure.client import ApiFormat, StreamError
from fairbench.measure.workload import Prompt


def completion_event(text: str, completion_tokens: int | None, prompt_tokens: int = 4) -> bytes:
    chunk: dict[str, Any] = {
        "id": "r1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "text": text, "logprobs": None, "finish_reason": None, "matched_stop": None}
        ],
    }
    if completion_tokens is not None:
        chunk["usage"] = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def usage_event(completion_tokens: int, prompt_tokens: int = 4) -> bytes:
    chunk = {
        "id": "r1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def chat_event(content: str, completion_tokens: int) -> bytes:
    chunk = {
        "id": "r1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": None}],
        "usage": {"prompt_tokens": 9, "completion_tokens": completion_tokens},
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def generate_event(text: str, completion_tokens: int) -> bytes:
    out = {
        "text": text,
        "output_ids": [1] * completion_tokens,
        "meta_info": {"id": "r1", "prompt_tokens": 3, "completion_tokens": completion_tokens},
    }
    return b"data: " + json.dumps(out).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def test_completions_counts_tokens_from_cumulative_usage() -> None:
    reads = [
        (100, completion_event("a", 1)),
        (200, completion_event("bcd", 4)),  # a chunk of 3 tokens (continuous decode steps)
        (300, completion_event("", 4)),  # a chunk that carried no token is not a content chunk
        (400, completion_event("e", 5) + usage_event(5) + DONE),
    ]
    counts = ApiFormat("completions", "m").parse(reads)
    assert counts.chunk_ns == [100, 200, 400]
    assert counts.chunk_tokens == [1, 3, 1]
    assert counts.output_len == 5
    assert counts.prompt_len == 4


def test_an_event_split_across_reads_arrives_with_its_last_byte() -> None:
    whole = completion_event("a", 1) + completion_event("b", 2) + DONE
    cut1, cut2 = 20, len(completion_event("a", 1)) + 5
    reads = [(10, whole[:cut1]), (20, whole[cut1:cut2]), (30, whole[cut2:])]
    counts = ApiFormat("completions", "m").parse(reads)
    assert counts.chunk_ns == [20, 30]
    assert counts.chunk_tokens == [1, 1]


def test_chat_counts_delta_content() -> None:
    reads = [(5, chat_event("", 0)), (10, chat_event("hi", 1)), (20, chat_event(" you", 3)), (25, DONE)]
    counts = ApiFormat("chat", "m").parse(reads)
    assert counts.chunk_ns == [10, 20]
    assert counts.chunk_tokens == [1, 2]
    assert counts.prompt_len == 9


def test_generate_uses_meta_info_completion_tokens() -> None:
    reads = [(1, generate_event("x", 1)), (2, generate_event("xyz", 3)), (3, DONE)]
    counts = ApiFormat("generate", "").parse(reads)
    assert counts.chunk_ns == [1, 2]
    assert counts.chunk_tokens == [1, 2]
    assert counts.output_len == 3
    assert counts.prompt_len == 3


def test_generate_abort_is_an_error() -> None:
    aborted = {
        "text": "x",
        "meta_info": {"completion_tokens": 1, "finish_reason": {"type": "abort", "message": "preempted"}},
    }
    reads = [(1, generate_event("x", 1)), (2, b"data: " + json.dumps(aborted).encode() + b"\n\n" + DONE)]
    with pytest.raises(StreamError, match="server aborted the request: preempted"):
        ApiFormat("generate", "").parse(reads)


def test_server_without_continuous_usage_gets_one_token_per_chunk_then_the_final_count() -> None:
    reads = [(1, completion_event("a", None)), (2, completion_event("b", None)), (3, usage_event(5) + DONE)]
    counts = ApiFormat("completions", "m").parse(reads)
    assert counts.chunk_ns == [1, 2]
    assert counts.chunk_tokens == [1, 4]
    assert counts.output_len == 5


@pytest.mark.parametrize(
    ("reads", "message"),
    [
        ([(1, b"data: {broken\n\n" + DONE)], "malformed stream line: data: {broken"),
        ([(1, b"garbage\n\n")], "malformed stream line: garbage"),
        ([(1, completion_event("a", 1))], "stream ended before \\[DONE\\]"),
        ([(1, completion_event("a", 1) + b'data: {"text"')], "stream ended inside an event"),
        (
            [(1, b'data: {"error": {"message": "out of memory", "code": 500}}\n\n' + DONE)],
            "server error in stream: out of memory",
        ),
        ([(1, DONE + completion_event("a", 1))], "data after \\[DONE\\]"),
        ([(1, b"data: [1, 2]\n\n" + DONE)], "malformed stream line"),
    ],
)
def test_format_violations_fail_with_the_reason(reads: list[tuple[int, bytes]], message: str) -> None:
    with pytest.raises(StreamError, match=message):
        ApiFormat("completions", "m").parse(reads)


def test_request_bodies_follow_sglang_formats() -> None:
    prompt = Prompt(index=0, prompt=[101, 102, 103], prompt_len=3, output_len=7)
    completions = json.loads(ApiFormat("completions", "kimi").body(prompt, "r-7"))
    assert completions == {
        "model": "kimi",
        "prompt": [101, 102, 103],
        "max_tokens": 7,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "rid": "r-7",
    }
    generate = json.loads(ApiFormat("generate", "").body(prompt, "r-7"))
    assert generate == {
        "input_ids": [101, 102, 103],
        "sampling_params": {"max_new_tokens": 7, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
        "rid": "r-7",
    }
    chat = json.loads(ApiFormat("chat", "kimi").body(Prompt(0, "hello world", 2, 7), "r-7"))
    assert chat["messages"] == [{"role": "user", "content": "hello world"}]
    assert chat["max_tokens"] == 7 and chat["ignore_eos"] is True
    assert chat["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert chat["rid"] == "r-7"


def test_unknown_api_is_rejected() -> None:
    with pytest.raises(ValueError, match="api: 'embed' is not one of completions, chat, generate"):
        ApiFormat("embed", "m")
