"""The SGLang-compatible test server itself, through raw sockets.

The expected bytes below were checked against streams built with SGLang 0.5.23's own
classes (protocol.py, sse_utils.py, usage_processor.py) served by uvicorn + Starlette.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import select
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.support.sse_server import (
    FaultRule,
    RunningServer,
    ServerConfig,
    ServerProcess,
    SSEServer,
    StartServer,
    chunk_token_counts,
    parse_args,
)

RID = "0123456789abcdef0123456789abcdef"
BOTH_USAGES = {"include_usage": True, "continuous_usage_stats": True}


@dataclass
class Response:
    """A response as read off the socket, with the arrival time of every read."""

    status: int = 0
    head: bytes = b""
    frames: list[bytes] = field(default_factory=list)  # chunked-body chunks, in order
    frame_read: list[int] = field(default_factory=list)  # index of the read that completed each
    read_ns: list[int] = field(default_factory=list)
    complete: bool = False  # the zero-length terminating chunk arrived
    error: str = ""  # "reset", "eof" or "timeout" when it did not complete

    @property
    def events(self) -> list[str]:
        return [frame.decode() for frame in self.frames]

    @property
    def json_events(self) -> list[Any]:
        return [json.loads(e[len("data: ") :]) for e in self.events if e != "data: [DONE]\n\n"]


def _request_bytes(method: str, path: str, body: Any = None, headers: str = "") -> bytes:
    payload = b"" if body is None else json.dumps(body).encode()
    return (
        f"{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n{headers}\r\n"
    ).encode() + payload


def read_response(sock: socket.socket, timeout_s: float = 5.0) -> Response:
    """Reads one response (Content-Length or chunked), noting when each read arrived."""
    response = Response()
    buffer = b""
    body_start = -1
    content_length = -1
    position = 0
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([sock], [], [], remaining)[0]:
            response.error = "timeout"
            return response
        try:
            data = sock.recv(1 << 20)
        except ConnectionResetError:
            response.error = "reset"
            return response
        if not data:
            response.error = "eof"
            return response
        response.read_ns.append(time.perf_counter_ns())
        buffer += data
        if body_start < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                continue
            response.head = buffer[:end]
            response.status = int(response.head.split(b" ", 2)[1])
            body_start = position = end + 4
            match = re.search(rb"\r\ncontent-length: (\d+)", response.head)
            content_length = int(match.group(1)) if match else -1
        if content_length >= 0:
            if len(buffer) >= body_start + content_length:
                response.frames = [buffer[body_start : body_start + content_length]]
                response.complete = True
                return response
            continue
        while (line_end := buffer.find(b"\r\n", position)) >= 0:
            size = int(buffer[position:line_end], 16)
            if len(buffer) < line_end + 2 + size + 2:
                break
            if size == 0:
                response.complete = True
                return response
            response.frames.append(buffer[line_end + 2 : line_end + 2 + size])
            response.frame_read.append(len(response.read_ns) - 1)
            assert buffer[line_end + 2 + size : line_end + 4 + size] == b"\r\n"
            position = line_end + 4 + size


def call(url: str, method: str, path: str, body: Any = None, headers: str = "") -> Response:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(_request_bytes(method, path, body, headers))
        return read_response(sock)


def normalized(response: Response) -> str:
    """The raw response with the clock readings (date, created, wall time) masked.

    The chunk sizes are those of the masked events; read_response already split the
    body by the sizes on the wire, so a wrong size there fails before this.
    """
    events = []
    for frame in response.frames:
        event = re.sub(r'"created":\d{10}', '"created":CREATED', frame.decode())
        events.append(
            re.sub(r'"response_sent_to_client_ts":\d{10}\.\d{6}', '"response_sent_to_client_ts":WALL', event)
        )
    head = re.sub(r"date: [^\r]+", "date: DATE", response.head.decode())
    return head + "\r\n\r\n" + "".join(sse_chunk(event) for event in events)


STREAM_HEAD = (
    "HTTP/1.1 200 OK\r\ndate: DATE\r\nserver: uvicorn\r\n"
    "content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
)


def sse_chunk(data: str) -> str:
    return f"{len(data.encode()):x}\r\n{data}\r\n"


# ----------------------------------------------------------------------------- formats


def test_completions_stream_is_byte_exact(sse_server: StartServer) -> None:
    server = sse_server()
    body = {"prompt": [1, 2, 3], "max_tokens": 2, "ignore_eos": True, "stream": True, "rid": RID}
    response = call(server.url, "POST", "/v1/completions", {**body, "stream_options": BOTH_USAGES})
    head = f'data: {{"id":"{RID}","object":"text_completion","created":CREATED,"model":"default",'
    usage = ',"prompt_tokens_details":null,"reasoning_tokens":0,"completion_tokens_details":null}'
    assert normalized(response) == STREAM_HEAD + "".join(
        sse_chunk(data)
        for data in [
            f'{head}"choices":[{{"index":0,"text":" the","logprobs":null,"finish_reason":null,'
            f'"matched_stop":null}}],"usage":{{"prompt_tokens":3,"total_tokens":4,"completion_tokens":1{usage}}}\n\n',
            f'{head}"choices":[{{"index":0,"text":" quick","logprobs":null,"finish_reason":"length",'
            f'"matched_stop":null}}],"usage":{{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2{usage}}}\n\n',
            f'{head}"choices":[],"usage":{{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2,'
            f'"reasoning_tokens":0}}}}\n\n',
            "data: [DONE]\n\n",
        ]
    )


def test_chat_stream_is_byte_exact(sse_server: StartServer) -> None:
    server = sse_server()
    body = {
        "messages": [{"role": "user", "content": "hi there"}],
        "max_tokens": 2,
        "stream": True,
        "rid": RID,
    }
    response = call(server.url, "POST", "/v1/chat/completions", {**body, "stream_options": BOTH_USAGES})
    head = f'data: {{"id":"{RID}","object":"chat.completion.chunk","created":CREATED,"model":"default",'
    tail = '"logprobs":null,"finish_reason":null,"matched_stop":null}]'
    usage = ',"prompt_tokens_details":null,"reasoning_tokens":0,"completion_tokens_details":null}'
    assert normalized(response) == STREAM_HEAD + "".join(
        sse_chunk(data)
        for data in [
            f'{head}"choices":[{{"index":0,"delta":{{"reasoning_content":null,"role":"assistant","content":""}},'
            f"{tail}}}\n\n",
            f'{head}"choices":[{{"index":0,"delta":{{"reasoning_content":null,"content":" the"}},{tail},'
            f'"usage":{{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1{usage}}}\n\n',
            f'{head}"choices":[{{"index":0,"delta":{{"reasoning_content":null,"content":" quick"}},{tail},'
            f'"usage":{{"prompt_tokens":2,"total_tokens":4,"completion_tokens":2{usage}}}\n\n',
            f'{head}"choices":[{{"index":0,"delta":{{"reasoning_content":null}},"logprobs":null,'
            f'"finish_reason":"length","matched_stop":null}}]}}\n\n',
            f'{head}"choices":[],"usage":{{"prompt_tokens":2,"total_tokens":4,"completion_tokens":2{usage}}}\n\n',
            "data: [DONE]\n\n",
        ]
    )


def test_generate_stream_is_byte_exact(sse_server: StartServer) -> None:
    server = sse_server(first_token_ms=1, chunk_gap_ms=2)
    body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}, "stream": True}
    response = call(server.url, "POST", "/generate", {**body, "rid": RID})
    meta = f'"id":"{RID}","finish_reason":'
    counts = '"prompt_tokens":2,"weight_version":"default","num_retractions":0,"reasoning_tokens":0'
    assert normalized(response) == STREAM_HEAD + "".join(
        sse_chunk(data)
        for data in [
            f'data: {{"text":" the","output_ids":[279],"meta_info":{{{meta}null,{counts},'
            f'"completion_tokens":1,"cached_tokens":0,"response_sent_to_client_ts":WALL}}}}\n\n',
            f'data: {{"text":" the quick","output_ids":[279,4062],"meta_info":{{{meta}'
            f'{{"type":"length","length":2}},{counts},"completion_tokens":2,"cached_tokens":0,'
            f'"e2e_latency":0.003}}}}\n\n',
            "data: [DONE]\n\n",
        ]
    )


def test_usage_follows_stream_options(sse_server: StartServer) -> None:
    server = sse_server()
    base = {"prompt": "a b c", "max_tokens": 3, "stream": True}
    plain = call(server.url, "POST", "/v1/completions", base).json_events
    assert [e["usage"] for e in plain] == [None, None, None]
    final_only = call(
        server.url, "POST", "/v1/completions", {**base, "stream_options": {"include_usage": True}}
    )
    assert [e["usage"] for e in final_only.json_events[:3]] == [None, None, None]
    assert final_only.json_events[3]["choices"] == []
    assert final_only.json_events[3]["usage"]["completion_tokens"] == 3
    chat = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": True}
    chat_events = call(server.url, "POST", "/v1/chat/completions", chat).json_events
    assert all("usage" not in e for e in chat_events)
    assert [e["choices"][0]["finish_reason"] for e in chat_events] == [None, None, None, None, "length"]


def test_lengths_chunking_override_and_eos(sse_server: StartServer) -> None:
    def completion_tokens(url: str, max_tokens: int, ignore_eos: bool = True) -> list[int]:
        body = {"prompt": [1], "max_tokens": max_tokens, "ignore_eos": ignore_eos, "stream": True}
        events = call(url, "POST", "/v1/completions", {**body, "stream_options": BOTH_USAGES}).json_events
        return [e["usage"]["completion_tokens"] for e in events if e["choices"]]

    grouped = sse_server(tokens_per_chunk=3)
    assert completion_tokens(grouped.url, 8) == [1, 4, 7, 8]
    assert chunk_token_counts(8, 3) == [1, 3, 3, 1]
    wrong = sse_server(output_len_override=5)
    assert completion_tokens(wrong.url, 8)[-1] == 5
    eos = sse_server(eos_at=3)
    assert completion_tokens(eos.url, 8, ignore_eos=False)[-1] == 3
    assert completion_tokens(eos.url, 8, ignore_eos=True)[-1] == 8
    body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 8}, "stream": True}
    last = call(eos.url, "POST", "/generate", body).json_events[-1]["meta_info"]
    assert (last["finish_reason"], last["completion_tokens"]) == ({"type": "stop", "matched": 2}, 3)


def test_keep_alive_then_idle_close(sse_server: StartServer) -> None:
    server = sse_server(keep_alive_timeout_s=0.2)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        for _ in range(2):
            sock.sendall(
                _request_bytes("POST", "/v1/completions", {"prompt": [1], "max_tokens": 2, "stream": True})
            )
            assert read_response(sock).complete
        pipelined = {"prompt": [1], "max_tokens": 2, "stream": True}
        sock.sendall(_request_bytes("POST", "/v1/completions", pipelined) + _request_bytes("GET", "/health"))
        both = b""
        while not both.endswith(b"content-length: 0\r\n\r\n"):  # the stream, then the health answer
            assert select.select([sock], [], [], 5)[0]
            both += sock.recv(65536)
        assert both.count(b"HTTP/1.1 200 OK") == 2 and b"data: [DONE]\n\n\r\n0\r\n\r\nHTTP/1.1" in both
        assert read_response(sock, timeout_s=2).error == "eof"  # closed after 0.2 s idle
    response = call(server.url, "GET", "/health", headers="Connection: close\r\n")
    assert b"\r\nconnection: close" in response.head


# ----------------------------------------------------------------------------- timing


def _schedule_misses(server: RunningServer, first_ms: float, gap_ms: float, tokens: int) -> list[str]:
    """Streams once; returns how the chunk arrivals missed the schedule (empty: none did)."""
    body = {"prompt": [1, 2], "max_tokens": tokens, "ignore_eos": True, "stream": True, "rid": RID}
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sent_ns = time.perf_counter_ns()
        sock.sendall(_request_bytes("POST", "/v1/completions", {**body, "stream_options": BOTH_USAGES}))
        response = read_response(sock)
    assert response.complete
    content_reads = [response.frame_read[i] for i, e in enumerate(response.json_events) if e["choices"]]
    assert len(set(content_reads)) == tokens  # no two chunks arrived in one read

    (record,) = server.send_times(clear=True)
    assert record["id"] == RID and record["outcome"] == "complete"
    assert record["chunk_tokens"] == [1] * tokens and record["output_tokens"] == tokens
    assert record["first_chunk_ns"] == record["chunk_ns"][0]
    assert sent_ns <= record["arrival_ns"] <= record["dispatch_ns"] < record["first_chunk_ns"]

    arrivals_ms = [(response.read_ns[r] - sent_ns) / 1e6 for r in content_reads]
    gap_errors = sorted(abs(b - a - gap_ms) for a, b in itertools.pairwise(arrivals_ms))
    # Same clock as this process: each chunk is read soon after the server wrote it.
    read_lags_ms = [
        (response.read_ns[r] - sent) / 1e6 for r, sent in zip(content_reads, record["chunk_ns"], strict=True)
    ]
    checks = {
        "first chunk within 3 ms of its time": abs(arrivals_ms[0] - first_ms) < 3,
        "median gap within 1 ms": gap_errors[len(gap_errors) // 2] < 1,
        "every gap within 3 ms": gap_errors[-1] < 3,
        # The schedule is absolute: lateness does not add up along the stream.
        "last chunk within 3 ms of its time": abs(arrivals_ms[-1] - first_ms - (tokens - 1) * gap_ms) < 3,
        "each chunk read within 2 ms of its send": all(0 < lag < 2 for lag in read_lags_ms),
    }
    return [f"{name}: arrivals {arrivals_ms}" for name, ok in checks.items() if not ok]


@pytest.mark.timing  # it holds each chunk to its send time within milliseconds
def test_chunks_leave_on_schedule_each_in_its_own_read(sse_server: StartServer) -> None:
    # In its own process: the test's reads then wait on nothing of the server's, not even the GIL.
    server = sse_server(first_token_ms=40, chunk_gap_ms=10, process=True)
    # A machine busy with other work can delay any one run by milliseconds; a server that
    # misses its schedule misses it every time.
    misses: list[str] = []
    for _ in range(5):
        misses = _schedule_misses(server, first_ms=40, gap_ms=10, tokens=8)
        if not misses:
            break
    assert not misses


def test_openai_head_waits_for_first_chunk_generate_head_does_not(sse_server: StartServer) -> None:
    server = sse_server(first_token_ms=300)
    for path, body, head_early in [
        ("/v1/completions", {"prompt": [1], "max_tokens": 1, "stream": True}, False),
        ("/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 1}, "stream": True}, True),
    ]:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(_request_bytes("POST", path, body))
            assert bool(select.select([sock], [], [], 0.15)[0]) == head_early, path
            assert read_response(sock).complete


# ----------------------------------------------------------------------------- faults


def test_http_error_every_nth_request(sse_server: StartServer) -> None:
    server = sse_server(faults=["http_error:every=2:status=503:message=busy"])
    body = {"prompt": [1], "max_tokens": 1, "stream": True}
    responses = [call(server.url, "POST", "/v1/completions", body) for _ in range(3)]
    assert [r.status for r in responses] == [200, 503, 200]
    assert responses[1].frames == [
        b'{"object":"error","message":"busy","type":"SERVICE_UNAVAILABLE","param":null,"code":503}'
    ]
    assert b"\r\ncontent-type: application/json" in responses[1].head
    generate = {"input_ids": [1], "sampling_params": {"max_new_tokens": 1}, "stream": True}
    assert call(server.url, "POST", "/generate", generate).frames == [b'{"error":{"message":"busy"}}']
    assert [r["status"] for r in server.send_times()] == [200, 503, 200, 503]


def test_http_error_fraction_is_seeded(sse_server: StartServer) -> None:
    def statuses(seed: int) -> list[int]:
        server = sse_server(faults=[FaultRule("http_error", fraction=0.5)], seed=seed)
        body = {"prompt": [1], "max_tokens": 1, "stream": True}
        return [call(server.url, "POST", "/v1/completions", body).status for _ in range(12)]

    first = statuses(7)
    assert first == statuses(7)
    assert 200 in first and 500 in first


def test_malformed_line_then_the_stream_goes_on(sse_server: StartServer) -> None:
    server = sse_server(faults=[FaultRule("malformed", after_chunks=1)])
    body = {"prompt": [1], "max_tokens": 3, "stream": True, "stream_options": BOTH_USAGES}
    events = call(server.url, "POST", "/v1/completions", body).events
    with pytest.raises(json.JSONDecodeError):
        json.loads(events[1][len("data: ") :])
    assert events[1].startswith("data: {") and events[1].endswith("\n\n")
    assert json.loads(events[2][len("data: ") :])["usage"]["completion_tokens"] == 3
    assert events[-1] == "data: [DONE]\n\n"


def test_reset_mid_stream(sse_server: StartServer) -> None:
    server = sse_server(faults=["reset:after=2"])
    body = {"prompt": [1], "max_tokens": 5, "stream": True, "stream_options": BOTH_USAGES}
    response = call(server.url, "POST", "/v1/completions", body)
    assert response.error == "reset"
    assert server.send_times()[0]["outcome"] == "reset"


def test_stall_keeps_the_connection_silent(sse_server: StartServer) -> None:
    server = sse_server(faults=["stall:after=1"])
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            _request_bytes("POST", "/v1/completions", {"prompt": [1], "max_tokens": 4, "stream": True})
        )
        response = read_response(sock, timeout_s=0.5)
        assert (response.error, len(response.frames)) == ("timeout", 1)
        assert server.stats()["open_connections"] == 1
    record = server.send_times()[0]
    assert (record["outcome"], record["output_tokens"]) == ("stalled", 1)


def test_abort_error_event_per_api(sse_server: StartServer) -> None:
    server = sse_server(faults=["abort:after=1:status=503:message=out of memory"])
    error = (
        'data: {"error": {"object": "error", "message": "out of memory", "type": "SERVICE_UNAVAILABLE", '
        '"param": null, "code": 503}}\n\n'
    )
    body = {"prompt": [1], "max_tokens": 4, "stream": True, "stream_options": BOTH_USAGES}
    events = call(server.url, "POST", "/v1/completions", body).events
    assert events[1] == error
    assert json.loads(events[2][len("data: ") :])["usage"]["completion_tokens"] == 1
    assert events[3:] == ["data: [DONE]\n\n"]
    chat = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "stream": True}
    assert call(server.url, "POST", "/v1/chat/completions", chat).events[2:] == [error, "data: [DONE]\n\n"]
    generate = {"input_ids": [1], "sampling_params": {"max_new_tokens": 4}, "stream": True}
    aborted = call(server.url, "POST", "/generate", generate).json_events[-1]["meta_info"]
    assert aborted["finish_reason"] == {
        "type": "abort",
        "message": "out of memory",
        "status_code": 503,
        "err_type": None,
    }
    assert aborted["completion_tokens"] == 1


def test_error_event_per_api(sse_server: StartServer) -> None:
    server = sse_server(faults=["error_event:after=1:message=bad"])
    body = {"prompt": [1], "max_tokens": 4, "stream": True, "stream_options": BOTH_USAGES}
    assert call(server.url, "POST", "/v1/completions", body).events[1:] == [
        'data: {"error": {"object": "error", "message": "bad", "type": "BadRequestError", "param": null, '
        '"code": 400}}\n\n',
        "data: [DONE]\n\n",
    ]
    generate = {"input_ids": [1], "sampling_params": {"max_new_tokens": 4}, "stream": True}
    assert call(server.url, "POST", "/generate", generate).events[1:] == [
        'data: {"error":{"message":"bad","type":"invalid_request_error","code":400,"retryable":false}}\n\n',
        "data: [DONE]\n\n",
    ]


def test_fault_past_the_last_chunk_takes_the_trailers_place(sse_server: StartServer) -> None:
    server = sse_server(faults=["stall:after=99"], chunk_gap_ms=1)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            _request_bytes(
                "POST",
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": True},
            )
        )
        response = read_response(sock, timeout_s=0.3)
    assert response.error == "timeout"
    assert [e["choices"][0]["delta"].get("content") for e in response.json_events] == [
        "",
        " the",
        " quick",
        " brown",
    ]


# ----------------------------------------------------------------------------- plain routes and errors


def test_plain_routes(sse_server: StartServer) -> None:
    server = sse_server(api_key="sekrit")
    health = call(server.url, "GET", "/health")
    assert (health.status, health.frames) == (200, [b""])
    assert b"content-length: 0" in health.head
    assert call(server.url, "GET", "/health_generate").status == 200
    info = json.loads(call(server.url, "GET", "/server_info").frames[0])
    assert info["version"] == "0.5.23" and info["fairbench_test_server"]["api_key"] == "sekrit"
    assert call(server.url, "POST", "/flush_cache").frames[0].startswith(b"Cache flushed.")
    assert call(server.url, "GET", "/v1/models").status == 200
    assert call(server.url, "GET", "/nope").status == 404
    assert call(server.url, "GET", "/v1/completions").status == 405
    body = {"prompt": [1], "max_tokens": 1, "stream": True}
    assert call(server.url, "POST", "/v1/completions", body).status == 401
    authorized = call(server.url, "POST", "/v1/completions", body, headers="Authorization: Bearer sekrit\r\n")
    assert authorized.complete


def test_bad_requests_get_sglang_style_errors(sse_server: StartServer) -> None:
    server = sse_server()
    empty = call(server.url, "POST", "/v1/completions", {"prompt": [], "stream": True})
    assert (empty.status, json.loads(empty.frames[0])["message"]) == (400, "Prompt cannot be empty")
    assert call(server.url, "POST", "/v1/completions", {"prompt": [1]}).status == 400  # not streaming
    assert call(server.url, "POST", "/generate", {"stream": True}).status == 400
    custom = call(server.url, "POST", "/v1/completions", {"prompt": [1], "stream": True, "rid": 'my "id"'})
    assert custom.json_events[0]["id"] == 'my "id"'


# ----------------------------------------------------------------------------- running it


def test_config_round_trips_through_the_command_line() -> None:
    config = ServerConfig(
        port=0,
        first_token_ms=100.0,
        chunk_gap_ms=20.5,
        tokens_per_chunk=8,
        output_len_override=7,
        eos_at=3,
        faults=(
            FaultRule("reset", every=3, after_chunks=0),
            FaultRule("abort", fraction=0.25, message="a: b"),
        ),
        seed=4,
        api_key="k",
        keep_alive_timeout_s=0.0,
        record_chunk_times=False,
        reuse_port=True,
        send_times_file="/tmp/x.json",
        cpu=1,
    )
    assert parse_args(config.to_cli_args()) == config
    assert parse_args(["--num-continuous-decode-steps", "4"]).tokens_per_chunk == 4
    with pytest.raises(ValueError, match="unknown option 'often'"):
        FaultRule.parse("reset:often=2")
    with pytest.raises(ValueError, match="fault kind 'explode'"):
        FaultRule.parse("explode")


def test_command_line_server_writes_send_times_at_exit(tmp_path: Path) -> None:
    send_times = tmp_path / "send_times.json"
    server = ServerProcess(ServerConfig(first_token_ms=5, send_times_file=str(send_times))).start()
    try:
        assert server.port > 0
        response = call(
            server.url, "POST", "/v1/completions", {"prompt": [1], "max_tokens": 3, "stream": True}
        )
        assert response.complete
        assert server.stats()["content_chunks"] == 3
    finally:
        server.stop()
    document = json.loads(send_times.read_text())
    assert document["clock"] == "time.perf_counter_ns"
    assert [r["chunk_tokens"] for r in document["requests"]] == [[1, 1, 1]]
    assert server.stderr() == ""  # SIGTERM ended it cleanly


def test_in_loop_server_as_async_context_manager() -> None:
    async def stream_once() -> tuple[bytes, list[dict[str, Any]]]:
        async with SSEServer(chunk_gap_ms=1) as server:
            reader, writer = await asyncio.open_connection(server.host, server.port)
            body = {"prompt": [1], "max_tokens": 3, "stream": True}
            writer.write(_request_bytes("POST", "/v1/completions", body, headers="Connection: close\r\n"))
            data = await reader.read()  # until the server closes
            writer.close()
            return data, server.send_times()

    data, records = asyncio.run(stream_once())
    assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert records[0]["chunk_tokens"] == [1, 1, 1]


def test_urllib_client_reads_the_stream(sse_server: StartServer) -> None:
    server = sse_server(process=True, chunk_gap_ms=1)
    payload = json.dumps({"prompt": "hello world", "max_tokens": 4, "stream": True}).encode()
    request = urllib.request.Request(
        server.url + "/v1/completions", payload, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as http:
        lines = [line for line in http.read().decode().split("\n\n") if line]
    assert lines[-1] == "data: [DONE]" and len(lines) == 5
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(server.url + "/missing", timeout=5)
    assert error.value.code == 404
