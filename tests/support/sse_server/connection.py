"""One client connection: HTTP/1.1 requests parsed in order, responses and streams written, keep-alive."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tests.support.sse_server.http_messages import (
    MAX_HEAD_BYTES,
    HttpError,
    Request,
    response_head,
    stream_head,
)
from tests.support.sse_server.json_bodies import json_bytes
from tests.support.sse_server.scheduled_stream import ScheduledStream
from tests.support.sse_server.stream_plan import Event
from tests.support.sse_server.templates import Substitutions

if TYPE_CHECKING:
    from tests.support.sse_server.server import SSEServer


class HttpConnection(asyncio.Protocol):
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
        self._stream: ScheduledStream | None = None
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
                except HttpError as error:
                    self._keep_alive = False
                    self.send_response(error.status, json_bytes({"detail": str(error)}))
                    return
                if request is None:
                    break
                self._keep_alive = request.keep_alive
                self.server.handle(self, request)
        finally:
            self._processing = False
        if not self._busy:
            self._arm_idle_timer()

    def _take_request(self) -> Request | None:
        head_end = self._buffer.find(b"\r\n\r\n")
        if head_end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise HttpError(431, "request head too large")
            return None
        lines = bytes(self._buffer[:head_end]).decode("latin-1").split("\r\n")
        request_line = lines[0].split(" ")
        if len(request_line) != 3 or not request_line[2].startswith("HTTP/1."):
            raise HttpError(400, "malformed request line")
        method, target, version = request_line
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise HttpError(400, "chunked request bodies are not supported by the test server")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise HttpError(400, "bad content-length") from None
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
        return Request(method, path, query, headers, body, keep_alive, arrival_ns)

    # responses

    def send_response(
        self, status: int, body: bytes, content_type: bytes | None = b"application/json"
    ) -> None:
        if self.transport is None:
            return
        headers = [(b"content-length", str(len(body)).encode())]
        if content_type is not None:
            headers.append((b"content-type", content_type))
        self.transport.write(response_head(status, headers, self._keep_alive) + b"\r\n" + body)
        self.response_done()

    def start_stream(
        self,
        events: Sequence[Event],
        head_now: bool,
        substitutions: Substitutions,
        record: dict[str, Any],
        start: float,
    ) -> None:
        assert self.transport is not None
        head = stream_head(self._keep_alive)
        if head_now:
            self.transport.write(head)
        self._busy = True
        self._stream = ScheduledStream(
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
