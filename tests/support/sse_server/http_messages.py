"""HTTP/1.1 messages as uvicorn writes them: a parsed request, response heads, the error a request earns."""

from __future__ import annotations

import time
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, NamedTuple

MAX_HEAD_BYTES = 65536


class Request(NamedTuple):
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    arrival_ns: int


class HttpError(Exception):
    """A request the server answers with ``status`` and ``message`` instead of serving it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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


def response_head(status: int, headers: list[tuple[bytes, bytes]], keep_alive: bool) -> bytes:
    """uvicorn's head: date, server, the app's headers, ``connection: close`` if closing."""
    parts = [_status_line(status), b"date: ", _date_value(), b"\r\nserver: uvicorn\r\n"]
    for name, value in headers:
        parts += [name, b": ", value, b"\r\n"]
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    return b"".join(parts)


def stream_head(keep_alive: bool) -> bytes:
    # Starlette's StreamingResponse sets only content-type; uvicorn adds the encoding last.
    head = response_head(200, [(b"content-type", b"text/event-stream; charset=utf-8")], keep_alive)
    return head + b"transfer-encoding: chunked\r\n\r\n"
