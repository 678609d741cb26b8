"""A small, fast, scriptable HTTP/1.1 server that streams like SGLang 0.5.23.

It is the known-timing counterpart that fairbench's streaming client is tested and
benchmarked against. It shares no code with ``bench/fairbench``: a format helper used
by both would let a shared bug cancel out. Every byte it streams follows SGLang's own
source (``srt/entrypoints/openai/serving_completions.py``, ``serving_chat.py``,
``sse_utils.py``, ``protocol.py``, ``srt/entrypoints/http_server.py``) as served by
uvicorn's httptools protocol behind Starlette's ``StreamingResponse``:

* ``POST /v1/completions``: one ``text_completion`` chunk per output step, the last
  one carrying ``finish_reason``; cumulative ``usage`` on every chunk when
  ``stream_options.continuous_usage_stats``; a final ``choices: []`` usage chunk
  when ``stream_options.include_usage``; then ``data: [DONE]``.
* ``POST /v1/chat/completions``: a role chunk (``"role":"assistant","content":""``)
  right before the first content chunk, content chunks, a separate
  ``finish_reason`` chunk, the optional usage chunk, ``data: [DONE]``.
* ``POST /generate``: cumulative ``text`` and ``output_ids`` and a ``meta_info`` with
  the cumulative ``completion_tokens`` on every chunk, ``data: [DONE]``.

HTTP details that a client can trip over are kept: the OpenAI routes send their
response head only together with the first chunk (SGLang awaits the first chunk
before it returns the ``StreamingResponse``), ``/generate`` sends its head at once;
every SSE event is its own chunk of the chunked transfer encoding and its own
``transport.write``; keep-alive connections idle for ``keep_alive_timeout_s`` are
closed (uvicorn's default under SGLang: 5 s).

Output: ``max_tokens`` / ``max_completion_tokens`` / ``sampling_params.max_new_tokens``
tokens (defaults 16, 16 and 128), or fewer with finish reason ``stop`` when the request
does not set ``ignore_eos`` and ``eos_at`` is configured; ``output_len_override`` forces
a length (a server that returns the wrong length). The first chunk carries one token
(SGLang streams the prefill's token at once), later chunks ``tokens_per_chunk`` tokens
(like ``--stream-interval`` / ``--num-continuous-decode-steps``). Prompt tokens: the
number of token ids, or of whitespace-separated words of a text prompt.

Timing: chunk ``j`` (0-based) of a request goes out at ``dispatch + first_token_ms +
j * chunk_gap_ms``, scheduled against absolute loop times, so a late callback does not
shift the chunks after it. The server records ``time.perf_counter_ns()`` (the client's
clock on the same machine) of each request's arrival and of each content chunk's write:
``GET /debug/send_times`` (``?clear=1`` empties it afterwards) or ``--send-times-file``.

Run it as ``python -m tests.support.sse_server --port 0 [flags]`` from the repository
root (it prints ``listening on HOST:PORT``), in a loop with ``async with SSEServer(...)``,
in a thread with ``ServerThread``, or in a child process with ``ServerProcess``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any, NamedTuple, Protocol

SGLANG_VERSION = "0.5.23"

# Token i of every response is TOKEN_TEXTS[i % 8] with id TOKEN_IDS[i % 8]: plain ASCII,
# so no JSON escaping can differ between encoders.
TOKEN_TEXTS = (" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog")
TOKEN_IDS = (279, 4062, 14198, 39935, 34208, 927, 16053, 5679)
EOS_TOKEN_ID = 2
DEFAULT_COMPLETION_MAX_TOKENS = 16  # CompletionRequest.max_tokens default
DEFAULT_CHAT_MAX_TOKENS = 16  # SGLang's is "up to the context length"; a test wants a number
DEFAULT_GENERATE_MAX_NEW_TOKENS = 128  # SamplingParams.max_new_tokens default

FAULT_KINDS = ("http_error", "malformed", "reset", "stall", "abort", "error_event")
STREAM_APIS = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/generate": "generate"}

# Stream templates are rendered once per shape with these stand-ins and filled per request
# with bytes.replace. Control characters never occur raw in the JSON we emit, and each
# stand-in has the length of its value, so the chunk-size lines stay right.
_RID_SLOT = "\x01" * 32  # uuid4().hex, as SGLang names requests
_CREATED_SLOT = "\x02" * 10  # int(time.time())
_WALL_SLOT = "\x03" * 17  # f"{time.time():.6f}"
_RID_SLOT_B = _RID_SLOT.encode()
_CREATED_SLOT_B = _CREATED_SLOT.encode()
_WALL_SLOT_B = _WALL_SLOT.encode()

_CHUNKED_END = b"0\r\n\r\n"
_DONE_DATA = "data: [DONE]\n\n"
_MAX_HEAD_BYTES = 65536


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class FaultRule:
    """One fault and the requests it strikes.

    ``kind``: ``http_error`` (answer ``status`` with an SGLang error body instead of a
    stream), ``malformed`` (content chunk ``after_chunks`` is sent with its JSON cut in
    half; the stream then goes on), ``reset`` (TCP reset where that chunk was due),
    ``stall`` (nothing more is sent; the connection stays open), ``abort`` (what SGLang
    sends when the scheduler aborts a request with a status, default 503: on the OpenAI
    routes ``data: {"error": {...}}``, the usage chunk if asked for and ``[DONE]``; on
    ``/generate`` a chunk whose ``meta_info.finish_reason`` is ``{"type": "abort", ...}``,
    then ``[DONE]``), ``error_event`` (what SGLang sends when an exception ends a started
    stream, default 400: ``data: {"error": {...}}`` and ``[DONE]`` on every route; with
    ``after=0`` SGLang would answer HTTP 400 on the OpenAI routes, use ``http_error``).
    A fault whose ``after_chunks`` is past the last chunk strikes one gap after it, in
    place of the finish/usage/``[DONE]`` trailer (``malformed``: the last chunk).

    Requests are numbered from 1 in arrival order (streaming API requests only). With
    ``every`` N the rule strikes requests N, 2N, ...; with ``fraction`` F a seeded random
    F of them; with neither, all of them. The first matching rule wins.
    """

    kind: str
    every: int = 0
    fraction: float = 0.0
    after_chunks: int = 1
    status: int = 0  # 0: 500 for http_error, 503 for abort, 400 for error_event
    message: str = ""

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r}: must be one of {', '.join(FAULT_KINDS)}")
        if self.every < 0 or not 0.0 <= self.fraction <= 1.0 or self.after_chunks < 0:
            raise ValueError(f"fault {self.kind}: every >= 0, 0 <= fraction <= 1 and after >= 0")
        if self.status and not 400 <= self.status <= 599:
            raise ValueError(f"fault {self.kind}: status {self.status} is not an HTTP error status")

    @property
    def effective_status(self) -> int:
        return self.status or {"http_error": 500, "abort": 503, "error_event": 400}.get(self.kind, 0)

    @property
    def effective_message(self) -> str:
        return self.message or f"fairbench test server: injected {self.kind}"

    def to_spec(self) -> str:
        """The ``--fault`` argument that parses back to this rule."""
        parts = [self.kind]
        if self.every:
            parts.append(f"every={self.every}")
        if self.fraction:
            parts.append(f"fraction={self.fraction!r}")
        if self.after_chunks != 1:
            parts.append(f"after={self.after_chunks}")
        if self.status:
            parts.append(f"status={self.status}")
        if self.message:
            parts.append(f"message={self.message}")
        return ":".join(parts)

    @classmethod
    def parse(cls, spec: str) -> FaultRule:
        """``KIND[:every=N][:fraction=F][:after=K][:status=S][:message=TEXT]``."""
        kind, *options = spec.split(":")
        values: dict[str, Any] = {}
        for i, option in enumerate(options):
            key, sep, value = option.partition("=")
            if not sep:
                raise ValueError(f"--fault {spec}: option {option!r} is not key=value")
            if key == "message":  # the message may itself contain colons
                values["message"] = ":".join([value, *options[i + 1 :]])
                break
            converters: dict[str, tuple[str, Callable[[str], Any]]] = {
                "every": ("every", int),
                "fraction": ("fraction", float),
                "after": ("after_chunks", int),
                "status": ("status", int),
            }
            if key not in converters:
                raise ValueError(f"--fault {spec}: unknown option {key!r}")
            name, convert = converters[key]
            try:
                values[name] = convert(value)
            except ValueError:
                raise ValueError(f"--fault {spec}: {key}={value!r} is not a number") from None
        return cls(kind=kind, **values)


@dataclass(frozen=True)
class ServerConfig:
    """Every knob of the test server; the command-line flags map one to one."""

    host: str = "127.0.0.1"
    port: int = 0
    first_token_ms: float = 0.0
    chunk_gap_ms: float = 0.0
    tokens_per_chunk: int = 1
    output_len_override: int | None = None
    eos_at: int | None = None
    faults: tuple[FaultRule, ...] = ()
    seed: int = 0
    api_key: str | None = None
    keep_alive_timeout_s: float = 5.0
    model_path: str = "fairbench/test-model"
    record_chunk_times: bool = True
    send_times_file: str | None = None
    cpu: int | None = None

    def __post_init__(self) -> None:
        if self.first_token_ms < 0 or self.chunk_gap_ms < 0:
            raise ValueError("first_token_ms and chunk_gap_ms must be >= 0")
        if self.tokens_per_chunk < 1:
            raise ValueError("tokens_per_chunk must be >= 1")
        if self.output_len_override is not None and self.output_len_override < 0:
            raise ValueError("output_len_override must be >= 0")
        if self.eos_at is not None and self.eos_at < 1:
            raise ValueError("eos_at must be >= 1")

    def to_cli_args(self) -> list[str]:
        """Command-line arguments that ``parse_args`` turns back into this config."""
        args = [
            f"--host={self.host}",
            f"--port={self.port}",
            f"--first-token-ms={self.first_token_ms!r}",
            f"--chunk-gap-ms={self.chunk_gap_ms!r}",
            f"--tokens-per-chunk={self.tokens_per_chunk}",
            f"--seed={self.seed}",
            f"--keep-alive-timeout={self.keep_alive_timeout_s!r}",
            f"--model-path={self.model_path}",
        ]
        if self.output_len_override is not None:
            args.append(f"--output-len-override={self.output_len_override}")
        if self.eos_at is not None:
            args.append(f"--eos-at={self.eos_at}")
        args += [f"--fault={rule.to_spec()}" for rule in self.faults]
        if self.api_key is not None:
            args.append(f"--api-key={self.api_key}")
        if not self.record_chunk_times:
            args.append("--no-chunk-times")
        if self.send_times_file is not None:
            args.append(f"--send-times-file={self.send_times_file}")
        if self.cpu is not None:
            args.append(f"--cpu={self.cpu}")
        return args


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.sse_server",
        description="SGLang-compatible streaming test server with timing and fault knobs.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000, help="0 picks a free port (printed when ready)")
    add("--first-token-ms", type=float, default=0.0, help="dispatch to first content chunk")
    add("--chunk-gap-ms", type=float, default=0.0, help="between content chunks")
    add(
        "--tokens-per-chunk",
        "--stream-interval",
        "--num-continuous-decode-steps",
        type=int,
        default=1,
        help="tokens per chunk after the first (which carries one)",
    )
    add("--output-len-override", type=int, default=None, help="send this many tokens, whatever was asked")
    add("--eos-at", type=int, default=None, help="stop after N tokens unless the request sets ignore_eos")
    add(
        "--fault",
        action="append",
        default=[],
        metavar="KIND[:every=N][:fraction=F][:after=K][:status=S][:message=TEXT]",
        help=f"inject a fault; KIND is one of {', '.join(FAULT_KINDS)}; repeatable",
    )
    add("--seed", type=int, default=0, help="for fault fractions")
    add("--api-key", default=None, help="require 'Authorization: Bearer KEY' on the API routes")
    add("--keep-alive-timeout", type=float, default=5.0, help="close idle connections after S seconds")
    add("--model-path", default="fairbench/test-model")
    add("--no-chunk-times", action="store_true", help="record only the first chunk's send time")
    add("--send-times-file", default=None, help="write the send-time records here (JSON) at exit")
    add("--cpu", type=int, default=None, help="pin the server to this CPU")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> ServerConfig:
    parser = build_arg_parser()
    ns = parser.parse_args(argv)
    try:
        return ServerConfig(
            host=ns.host,
            port=ns.port,
            first_token_ms=ns.first_token_ms,
            chunk_gap_ms=ns.chunk_gap_ms,
            tokens_per_chunk=ns.tokens_per_chunk,
            output_len_override=ns.output_len_override,
            eos_at=ns.eos_at,
            faults=tuple(FaultRule.parse(spec) for spec in ns.fault),
            seed=ns.seed,
            api_key=ns.api_key,
            keep_alive_timeout_s=ns.keep_alive_timeout,
            model_path=ns.model_path,
            record_chunk_times=not ns.no_chunk_times,
            send_times_file=ns.send_times_file,
            cpu=ns.cpu,
        )
    except ValueError as error:
        parser.error(str(error))


# --------------------------------------------------------------------------- stream formats


@dataclass(frozen=True)
class StreamShape:
    """Everything that decides a stream's bytes except its id and clock readings."""

    api: str  # completions | chat | generate
    model: str
    prompt_tokens: int
    output_tokens: int
    tokens_per_chunk: int
    finish: str  # "length" | "stop" (EOS)
    include_usage: bool
    continuous_usage: bool
    first_token_s: float
    chunk_gap_s: float
    fault: FaultRule | None = None


class Event(NamedTuple):
    """What the server writes at one scheduled instant: one ``transport.write`` per frame."""

    offset_s: float  # from dispatch
    frames: tuple[bytes, ...]
    tokens: int  # output tokens carried by the content frame
    content_frame: int  # index of the content frame in ``frames``; -1 if none
    action: str  # "" | "reset" | "stall"


def chunk_token_counts(output_tokens: int, tokens_per_chunk: int) -> list[int]:
    """Tokens per content chunk: the prefill's one token at once, then groups."""
    if output_tokens == 0:
        return [0]
    counts = [1]
    left = output_tokens - 1
    while left > 0:
        counts.append(min(tokens_per_chunk, left))
        left -= counts[-1]
    return counts


def token_text(start: int, stop: int) -> str:
    return "".join(TOKEN_TEXTS[i % 8] for i in range(start, stop))


def _sse(data: str) -> bytes:
    """One SSE event as one chunk of the chunked transfer encoding, as uvicorn frames it."""
    payload = data.encode()
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def _malformed(data: str) -> str:
    """The event's JSON cut in half: a line no JSON parser accepts."""
    return data[: len(data) // 2] + "\n\n"


def _error_type(status: int) -> str:
    """SGLang's error ``type`` for a status: its two spelled-out names, else the enum name."""
    return {400: "BadRequestError", 500: "InternalServerError"}.get(status) or HTTPStatus(status).name


def _usage_full(prompt_tokens: int, completion_tokens: int) -> str:
    """``UsageInfo.model_dump_json()`` (or msgspec of ``model_dump()``): None fields kept."""
    return (
        f'{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens + completion_tokens},'
        f'"completion_tokens":{completion_tokens},"prompt_tokens_details":null,"reasoning_tokens":0,'
        f'"completion_tokens_details":null}}'
    )


class _OpenAIFrames:
    """What /v1/completions and /v1/chat/completions have in common."""

    def __init__(self, shape: StreamShape, head: str) -> None:
        self.shape = shape
        self.head = head  # 'data: {"id":...,"model":...,' up to the choices

    def _usage_chunk(self, completion_tokens: int) -> list[bytes]:
        return []

    def fault_frames(self, rule: FaultRule, j: int, offset: float, sent: int) -> list[bytes]:
        """``create_streaming_error_response`` (note ``json.dumps``'s default separators),
        then what SGLang still sends after it."""
        status = rule.effective_status
        # An abort names its HTTPStatus; an exception gets the default BadRequestError.
        error_type = HTTPStatus(status).name if rule.kind == "abort" else _error_type(status)
        error: dict[str, Any] = {
            "object": "error",
            "message": rule.effective_message,
            "type": error_type,
            "param": None,
            "code": status,
        }
        frames = [_sse(f"data: {json.dumps({'error': error})}\n\n")]
        if rule.kind == "abort":  # the loop breaks; the usage chunk still follows
            frames += self._usage_chunk(sent)
        return [*frames, _sse(_DONE_DATA), _CHUNKED_END]


class _CompletionsFrames(_OpenAIFrames):
    """serving_completions.py: pydantic ``model_dump_json`` of CompletionStreamResponse."""

    def content(self, j: int, offset: float, sent: int, count: int, final: bool) -> tuple[list[str], int]:
        shape = self.shape
        done = sent + count
        finish = f'"{shape.finish}"' if final else "null"
        matched = str(EOS_TOKEN_ID) if final and shape.finish == "stop" else "null"
        usage = _usage_full(shape.prompt_tokens, done) if shape.continuous_usage else "null"
        data = (
            f'{self.head}"choices":[{{"index":0,"text":"{token_text(sent, done)}","logprobs":null,'
            f'"finish_reason":{finish},"matched_stop":{matched}}}],"usage":{usage}}}\n\n'
        )
        return [data], 0

    def _usage_chunk(self, completion_tokens: int) -> list[bytes]:
        if not self.shape.include_usage:
            return []
        prompt_tokens = self.shape.prompt_tokens
        # model_dump_json(exclude_none=True): the None detail fields disappear.
        usage = (
            f'{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens + completion_tokens},'
            f'"completion_tokens":{completion_tokens},"reasoning_tokens":0}}'
        )
        return [_sse(f'{self.head}"choices":[],"usage":{usage}}}\n\n')]

    def trailer(self, offset: float, sent: int) -> list[bytes]:
        return [*self._usage_chunk(sent), _sse(_DONE_DATA), _CHUNKED_END]


class _ChatFrames(_OpenAIFrames):
    """serving_chat.py: content chunks from sse_utils.build_sse_content (msgspec: the delta
    always has reasoning_content and omits None role/content, the choice keeps every field,
    the chunk omits a None usage); the usage chunk is pydantic with None fields kept."""

    def content(self, j: int, offset: float, sent: int, count: int, final: bool) -> tuple[list[str], int]:
        events = []
        if j == 0:  # the role chunk goes out with the first output
            events.append(
                f'{self.head}"choices":[{{"index":0,"delta":{{"reasoning_content":null,"role":"assistant",'
                f'"content":""}},"logprobs":null,"finish_reason":null,"matched_stop":null}}]}}\n\n'
            )
        text = token_text(sent, sent + count)
        if not text:  # SGLang sends no content chunk for an empty delta
            return events, -1
        usage = ""
        if self.shape.continuous_usage:
            usage = f',"usage":{_usage_full(self.shape.prompt_tokens, sent + count)}'
        events.append(
            f'{self.head}"choices":[{{"index":0,"delta":{{"reasoning_content":null,"content":"{text}"}},'
            f'"logprobs":null,"finish_reason":null,"matched_stop":null}}]{usage}}}\n\n'
        )
        return events, len(events) - 1

    def _usage_chunk(self, completion_tokens: int) -> list[bytes]:
        if not self.shape.include_usage:
            return []
        usage = _usage_full(self.shape.prompt_tokens, completion_tokens)
        return [_sse(f'{self.head}"choices":[],"usage":{usage}}}\n\n')]

    def trailer(self, offset: float, sent: int) -> list[bytes]:
        matched = str(EOS_TOKEN_ID) if self.shape.finish == "stop" else "null"
        finish = _sse(
            f'{self.head}"choices":[{{"index":0,"delta":{{"reasoning_content":null}},"logprobs":null,'
            f'"finish_reason":"{self.shape.finish}","matched_stop":{matched}}}]}}\n\n'
        )
        return [finish, *self._usage_chunk(sent), _sse(_DONE_DATA), _CHUNKED_END]


class _GenerateFrames:
    """http_server.py's /generate: orjson of the tokenizer manager's output dict, in its key
    order, with cumulative text and output_ids (non-incremental streaming, the default)."""

    def __init__(self, shape: StreamShape, rid: str, wall: str) -> None:
        self.shape = shape
        self.wall = wall
        self.text = ""
        self.ids: list[str] = []
        self.meta_head = f'"meta_info":{{"id":"{rid}","finish_reason":'
        self.meta_mid = (
            f',"prompt_tokens":{shape.prompt_tokens},"weight_version":"default","num_retractions":0'
            f',"reasoning_tokens":0'
        )

    def _chunk(self, j: int, offset: float, finish: str) -> str:
        tail = f',"completion_tokens":{len(self.ids)},"cached_tokens":0'
        if finish != "null":
            tail += f',"e2e_latency":{round(offset, 6)!r}'
        if j == 0:  # set on the first output the tokenizer manager sends
            tail += f',"response_sent_to_client_ts":{self.wall}'
        output_ids = ",".join(self.ids)
        return (
            f'data: {{"text":"{self.text}","output_ids":[{output_ids}],'
            f"{self.meta_head}{finish}{self.meta_mid}{tail}}}}}\n\n"
        )

    def content(self, j: int, offset: float, sent: int, count: int, final: bool) -> tuple[list[str], int]:
        self.text += token_text(sent, sent + count)
        self.ids += [str(TOKEN_IDS[i % 8]) for i in range(sent, sent + count)]
        if not final:
            finish = "null"
        elif self.shape.finish == "stop":
            finish = f'{{"type":"stop","matched":{EOS_TOKEN_ID}}}'
        else:
            finish = f'{{"type":"length","length":{len(self.ids)}}}'
        return [self._chunk(j, offset, finish)], 0

    def trailer(self, offset: float, sent: int) -> list[bytes]:
        return [_sse(_DONE_DATA), _CHUNKED_END]

    def fault_frames(self, rule: FaultRule, j: int, offset: float, sent: int) -> list[bytes]:
        status = rule.effective_status
        message = json.dumps(rule.effective_message, ensure_ascii=False)
        if rule.kind == "abort":  # a scheduler abort with a status: a normal-looking chunk
            finish = f'{{"type":"abort","message":{message},"status_code":{status},"err_type":null}}'
            data = self._chunk(j, offset, finish)
        else:  # a ValueError inside the stream
            data = (
                f'data: {{"error":{{"message":{message},"type":"invalid_request_error","code":{status},'
                f'"retryable":false}}}}\n\n'
            )
        return [_sse(data), _sse(_DONE_DATA), _CHUNKED_END]


def render_stream(shape: StreamShape, rid: str, created: str, wall: str) -> list[Event]:
    """The events of one stream; ``rid`` must already be JSON-escaped.

    Content chunk ``j`` is due at ``first_token_s + j * chunk_gap_s``; the last one also
    carries the trailer (chat's finish chunk, the usage chunk, ``[DONE]``, the end of the
    chunked body). A fault takes the place of chunk ``after_chunks``, or of the trailer
    (one gap after the last chunk) when that is past the end; ``malformed`` breaks at the
    latest the last content chunk.
    """
    frames_of: _CompletionsFrames | _ChatFrames | _GenerateFrames
    if shape.api == "generate":
        frames_of = _GenerateFrames(shape, rid, wall)
    else:
        kind = "text_completion" if shape.api == "completions" else "chat.completion.chunk"
        model = json.dumps(shape.model, ensure_ascii=False)
        head = f'data: {{"id":"{rid}","object":"{kind}","created":{created},"model":{model},'
        frames_of = (
            _CompletionsFrames(shape, head) if shape.api == "completions" else _ChatFrames(shape, head)
        )
    counts = chunk_token_counts(shape.output_tokens, shape.tokens_per_chunk)
    fault = shape.fault if shape.fault is not None and shape.fault.kind != "http_error" else None
    fault_at = -1
    if fault is not None:
        fault_at = min(fault.after_chunks, len(counts) - 1 if fault.kind == "malformed" else len(counts))
    events: list[Event] = []
    sent = 0
    for j in range(len(counts) + 1):
        offset = shape.first_token_s + j * shape.chunk_gap_s
        if j == fault_at and fault is not None and fault.kind != "malformed":
            if fault.kind in ("reset", "stall"):
                events.append(Event(offset, (), 0, -1, fault.kind))
            else:
                events.append(Event(offset, tuple(frames_of.fault_frames(fault, j, offset, sent)), 0, -1, ""))
            break
        if j == len(counts):
            break
        final = j == len(counts) - 1 and fault_at != len(counts)
        data, content_frame = frames_of.content(j, offset, sent, counts[j], final)
        if j == fault_at:
            data[content_frame] = _malformed(data[content_frame])
        sent += counts[j]
        frames = [_sse(event) for event in data]
        if final:
            frames += frames_of.trailer(offset, sent)
        tokens = counts[j] if content_frame >= 0 else 0
        events.append(Event(offset, tuple(frames), tokens, content_frame, ""))
    return events


class _TemplateCache:
    """Rendered streams by shape, with the id and clock readings left as stand-ins.

    A benchmark's requests mostly share one shape, so rendering happens once and each
    request costs a few ``bytes.replace`` calls at send time. Huge templates (``/generate``
    repeats all output ids in every chunk) are not kept.
    """

    def __init__(self, max_entries: int = 64, max_template_bytes: int = 4 << 20) -> None:
        self._entries: OrderedDict[StreamShape, tuple[Event, ...]] = OrderedDict()
        self._max_entries = max_entries
        self._max_template_bytes = max_template_bytes

    def get(self, shape: StreamShape) -> tuple[Event, ...]:
        events = self._entries.get(shape)
        if events is not None:
            self._entries.move_to_end(shape)
            return events
        events = tuple(render_stream(shape, _RID_SLOT, _CREATED_SLOT, _WALL_SLOT))
        if sum(len(frame) for event in events for frame in event.frames) <= self._max_template_bytes:
            self._entries[shape] = events
            if len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return events


# --------------------------------------------------------------------------- HTTP plumbing


class _Request(NamedTuple):
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    arrival_ns: int


_date_cache: list[Any] = [0, b""]


def _date_value() -> bytes:
    """The ``date`` header value, rendered once a second as uvicorn does."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0] = now
        _date_cache[1] = formatdate(now, usegmt=True).encode()
    return _date_cache[1]  # type: ignore[no-any-return]


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode()


def _response_head(status: int, headers: list[tuple[bytes, bytes]], keep_alive: bool) -> bytes:
    """uvicorn's head: date, server, the app's headers, ``connection: close`` if closing."""
    parts = [_status_line(status), b"date: ", _date_value(), b"\r\nserver: uvicorn\r\n"]
    for name, value in headers:
        parts += [name, b": ", value, b"\r\n"]
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    return b"".join(parts)


def _stream_head(keep_alive: bool) -> bytes:
    # Starlette's StreamingResponse sets only content-type; uvicorn adds the encoding last.
    head = _response_head(200, [(b"content-type", b"text/event-stream; charset=utf-8")], keep_alive)
    return head + b"transfer-encoding: chunked\r\n\r\n"


def _json_bytes(value: Any) -> bytes:
    """orjson's compact form (what ORJSONResponse sends)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error_body(api: str, status: int, message: str) -> bytes:
    """SGLang's error bodies: ErrorResponse on the OpenAI routes, ``{"error": ...}`` on /generate."""
    if api == "generate":
        return _json_bytes({"error": {"message": message}})
    return _json_bytes(
        {"object": "error", "message": message, "type": _error_type(status), "param": None, "code": status}
    )


def _count_words(text: str) -> int:
    return max(1, len(text.split()))


def _int_field(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _HttpError(400, f"{name} must be a positive integer")
    return value


# --------------------------------------------------------------------------- server


class _Stream:
    """Sends one request's planned events, each at its absolute due time."""

    __slots__ = (
        "_conn",
        "_events",
        "_head",
        "_loop",
        "_next",
        "_record",
        "_server",
        "_start",
        "_substitutions",
        "_timer",
    )

    def __init__(
        self,
        conn: _HttpConnection,
        *,
        events: Sequence[Event],
        head: bytes | None,
        substitutions: tuple[tuple[bytes, bytes], ...],
        record: dict[str, Any],
        start: float,
    ) -> None:
        self._conn = conn
        self._server = conn.server
        self._loop = conn.server.loop
        self._events = events
        self._head = head
        self._substitutions = substitutions
        self._record = record
        self._start = start  # loop.time() at dispatch: every event is due relative to it
        self._next = 0
        self._timer: asyncio.Handle | None = None

    def begin(self) -> None:
        self._schedule(self._start + self._events[0].offset_s)

    def _schedule(self, due: float) -> None:
        loop = self._loop
        # An event already due skips the timer heap (whose comparisons are Python code):
        # call_soon runs it on the loop's next pass, after the other streams' due events.
        if due <= loop.time():
            self._timer = loop.call_soon(self._fire)
        else:
            self._timer = loop.call_at(due, self._fire)

    def cancel(self, outcome: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._record["outcome"]:
            self._record["outcome"] = outcome

    def _fire(self) -> None:
        self._timer = None
        transport = self._conn.transport
        if transport is None:
            return
        _offset, frames, tokens, content_frame, action = self._events[self._next]
        self._next += 1
        if action == "reset":
            self._record["outcome"] = "reset"
            self._conn.reset()
            return
        if action == "stall":
            self._record["outcome"] = "stalled"  # the connection stays open, silent
            return
        write = transport.write
        if self._head is not None:
            write(self._head)
            self._head = None
        server = self._server
        for index, frame in enumerate(frames):
            for slot, value in self._substitutions:
                frame = frame.replace(slot, value)  # noqa: PLW2901 - filled copy of the template
            if index == content_frame:
                sent_ns = time.perf_counter_ns()
                record = self._record
                if record["first_chunk_ns"] == 0:
                    record["first_chunk_ns"] = sent_ns
                if server.record_chunk_times:
                    record["chunk_ns"].append(sent_ns)
                    record["chunk_tokens"].append(tokens)
                record["output_tokens"] += tokens
                server.content_chunks += 1
            write(frame)
        server.sse_events += len(frames)
        if self._next < len(self._events):
            self._schedule(self._start + self._events[self._next].offset_s)
        else:
            if not self._record["outcome"]:
                self._record["outcome"] = "complete"
            self._conn.response_done()


class _HttpConnection(asyncio.Protocol):
    """One client connection: HTTP/1.1 requests in order, keep-alive, one stream at a time."""

    def __init__(self, server: SSEServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._arrival_ns = 0
        self._busy = False  # a response is under way; later requests wait in the buffer
        self._processing = False  # inside _process_buffer: it will take the next request itself
        self._closing = False
        self._keep_alive = True
        self._stream: _Stream | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)
        self._arm_idle_timer()

    def data_received(self, data: bytes) -> None:
        if not self._buffer:
            self._arrival_ns = time.perf_counter_ns()
        self._buffer += data
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if not self._busy:
            self._process_buffer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.server.connections.discard(self)
        if self._stream is not None:
            self._stream.cancel("client_closed")
            self._stream = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    # requests

    def _process_buffer(self) -> None:
        self._processing = True
        try:
            while not self._busy and not self._closing and self.transport is not None:
                try:
                    request = self._take_request()
                except _HttpError as error:
                    self._keep_alive = False
                    self.send_response(error.status, _json_bytes({"detail": str(error)}))
                    return
                if request is None:
                    break
                self._keep_alive = request.keep_alive
                self.server.handle(self, request)
        finally:
            self._processing = False
        if not self._busy:
            self._arm_idle_timer()

    def _take_request(self) -> _Request | None:
        head_end = self._buffer.find(b"\r\n\r\n")
        if head_end < 0:
            if len(self._buffer) > _MAX_HEAD_BYTES:
                raise _HttpError(431, "request head too large")
            return None
        lines = bytes(self._buffer[:head_end]).decode("latin-1").split("\r\n")
        request_line = lines[0].split(" ")
        if len(request_line) != 3 or not request_line[2].startswith("HTTP/1."):
            raise _HttpError(400, "malformed request line")
        method, target, version = request_line
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise _HttpError(400, "chunked request bodies are not supported by the test server")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise _HttpError(400, "bad content-length") from None
        body_start = head_end + 4
        if len(self._buffer) < body_start + length:
            return None
        body = bytes(self._buffer[body_start : body_start + length])
        del self._buffer[: body_start + length]
        arrival_ns = self._arrival_ns
        if self._buffer:  # a pipelined request: it arrived no later than now
            self._arrival_ns = time.perf_counter_ns()
        path, _, query_string = target.partition("?")
        query = dict(part.partition("=")[::2] for part in query_string.split("&") if part)
        connection = headers.get("connection", "").lower()
        keep_alive = version != "HTTP/1.0" and "close" not in connection
        return _Request(method, path, query, headers, body, keep_alive, arrival_ns)

    # responses

    def send_response(
        self, status: int, body: bytes, content_type: bytes | None = b"application/json"
    ) -> None:
        if self.transport is None:
            return
        headers = [(b"content-length", str(len(body)).encode())]
        if content_type is not None:
            headers.append((b"content-type", content_type))
        self.transport.write(_response_head(status, headers, self._keep_alive) + b"\r\n" + body)
        self.response_done()

    def start_stream(
        self,
        events: Sequence[Event],
        head_now: bool,
        substitutions: tuple[tuple[bytes, bytes], ...],
        record: dict[str, Any],
        start: float,
    ) -> None:
        assert self.transport is not None
        head = _stream_head(self._keep_alive)
        if head_now:
            self.transport.write(head)
        self._busy = True
        self._stream = _Stream(
            self,
            events=events,
            head=None if head_now else head,
            substitutions=substitutions,
            record=record,
            start=start,
        )
        self._stream.begin()

    def response_done(self) -> None:
        self._stream = None
        self._busy = False
        if not self._keep_alive:  # "Connection: close" or HTTP/1.0: nothing after this response
            self._closing = True
            if self.transport is not None:
                self.transport.close()
        elif not self._processing:  # a stream ended: serve a pipelined request, if any
            self._process_buffer()

    def reset(self) -> None:
        """Close with a TCP RST: SO_LINGER on, zero timeout, then drop the socket."""
        transport = self.transport
        if transport is None:
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    def _arm_idle_timer(self) -> None:
        timeout = self.server.config.keep_alive_timeout_s
        if timeout > 0 and self._idle_timer is None and self.transport is not None and not self._closing:
            self._idle_timer = self.server.loop.call_later(timeout, self._idle_timeout)

    def _idle_timeout(self) -> None:
        self._idle_timer = None
        if not self._busy and not self._buffer and self.transport is not None:
            self.transport.close()

    def shutdown(self) -> None:
        if self._stream is not None:
            self._stream.cancel("server_stopped")
        if self.transport is not None:
            self.transport.abort()


class SSEServer:
    """The test server on the running event loop.

    ``async with SSEServer(ServerConfig(first_token_ms=100)) as server: ... server.url``;
    knobs may also be passed as keywords: ``SSEServer(chunk_gap_ms=20)``.
    """

    def __init__(self, config: ServerConfig | None = None, **knobs: Any) -> None:
        config = config or ServerConfig()
        self.config = dataclasses.replace(config, **knobs) if knobs else config
        self.record_chunk_times = self.config.record_chunk_times
        self.connections: set[_HttpConnection] = set()
        self.records: list[dict[str, Any]] = []
        self.requests_seen = 0
        self.content_chunks = 0
        self.sse_events = 0
        self._templates = _TemplateCache()
        self._random = random.Random(self.config.seed)
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._port = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "server not started"
        return self._loop

    @property
    def host(self) -> str:
        return self.config.host

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(
            lambda: _HttpConnection(self),
            self.config.host,
            self.config.port,
            backlog=4096,
            reuse_address=True,
        )
        self._port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for conn in list(self.connections):
            conn.shutdown()
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> SSEServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def send_times(self, clear: bool = False) -> list[dict[str, Any]]:
        """Copies of the per-request records (call from the server's loop thread)."""
        records = [
            dict(r, chunk_ns=list(r["chunk_ns"]), chunk_tokens=list(r["chunk_tokens"])) for r in self.records
        ]
        if clear:
            self.records = []
        return records

    def stats(self) -> dict[str, Any]:
        """Counters and this process's CPU seconds: a benchmark shows the server kept up."""
        times = os.times()
        return {
            "requests": self.requests_seen,
            "content_chunks": self.content_chunks,
            "sse_events": self.sse_events,
            "open_connections": len(self.connections),
            "cpu_s": time.process_time(),
            "cpu_user_s": times.user,
            "cpu_system_s": times.system,
        }

    def write_send_times(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps(self._send_times_document(self.records)))

    def _send_times_document(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"clock": "time.perf_counter_ns", "pid": os.getpid(), "requests": records}

    # routing

    def handle(self, conn: _HttpConnection, request: _Request) -> None:
        api = STREAM_APIS.get(request.path)
        if api is not None:
            if request.method != "POST":
                conn.send_response(405, _json_bytes({"detail": "Method Not Allowed"}))
                return
            try:
                self._handle_stream(conn, request, api)
            except _HttpError as error:
                conn.send_response(error.status, _error_body(api, error.status, str(error)))
            return
        route = _ROUTES.get(request.path)
        if route is None:
            conn.send_response(404, _json_bytes({"detail": "Not Found"}))
        elif request.method not in route[0]:
            conn.send_response(405, _json_bytes({"detail": "Method Not Allowed"}))
        else:
            route[1](self, conn, request)

    def _handle_stream(self, conn: _HttpConnection, request: _Request, api: str) -> None:
        config = self.config
        if config.api_key is not None and request.headers.get("authorization") != f"Bearer {config.api_key}":
            conn.send_response(401, _json_bytes({"error": "Unauthorized"}))
            return
        try:
            body = json.loads(request.body)
        except (ValueError, UnicodeDecodeError):
            raise _HttpError(400, "request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise _HttpError(400, "request body must be a JSON object")
        if not body.get("stream"):
            raise _HttpError(400, "the fairbench test server only streams: send stream=true")
        prompt_tokens, max_tokens, ignore_eos = _read_request(api, body)
        include_usage = continuous_usage = False
        if api != "generate":
            options = body.get("stream_options") or {}
            if not isinstance(options, dict):
                raise _HttpError(400, "stream_options must be an object")
            include_usage = bool(options.get("include_usage"))
            continuous_usage = bool(options.get("continuous_usage_stats"))
        rid = body.get("rid")  # SGLang names the request (and its chunks) after it if given
        if rid is None:
            rid = uuid.uuid4().hex
        elif not isinstance(rid, str):
            raise _HttpError(400, "rid must be a string")

        # The schedule starts here, before any rendering, so a slow render delays nothing.
        start = self.loop.time()
        dispatch_ns = time.perf_counter_ns()
        self.requests_seen += 1
        fault = self._pick_fault(self.requests_seen)
        record: dict[str, Any] = {
            "index": self.requests_seen,
            "id": rid,
            "path": request.path,
            "arrival_ns": request.arrival_ns,
            "dispatch_ns": dispatch_ns,
            "first_chunk_ns": 0,
            "chunk_ns": [],
            "chunk_tokens": [],
            "prompt_tokens": prompt_tokens,
            "output_tokens": 0,
            "fault": fault.kind if fault else "",
            "status": 200,
            "outcome": "",
        }
        self.records.append(record)
        if fault is not None and fault.kind == "http_error":
            record["status"] = fault.effective_status
            record["outcome"] = "http_error"
            conn.send_response(
                fault.effective_status, _error_body(api, fault.effective_status, fault.effective_message)
            )
            return

        output_tokens = max_tokens
        finish = "length"
        if config.output_len_override is not None:
            output_tokens = config.output_len_override
        elif not ignore_eos and config.eos_at is not None and config.eos_at < max_tokens:
            output_tokens = config.eos_at
            finish = "stop"
        shape = StreamShape(
            api=api,
            model=str(body.get("model") or "default"),
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            tokens_per_chunk=config.tokens_per_chunk,
            finish=finish,
            include_usage=include_usage,
            continuous_usage=continuous_usage,
            first_token_s=config.first_token_ms / 1000.0,
            chunk_gap_s=config.chunk_gap_ms / 1000.0,
            fault=fault,
        )
        if len(rid) == len(_RID_SLOT) and rid.isascii() and rid.isalnum():
            events: Sequence[Event] = self._templates.get(shape)
            rid_bytes = rid.encode()
        else:  # an id of another length or with characters to escape: render this one
            escaped = json.dumps(rid, ensure_ascii=False)[1:-1]
            events = render_stream(shape, escaped, _CREATED_SLOT, _WALL_SLOT)
            rid_bytes = _RID_SLOT_B  # nothing to fill in
        now = time.time()
        substitutions = (
            (_RID_SLOT_B, rid_bytes),
            (_CREATED_SLOT_B, b"%d" % int(now))
            if api != "generate"
            else (_WALL_SLOT_B, b"%.6f" % (now + shape.first_token_s)),
        )
        conn.start_stream(
            events, head_now=api == "generate", substitutions=substitutions, record=record, start=start
        )

    def _pick_fault(self, request_number: int) -> FaultRule | None:
        for rule in self.config.faults:
            if rule.every:
                if request_number % rule.every == 0:
                    return rule
            elif rule.fraction:
                if self._random.random() < rule.fraction:
                    return rule
            else:
                return rule
        return None

    # plain endpoints

    def _health(self, conn: _HttpConnection, request: _Request) -> None:
        conn.send_response(200, b"", content_type=None)

    def _server_info(self, conn: _HttpConnection, request: _Request) -> None:
        config = self.config
        info = {
            "model_path": config.model_path,
            "served_model_name": config.model_path,
            "tp_size": 1,
            "stream_interval": config.tokens_per_chunk,
            "num_continuous_decode_steps": config.tokens_per_chunk,
            "max_running_requests": None,
            "launch_command": " ".join(["python -m tests.support.sse_server", *config.to_cli_args()]),
            "internal_states": [{"last_gen_throughput": 0.0}],
            "version": SGLANG_VERSION,
            "frontend": "python",
            "fairbench_test_server": dataclasses.asdict(config),
        }
        conn.send_response(200, _json_bytes(info))

    def _models(self, conn: _HttpConnection, request: _Request) -> None:
        model = {
            "id": self.config.model_path,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
        }
        conn.send_response(200, _json_bytes({"object": "list", "data": [model]}))

    def _flush_cache(self, conn: _HttpConnection, request: _Request) -> None:
        text = (
            "Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation will not be performed.)\n"
        )
        conn.send_response(200, text.encode(), content_type=None)

    def _debug_send_times(self, conn: _HttpConnection, request: _Request) -> None:
        records = self.records
        if request.query.get("clear") in ("1", "true"):
            self.records = []
        conn.send_response(200, _json_bytes(self._send_times_document(records)))

    def _debug_stats(self, conn: _HttpConnection, request: _Request) -> None:
        conn.send_response(200, _json_bytes(self.stats()))


_ROUTES: dict[str, tuple[tuple[str, ...], Callable[[SSEServer, _HttpConnection, _Request], None]]] = {
    "/health": (("GET",), SSEServer._health),
    "/health_generate": (("GET",), SSEServer._health),
    "/server_info": (("GET",), SSEServer._server_info),
    "/get_server_info": (("GET",), SSEServer._server_info),
    "/v1/models": (("GET",), SSEServer._models),
    "/flush_cache": (("GET", "POST"), SSEServer._flush_cache),
    "/debug/send_times": (("GET",), SSEServer._debug_send_times),
    "/debug/stats": (("GET",), SSEServer._debug_stats),
}


def _read_request(api: str, body: dict[str, Any]) -> tuple[int, int, bool]:
    """(prompt tokens, requested output tokens, ignore_eos) of a request body."""
    if api == "completions":
        prompt = body.get("prompt")
        if isinstance(prompt, str) and prompt:
            prompt_tokens = _count_words(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_tokens = len(prompt)
        elif not prompt:
            raise _HttpError(400, "Prompt cannot be empty")
        else:
            raise _HttpError(400, "the test server takes one prompt: a string or a list of token ids")
        return (
            prompt_tokens,
            _int_field(body, "max_tokens", DEFAULT_COMPLETION_MAX_TOKENS),
            bool(body.get("ignore_eos")),
        )
    if api == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _HttpError(400, "messages must be a non-empty list")
        words = 0
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                words += len(content.split())
            elif isinstance(content, list):
                words += sum(
                    len(str(part.get("text", "")).split()) for part in content if isinstance(part, dict)
                )
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        max_tokens = _int_field({"max_tokens": max_tokens}, "max_tokens", DEFAULT_CHAT_MAX_TOKENS)
        return max(1, words), max_tokens, bool(body.get("ignore_eos"))
    input_ids = body.get("input_ids")
    text = body.get("text")
    if isinstance(input_ids, list) and input_ids and all(isinstance(t, int) for t in input_ids):
        prompt_tokens = len(input_ids)
    elif isinstance(text, str) and text:
        prompt_tokens = _count_words(text)
    else:
        raise _HttpError(400, "the test server takes one prompt: text or a list of input_ids")
    sampling_params = body.get("sampling_params") or {}
    if not isinstance(sampling_params, dict):
        raise _HttpError(400, "sampling_params must be an object")
    max_new_tokens = _int_field(sampling_params, "max_new_tokens", DEFAULT_GENERATE_MAX_NEW_TOKENS)
    return prompt_tokens, max_new_tokens, bool(sampling_params.get("ignore_eos"))


# --------------------------------------------------------------------------- running it


class RunningServer(Protocol):
    """What ServerThread and ServerProcess both offer a test."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def url(self) -> str: ...

    @property
    def port(self) -> int: ...

    def send_times(self, clear: bool = False) -> list[dict[str, Any]]: ...

    def stats(self) -> dict[str, Any]: ...

    def stop(self) -> None: ...


StartServer = Callable[..., RunningServer]
"""The ``sse_server`` fixture: ``sse_server(config=None, *, process=False, **knobs)``."""


class ServerThread:
    """The server on its own event loop in a daemon thread, for synchronous tests.

    ``with ServerThread(ServerConfig(chunk_gap_ms=5)) as server: urlopen(server.url + ...)``.
    The thread shares the GIL with the test; timing-sensitive benchmarks use ServerProcess.
    """

    def __init__(self, config: ServerConfig | None = None, **knobs: Any) -> None:
        self.server = SSEServer(config, **knobs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="sse-test-server", daemon=True)
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None

    @property
    def config(self) -> ServerConfig:
        return self.server.config

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> ServerThread:
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as error:
            self._startup_error = error
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.stop())
        self._loop.close()

    def _call(self, function: Callable[[], Any]) -> Any:
        async def call() -> Any:
            return function()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=10)

    def send_times(self, clear: bool = False) -> list[dict[str, Any]]:
        return self._call(lambda: self.server.send_times(clear))  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        return self._call(self.server.stats)  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


REPO_ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"^listening on (.+):(\d+)$")


class ServerProcess:
    """The server in a child process (``python -m tests.support.sse_server``).

    Its own interpreter and, with ``ServerConfig(cpu=N)``, its own core: what a client
    benchmark measures against. ``send_times()`` and ``stats()`` ask it over HTTP.
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        python: str = sys.executable,
        startup_timeout_s: float = 15.0,
        **knobs: Any,
    ) -> None:
        config = config or ServerConfig()
        self.config = dataclasses.replace(config, **knobs) if knobs else config
        self._python = python
        self._startup_timeout_s = startup_timeout_s
        self._process: subprocess.Popen[str] | None = None
        # The server's stderr goes to a file that lives as long as this object: nobody
        # drains a pipe while the server runs, and a full pipe would stop it mid-benchmark.
        self._stderr: IO[str] = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.host = self.config.host
        self.port = 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def start(self) -> ServerProcess:
        command = [self._python, "-m", "tests.support.sse_server", *self.config.to_cli_args()]
        self._process = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=self._stderr, text=True
        )
        ready = threading.Event()
        lines: list[str] = []

        def read_first_line() -> None:
            assert self._process is not None and self._process.stdout is not None
            lines.append(self._process.stdout.readline().strip())
            ready.set()

        threading.Thread(target=read_first_line, daemon=True).start()
        if not ready.wait(self._startup_timeout_s) or not (match := _LISTENING.match(lines[0])):
            self.stop()
            raise RuntimeError(f"test server did not start: {lines[:1]} {self.stderr()[-2000:]}")
        self.port = int(match.group(2))
        return self

    def stderr(self) -> str:
        """What the server wrote to stderr so far (tracebacks of a failed test)."""
        self._stderr.seek(0)
        return self._stderr.read()

    def _get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read())

    def send_times(self, clear: bool = False) -> list[dict[str, Any]]:
        document = self._get_json("/debug/send_times" + ("?clear=1" if clear else ""))
        return document["requests"]  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        return self._get_json("/debug/stats")  # type: ignore[no-any-return]

    def stop(self) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


async def serve(config: ServerConfig) -> None:
    """Run until SIGTERM or SIGINT; print the address once listening."""
    server = SSEServer(config)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"listening on {server.host}:{server.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
        if config.send_times_file:
            server.write_send_times(config.send_times_file)


def main(argv: Sequence[str] | None = None) -> None:
    config = parse_args(argv)
    if config.cpu is not None:
        os.sched_setaffinity(0, {config.cpu})
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config))


if __name__ == "__main__":
    main()
