"""Streaming HTTP client for SGLang's three generation APIs (formats of SGLang 0.5.23).

The hot path only timestamps network reads: each read's bytes are kept with the
``perf_counter_ns`` of their arrival, and the stream is parsed once it has ended.
An event's arrival time is the arrival of the read that completed it. Keeping
JSON parsing out of the read loop keeps the event loop free, so timestamps of
other streams are not delayed behind it (the TTFT error of busy clients).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import aiohttp
import orjson

from fairbench.records import RequestRecord
from fairbench.workload import Prompt

APIS = ("completions", "chat", "generate")
ERROR_EXCERPT_CHARS = 300
READ_BUFFER_BYTES = 4 * 1024 * 1024


class StreamError(Exception):
    """The stream broke a rule of the format; the message says which."""


class ServerUnreachable(Exception):
    """The server did not accept a connection within the connect timeout."""


@dataclass(slots=True)
class StreamCounts:
    """What parsing a finished stream yields (the fields of RequestRecord it fills)."""

    chunk_ns: list[int]
    chunk_tokens: list[int]
    output_len: int
    prompt_len: int | None


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


@dataclass(slots=True)
class EventCount:
    """What one stream event says about the output so far."""

    completion_tokens: int | None
    """The server's cumulative count, when the event carries one."""
    prompt_tokens: int | None
    has_text: bool
    carries_output: bool
    """False for OpenAI's closing usage-only event (``choices: []``), which delivers no token."""


def _openai_count(data: dict[str, Any], text_of: Callable[[dict[str, Any]], str]) -> EventCount:
    usage = data.get("usage") or {}
    choices = data.get("choices") or []
    return EventCount(
        usage.get("completion_tokens"),
        usage.get("prompt_tokens"),
        bool(choices) and bool(text_of(choices[0])),
        bool(choices),
    )


def _completion_text(choice: dict[str, Any]) -> str:
    return choice.get("text") or ""


def _chat_text(choice: dict[str, Any]) -> str:
    delta = choice.get("delta") or {}
    # Reasoning models stream their thinking separately; it is output all the same.
    return (delta.get("reasoning_content") or "") + (delta.get("content") or "")


def _generate_count(data: dict[str, Any]) -> EventCount:
    meta = data.get("meta_info") or {}
    return EventCount(meta.get("completion_tokens"), meta.get("prompt_tokens"), bool(data.get("text")), True)


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
        self._count: Callable[[dict[str, Any]], EventCount]
        if name == "generate":
            self._count = _generate_count
        else:
            text_of = _completion_text if name == "completions" else _chat_text
            self._count = lambda data: _openai_count(data, text_of)

    def body(self, prompt: Prompt, rid: str) -> bytes:
        """The request body; output length is enforced with ignore_eos, greedy sampling.

        ``rid`` is SGLang's request id on all three APIs: its logs then name our requests.
        """
        if self.name == "generate":
            key = "text" if isinstance(prompt.prompt, str) else "input_ids"
            payload: dict[str, Any] = {
                key: prompt.prompt,
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
            if self.name == "chat":
                text = prompt.prompt if isinstance(prompt.prompt, str) else " ".join(map(str, prompt.prompt))
                payload["messages"] = [{"role": "user", "content": text}]
            else:
                payload["prompt"] = prompt.prompt
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
            payload["rid"] = rid
        return orjson.dumps(payload)

    def parse(self, reads: list[tuple[int, bytes]]) -> StreamCounts:
        """Turn timestamped reads into content chunks; raises StreamError on a format violation.

        A content chunk is an event after which the server's cumulative completion
        count grew; it carried that many tokens. A server that sends no counts gets
        one token per non-empty event, corrected by its final usage.
        """
        chunk_ns: list[int] = []
        chunk_tokens: list[int] = []
        counted = 0
        prompt_len: int | None = None
        final_count: int | None = None
        done = False
        pending = b""
        for arrival_ns, data in reads:
            events = (pending + data).split(b"\n\n") if pending else data.split(b"\n\n")
            pending = events.pop()
            for raw_event in events:
                event = raw_event.strip()
                if not event:
                    continue
                if done:
                    raise StreamError(f"data after [DONE]: {_excerpt(event.decode(errors='replace'))}")
                if not event.startswith(b"data:"):
                    raise StreamError(f"malformed stream line: {_excerpt(event.decode(errors='replace'))}")
                payload = event[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    continue
                try:
                    message = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    raise StreamError(
                        f"malformed stream line: {_excerpt(event.decode(errors='replace'))}"
                    ) from None
                if not isinstance(message, dict):
                    raise StreamError(f"malformed stream line: {_excerpt(event.decode(errors='replace'))}")
                if (error := _stream_error(message)) is not None:
                    raise StreamError(error)
                count = self._count(message)
                if count.prompt_tokens is not None:
                    prompt_len = count.prompt_tokens
                total = count.completion_tokens
                if total is None:
                    if count.has_text:
                        chunk_ns.append(arrival_ns)
                        chunk_tokens.append(1)
                        counted += 1
                    continue
                final_count = total
                if total > counted and count.carries_output:
                    chunk_ns.append(arrival_ns)
                    chunk_tokens.append(total - counted)
                    counted = total
        if pending.strip():
            raise StreamError(f"stream ended inside an event: {_excerpt(pending.decode(errors='replace'))}")
        if not done:
            raise StreamError("stream ended before [DONE]")
        output_len = final_count if final_count is not None else counted
        if chunk_tokens and output_len > counted:
            # Counts came only at the end: the missing tokens belong to the last chunk.
            chunk_tokens[-1] += output_len - counted
        return StreamCounts(chunk_ns, chunk_tokens, output_len, prompt_len)


class StreamClient:
    """One aiohttp session for a whole sweep, its pool sized to the concurrency."""

    def __init__(
        self,
        base_url: str,
        api: ApiFormat,
        *,
        concurrency: int,
        api_key: str | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 600.0,
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

    async def __aenter__(self) -> StreamClient:
        connector = aiohttp.TCPConnector(limit=self._concurrency, limit_per_host=self._concurrency)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout, sock_read=self.read_timeout
        )
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, read_bufsize=READ_BUFFER_BYTES, auto_decompress=False
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("StreamClient used outside 'async with'")
        return self._session

    async def get_json(self, path: str, *, timeout: float | None = None) -> Any:
        """GET a JSON endpoint; raises ServerUnreachable when no connection can be made."""
        try:
            async with self.session.get(
                self.base_url + path,
                headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=timeout or self.connect_timeout * 3),
            ) as response:
                response.raise_for_status()
                return await response.json(content_type=None)
        except (aiohttp.ClientConnectorError, asyncio.TimeoutError) as exc:
            raise ServerUnreachable(
                f"cannot reach {self.base_url + path} within {self.connect_timeout:g} s: "
                f"{exc or type(exc).__name__}"
            ) from exc

    async def post(self, path: str) -> tuple[int, str]:
        """POST without a body (e.g. /flush_cache); returns the status and a body excerpt."""
        async with self.session.post(self.base_url + path, headers=self.headers) as response:
            return response.status, _excerpt(await response.text())

    async def request(self, prompt: Prompt, body: bytes, rid: str) -> RequestRecord:
        """Send one streaming request (``body`` made with ``rid``) and return its record.

        Never raises for a failure of the request: the record says what went wrong.
        """
        record = RequestRecord(prompt.index, prompt.prompt_len, prompt.output_len, rid=rid)
        reads: list[tuple[int, bytes]] = []
        record.start_ns = perf_counter_ns()
        try:
            async with self.session.post(self.url, data=body, headers=self.headers) as response:
                record.status = response.status
                if response.status != 200:
                    record.error = (
                        f"HTTP {response.status}: {_excerpt(await response.text(errors='replace'))}"
                    )
                    record.end_ns = perf_counter_ns()
                    return record
                append = reads.append
                async for data in response.content.iter_any():
                    append((perf_counter_ns(), data))
        except asyncio.TimeoutError:
            record.error = f"stalled: no data for {self.read_timeout:g} s"
        except aiohttp.ClientError as exc:
            record.error = f"connection failed: {type(exc).__name__}: {_excerpt(str(exc))}"
        record.end_ns = reads[-1][0] if reads and not record.error else perf_counter_ns()
        if record.error:
            return record
        try:
            counts = self.api.parse(reads)
        except StreamError as exc:
            record.error = str(exc)
            return record
        record.chunk_ns = counts.chunk_ns
        record.chunk_tokens = counts.chunk_tokens
        record.output_len = counts.output_len
        if counts.prompt_len is not None:
            record.prompt_len = counts.prompt_len
        if counts.output_len != prompt.output_len:
            record.error = (
                f"output length {counts.output_len} != requested {prompt.output_len} "
                "(the server ignored max_tokens or ignore_eos)"
            )
        return record
