"""HTTP/1.1 POSTs whose response body streams, on asyncio protocols: each network read goes from the socket
to the body's consumer in the same callback, with its arrival time.

A general client wakes a task for every read, queues the bytes in a stream and copies them out again:
at one token per read, that was most of the client's cost per token. Here ``data_received`` decodes the
read's chunked framing and hands the payload (with one ``perf_counter_ns`` reading taken as the read
arrived) to the consumer; the request's task wakes twice, when the response head arrives and when its
body ends.

:class:`ConnectionPool` keeps one connection per request in flight and reuses idle ones (keep-alive). A
server may close an idle connection at any moment (SGLang's uvicorn does after 5 s), so a request on a
reused connection that closes before any byte of the response is sent again, once, on a new connection;
never after a byte arrived.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from time import perf_counter_ns
from urllib.parse import urlsplit

BodySink = Callable[[int, bytes], None]
"""Takes one read's body bytes with the read's arrival time (``perf_counter_ns``)."""

MAX_HEAD_BYTES = 64 * 1024
MAX_CHUNK_SIZE_LINE = 1024
ERROR_BODY_BYTES = 64 * 1024
"""How much of a body that does not stream (an error's) is kept; the rest is read and dropped."""
_HEX_DIGITS = b"0123456789abcdefABCDEF"


class HttpStreamError(Exception):
    """The exchange failed below the body's format: no connection, a closed one, or no valid HTTP."""


class ClientConnectorError(HttpStreamError):
    """No connection to the server could be made: refused, unresolved, timed out, or TLS refused.

    Named and worded as the exception of aiohttp that streamed requests failed with before, so that a
    refused connection reads the same in every record file."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"Cannot connect to host {host}:{port} ssl:default [{reason}]")


class ServerDisconnected(HttpStreamError):
    """The connection closed before the response ended; ``answered``: whether any byte of it arrived."""

    def __init__(self, message: str, *, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


class InvalidResponse(HttpStreamError):
    """The server's bytes are not an HTTP/1.1 response."""


# What the connection is reading.
_IDLE, _HEAD, _CHUNKED, _LENGTH, _UNTIL_CLOSE = range(5)
# Where chunked decoding is between chunks.
_SIZE_LINE, _DATA_END, _TRAILER = range(3)


def _reason(exc: OSError) -> str:
    """An OSError's own words (for a refused connection, asyncio's name the address), else its type."""
    if exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Response:
    """A response whose head arrived. Its body streams to the sink when its status is the streamed one;
    any other status's body is kept (its first ERROR_BODY_BYTES) for :meth:`finish` to return."""

    __slots__ = ("_connection", "_ended", "headers", "status")

    def __init__(
        self, connection: _Connection, status: int, headers: dict[str, str], ended: asyncio.Future[bytes]
    ) -> None:
        self.status = status
        self.headers = headers
        self._connection = connection
        self._ended = ended

    async def finish(self) -> bytes:
        """Wait for the body's end; returns the kept body (empty for a streamed one). Raises what broke
        the response (HttpStreamError, or what the sink raised); the connection is then closed."""
        try:
            return await self._ended
        except BaseException:
            self._connection.abort()
            raise


class _Connection(asyncio.Protocol):
    """One connection, one exchange at a time; it gives itself back to its pool when a response ends."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._state = _IDLE
        self._sink: BodySink = _drop
        self._stream_status = 200
        self._got_head: asyncio.Future[Response] | None = None
        self._ended: asyncio.Future[bytes] | None = None
        self._answered = False
        self._buffer = b""  # a head, a chunk-size line or a chunk's CRLF not yet whole
        self._keep_alive = True
        self._kept = bytearray()
        self._chunk_left = 0
        self._chunk_step = _SIZE_LINE
        self._length_left = 0
        self._lost: Exception | None = None  # what closed the connection, when it closed between exchanges

    # --- the exchange

    async def send(self, request: bytes, sink: BodySink, stream_status: int) -> Response:
        """Write ``request``; returns once the response head arrived."""
        assert self._state == _IDLE
        self._answered = False
        if self.transport is None:  # reset between its connect and this request: a server going down
            raise self._disconnected(self._lost)
        loop = asyncio.get_running_loop()
        self._got_head = loop.create_future()
        self._sink = sink
        self._stream_status = stream_status
        self._state = _HEAD
        self.transport.write(request)
        try:
            return await self._got_head
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop the connection, whatever it was doing (an exchange broken off or failed)."""
        self._state = _IDLE
        self._close()
        if self.transport is not None:
            self.transport.abort()

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        arrival_ns = perf_counter_ns()
        try:
            state = self._state
            if state == _CHUNKED:
                self._dechunk(arrival_ns, data)
            elif state == _HEAD:
                self._answered = True
                self._read_head(arrival_ns, data)
            else:
                self._read_body(arrival_ns, data)
        except Exception as exc:  # the exchange's failure (the sink's too), for the one who waits
            self._fail(exc)

    def eof_received(self) -> bool:
        return False  # close: a half-closed connection carries no further response

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._state == _UNTIL_CLOSE and exc is None:
            self._end()
        elif self._state != _IDLE:
            self._fail(self._disconnected(exc))
        else:
            self._lost = exc
        self._close()

    def _disconnected(self, exc: Exception | None) -> ServerDisconnected:
        """The failure of a connection the server closed (``exc``: why, where the transport knows)."""
        where = "in the middle of its response" if self._answered else "before answering"
        detail = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
        message = f"the server closed the connection {where}{detail}"
        return ServerDisconnected(message, answered=self._answered)

    # --- reading

    def _read_head(self, arrival_ns: int, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        while True:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise InvalidResponse(f"response head longer than {MAX_HEAD_BYTES} bytes")
                self._buffer = buffer
                return
            status, headers, version = _parse_head(buffer[:head_end])
            buffer = buffer[head_end + 4 :]
            if status >= 200:
                break
            # An interim response (100 Continue, 103 Early Hints): the final one follows.
        self._buffer = b""
        connection = headers.get("connection", "").lower()
        self._keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        if status != self._stream_status:
            self._sink = self._keep
            self._kept = bytearray()
        encoding = headers.get("transfer-encoding")
        if status in (204, 304):
            self._state, self._length_left = _LENGTH, 0
        elif encoding is not None:
            if encoding.rsplit(",", 1)[-1].strip().lower() == "chunked":
                self._state, self._chunk_left, self._chunk_step = _CHUNKED, 0, _SIZE_LINE
            else:
                self._state, self._keep_alive = _UNTIL_CLOSE, False
        elif "content-length" in headers:
            length = headers["content-length"]
            if not length.isdigit():
                raise InvalidResponse(f"content-length {length!r} is not a length")
            self._state, self._length_left = _LENGTH, int(length)
        else:
            self._state, self._keep_alive = _UNTIL_CLOSE, False
        loop = asyncio.get_running_loop()
        self._ended = loop.create_future()
        assert self._got_head is not None
        if not self._got_head.done():
            self._got_head.set_result(Response(self, status, headers, self._ended))
        if self._state == _LENGTH and self._length_left == 0:
            self._end(buffer)
        elif buffer:
            self._read_body(arrival_ns, buffer)

    def _read_body(self, arrival_ns: int, data: bytes) -> None:
        state = self._state
        if state == _CHUNKED:
            self._dechunk(arrival_ns, data)
        elif state == _LENGTH:
            self._read_length(arrival_ns, data)
        elif state == _UNTIL_CLOSE:
            self._sink(arrival_ns, data)
        else:
            raise InvalidResponse(f"{len(data)} bytes from the server with no request pending")

    def _read_length(self, arrival_ns: int, data: bytes) -> None:
        left = self._length_left
        if len(data) < left:
            self._length_left = left - len(data)
            self._sink(arrival_ns, data)
            return
        self._sink(arrival_ns, data[:left])
        self._end(data[left:])

    def _dechunk(self, arrival_ns: int, data: bytes) -> None:
        """Chunked transfer coding: the chunk data of the read go to the sink as one piece."""
        if self._buffer:
            data = self._buffer + data
            self._buffer = b""
        pieces: list[bytes] = []
        position, size = 0, len(data)
        while position < size:
            left = self._chunk_left
            if left:
                stop = position + left
                if stop > size:
                    pieces.append(data[position:] if position else data)
                    self._chunk_left = stop - size
                    break
                pieces.append(data[position:stop])
                self._chunk_left = 0
                if data.startswith(b"\r\n", stop):  # the CRLF after the data, in the same read
                    position = stop + 2
                else:
                    self._chunk_step = _DATA_END
                    position = stop
                continue
            line_end = data.find(b"\r\n", position)
            if line_end < 0:
                if size - position > MAX_CHUNK_SIZE_LINE:
                    raise InvalidResponse("chunk-size line too long")
                self._buffer = data[position:]
                break
            line = data[position:line_end]
            position = line_end + 2
            step = self._chunk_step
            if step == _SIZE_LINE:
                self._chunk_left = _chunk_size(line)
                if not self._chunk_left:
                    self._chunk_step = _TRAILER
            elif step == _DATA_END:
                if line:
                    raise InvalidResponse(f"chunk data longer than its size (followed by {line[:40]!r})")
                self._chunk_step = _SIZE_LINE
            elif not line:  # the blank line that ends the trailer: the body is complete
                if pieces:
                    self._sink(arrival_ns, b"".join(pieces))
                self._end(data[position:])
                return
        if pieces:
            self._sink(arrival_ns, pieces[0] if len(pieces) == 1 else b"".join(pieces))

    def _keep(self, arrival_ns: int, data: bytes) -> None:
        room = ERROR_BODY_BYTES - len(self._kept)
        if room > 0:
            self._kept += data[:room]

    # --- the end of an exchange

    def _end(self, rest: bytes = b"") -> None:
        """The response ended; the connection goes back to the pool if it may carry another."""
        self._state = _IDLE
        self._sink = _drop
        assert self._ended is not None
        if not self._ended.done():
            self._ended.set_result(bytes(self._kept))
        self._kept = bytearray()
        if rest or not self._keep_alive or self.transport is None:
            self.abort()  # bytes past the response's end: the connection's framing is lost
        else:
            self._pool.give_back(self)

    def _fail(self, exc: BaseException) -> None:
        waiting = self._ended if self._state != _HEAD else self._got_head
        self.abort()
        if waiting is not None and not waiting.done():
            waiting.set_exception(exc)

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            self._pool.forget(self)


def _drop(arrival_ns: int, data: bytes) -> None:
    """The sink of a connection between exchanges."""


def _chunk_size(line: bytes) -> int:
    """The size of a chunk-size line: hex digits, then any ``;extension``."""
    digits = line
    if line.strip(_HEX_DIGITS):  # more than digits: an extension, blanks, or not a size at all
        digits = line.partition(b";")[0].strip(b" \t")
        if digits.strip(_HEX_DIGITS):
            digits = b""
    if not digits:
        raise InvalidResponse(f"bad chunk-size line {line[:40]!r}")
    return int(digits, 16)


def _parse_head(head: bytes) -> tuple[int, dict[str, str], str]:
    """Status, headers (names in lower case) and version of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if (
        len(parts) < 2
        or not parts[0].startswith("HTTP/1.")
        or not (parts[1].isdigit() and len(parts[1]) == 3)
    ):
        raise InvalidResponse(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise InvalidResponse(f"malformed header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers, parts[0]


class ConnectionPool:
    """Keep-alive connections to one URL, for POSTs whose response streams.

    One connection carries one request at a time; a request takes an idle connection (the one most
    recently given back: the least likely to have been closed by the server's idle timeout) or opens a
    new one. At most ``keep_idle`` idle connections are kept. A connection the server closes leaves the
    pool at once.
    """

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        connect_timeout: float,
        keep_idle: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        self.connect_timeout = connect_timeout
        self.keep_idle = keep_idle
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]
        lines = [f"POST {target} HTTP/1.1", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def post(self, body: bytes, sink: BodySink, *, stream_status: int = 200) -> Response:
        """POST ``body``; returns once the response head arrived. A response of ``stream_status`` sends
        its body to ``sink`` as it arrives. Raises HttpStreamError."""
        request = self._head + b"%d\r\n\r\n" % len(body) + body
        while self._idle:
            connection = self._idle.pop()
            if connection.closed or connection.transport is None or connection.transport.is_closing():
                continue
            try:
                return await connection.send(request, sink, stream_status)
            except ServerDisconnected as exc:
                if exc.answered:
                    raise
            break  # closed before answering: the server had dropped it; once more on a new connection
        connection = await self._connect()
        return await connection.send(request, sink, stream_status)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port, ssl=self._ssl),
                self.connect_timeout,
            )
        except asyncio.TimeoutError:
            raise ClientConnectorError(
                self.host, self.port, f"no connection within {self.connect_timeout:g} s"
            ) from None
        except OSError as exc:
            raise ClientConnectorError(self.host, self.port, _reason(exc)) from exc
        self._open.add(connection)
        return connection

    def give_back(self, connection: _Connection) -> None:
        """A connection's response ended cleanly: it waits for the next request, or closes if enough do."""
        if len(self._idle) < self.keep_idle:
            self._idle.append(connection)
        else:
            connection.abort()

    def forget(self, connection: _Connection) -> None:
        """A connection closed."""
        self._open.discard(connection)
        if connection in self._idle:
            self._idle.remove(connection)

    def close(self) -> None:
        """Close every connection."""
        for connection in list(self._open):
            connection.abort()
        self._idle.clear()
