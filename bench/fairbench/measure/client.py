"""Streaming HTTP client for SGLang's three generation APIs (formats of SGLang 0.5.23).

Each network read is timestamped (``perf_counter_ns``) the moment it is handed over,
then fed to the stream's parser; an event's arrival time is the arrival of the read
that completed it. Parsing as reads come spreads its cost evenly: parsing whole
streams at their end made bursts of hundreds of milliseconds when a wave of C
requests ended together, delaying the first tokens of the next wave. The streams
go through measure/http_stream.py, which feeds the parser from the socket's own
callback; the few requests that do not stream (health, model list) use aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import aiohttp
import orjson

from fairbench.measure.http_stream import ConnectionPool, HttpStreamError
from fairbench.measure.records import RequestRecord
from fairbench.measure.workload import APIS, CHAT, Prompt

ERROR_EXCERPT_CHARS = 300
CONNECTION_FAILED = "connection failed: "
STALLED = "stalled: "
"""How a request's error starts when the connection failed (refused, reset, cut mid-stream)."""
PLAIN_HTTP_HINT = "if the server speaks plain HTTP, use http://"
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 600.0
"""Seconds without data before a stream fails."""


class StreamError(Exception):
    """The stream broke a rule of the format; the message says which."""


class ServerUnreachable(Exception):
    """The server cannot be used: no connection, an error status, or an answer its API does not allow.

    The message names the URL and the reason."""


@dataclass(slots=True)
class StreamCounts:
    """What parsing a finished stream yields (the fields of RequestRecord it fills)."""

    chunk_ns: list[int]
    chunk_tokens: list[int]
    output_len: int
    prompt_len: int | None
    server_sent_s: float | None
    """``meta_info.response_sent_to_client_ts`` of the first event (epoch seconds): when SGLang's
    ``/generate`` sent it; None when the stream did not say."""
    cached_tokens: int | None = None
    """The prompt tokens the server says came from its prefix cache (:func:`_cached_tokens`); None when
    the stream did not say."""
    server_received_s: float | None = None
    """``meta_info.request_received_ts`` of the last event (epoch seconds): when SGLang's tokenizer manager
    received the request (``/generate`` with ``--enable-metrics``); None when the stream did not say."""
    spec: SpecCounts | None = None
    """What the last event says of the request's speculative decoding (:func:`_spec_counts`); None when it
    says nothing of it."""


@dataclass(frozen=True, slots=True)
class SpecCounts:
    """A request's speculative decoding as SGLang 0.5.23's ``/generate`` reports it in its last event's
    ``meta_info`` (``TokenizerManager._calculate_spec_decoding_metrics``, run once the request finished,
    only on a server with a speculative algorithm and for a request with at least one verify step). Each
    field None where the event lacks it or holds no valid value; RequestRecord's ``spec_*`` fields."""

    accept_length: float | None = None
    """``spec_accept_length``: completion_tokens / spec_verify_ct."""
    accept_rate: float | None = None
    """``spec_accept_rate``: spec_num_correct_drafts / spec_num_proposed_drafts."""
    verify_ct: int | None = None
    """``spec_verify_ct``: verify steps, at least 1."""
    num_correct_drafts: int | None = None
    """``spec_num_correct_drafts``: draft tokens accepted."""
    num_proposed_drafts: int | None = None
    """``spec_num_proposed_drafts``: draft tokens proposed."""


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_EXCERPT_CHARS else text[:ERROR_EXCERPT_CHARS] + "..."


def _stream_error(data: dict[str, Any]) -> str | None:
    """A failure reported inside a 200 stream, or None.

    SGLang's OpenAI routes send ``{"error": {...}}``; ``/generate`` ends an aborted
    request with ``meta_info.finish_reason = {"type": "abort", "message": ...}``.
    """
    error = data.get("error")
    if error is not None:
        message = error.get("message", error) if isinstance(error, dict) else error
        return f"server error in stream: {message}"
    finish = (data.get("meta_info") or {}).get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        return f"server aborted the request: {finish.get('message', '')}"
    return None


EventCount = tuple[int | None, int | None, bool, bool]
"""What one stream event says: (the server's cumulative completion tokens if given, prompt tokens
if given, has text, carries output). OpenAI's closing usage-only event (``choices: []``) carries
no output. A plain tuple: this runs once per token."""


def _openai_count(data: dict[str, Any]) -> EventCount:
    """An event of the completions or chat API: a choice's output is its ``text`` (completions), or its
    delta's ``content`` and ``reasoning_content`` (chat: reasoning models stream their thinking apart,
    and it is output all the same)."""
    usage = data.get("usage") or {}
    choices = data.get("choices")
    if not choices:
        return usage.get("completion_tokens"), usage.get("prompt_tokens"), False, False
    choice = choices[0]
    has_text = bool(choice.get("text"))
    if not has_text:
        delta = choice.get("delta") or {}
        has_text = bool(delta.get("reasoning_content") or delta.get("content"))
    return usage.get("completion_tokens"), usage.get("prompt_tokens"), has_text, True


def _generate_count(data: dict[str, Any]) -> EventCount:
    meta = data.get("meta_info") or {}
    return meta.get("completion_tokens"), meta.get("prompt_tokens"), bool(data.get("text")), True


class Reply:
    """What a stream's events wrote, joined: token ids (``/generate``'s ``output_ids``) and text."""

    __slots__ = ("ids", "text")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.text: list[str] = []


def _generate_reply(reply: Reply, data: dict[str, Any]) -> None:
    """``/generate``'s event: its ``output_ids`` and ``text`` are the whole output so far (SGLang's
    default) or only the event's (``--incremental-streaming-output``). Which one, each event says: whole
    when it holds as many ids as its ``completion_tokens``, so the reply is replaced, else extended."""
    ids = data.get("output_ids")
    if not isinstance(ids, list):
        return
    text = data.get("text")
    if len(ids) == (data.get("meta_info") or {}).get("completion_tokens"):
        reply.ids = ids
        reply.text = [text] if isinstance(text, str) else []
    else:
        reply.ids.extend(ids)
        if isinstance(text, str):
            reply.text.append(text)


def _openai_reply(reply: Reply, data: dict[str, Any]) -> None:
    """A completions or chat event's text: a choice's ``text``, or its delta's ``content`` (a reasoning
    model's ``reasoning_content`` is left out, as chat clients leave it out of the next turn)."""
    choices = data.get("choices")
    if not choices:
        return
    choice = choices[0]
    text = choice.get("text")
    if text is None:
        text = (choice.get("delta") or {}).get("content")
    if isinstance(text, str):
        reply.text.append(text)


def _cached_tokens(data: dict[str, Any] | None) -> int | None:
    """The cached prompt tokens a stream's last event reports: ``meta_info.cached_tokens`` on
    ``/generate`` (always), ``usage.prompt_tokens_details.cached_tokens`` on the OpenAI APIs (only from a
    server started with ``--enable-cache-report``)."""
    if data is None:
        return None
    meta = data.get("meta_info")
    if isinstance(meta, dict):
        value = meta.get("cached_tokens")
    else:
        usage = data.get("usage")
        details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
        value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _server_sent_s(data: dict[str, Any]) -> float | None:
    """``meta_info.response_sent_to_client_ts``: SGLang stamps a stream's first event with it (with
    ``--enable-metrics`` its last event repeats the same value); only the first is read."""
    meta = data.get("meta_info")
    sent = meta.get("response_sent_to_client_ts") if isinstance(meta, dict) else None
    return float(sent) if isinstance(sent, int | float) and not isinstance(sent, bool) else None


def _server_received_s(data: dict[str, Any] | None) -> float | None:
    """``meta_info.request_received_ts``, which SGLang puts on a stream's last event with
    ``--enable-metrics``."""
    meta = data.get("meta_info") if data is not None else None
    received = meta.get("request_received_ts") if isinstance(meta, dict) else None
    return float(received) if isinstance(received, int | float) and not isinstance(received, bool) else None


def _spec_count(value: object, least: int) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= least else None


def _spec_ratio(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)  # orjson reads no number past a float's range, nor NaN
    return number if math.isfinite(number) and number >= 0 else None


def _spec_counts(data: dict[str, Any] | None) -> SpecCounts | None:
    """The ``spec_*`` keys of a stream's last event's ``meta_info`` (:class:`SpecCounts`); None where it has
    none that hold a valid value: the OpenAI APIs' events carry no ``meta_info``, and SGLang writes them
    only on a finished request's event, only with speculative decoding."""
    meta = data.get("meta_info") if data is not None else None
    if not isinstance(meta, dict):
        return None
    counts = SpecCounts(
        accept_length=_spec_ratio(meta.get("spec_accept_length")),
        accept_rate=_spec_ratio(meta.get("spec_accept_rate")),
        verify_ct=_spec_count(meta.get("spec_verify_ct"), 1),
        num_correct_drafts=_spec_count(meta.get("spec_num_correct_drafts"), 0),
        num_proposed_drafts=_spec_count(meta.get("spec_num_proposed_drafts"), 0),
    )
    return None if counts == SpecCounts() else counts


def _unreachable_reason(exc: BaseException, url: str, connect_timeout: float, answer_timeout: float) -> str:
    """Why no answer came from ``url``, in words: aiohttp's own messages hide the reason."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"its TLS certificate was refused ({exc.certificate_error})"
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return f"TLS handshake failed ({exc.os_error}); {PLAIN_HTTP_HINT}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, socket.gaierror):
            return f"host name {exc.host!r} not resolved ({exc.os_error.strerror})"
        if isinstance(exc.os_error, ConnectionRefusedError):
            return f"connection refused: nothing listens on {exc.host}:{exc.port}"
        return f"cannot connect to {exc.host}:{exc.port} ({exc.os_error.strerror or exc.os_error})"
    if isinstance(exc, aiohttp.ServerTimeoutError):  # only the connection has a timeout of its own
        if url.startswith("https://"):  # a plain-HTTP server waits for a request, never answering TLS
            return f"no TLS connection within {connect_timeout:g} s; {PLAIN_HTTP_HINT}"
        return f"no connection within {connect_timeout:g} s"
    if isinstance(exc, asyncio.TimeoutError):
        return f"no answer within {answer_timeout:g} s"
    return f"{type(exc).__name__}: {_excerpt(str(exc))}" if str(exc) else type(exc).__name__


def _text(tokens: list[int] | str) -> str:
    return tokens if isinstance(tokens, str) else " ".join(map(str, tokens))


def _messages(prompt: Prompt) -> list[dict[str, str]]:
    """The chat API's messages: a conversation's turn as a chat client sends it (its system prompt as the
    system message, each earlier turn as the user's message and the assistant's reply, then the user's
    turn); any other prompt as one user message of its whole input, as sglang.bench_serving sends it."""
    if prompt.conversation is None:
        return [{"role": "user", "content": _text(prompt.whole_input())}]
    messages = [] if prompt.system is None else [{"role": "system", "content": _text(prompt.system)}]
    for user, reply in prompt.earlier:
        messages.append({"role": "user", "content": _text(user)})
        messages.append({"role": "assistant", "content": _text(reply)})
    messages.append({"role": "user", "content": _text(prompt.prompt)})
    return messages


class ApiFormat:
    """Request body and stream reading for one API."""

    def __init__(self, name: str, model: str) -> None:
        if name not in APIS:
            raise ValueError(f"api: {name!r} is not one of {', '.join(APIS)}")
        self.name = name
        self.model = model
        self.path = {
            "completions": "/v1/completions",
            "chat": "/v1/chat/completions",
            "generate": "/generate",
        }[name]
        self._count = _generate_count if name == "generate" else _openai_count

    def body(self, prompt: Prompt, rid: str) -> bytes:
        """The request body; output length is enforced with ignore_eos, greedy sampling.

        ``rid`` is SGLang's request id on all three APIs: its logs then name our requests.
        """
        if self.name == "generate":
            key = "text" if isinstance(prompt.prompt, str) else "input_ids"
            payload: dict[str, Any] = {
                key: prompt.whole_input(),
                "sampling_params": {
                    "max_new_tokens": prompt.output_len,
                    "temperature": 0.0,
                    "ignore_eos": True,
                },
                "stream": True,
                "rid": rid,
            }
        else:
            payload = {
                "model": self.model,
                "max_tokens": prompt.output_len,
                "temperature": 0.0,
                "ignore_eos": True,
            }
            if self.name == CHAT:
                payload["messages"] = _messages(prompt)
            else:
                payload["prompt"] = prompt.whole_input()
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
            payload["rid"] = rid
        return orjson.dumps(payload)

    def parser(self, *, keep_reply: bool = False) -> StreamParser:
        """A stream's parser; with ``keep_reply``, it also keeps what the server wrote (``reply``)."""
        reply = (_generate_reply if self.name == "generate" else _openai_reply) if keep_reply else None
        return StreamParser(self._count, reply)

    def parse(self, reads: list[tuple[int, bytes]]) -> StreamCounts:
        """Parse a whole stream given as (arrival_ns, bytes) reads."""
        parser = self.parser()
        for arrival_ns, data in reads:
            parser.feed(arrival_ns, data)
        return parser.finish()


class StreamParser:
    """Turns one stream's timestamped reads into content chunks; raises StreamError on a format violation.

    A content chunk is an event after which the server's cumulative completion
    count grew; it carried that many tokens. A server that sends no counts gets
    one token per non-empty event, corrected by its final usage.
    """

    def __init__(
        self,
        count: Callable[[dict[str, Any]], EventCount],
        keep_reply: Callable[[Reply, dict[str, Any]], None] | None = None,
    ) -> None:
        self._count = count
        self._keep_reply = keep_reply
        self.reply = Reply()
        """What the server wrote, where the parser keeps it (``ApiFormat.parser``)."""
        self.chunk_ns: list[int] = []
        self.chunk_tokens: list[int] = []
        self.last_read_ns = 0
        self.server_sent_s: float | None = None
        self._counted = 0
        self._prompt_len: int | None = None
        self._final_count: int | None = None
        self._first = True
        self._last: dict[str, Any] | None = None
        self._done = False
        self._pending = b""

    def feed(self, arrival_ns: int, data: bytes) -> None:
        self.last_read_ns = arrival_ns
        events = (self._pending + data).split(b"\n\n") if self._pending else data.split(b"\n\n")
        self._pending = events.pop()
        for event in events:
            # The common event, "data: {...}", is parsed as it is (JSON allows the blanks around it);
            # anything else takes the path that checks it.
            message = None
            if event[:5] == b"data:" and not self._done:
                try:
                    message = orjson.loads(event[5:])
                except orjson.JSONDecodeError:
                    message = None
            if type(message) is not dict:
                message = self._checked_message(event)
                if message is None:
                    continue
            if ("error" in message or "meta_info" in message) and (error := _stream_error(message)):
                raise StreamError(error)
            if self._first:
                self._first = False
                self.server_sent_s = _server_sent_s(message)
            self._last = message
            if self._keep_reply is not None:
                self._keep_reply(self.reply, message)
            total, prompt_tokens, has_text, carries_output = self._count(message)
            if prompt_tokens is not None:
                self._prompt_len = prompt_tokens
            if total is None:
                if has_text:
                    self.chunk_ns.append(arrival_ns)
                    self.chunk_tokens.append(1)
                    self._counted += 1
                continue
            self._final_count = total
            if total > self._counted and carries_output:
                self.chunk_ns.append(arrival_ns)
                self.chunk_tokens.append(total - self._counted)
                self._counted = total

    def _checked_message(self, raw_event: bytes) -> dict[str, Any] | None:
        """An event that is not plain ``data: {...}``: its message, or None for a blank event and for
        ``[DONE]``; raises StreamError for what the format does not allow."""
        event = raw_event.strip()
        if not event:
            return None
        if self._done:
            raise StreamError(f"data after [DONE]: {_excerpt(event.decode(errors='replace'))}")
        if not event.startswith(b"data:"):
            raise StreamError(f"malformed stream line: {_excerpt(event.decode(errors='replace'))}")
        payload = event[5:].strip()
        if payload == b"[DONE]":
            self._done = True
            return None
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            message = None
        if not isinstance(message, dict):
            raise StreamError(f"malformed stream line: {_excerpt(event.decode(errors='replace'))}")
        return message

    def finish(self) -> StreamCounts:
        """The stream has ended: check it ended properly and return what it carried."""
        if self._pending.strip():
            raise StreamError(
                f"stream ended inside an event: {_excerpt(self._pending.decode(errors='replace'))}"
            )
        if not self._done:
            raise StreamError("stream ended before [DONE]")
        output_len = self._final_count if self._final_count is not None else self._counted
        if self.chunk_tokens and output_len > self._counted:
            # Counts came only at the end: the missing tokens belong to the last chunk.
            self.chunk_tokens[-1] += output_len - self._counted
        return StreamCounts(
            self.chunk_ns,
            self.chunk_tokens,
            output_len,
            self._prompt_len,
            self.server_sent_s,
            _cached_tokens(self._last),
            _server_received_s(self._last),
            _spec_counts(self._last),
        )


@dataclass(eq=False, slots=True)
class _InFlight:
    """A request in flight, as the stall watchdog sees it."""

    task: asyncio.Task[Any]
    parser: StreamParser
    stalled: bool = False


class StreamClient:
    """A whole sweep's connections: streams through a keep-alive pool of up to ``concurrency`` idle
    connections (one per request in flight), other requests through an aiohttp session.

    A stream that sends nothing for ``read_timeout`` seconds fails as stalled. One
    watchdog task checks every stream's last read, where a timeout per stream would
    re-arm a timer on every read: a quarter of the client's CPU per token at high
    concurrency.
    """

    def __init__(
        self,
        base_url: str,
        api: ApiFormat,
        *,
        concurrency: int,
        api_key: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api = api
        self.url = self.base_url + api.path
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._concurrency = concurrency
        self._session: aiohttp.ClientSession | None = None
        self._pool: ConnectionPool | None = None
        self._in_flight: set[_InFlight] = set()
        self._watchdog: asyncio.Task[None] | None = None

    async def __aenter__(self) -> StreamClient:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout)
        self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        self._pool = ConnectionPool(
            self.url, self.headers, connect_timeout=self.connect_timeout, keep_idle=self._concurrency
        )
        self._watchdog = asyncio.get_running_loop().create_task(self._watch_stalls())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
            self._watchdog = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _watch_stalls(self) -> None:
        limit_ns = int(self.read_timeout * 1e9)
        while True:
            await asyncio.sleep(min(1.0, self.read_timeout / 4))
            now = perf_counter_ns()
            for request in self._in_flight:
                if not request.stalled and now - request.parser.last_read_ns > limit_ns:
                    request.stalled = True
                    request.task.cancel()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("StreamClient used outside 'async with'")
        return self._session

    @property
    def pool(self) -> ConnectionPool:
        if self._pool is None:
            raise RuntimeError("StreamClient used outside 'async with'")
        return self._pool

    async def get(self, path: str) -> bytes:
        """GET ``path``: its body; raises ServerUnreachable when no answer came, or one that is not 200."""
        status, body = await self._exchange("GET", path, self.connect_timeout * 3)
        if status != 200:
            text = _excerpt(body.decode(errors="replace"))
            raise ServerUnreachable(f"{self.base_url + path} answered HTTP {status}: {text}")
        return body

    async def get_json(self, path: str) -> Any:
        """GET a JSON endpoint; raises ServerUnreachable as ``get`` does, and when the answer is not JSON."""
        body = await self.get(path)
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            text = _excerpt(body.decode(errors="replace"))
            raise ServerUnreachable(f"{self.base_url + path} answered HTTP 200, not JSON: {text!r}") from None

    async def served_model(self) -> str:
        """The first model the server's OpenAI ``/v1/models`` lists: the one the OpenAI APIs ask for."""
        models = await self.get_json("/v1/models")
        listed = models.get("data") if isinstance(models, dict) else None
        first = listed[0] if isinstance(listed, list) and listed else None
        model = first.get("id") if isinstance(first, dict) else None
        if not isinstance(model, str) or not model:
            raise ServerUnreachable(
                f"{self.base_url}/v1/models answered {_excerpt(json.dumps(models))}, not an OpenAI "
                "model list naming a model; give the model's name (--model)"
            )
        return model

    async def post(self, path: str) -> tuple[int, str]:
        """POST without a body (e.g. /flush_cache); returns the status and a body excerpt. Raises
        ServerUnreachable when no answer came."""
        status, body = await self._exchange("POST", path, self.connect_timeout * 3)
        return status, _excerpt(body.decode(errors="replace"))

    async def _exchange(self, method: str, path: str, answer_timeout: float) -> tuple[int, bytes]:
        """One request that does not stream: its status and body."""
        url = self.base_url + path
        timeout = aiohttp.ClientTimeout(total=answer_timeout, sock_connect=self.connect_timeout)
        try:
            async with self.session.request(method, url, headers=self.headers, timeout=timeout) as response:
                return response.status, await response.read()
        except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
            reason = _unreachable_reason(exc, url, self.connect_timeout, answer_timeout)
            raise ServerUnreachable(f"cannot reach {url}: {reason}") from exc

    async def request(
        self, prompt: Prompt, body: bytes, rid: str, *, scheduled_ns: int | None = None
    ) -> RequestRecord:
        """Send one streaming request (``body`` made with ``rid``) and return its record.

        ``scheduled_ns`` (a ``perf_counter_ns`` reading) is when an open loop meant to send it: the
        record's ``start_ns`` is then that time, not the send, and ``send_delay_ns`` = send -
        scheduled_ns (negative if sent early). Without it, ``start_ns`` is the send and the delay 0.
        Never raises for a failure of the request: the record says what went wrong.
        """
        return await self._send(prompt, body, rid, self.api.parser(), scheduled_ns)

    async def turn(self, prompt: Prompt, body: bytes, rid: str) -> tuple[RequestRecord, list[int] | str]:
        """Send a conversation's turn as ``request`` sends a request; its record, and the server's reply:
        its token ids where ``prompt`` is token ids, else its text (empty where the request failed)."""
        parser = self.api.parser(keep_reply=True)
        record = await self._send(prompt, body, rid, parser, None)
        reply = parser.reply
        return record, reply.ids if isinstance(prompt.prompt, list) else "".join(reply.text)

    async def _send(
        self, prompt: Prompt, body: bytes, rid: str, parser: StreamParser, scheduled_ns: int | None
    ) -> RequestRecord:
        record = RequestRecord(prompt.index, prompt.prompt_len, prompt.output_len, rid=rid)
        if prompt.conversation is not None:
            record.turn = prompt.turn
        task = asyncio.current_task()
        assert task is not None, "request() runs in a task"
        watched = _InFlight(task, parser)
        self._in_flight.add(watched)
        # The stall watchdog counts from the send: a request that waited for its slot has not stalled.
        record.start_ns = parser.last_read_ns = perf_counter_ns()
        if scheduled_ns is not None:
            record.send_delay_ns = record.start_ns - scheduled_ns
            record.start_ns = scheduled_ns
        try:
            response = await self.pool.post(body, parser.feed)
            record.status = response.status
            kept = await response.finish()
            if response.status != 200:
                raise StreamError(f"HTTP {response.status}: {_excerpt(kept.decode(errors='replace'))}")
            counts = parser.finish()
        except StreamError as exc:
            record.error = str(exc)
        except HttpStreamError as exc:
            record.error = f"{CONNECTION_FAILED}{type(exc).__name__}: {_excerpt(str(exc))}"
        except asyncio.CancelledError:
            if not watched.stalled:
                raise
            if sys.version_info >= (3, 11):  # 3.10 counts no cancellations: there is none to take back
                task.uncancel()  # this cancellation is handled
            record.error = f"{STALLED}no data for {self.read_timeout:g} s"
        finally:
            self._in_flight.discard(watched)
        if record.error:
            record.end_ns = perf_counter_ns()
            return record
        record.end_ns = parser.last_read_ns
        record.chunk_ns = counts.chunk_ns
        record.chunk_tokens = counts.chunk_tokens
        record.output_len = counts.output_len
        if counts.prompt_len is not None:
            record.prompt_len = counts.prompt_len
        record.cached_tokens = counts.cached_tokens
        if (spec := counts.spec) is not None:
            record.spec_accept_length = spec.accept_length
            record.spec_accept_rate = spec.accept_rate
            record.spec_verify_ct = spec.verify_ct
            record.spec_num_correct_drafts = spec.num_correct_drafts
            record.spec_num_proposed_drafts = spec.num_proposed_drafts
        # The wall clock less perf_counter_ns, read now, turns the server's epoch stamps into this clock's:
        # NTP may step the wall clock during a run and the server reads it afresh, so an offset read once at
        # the start would move every later stamp by the step.
        epoch_offset_ns = time.time_ns() - perf_counter_ns()
        if counts.server_sent_s is not None:
            record.server_sent_ns = round(counts.server_sent_s * 1e9) - epoch_offset_ns
        if counts.server_received_s is not None:
            record.server_received_ns = round(counts.server_received_s * 1e9) - epoch_offset_ns
        if counts.output_len != prompt.output_len:
            record.error = (
                f"output length {counts.output_len} != requested {prompt.output_len} "
                "(the server ignored max_tokens or ignore_eos)"
            )
        return record
