"""What a long context costs the client: `fairbench sweep` with 64k-token inputs beside 256-token ones.

Two sweeps of the same shape against the test server (tests/support/sse_server/, 50 ms to the first
token, CHUNK_GAP_MS between tokens, each token its own read), the server pinned to one core and the client,
one process, to the other: REQUESTS random-id prompts of LONG_TOKENS, then of SHORT_TOKENS, OUTPUT_TOKENS
out each, CONCURRENCY in flight. Each sweep's own process is waited for with wait4, which gives its peak
resident memory; its point gives the client's CPU over the measured loop (`client_cpu_s`).

Targets (the issue's): the long sweep's client CPU per output token within 1.3x of the short one's, and
the long sweep's peak resident memory, with all REQUESTS prompts of LONG_TOKENS prepared before its clock
starts, below 1 GiB. The script exits 1, naming each miss.

    .venv/bin/python tests/perf/long_context.py [--requests 1000] [--long 65536]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _harness import CLIENT_CPU, REPO, Server

sys.path.insert(0, str(REPO))

from tests.support.sweep_process import points

SHORT_TOKENS = 256
OUTPUT_TOKENS = 128
CONCURRENCY = 32
CHUNK_GAP_MS = 5.0
COST_RATIO_TARGET = 1.3
MEMORY_TARGET_BYTES = 1 << 30
VOCAB_SIZE = 30000
"""The test server has no model files to learn a vocabulary from: token ids from an explicit range."""


def sweep(url: str, out: Path, input_len: int, requests: int) -> tuple[dict[str, Any], int]:
    """One sweep's point and its process's peak resident memory in bytes."""
    command = [sys.executable, "-m", "fairbench", "sweep", "--url", url, "--out", str(out)]
    command += ["--api", "completions", "--vocab-size", str(VOCAB_SIZE), "--input-len", str(input_len)]
    command += ["--output-len", str(OUTPUT_TOKENS), "--concurrency", str(CONCURRENCY)]
    command += ["--prompts-per-level", str(requests), "--warmup", "0", "--client-processes", "1"]
    command += ["--no-server-metrics", "--no-energy", "--progress", "lines"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.sched_setaffinity(process.pid, {CLIENT_CPU})
    assert process.stderr is not None
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"the sweep failed ({process.returncode}):\n{stderr.decode()[-3000:]}")
    (point,) = points(out)
    return point, usage.ru_maxrss * 1024  # Linux reports kilobytes


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--long", type=int, default=65536, help="tokens of each long prompt")
    args = parser.parse_args()
    server = Server(first_token_ms=50, chunk_gap_ms=CHUNK_GAP_MS)
    measured = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, length in (("short", SHORT_TOKENS), ("long", args.long)):
                measured[name] = sweep(server.url, Path(tmp) / name, length, args.requests)
    finally:
        server.stop()
    cost = {}
    print(
        f"{args.requests} requests of {OUTPUT_TOKENS} tokens out, {CONCURRENCY} in flight, client on core "
        f"{CLIENT_CPU}"
    )
    for name, (point, peak) in measured.items():
        cost[name] = point["client_cpu_s"] / point["total_output_tokens"]
        print(
            f"  {name:5} ({point['total_input_tokens'] // point['completed']:>6} tokens in): completed "
            f"{point['completed']}, client {cost[name] * 1e6:.1f} us CPU per output token, peak RSS "
            f"{peak / 2**20:.0f} MiB"
        )
    ratio = cost["long"] / cost["short"]
    print(f"  long / short client cost per output token: {ratio:.2f}x")
    misses = []
    if ratio > COST_RATIO_TARGET:
        misses.append(
            f"the long sweep's client cost is {ratio:.2f}x the short one's (> {COST_RATIO_TARGET}x)"
        )
    if (peak := measured["long"][1]) >= MEMORY_TARGET_BYTES:
        misses.append(f"the long sweep's peak RSS {peak / 2**20:.0f} MiB >= 1 GiB")
    for name, (point, _) in measured.items():
        if point["completed"] != args.requests:
            misses.append(f"{name}: {args.requests - int(point['completed'])} requests did not complete")
    for miss in misses:
        print(f"MISS: {miss}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
