"""The routes that answer at once: health, server info, models, cache flush, and the debug reads."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tests.support.sse_server.json_bodies import json_bytes

if TYPE_CHECKING:
    from tests.support.sse_server.connection import HttpConnection
    from tests.support.sse_server.http_messages import Request
    from tests.support.sse_server.server import SSEServer

SGLANG_VERSION = "0.5.23"


def _health(server: SSEServer, conn: HttpConnection, request: Request) -> None:
    conn.send_response(200, b"", content_type=None)


def _server_info(server: SSEServer, conn: HttpConnection, request: Request) -> None:
    config = server.config
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
    conn.send_response(200, json_bytes(info))


def _models(server: SSEServer, conn: HttpConnection, request: Request) -> None:
    model = {
        "id": server.config.model_path,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
    }
    conn.send_response(200, json_bytes({"object": "list", "data": [model]}))


def _flush_cache(server: SSEServer, conn: HttpConnection, request: Request) -> None:
    text = (
        "Cache flushed.\nPlease check backend logs for more details. "
        "(When there are running or waiting requests, the operation will not be performed.)\n"
    )
    conn.send_response(200, text.encode(), content_type=None)


def _debug_send_times(server: SSEServer, conn: HttpConnection, request: Request) -> None:
    records = server.log.take(clear=request.query.get("clear") in ("1", "true"))
    conn.send_response(200, json_bytes(server.log.document(records)))


def _debug_stats(server: SSEServer, conn: HttpConnection, request: Request) -> None:
    conn.send_response(200, json_bytes(server.stats()))


ROUTES: dict[str, tuple[tuple[str, ...], Callable[[SSEServer, HttpConnection, Request], None]]] = {
    "/health": (("GET",), _health),
    "/health_generate": (("GET",), _health),
    "/server_info": (("GET",), _server_info),
    "/get_server_info": (("GET",), _server_info),
    "/v1/models": (("GET",), _models),
    "/flush_cache": (("GET", "POST"), _flush_cache),
    "/debug/send_times": (("GET",), _debug_send_times),
    "/debug/stats": (("GET",), _debug_stats),
}
"""Path -> (the methods it takes, its handler)."""
