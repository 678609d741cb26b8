"""A minimal HTTP/1.1 server on raw asyncio: just what the simulator's API needs, and fast.

Why not aiohttp.web: a streamed token there costs an awaited ``StreamResponse.write`` (with its drain)
per event, which caps one core well below the tens of thousands of events per second the simulator must
sustain at concurrency 256. Here the engine writes each event straight into the connection's transport
from its timer callback: no coroutine, no task switch per token.

Supported: keep-alive, ``Content-Length`` request bodies, fixed-length responses and chunked
(``Transfer-Encoding: chunked``) streams as uvicorn sends them. Not supported: chunked request bodies,
``Expect: 100-continue``, pipelined requests beyond processing them one after another, HTTP/2 (a client
that speaks it with prior knowledge, as sglang-router's gRPC probe does, gets a 400 and a closed
connection).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qsl

log = logging.getLogger("fairbench.sim")

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes


Handler = Callable[[HttpRequest, "HttpExchange"], Awaitable[None]]


class HttpExchange:
    """The response to one request: either one fixed-length response, or a chunked stream."""

    def __init__(self, transport: asyncio.Transport, keep_alive: bool) -> None:
        self._transport = transport
        self.keep_alive = keep_alive
        self.streaming = False
        self.closed = False
        """The response was sent in full, or the client went away: nothing more is written."""
        self.complete: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_disconnect: Callable[[], None] | None = None

    def respond(self, status: int, body: bytes = b"", content_type: str | None = "application/json") -> None:
        """``content_type=None`` sends no content-type header, as Starlette's plain ``Response`` does."""
        if self.closed:
            return
        kind = f"content-type: {content_type}\r\n" if content_type else ""
        head = f"{kind}content-length: {len(body)}\r\n\r\n".encode()
        self._transport.write(self._status_line(status) + head + body)
        self._close()

    def start_stream(self, content_type: str = "text/event-stream; charset=utf-8") -> None:
        if self.closed or self.streaming:
            return
        self.streaming = True
        head = f"content-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n".encode()
        self._transport.write(self._status_line(200) + head)

    def send(self, data: bytes) -> None:
        """One chunk of the stream, written now (the transport buffers what the socket cannot take)."""
        if not self.closed:
            self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def end_stream(self, data: bytes = b"") -> None:
        """The last chunk (if any) and the stream's terminator, in one write."""
        if self.closed:
            return
        chunk = b"%x\r\n%b\r\n" % (len(data), data) if data else b""
        self._transport.write(chunk + b"0\r\n\r\n")
        self._close()

    def lost(self) -> None:
        if self.closed:
            return
        self._close()
        if self.on_disconnect is not None:
            self.on_disconnect()

    def _close(self) -> None:
        self.closed = True
        self.complete.set_result(None)

    def _status_line(self, status: int) -> bytes:
        connection = b"" if self.keep_alive else b"connection: close\r\n"
        return b"HTTP/1.1 %d %b\r\n%b" % (status, HTTPStatus(status).phrase.encode(), connection)


class HttpConnection(asyncio.Protocol):
    """One client connection; requests on it are handled one after another."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._exchange: HttpExchange | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._exchange is not None:
            self._exchange.lost()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._exchange is None:
            self._next_request()

    def _next_request(self) -> None:
        header_end = self._buffer.find(b"\r\n\r\n")
        if header_end < 0:
            if len(self._buffer) > MAX_HEADER_BYTES:
                self._reject(431)
            return
        try:
            request_line, *header_lines = self._buffer[:header_end].decode("latin-1").split("\r\n")
            method, target, version = request_line.split(" ")
            headers = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
        except ValueError:
            self._reject(400)
            return
        if version not in ("HTTP/1.0", "HTTP/1.1"):
            # HTTP/2 with prior knowledge (a gRPC probe: "PRI * HTTP/2.0") or junk: refused as uvicorn
            # refuses a request its HTTP/1.1 parser cannot take, with a 400 and a closed connection.
            self._reject(400)
            return
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._reject(501)
            return
        if length > MAX_BODY_BYTES:
            self._reject(413)
            return
        body_start = header_end + 4
        if len(self._buffer) < body_start + length:
            return
        body = bytes(self._buffer[body_start : body_start + length])
        del self._buffer[: body_start + length]
        path, _, query = target.partition("?")
        connection_header = headers.get("connection", "").lower()
        keep_alive = connection_header != "close" and (
            version == "HTTP/1.1" or connection_header == "keep-alive"
        )
        request = HttpRequest(method, path, dict(parse_qsl(query)), headers, body)
        assert self._transport is not None
        self._exchange = HttpExchange(self._transport, keep_alive)
        asyncio.get_running_loop().create_task(self._serve(request, self._exchange))

    async def _serve(self, request: HttpRequest, exchange: HttpExchange) -> None:
        try:
            await self._handler(request, exchange)
            await exchange.complete
        except Exception:
            log.exception("error handling %s %s", request.method, request.path)
            if exchange.streaming:
                self._close()
                return
            exchange.respond(500, b'{"detail":"Internal Server Error"}')
        self._exchange = None
        if not exchange.keep_alive:
            self._close()
        elif self._transport is not None and self._buffer:
            self._next_request()

    def _reject(self, status: int) -> None:
        assert self._transport is not None
        HttpExchange(self._transport, keep_alive=False).respond(
            status, HTTPStatus(status).phrase.encode(), "text/plain"
        )
        self._close()

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def serve(handler: Handler, host: str, port: int) -> asyncio.Server:
    """Listen on ``host:port`` (TCP_NODELAY is asyncio's default, so each event leaves at once)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: HttpConnection(handler), host, port, reuse_address=True)
