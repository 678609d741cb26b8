"""Conformance: one protocol suite run against ``fairbench sim`` and real SGLang, compared by structure.

Every case sends the same requests to each server and records the response's *structure*, never its text,
ids or clock readings (at most an order of times): the status code, the content type, the key paths of
every JSON body with the type of each value, the order of a stream's event kinds (a run of content events
counts once: how SGLang groups tokens into events depends on timing, see ``collapse``), the finish reason,
the usage counts, the cached prompt tokens. The comparison then requires the simulator's structure to
equal SGLang's in every case, except for the differences listed in ``SIM_DIFFERENCES``, each with the
reason it stays; a listed difference that no longer shows up fails the suite too, so the list stays true.
docs/sim-conformance.md documents the same table. ``tests/support/sse_server/`` is held to the streaming
and health cases it serves the same way (``SSE_DIFFERENCES``).

Real SGLang is the session's shared server (``real_sglang``: campaigns/lab-sglang.yml's baseline flags on
the tiny GPT-2 model); the simulator runs with the same flags and the same model directory. Before each
case the server's prefix cache is flushed (retried until no request runs), so a case sees the same cache
whatever ran before it. Prompts use token ids below 511 only: the tiny model has 512 ids, 511 is its
end-of-text, and an id past the vocabulary makes real SGLang exit.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.support import real_sglang as real_sglang_support
from tests.support.sse_server import ServerThread
from tests.support.tiny_model import build as build_tiny_model

from fairbench.measure.workload import FLUSHED, Prompt, designed_cached_tokens
from fairbench.sim.args import flag_table

# One pytest worker runs every test of real SGLang, so that one server start serves them all.
pytestmark = pytest.mark.xdist_group("real_sglang")

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "sim-conformance.md"
TARGETS = ("sim", "sglang")

# Token ids the tiny model has (its last id, 511, is end-of-text): a fixed 8-token prompt, and a prompt
# longer than the 4096-token context.
PROMPT = [17, 42, 101, 7, 250, 3, 99, 311]
OVER_LONG_PROMPT = list(range(1, 421)) * 10
OUTPUT_TOKENS = 8
SETTLE_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 120.0

Structure = dict[str, Any]
"""Facet name -> value: a set of items (compared item by item), or a scalar (compared as it is)."""


# --------------------------------------------------------------------------- structure of a response


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, str)):
        return type(value).__name__
    return "{}" if isinstance(value, dict) else "[]"


TIMING_KEYS = frozenset({"meta_info.decode_throughput"})
"""Keys SGLang writes or leaves out by timing: ``decode_throughput`` is 1 / TPOT from the tokenizer's first
token and finish times, and is absent when both came in one of its steps (the outputs that queued up while
it was busy coalesce; a fast machine's CPU server often finishes a short request that way)."""


def shape(value: Any, path: str = "") -> set[str]:
    """``path: type`` for every leaf of a JSON value but ``TIMING_KEYS``; ``[]`` stands for any element of a
    list."""
    if isinstance(value, dict) and value:
        return {
            item
            for key, child in value.items()
            if (child_path := f"{path}.{key}" if path else key) not in TIMING_KEYS
            for item in shape(child, child_path)
        }
    if isinstance(value, list) and value:
        return {item for child in value for item in shape(child, f"{path}[]")}
    return {f"{path or '.'}: {type_name(value)}"}


@dataclass
class Reply:
    status: int
    content_type: str | None
    body: bytes = b""
    events: list[Any] | None = None
    """A stream's ``data:`` payloads, parsed (``"[DONE]"`` as that string); None when it was no stream."""

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


async def read_reply(response: aiohttp.ClientResponse) -> Reply:
    content_type = response.headers.get("content-type")
    if content_type and content_type.startswith("text/event-stream"):
        events: list[Any] = []
        async for line in response.content:
            if line.startswith(b"data: "):
                events.append(parse_event(line[6:].strip()))
        return Reply(response.status, content_type, events=events)
    return Reply(response.status, content_type, body=await response.read())


def parse_event(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        return payload.decode(errors="replace")


def event_kind(api: str, event: Any) -> str:
    """What one stream event is, in the terms of SGLang's serving code."""
    if event == "[DONE]":
        return "[DONE]"
    if not isinstance(event, dict):
        return "unparsable"
    if "error" in event:
        return "error"
    if api == "generate":
        return "finish" if event.get("meta_info", {}).get("finish_reason") else "content"
    choices = event.get("choices")
    if choices == []:
        return "usage"
    choice = choices[0] if isinstance(choices, list) and choices else {}
    if api == "chat" and "role" in choice.get("delta", {}):
        return "role"
    return "finish" if choice.get("finish_reason") else "content"


def collapse(kinds: list[str]) -> list[str]:
    """Runs of one kind counted once. How many content events carry a response's tokens is timing: SGLang's
    tokenizer manager coalesces the outputs that queued up while the HTTP side was busy into one event
    (``_wait_one_response`` sends only the latest), so a 2-core machine sends fewer than one per token."""
    collapsed: list[str] = []
    for kind in kinds:
        if not collapsed or collapsed[-1] != kind:
            collapsed.append(kind)
    return collapsed


def finish_type(reason: Any) -> Any:
    return reason.get("type") if isinstance(reason, dict) else reason


def value_facets(body: Any) -> Structure:
    """The values compared as they are: finish reason, usage counts, cached tokens, error type."""
    facets: Structure = {}
    if not isinstance(body, dict):
        return facets
    meta = body.get("meta_info")
    if isinstance(meta, dict):
        facets["finish_reason"] = finish_type(meta.get("finish_reason"))
        facets["completion_tokens"] = meta.get("completion_tokens")
        facets["prompt_tokens"] = meta.get("prompt_tokens")
        facets["cached_tokens"] = meta.get("cached_tokens")
        facets["output_ids"] = len(body.get("output_ids") or [])
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        facets["finish_reason"] = choices[0].get("finish_reason")
        facets["choices"] = len(choices)
    usage = body.get("usage")
    if isinstance(usage, dict):
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            facets[f"usage.{key}"] = usage.get(key)
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    if body.get("object") == "error" or "error" in body:
        facets["error.type"] = error.get("type")
        facets["error.code"] = error.get("code")
    return facets


def describe(reply: Reply, api: str | None = None) -> Structure:
    """A response's structure; ``api`` names how its stream events are classified."""
    structure: Structure = {"status": reply.status, "content_type": reply.content_type}
    if reply.events is not None:
        kinds = [event_kind(api or "", event) for event in reply.events]
        structure["events"] = " ".join(collapse(kinds))
        for kind, event in zip(kinds, reply.events, strict=True):
            structure.setdefault(f"event.{kind}", set()).update(shape(event))
            if kind in ("finish", "usage", "error"):
                structure.update(value_facets(event))
        return structure
    body = reply.json()
    if body is None:
        structure["body"] = "empty" if not reply.body else "text"
        return structure
    structure["body"] = shape(body)
    structure.update(value_facets(body))
    return structure


def prefixed(prefix: str, structure: Structure) -> Structure:
    return {f"{prefix}.{key}": value for key, value in structure.items()}


def without_counts(structure: Structure) -> Structure:
    """An aborted response's token counts: how far it got before the abort arrived, which is timing."""
    return {key: value for key, value in structure.items() if key not in ("completion_tokens", "output_ids")}


# --------------------------------------------------------------------------- the cases


Send = Callable[..., Awaitable[Reply]]


@dataclass(frozen=True)
class Case:
    name: str
    status: int
    """The status SGLang answers with: checked on every target."""
    run: Callable[[aiohttp.ClientSession, str], Awaitable[Structure]]
    sse: bool = False
    """tests/support/sse_server/ serves this case too."""


JSON = {"content-type": "application/json"}


async def send(
    client: aiohttp.ClientSession,
    url: str,
    method: str = "POST",
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    sent_headers = dict(JSON if body is not None and headers is None else headers or {})
    async with client.request(method, url, data=data, headers=sent_headers) as response:
        return await read_reply(response)


def request_case(
    name: str,
    status: int,
    path: str,
    body: Any = None,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    api: str | None = None,
    sse: bool = False,
) -> Case:
    async def run(client: aiohttp.ClientSession, url: str) -> Structure:
        return describe(await send(client, url + path, method, body, headers), api)

    return Case(name, status, run, sse)


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": "default", "prompt": PROMPT, "max_tokens": OUTPUT_TOKENS, "ignore_eos": True, **fields}


def chat(**fields: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "what does a fair benchmark compare"}]
    return {
        "model": "default",
        "messages": messages,
        "max_tokens": OUTPUT_TOKENS,
        "ignore_eos": True,
        **fields,
    }


def generate(max_new_tokens: int = OUTPUT_TOKENS, **fields: Any) -> dict[str, Any]:
    sampling = {"max_new_tokens": max_new_tokens, "ignore_eos": True}
    return {"input_ids": PROMPT, "sampling_params": sampling, **fields}


INCLUDE_USAGE = {"stream_options": {"include_usage": True}}
BOTH_USAGES = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}


LONG_OUTPUT = 1000
"""Output long enough that an abort arrives mid-generation (prompt + output stays within the context)."""


def generation_cases() -> list[Case]:
    text_generate = {"text": "a fair benchmark", "sampling_params": generate()["sampling_params"]}
    cases = [
        request_case("completions", 200, "/v1/completions", completion()),
        request_case("completions_text", 200, "/v1/completions", completion(prompt="a fair benchmark")),
        request_case("chat", 200, "/v1/chat/completions", chat()),
        request_case("generate", 200, "/generate", generate()),
        request_case("generate_text", 200, "/generate", text_generate),
    ]
    for suffix, options in [("", {}), ("_include_usage", INCLUDE_USAGE), ("_continuous_usage", BOTH_USAGES)]:
        cases += [
            request_case(
                f"completions_stream{suffix}",
                200,
                "/v1/completions",
                completion(stream=True, **options),
                api="completions",
                sse=True,
            ),
            request_case(
                f"chat_stream{suffix}",
                200,
                "/v1/chat/completions",
                chat(stream=True, **options),
                api="chat",
                sse=True,
            ),
        ]
    return [
        *cases,
        request_case("generate_stream", 200, "/generate", generate(stream=True), api="generate", sse=True),
        request_case("completions_n2", 200, "/v1/completions", completion(n=2)),
        request_case("chat_max_tokens_0", 200, "/v1/chat/completions", chat(max_tokens=0)),
        request_case(
            "chat_stream_max_tokens_0",
            200,
            "/v1/chat/completions",
            chat(max_tokens=0, stream=True),
            api="chat",
        ),
        request_case("generate_max_new_tokens_0", 200, "/generate", generate(0)),
        request_case(
            "generate_stream_max_new_tokens_0", 200, "/generate", generate(0, stream=True), api="generate"
        ),
        request_case("completions_unknown_model", 200, "/v1/completions", completion(model="no-such-model")),
        request_case("chat_unknown_model", 200, "/v1/chat/completions", chat(model="no-such-model")),
    ]


def bad_request_cases() -> list[Case]:
    long_chat = chat(messages=[{"role": "user", "content": "word " * 4200}], max_tokens=4)
    return [
        request_case(
            "completions_over_long_prompt",
            400,
            "/v1/completions",
            completion(prompt=OVER_LONG_PROMPT, max_tokens=4),
        ),
        request_case(
            "completions_stream_over_long_prompt",
            400,
            "/v1/completions",
            completion(prompt=OVER_LONG_PROMPT, max_tokens=4, stream=True),
            api="completions",
        ),
        request_case("chat_over_long_prompt", 400, "/v1/chat/completions", long_chat),
        request_case("generate_over_long_prompt", 400, "/generate", generate(4, input_ids=OVER_LONG_PROMPT)),
        # /generate has started its stream when the length check fails: the error comes as an event.
        request_case(
            "generate_stream_over_long_prompt",
            200,
            "/generate",
            generate(4, input_ids=OVER_LONG_PROMPT, stream=True),
            api="generate",
        ),
        request_case("completions_too_many_tokens", 400, "/v1/completions", completion(max_tokens=5000)),
        request_case(
            "generate_stream_too_many_tokens", 200, "/generate", generate(5000, stream=True), api="generate"
        ),
        request_case("completions_max_tokens_0", 400, "/v1/completions", completion(max_tokens=0)),
        request_case("completions_max_tokens_negative", 400, "/v1/completions", completion(max_tokens=-1)),
        request_case("chat_max_tokens_negative", 400, "/v1/chat/completions", chat(max_tokens=-1)),
        request_case(
            "chat_stream_max_tokens_negative",
            400,
            "/v1/chat/completions",
            chat(max_tokens=-1, stream=True),
            api="chat",
        ),
        request_case("generate_max_new_tokens_negative", 400, "/generate", generate(-1)),
        request_case(
            "generate_stream_max_new_tokens_negative",
            200,
            "/generate",
            generate(-1, stream=True),
            api="generate",
        ),
        request_case("completions_malformed_json", 400, "/v1/completions", b'{"model": "default", "prompt":'),
        request_case("chat_malformed_json", 400, "/v1/chat/completions", b'{"model": "default",'),
        request_case("generate_malformed_json", 400, "/generate", b'{"input_ids":'),
        request_case(
            "completions_missing_prompt", 400, "/v1/completions", {"model": "default", "max_tokens": 2}
        ),
        request_case(
            "chat_missing_messages", 400, "/v1/chat/completions", {"model": "default", "max_tokens": 2}
        ),
        request_case("generate_missing_input", 400, "/generate", {"sampling_params": {"max_new_tokens": 2}}),
        request_case("completions_empty_prompt", 400, "/v1/completions", completion(prompt="")),
        request_case(
            "completions_not_json",
            400,
            "/v1/completions",
            json.dumps(completion()).encode(),
            headers={"content-type": "text/plain"},
        ),
        request_case(
            "generate_form_encoded",
            400,
            "/generate",
            json.dumps(generate()).encode(),
            headers={"content-type": "application/x-www-form-urlencoded"},
        ),
    ]


def information_cases() -> list[Case]:
    return [
        request_case("health", 200, "/health", method="GET", sse=True),
        request_case("health_generate", 200, "/health_generate", method="GET", sse=True),
        request_case("models", 200, "/v1/models", method="GET"),
        request_case("models_unknown", 404, "/v1/models/no-such-model", method="GET"),
        request_case("model_info", 200, "/model_info", method="GET"),
        Case("server_info", 200, server_info),
        request_case("flush_cache_get", 200, "/flush_cache", method="GET", sse=True),
        request_case("unknown_route", 404, "/no/such/route", method="GET"),
        request_case("wrong_method", 405, "/v1/completions", method="GET"),
    ]


def cache_and_abort_cases() -> list[Case]:
    return [
        Case("generate_repeated_prompt", 200, repeated_prompt),
        Case("flush_cache_between_repeats", 200, flush_between_repeats),
        Case("shared_prefix_groups", 200, shared_prefix_groups),
        Case("multi_turn_live_replies", 200, multi_turn_live_replies),
        Case("abort_generate_stream", 200, abort_stream),
        Case("abort_generate", 200, abort_whole),
        request_case("abort_unknown_rid", 200, "/abort_request", {"rid": "no-such-request"}),
    ]


async def server_info(client: aiohttp.ClientSession, url: str) -> Structure:
    """``/server_info``: its key sets, the type of every value that is no launch argument, and whether each
    launch argument's value is null (its value is the machine's and the model's, not the protocol's)."""
    reply = await send(client, url + "/server_info", "GET")
    structure: Structure = {"status": reply.status, "content_type": reply.content_type}
    info = reply.json()
    fields = set(flag_table()["fields"])
    state = info["internal_states"][0]
    structure["keys"] = set(info)
    structure["internal_states[].keys"] = set(state)
    for key, value in info.items():
        if key in fields:
            structure[f"field.{key}"] = type_name(value)
        elif key != "internal_states":
            structure[f"extra.{key}"] = shape(value)
    for key, value in state.items():
        if key not in fields:
            structure[f"internal_states[].extra.{key}"] = shape(value)
    return structure


async def repeated_prompt(client: aiohttp.ClientSession, url: str) -> Structure:
    """The second of two equal prompts: the prefix cache serves all of it but the last token."""
    await send(client, url + "/generate", body=generate())
    return describe(await send(client, url + "/generate", body=generate()))


async def flush_between_repeats(client: aiohttp.ClientSession, url: str) -> Structure:
    await send(client, url + "/generate", body=generate())
    flushed = await send(client, url + "/flush_cache")
    again = await send(client, url + "/generate", body=generate())
    return {**prefixed("flush", describe(flushed)), **describe(again)}


SYSTEM_PROMPTS = [[1 + (97 * group + 13 * index) % 500 for index in range(64)] for group in range(2)]
"""Two groups' system prompts (64 ids each, their first ids differ)."""
QUESTIONS = [
    [400 + 3 * question] + [1 + (31 * question + 7 * index) % 500 for index in range(7)]
    for question in range(3)
]
"""Three questions of 8 ids, each opening with an id of its own: one prompt shares only its system prompt
with another."""


async def shared_prefix_groups(client: aiohttp.ClientSession, url: str) -> Structure:
    """A shared-prefix workload sent one request at a time, its groups interleaved (each group's system
    prompt and then each question): every request after its group's first finds the system prompt in the
    cache, and no more of it."""
    cached: list[Any] = []
    reply = None
    for question in QUESTIONS:
        for system_prompt in SYSTEM_PROMPTS:
            reply = await send(client, url + "/generate", body=generate(input_ids=system_prompt + question))
            cached.append((reply.json() or {}).get("meta_info", {}).get("cached_tokens"))
    assert reply is not None
    return {**describe(reply), "cached_tokens_by_request": cached}


CONVERSATION_SYSTEM_PROMPT = [1 + (37 * index) % 500 for index in range(3000)]
"""Long enough that prefilling it takes a real server far longer than the few tokens a later turn adds (the
tiny model's context is 4096 tokens)."""
USER_TURNS = [[450 + turn] + [1 + (11 * turn + 5 * index) % 500 for index in range(15)] for turn in range(3)]
CONVERSATION_REPEATS = 3


async def conversation(client: aiohttp.ClientSession, url: str) -> tuple[list[Any], list[float], Reply]:
    """One conversation on an empty cache, each turn streamed: the system prompt, then each user turn
    after all earlier turns and the server's own replies (its output ids). Cached tokens and the time to
    the first event of each turn, and the last turn's reply."""
    await settle(client, url)
    history: list[int] = list(CONVERSATION_SYSTEM_PROMPT)
    cached: list[Any] = []
    first_event_s: list[float] = []
    reply = None
    for user_turn in USER_TURNS:
        history += user_turn
        body = json.dumps(generate(input_ids=history, stream=True)).encode()
        events: list[Any] = []
        start = time.perf_counter()
        async with client.post(url + "/generate", data=body, headers=JSON) as response:
            async for line in response.content:
                if line.startswith(b"data: "):
                    if not events:
                        first_event_s.append(time.perf_counter() - start)
                    events.append(parse_event(line[6:].strip()))
            reply = Reply(response.status, response.headers.get("content-type"), events=events)
        finish = next(event for event in reversed(events) if isinstance(event, dict))
        cached.append(finish.get("meta_info", {}).get("cached_tokens"))
        history += finish.get("output_ids") or []
    assert reply is not None
    return cached, first_event_s, reply


async def multi_turn_live_replies(client: aiohttp.ClientSession, url: str) -> Structure:
    """A three-turn conversation with a long system prompt, run three times from an empty cache. Each
    later turn is served from the cache but for its new user turn (the earlier turns and replies, less
    the last reply's last token); so the first turn, which prefills all of the system prompt, is the one
    slowest to its first token: on the fastest of the three runs of each turn, which leaves out the
    machine's stalls."""
    runs = [await conversation(client, url) for _ in range(CONVERSATION_REPEATS)]
    fastest = [min(times) for times in zip(*(first_event_s for _, first_event_s, _ in runs), strict=True)]
    return {
        **describe(runs[-1][2], "generate"),
        "cached_tokens_by_turn": [cached for cached, _, _ in runs],
        "first_turn_slowest": fastest[0] > max(fastest[1:]),
    }


async def abort_stream(client: aiohttp.ClientSession, url: str) -> Structure:
    """A streamed /generate aborted by its rid after its first event: it ends with an abort event."""
    rid = f"conformance-{uuid.uuid4().hex}"
    body = json.dumps(generate(LONG_OUTPUT, stream=True, rid=rid)).encode()
    events: list[Any] = []
    abort: Reply | None = None
    async with client.post(url + "/generate", data=body, headers=JSON) as response:
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            events.append(parse_event(line[6:].strip()))
            if abort is None:
                abort = await send(client, url + "/abort_request", body={"rid": rid})
        reply = Reply(response.status, response.headers.get("content-type"), events=events)
    assert abort is not None, "the stream sent no event"
    return {**without_counts(describe(reply, "generate")), **prefixed("abort", describe(abort))}


async def abort_whole(client: aiohttp.ClientSession, url: str) -> Structure:
    """A whole-response /generate aborted by its rid while it runs: 200, finish reason abort. The abort is
    repeated until the response comes, in case the first one arrived before the request did."""
    rid = f"conformance-{uuid.uuid4().hex}"
    pending = asyncio.create_task(send(client, url + "/generate", body=generate(LONG_OUTPUT, rid=rid)))
    aborts: list[Reply] = []
    while not pending.done():
        await asyncio.sleep(0.3)
        if not pending.done():
            aborts.append(await send(client, url + "/abort_request", body={"rid": rid}))
    reply = await pending
    assert aborts, "the request ended before it could be aborted"
    return {**without_counts(describe(reply)), **prefixed("abort", describe(aborts[0]))}


CASES = [*generation_cases(), *bad_request_cases(), *information_cases(), *cache_and_abort_cases()]
CASE_NAMES = [case.name for case in CASES]
SSE_CASES = [case for case in CASES if case.sse]


# --------------------------------------------------------------------------- differences


@dataclass(frozen=True)
class Difference:
    """A difference that stays, and why. ``cases`` and ``text`` may hold ``*`` (any characters)."""

    cases: tuple[str, ...]
    text: str
    reason: str

    def matches(self, case: str, text: str) -> bool:
        return any(wildcard(pattern).match(case) for pattern in self.cases) and bool(
            wildcard(self.text).match(text)
        )


def wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")) + r"\Z")


def differences(other: Structure, sglang: Structure, name: str) -> list[str]:
    """Every facet in which ``other`` (the server called ``name``) differs from SGLang's, in words."""
    found: list[str] = []
    for facet in sorted(set(other) | set(sglang)):
        if facet not in other:
            found.append(f"{facet}: sglang only")
        elif facet not in sglang:
            found.append(f"{facet}: {name} only")
        elif isinstance(other[facet], set) or isinstance(sglang[facet], set):
            mine, theirs = set(other[facet]), set(sglang[facet])
            found += [f"{facet}: sglang only {item}" for item in sorted(theirs - mine)]
            found += [f"{facet}: {name} only {item}" for item in sorted(mine - theirs)]
        elif other[facet] != sglang[facet]:
            found.append(f"{facet}: {name} {json.dumps(other[facet])}, sglang {json.dumps(sglang[facet])}")
    return found


def unlisted(table: list[Difference], case: str, found: list[str]) -> list[str]:
    return [text for text in found if not any(entry.matches(case, text) for entry in table)]


TEXT_PROMPT_CASES = ("chat", "chat_*", "completions_text", "generate_text")

SIM_DIFFERENCES = [
    Difference(
        TEXT_PROMPT_CASES,
        "*prompt_tokens: sim *, sglang *",
        "The simulator has no tokenizer: it counts a text prompt's words, SGLang its BPE tokens plus the "
        "chat template's. Token-id prompts (what a benchmark sends) count the same.",
    ),
    Difference(
        TEXT_PROMPT_CASES, "usage.total_tokens: sim *, sglang *", "The prompt count above, plus output."
    ),
    Difference(
        ("completions_n2",),
        "*",
        "n > 1 is refused with a 400 (one choice per request); SGLang generates n choices. A benchmark "
        "sends n = 1, and a refusal is better than silently returning one choice.",
    ),
    Difference(
        ("server_info",),
        'field.*: sim "null", sglang *',
        "Launch arguments SGLang resolves after parsing from the hardware, the model and its own defaults "
        "(mem_fraction_static, page_size, random_seed, cuda_graph_config, ...); the simulator reports "
        "the parser's default, null, for those it does not model.",
    ),
    Difference(
        ("server_info",),
        "keys: sim only sim",
        "The simulator's own description (profile, performance model, faults, flags not modelled).",
    ),
    Difference(
        ("server_info",),
        "extra.sim: sim only",
        "The same `sim` key, seen among the values that are no launch arguments.",
    ),
    Difference(
        ("model_info",),
        "body: sglang only embedding.*",
        "SGLang's resolved embedding plan comes from its model registry; the simulator serves generation "
        "models only and has no registry.",
    ),
]

SSE_DIFFERENCES = [
    Difference(
        ("chat_stream*",),
        "*prompt_tokens: sse *, sglang *",
        "The test server counts a text prompt's words, SGLang its BPE tokens plus the chat template's.",
    ),
    Difference(
        ("chat_stream*",), "usage.total_tokens: sse *, sglang *", "The prompt count above, plus output."
    ),
    Difference(
        ("generate_stream",),
        "event.*: sglang only meta_info.*",
        "tests/unit/test_sse_server.py pins the test server's /generate events byte for byte without "
        "weight_versions, cached_tokens_details and dp_rank; fairbench's client reads none of them.",
    ),
    Difference(
        ("*_stream_*usage",),
        "event.*: * usage.prompt_tokens_details*",
        "The lab's SGLang reports cached tokens (--enable-cache-report); the test server writes the usage of "
        "one that does not (prompt_tokens_details null), pinned by tests/unit/test_sse_server.py. "
        "fairbench's client reads either.",
    ),
]


# --------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the simulator exited ({process.returncode})"
        try:
            with urllib.request.urlopen(f"{url}/health_generate", timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"the simulator at {url} was not healthy within {timeout_s} s")


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``fairbench sim`` with the launch flags and the model directory real SGLang gets, its modelled times
    ten times the generic profile's: its 3,000-token system prompt then prefills in 30 ms, not 3, which is
    more than a busy machine's delays (the conversation's first turn must stay the slowest)."""
    model_dir = build_tiny_model(tmp_path_factory.mktemp("sim") / "tiny-gpt2")
    port = free_port()
    lab = real_sglang_support.lab_argv(model_dir)
    argv = [sys.executable, "-m", "fairbench", "sim", *lab, "--sim-time-scale", "10"]
    process = subprocess.Popen([*argv, "--host", "127.0.0.1", "--port", str(port)], cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def sse_url() -> Iterator[str]:
    server = ServerThread().start()
    yield server.url
    server.stop()


def url_of(request: pytest.FixtureRequest, target: str) -> str:
    if target == "sglang":
        server: real_sglang_support.RealServer = request.getfixturevalue("real_sglang")
        assert server.alive(), f"real SGLang exited:\n{server.log_tail()}"
        return server.url
    return str(request.getfixturevalue(f"{target}_url"))


@dataclass
class Recordings:
    """Each (server, case) is recorded once per module; the tests that compare read the same records."""

    structures: dict[tuple[str, str], Structure] = field(default_factory=dict)

    def get(self, request: pytest.FixtureRequest, target: str, case: Case) -> Structure:
        key = (target, case.name)
        if key not in self.structures:
            self.structures[key] = asyncio.run(record(url_of(request, target), case))
        return self.structures[key]


async def settle(client: aiohttp.ClientSession, url: str) -> None:
    """Empty the prefix cache; SGLang refuses while a request still runs (an aborted one may be leaving)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while (await send(client, url + "/flush_cache")).status != 200:
        assert time.monotonic() < deadline, f"{url} still busy after {SETTLE_TIMEOUT_S} s"
        await asyncio.sleep(0.2)


async def record(url: str, case: Case) -> Structure:
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        await settle(client, url)
        return await case.run(client, url)


@pytest.fixture(scope="module")
def recordings() -> Recordings:
    return Recordings()


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_the_protocol_suite_runs_against_each_server(
    request: pytest.FixtureRequest, recordings: Recordings, target: str, case: Case
) -> None:
    structure = recordings.get(request, target, case)
    status = structure["status"]
    if target != "sglang" and status != case.status:
        # Only where a listed difference says so: the comparison below has the details.
        difference = f"status: {target} {status}, sglang {case.status}"
        assert unlisted(SIM_DIFFERENCES, case.name, [difference]) == [], structure
    else:
        assert status == case.status, structure
    if "events" in structure:
        assert structure["events"].endswith("[DONE]"), structure["events"]


CASES_BY_NAME = {case.name: case for case in CASES}


def test_each_server_caches_what_fairbenchs_workloads_design(
    request: pytest.FixtureRequest, recordings: Recordings, target: str
) -> None:
    """The cached tokens of each request of the shared-prefix and the multi-turn case are those fairbench
    designs for such a workload (``workload.designed_cached_tokens``, which the ``prefix_reuse`` check
    holds a point to); a conversation's first turn is its slowest to the first token."""
    order = [(group, question) for question in range(len(QUESTIONS)) for group in range(len(SYSTEM_PROMPTS))]
    groups = [
        Prompt(index, QUESTIONS[question], 72, OUTPUT_TOKENS, SYSTEM_PROMPTS[group], group)
        for index, (group, question) in enumerate(order)
    ]
    shared = recordings.get(request, target, CASES_BY_NAME["shared_prefix_groups"])
    assert shared["cached_tokens_by_request"] == list(designed_cached_tokens(groups, FLUSHED).values())
    prompt_len = len(CONVERSATION_SYSTEM_PROMPT)
    turns = []
    for turn, user_turn in enumerate(USER_TURNS):
        prompt_len += len(user_turn) + (OUTPUT_TOKENS if turn else 0)
        system = CONVERSATION_SYSTEM_PROMPT
        turns.append(Prompt(turn, user_turn, prompt_len, OUTPUT_TOKENS, system, conversation=0, turn=turn))
    conversation = recordings.get(request, target, CASES_BY_NAME["multi_turn_live_replies"])
    designed = list(designed_cached_tokens(turns, FLUSHED).values())
    assert conversation["cached_tokens_by_turn"] == [designed] * CONVERSATION_REPEATS
    assert conversation["first_turn_slowest"] is True


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_the_simulator_answers_as_sglang_does(
    request: pytest.FixtureRequest, recordings: Recordings, case: Case
) -> None:
    found = differences(recordings.get(request, "sim", case), recordings.get(request, "sglang", case), "sim")
    assert unlisted(SIM_DIFFERENCES, case.name, found) == []


def test_every_listed_simulator_difference_still_exists(
    request: pytest.FixtureRequest, recordings: Recordings
) -> None:
    found = {
        case.name: differences(
            recordings.get(request, "sim", case), recordings.get(request, "sglang", case), "sim"
        )
        for case in CASES
    }
    gone = [
        entry
        for entry in SIM_DIFFERENCES
        if not any(entry.matches(case, text) for case, texts in found.items() for text in texts)
    ]
    assert gone == [], "listed differences that no longer show: remove them here and in the doc"


@pytest.mark.parametrize("case", SSE_CASES, ids=[case.name for case in SSE_CASES])
def test_the_test_server_streams_as_sglang_does(
    request: pytest.FixtureRequest, recordings: Recordings, case: Case
) -> None:
    found = differences(recordings.get(request, "sse", case), recordings.get(request, "sglang", case), "sse")
    assert unlisted(SSE_DIFFERENCES, case.name, found) == []


def test_every_listed_test_server_difference_still_exists(
    request: pytest.FixtureRequest, recordings: Recordings
) -> None:
    found = {
        case.name: differences(
            recordings.get(request, "sse", case), recordings.get(request, "sglang", case), "sse"
        )
        for case in SSE_CASES
    }
    gone = [
        entry
        for entry in SSE_DIFFERENCES
        if not any(entry.matches(case, text) for case, texts in found.items() for text in texts)
    ]
    assert gone == [], "listed differences that no longer show: remove them here and in the doc"


def test_the_doc_lists_every_difference() -> None:
    doc = DOC.read_text(encoding="utf-8")
    missing = [entry.text for entry in [*SIM_DIFFERENCES, *SSE_DIFFERENCES] if f"`{entry.text}`" not in doc]
    assert missing == [], f"{DOC.relative_to(REPO)} does not list these differences"
