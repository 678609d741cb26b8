"""How fast the SSE test server streams, pinned to one core.

    .venv/bin/python tests/perf/sse_server_speed.py [--server-cpu 0] [--client-cpu 1]

Two settings, as in the client benchmark: (a) realistic - C=256 streams, 100 ms to the
first token, 20 ms between tokens, 256 tokens each; (b) saturated - no delays. A raw
asyncio byte-counting client (no parsing beyond spotting the end of each body) drives
the server; the server's own counters (GET /debug/stats) give its events and CPU
seconds, and its send-time records give how late each chunk left against its schedule.

Target: in the realistic setting the server keeps its schedule, each chunk's lateness at p99 under one
chunk gap (20 ms): a server later than that sends chunks after their successors were due, and the client
benchmark run against it would not be streaming the schedule it names. The saturated setting is a
capacity figure, with no target. The script exits 1 when the realistic setting misses the target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.sse_server import ServerConfig, ServerProcess

_BODY_END = b"\r\n0\r\n\r\n"


class _CountingClient(asyncio.Protocol):
    """Sends the same request again as soon as the previous response ended."""

    def __init__(self, request: bytes, remaining: list[int], done: asyncio.Future[None]) -> None:
        self._request = request
        self._remaining = remaining
        self._done = done
        self._tail = b""
        self.transport: asyncio.Transport | None = None
        self.bytes_read = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._send_next()

    def _send_next(self) -> None:
        assert self.transport is not None
        if self._remaining[0] <= 0:
            self.transport.close()
            return
        self._remaining[0] -= 1
        self.transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        self.bytes_read += len(data)
        tail = self._tail + data[-len(_BODY_END) :]
        if tail.endswith(_BODY_END):
            self._tail = b""
            self._send_next()
        else:
            self._tail = tail[-len(_BODY_END) :]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(None)


async def _drive(port: int, concurrency: int, requests: int, output_len: int, input_len: int) -> float:
    body = json.dumps(
        {
            "prompt": list(range(input_len)),
            "max_tokens": output_len,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    loop = asyncio.get_running_loop()
    remaining = [requests]
    dones: list[asyncio.Future[None]] = [loop.create_future() for _ in range(concurrency)]
    start = time.perf_counter()
    for done in dones:
        await loop.create_connection(partial(_CountingClient, request, remaining, done), "127.0.0.1", port)
    await asyncio.gather(*dones)
    return time.perf_counter() - start


def _lateness_ms(records: list[dict[str, Any]], first_ms: float, gap_ms: float) -> list[float]:
    """How long after its scheduled time (dispatch + first + j * gap) each chunk was written."""
    late = []
    for record in records:
        dispatch_ns: int = record["dispatch_ns"]
        for j, sent_ns in enumerate(record["chunk_ns"]):
            late.append((sent_ns - dispatch_ns) / 1e6 - (first_ms + j * gap_ms))
    return late


def run(name: str, config: ServerConfig, concurrency: int, requests: int, output_len: int) -> float:
    """One setting, printed; returns the p99 of its chunks' lateness in ms."""
    with ServerProcess(config) as server:
        before = server.stats()
        wall = asyncio.run(_drive(server.port, concurrency, requests, output_len, input_len=128))
        after = server.stats()
        records = server.send_times()
    events = after["sse_events"] - before["sse_events"]
    chunks = after["content_chunks"] - before["content_chunks"]
    cpu = after["cpu_s"] - before["cpu_s"]
    user = after["cpu_user_s"] - before["cpu_user_s"]
    system = after["cpu_system_s"] - before["cpu_system_s"]
    late = sorted(_lateness_ms(records, config.first_token_ms, config.chunk_gap_ms))
    p99 = late[int(0.99 * (len(late) - 1))]
    print(
        f"{name}: {requests} requests x {output_len} tokens at C={concurrency} in {wall:.2f} s\n"
        f"  SSE events {events} ({events / wall:,.0f}/s), content chunks {chunks / wall:,.0f}/s\n"
        f"  server CPU {cpu:.2f} s = {100 * cpu / wall:.0f}% of one core, "
        f"{1e6 * cpu / events:.2f} us per event ({1e6 * user / events:.2f} user, "
        f"{1e6 * system / events:.2f} system) -> {events / cpu:,.0f} events per CPU second\n"
        f"  chunk send lateness vs schedule: p50 {statistics.median(late):.3f} ms, "
        f"p99 {p99:.3f} ms, max {late[-1]:.3f} ms"
    )
    return p99


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=256)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.client_cpu})
    realistic = ServerConfig(first_token_ms=100, chunk_gap_ms=20, cpu=args.server_cpu, keep_alive_timeout_s=0)
    saturated = ServerConfig(cpu=args.server_cpu, keep_alive_timeout_s=0)
    realistic_p99 = run("(a) realistic", realistic, args.concurrency, args.requests, args.output_len)
    run("(b) saturated", saturated, args.concurrency, args.requests, args.output_len)
    if realistic_p99 >= realistic.chunk_gap_ms:
        print(
            f"MISSED (a) realistic: chunk lateness p99 {realistic_p99:.3f} ms, "
            f"not under one chunk gap ({realistic.chunk_gap_ms:g} ms)"
        )
        print("FAIL")
        return 1
    print(f"OK: the realistic setting kept its schedule (lateness p99 under {realistic.chunk_gap_ms:g} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
