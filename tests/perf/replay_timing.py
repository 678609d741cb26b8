"""How punctually a trace replay sends: `fairbench sweep --trace` at 200 requests per second on one core.

A sample Mooncake trace (measure.trace_samples: Poisson arrivals, log-uniform lengths, shared prefixes) of
REQUESTS requests at RATE requests per second is replayed against the test server (tests/support/
sse_server/, 50 ms to the first token, 20 ms between tokens, each token its own read, the trace's output
lengths), the server pinned to one core and the client, one process, to the next (or N processes to the
next N cores, --client-processes N). Every request's send delay (when its request began, less when it was
due) comes from its record.

Side by side, the floor: a bare asyncio loop on the client's core that only sleeps until each due time of
the same schedule and notes how late it woke, no HTTP. Machines here are noisy: the floor says how much of
the lateness is the machine's timers.

Targets (the replay's own, absolute): median send delay below 1 ms and p99 below 5 ms, every request
completed, the achieved rate within 2 % of the scheduled. The script exits 1, naming each miss.

    .venv/bin/python tests/perf/replay_timing.py [--requests 2000] [--rate 200] [--client-processes 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import CLIENT_CPU, REPO, Server, spawn_pinned

sys.path.insert(0, str(REPO))

from tests.support.sweep_process import points, requests_of

from fairbench.measure.trace_replay import load_window, own_rate
from fairbench.measure.trace_samples import write_sample
from fairbench.measure.workload import TraceWindow

MEDIAN_TARGET_MS = 1.0
P99_TARGET_MS = 5.0
RATE_TOLERANCE = 0.02
VOCAB_SIZE = 30000
"""The test server has no model files to learn a vocabulary from: token ids from an explicit range."""


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def replay(url: str, trace: Path, out: Path, processes: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The replay's one point and its request records, the client in ``processes`` processes."""
    command = [sys.executable, "-m", "fairbench", "sweep", "--url", url, "--out", str(out)]
    command += ["--trace", str(trace), "--api", "completions", "--vocab-size", str(VOCAB_SIZE)]
    command += ["--warmup", "0", "--client-processes", str(processes), "--no-server-metrics", "--no-energy"]
    command += ["--progress", "lines"]
    cpus = range(CLIENT_CPU, CLIENT_CPU + processes)
    process = spawn_pinned(command, cpus, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, stderr = process.communicate(timeout=900)
    if process.returncode != 0:
        raise SystemExit(f"the replay failed ({process.returncode}):\n{stderr.decode()[-3000:]}")
    (point,) = points(out)
    return point, requests_of(out, point["point_id"])


def floor_lateness_ms(offsets_s: list[float]) -> list[float]:
    """The bare loop's lateness on the client's core: sleep until each due time, note how late it woke."""
    os.sched_setaffinity(0, {CLIENT_CPU})

    async def walk() -> list[float]:
        late = []
        origin = time.perf_counter_ns()
        for offset in offsets_s:
            due = origin + round(offset * 1e9)
            if (wait := due - time.perf_counter_ns()) > 0:
                await asyncio.sleep(wait / 1e9)
            late.append(max(0, time.perf_counter_ns() - due) / 1e6)
        return late

    return asyncio.run(walk())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--client-processes", type=int, default=1)
    args = parser.parse_args()
    if not 1 <= args.client_processes <= len(os.sched_getaffinity(0)) - CLIENT_CPU:
        parser.error(f"--client-processes: 1 to {len(os.sched_getaffinity(0)) - CLIENT_CPU} on this machine")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        write_sample(trace, args.requests, args.rate, seed=1)
        window = load_window(TraceWindow(str(trace)))
        scheduled = own_rate(window)
        server = Server(first_token_ms=50, chunk_gap_ms=20)
        try:
            point, records = replay(server.url, trace, Path(tmp) / "out", args.client_processes)
        finally:
            server.stop()
        floor = floor_lateness_ms([request.arrival_ms / 1000 for request in window])
    delays = [record["send_delay_ns"] / 1e6 for record in records]
    last_cpu = CLIENT_CPU + args.client_processes - 1
    cores = f"core {CLIENT_CPU}" if last_cpu == CLIENT_CPU else f"cores {CLIENT_CPU}-{last_cpu}"
    print(
        f"replay of {len(window)} requests scheduled at {scheduled:.1f} req/s, "
        f"client in {args.client_processes} process(es) on {cores}"
    )
    print(
        f"  completed {point['completed']}, failed {point['failed']}, "
        f"achieved {point['achieved_request_rate']:.2f} req/s"
    )
    for name, values in (("fairbench send delay", delays), ("floor (bare asyncio) ", floor)):
        print(
            f"  {name}: median {statistics.median(values):.3f} ms, p99 {percentile(values, 99):.3f} ms, "
            f"max {max(values):.3f} ms"
        )
    misses = []
    if statistics.median(delays) >= MEDIAN_TARGET_MS:
        misses.append(f"median send delay {statistics.median(delays):.3f} ms >= {MEDIAN_TARGET_MS} ms")
    if percentile(delays, 99) >= P99_TARGET_MS:
        misses.append(f"p99 send delay {percentile(delays, 99):.3f} ms >= {P99_TARGET_MS} ms")
    if point["completed"] != len(window):
        misses.append(f"{len(window) - int(point['completed'])} requests did not complete")
    if abs(point["achieved_request_rate"] / scheduled - 1) > RATE_TOLERANCE:
        misses.append(f"achieved {point['achieved_request_rate']:.2f} req/s, scheduled {scheduled:.2f}")
    for miss in misses:
        print(f"MISS: {miss}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
