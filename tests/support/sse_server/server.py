"""The test server on the running event loop: listening, routing, and planning each stream."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from typing import Any

from tests.support.sse_server.config import ServerConfig
from tests.support.sse_server.connection import HttpConnection
from tests.support.sse_server.faults import FaultPicker
from tests.support.sse_server.http_messages import HttpError, Request
from tests.support.sse_server.json_bodies import error_body, json_bytes
from tests.support.sse_server.plain_routes import ROUTES
from tests.support.sse_server.recording import RequestLog
from tests.support.sse_server.request_body import parse_stream_request
from tests.support.sse_server.stream_shape import StreamShape
from tests.support.sse_server.templates import StreamTemplates

STREAM_APIS = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/generate": "generate"}


class SSEServer:
    """The test server on the running event loop.

    ``async with SSEServer(ServerConfig(first_token_ms=100)) as server: ... server.url``;
    knobs may also be passed as keywords: ``SSEServer(chunk_gap_ms=20)``.
    """

    def __init__(self, config: ServerConfig | None = None, **knobs: Any) -> None:
        config = config or ServerConfig()
        self.config = dataclasses.replace(config, **knobs) if knobs else config
        self.connections: set[HttpConnection] = set()
        self.log = RequestLog(self.config.record_chunk_times)
        self._templates = StreamTemplates()
        self._faults = FaultPicker(self.config.faults, self.config.seed)
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
            lambda: HttpConnection(self),
            self.config.host,
            self.config.port,
            backlog=4096,
            reuse_address=True,
            reuse_port=self.config.reuse_port,
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
        return self.log.copies(clear)

    def stats(self) -> dict[str, Any]:
        """Counters and this process's CPU seconds: a benchmark shows the server kept up."""
        times = os.times()
        return {
            "requests": self.log.requests_seen,
            "content_chunks": self.log.content_chunks,
            "sse_events": self.log.sse_events,
            "open_connections": len(self.connections),
            "cpu_s": time.process_time(),
            "cpu_user_s": times.user,
            "cpu_system_s": times.system,
        }

    def write_send_times(self, path: str | os.PathLike[str]) -> None:
        self.log.write(path)

    # routing

    def handle(self, conn: HttpConnection, request: Request) -> None:
        api = STREAM_APIS.get(request.path)
        if api is not None:
            if request.method != "POST":
                conn.send_response(405, json_bytes({"detail": "Method Not Allowed"}))
                return
            try:
                self._handle_stream(conn, request, api)
            except HttpError as error:
                conn.send_response(error.status, error_body(api, error.status, str(error)))
            return
        route = ROUTES.get(request.path)
        if route is None:
            conn.send_response(404, json_bytes({"detail": "Not Found"}))
        elif request.method not in route[0]:
            conn.send_response(405, json_bytes({"detail": "Method Not Allowed"}))
        else:
            route[1](self, conn, request)

    def _handle_stream(self, conn: HttpConnection, request: Request, api: str) -> None:
        config = self.config
        if config.api_key is not None and request.headers.get("authorization") != f"Bearer {config.api_key}":
            conn.send_response(401, json_bytes({"error": "Unauthorized"}))
            return
        asked = parse_stream_request(api, request.body)

        # The schedule starts here, before any rendering, so a slow render delays nothing.
        start = self.loop.time()
        dispatch_ns = time.perf_counter_ns()
        index = self.log.count_request()
        fault = self._faults.pick(index)
        record = self.log.open(
            index,
            rid=asked.rid,
            path=request.path,
            arrival_ns=request.arrival_ns,
            dispatch_ns=dispatch_ns,
            prompt_tokens=asked.prompt_tokens,
            fault=fault.kind if fault else "",
        )
        if fault is not None and fault.kind == "http_error":
            record["status"] = fault.effective_status
            record["outcome"] = "http_error"
            conn.send_response(
                fault.effective_status, error_body(api, fault.effective_status, fault.effective_message)
            )
            return

        output_tokens = asked.max_tokens
        finish = "length"
        if config.output_len_override is not None:
            output_tokens = config.output_len_override
        elif not asked.ignore_eos and config.eos_at is not None and config.eos_at < asked.max_tokens:
            output_tokens = config.eos_at
            finish = "stop"
        shape = StreamShape(
            api=api,
            model=asked.model,
            prompt_tokens=asked.prompt_tokens,
            output_tokens=output_tokens,
            tokens_per_chunk=config.tokens_per_chunk,
            finish=finish,
            include_usage=asked.include_usage,
            continuous_usage=asked.continuous_usage,
            first_token_s=config.first_token_ms / 1000.0,
            chunk_gap_s=config.chunk_gap_ms / 1000.0,
            fault=fault,
        )
        events, substitutions = self._templates.stream(shape, asked.rid)
        conn.start_stream(
            events, head_now=api == "generate", substitutions=substitutions, record=record, start=start
        )
