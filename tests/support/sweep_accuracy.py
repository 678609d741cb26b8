"""How exactly `fairbench sweep` times a stream: its request records against the test server's send times.

The test server runs in its own process pinned to SERVER_CPU and records, on the client's clock
(``perf_counter_ns``: CLOCK_MONOTONIC, one clock for every process of the machine), when each request
arrived and when it wrote each content chunk; ``fairbench sweep`` runs pinned to CLIENT_CPU. Per request
the truth is the server's record, TTFT counted from the sweep's send time as the sweep (like
sglang.bench_serving) counts it:

  TTFT   first chunk written - the sweep's send time
  TPOT   (last chunk written - first chunk written) / (output tokens - 1)
  ITL    the gaps between consecutive chunks written

and the error is what the sweep measured minus that. A TTFT error is the first chunk's way back, from the
server's write to the sweep's read: never negative. The way in, from the sweep's send time to the
server's read of the request, is part of TTFT by that definition and so no error; it is kept beside the
errors, where a sweep that took its send time too early shows.

Used by tests/perf/accuracy.py (the full figures) and tests/integration/test_accuracy.py (a small run).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from tests.support.sse_server import ServerProcess

SERVER_CPU, CLIENT_CPU = 0, 1
FIRST_TOKEN_MS = 50.0
CHUNK_GAP_MS = 20.0
TARGET_MS = 1.0
TARGET_SHARE = 0.02
"""The target: each error within 1 ms, small beside the decode step of a served model (10-50 ms) that TPOT
and ITL measure; or 2 % of the true value where that is more, for TTFTs of hundreds of ms at high
concurrency."""
VOCAB_SIZE = 30000
"""The test server has no model files to learn a vocabulary from: token ids from an explicit range."""


@dataclass
class TimingErrors:
    """Measured minus true, in ms, per request (TTFT, TPOT) and per chunk gap (ITL); the true values."""

    ttft_ms: list[float] = field(default_factory=list)
    way_in_ms: list[float] = field(default_factory=list)
    """Not an error (see above): from the sweep's send time to the server's read of the request."""
    tpot_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    true_ttft_ms: list[float] = field(default_factory=list)
    true_tpot_ms: list[float] = field(default_factory=list)
    true_itl_ms: list[float] = field(default_factory=list)


def timing_errors(records: Sequence[dict[str, Any]], sent: dict[str, dict[str, Any]]) -> TimingErrors:
    """The errors of the sweep's ``records`` (a point's requests/*.jsonl.gz) against the server's
    records by request id (``send_times()``). Raises ValueError where a request failed or the sweep saw
    other chunks than the server wrote: there is no timing to compare."""
    errors = TimingErrors()
    for record in records:
        truth = sent[record["rid"]]
        chunks, written = record["chunk_ns"], truth["chunk_ns"]
        if record["error"] or len(chunks) != len(written) or record["output_len"] < 2:
            raise ValueError(
                f"{record['rid']}: error {record['error']!r}, {len(chunks)} chunks read, "
                f"{len(written)} written, {record['output_len']} tokens"
            )
        errors.true_ttft_ms.append((written[0] - record["start_ns"]) / 1e6)
        errors.ttft_ms.append((chunks[0] - written[0]) / 1e6)
        errors.way_in_ms.append((truth["arrival_ns"] - record["start_ns"]) / 1e6)
        decode_tokens = record["output_len"] - 1
        true_tpot = (written[-1] - written[0]) / decode_tokens
        errors.true_tpot_ms.append(true_tpot / 1e6)
        errors.tpot_ms.append(((record["end_ns"] - chunks[0]) / decode_tokens - true_tpot) / 1e6)
        for (read_a, read_b), (sent_a, sent_b) in zip(pairwise(chunks), pairwise(written), strict=True):
            errors.true_itl_ms.append((sent_b - sent_a) / 1e6)
            errors.itl_ms.append(((read_b - read_a) - (sent_b - sent_a)) / 1e6)
    return errors


def rank_percentile(values: Sequence[float], q: float) -> float:
    """The value at index int(q/100 * n) of the sorted values, the last for q = 100: always one of them."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


METRICS = ("ttft", "tpot", "itl")


def errors_of(errors: TimingErrors, metric: str) -> tuple[list[float], list[float]]:
    """(errors, true values) of one of METRICS, in ms."""
    values: list[float] = getattr(errors, f"{metric}_ms")
    truths: list[float] = getattr(errors, f"true_{metric}_ms")
    return values, truths


def allowed_ms(truths: Sequence[float], limit_ms: float, share: float) -> float:
    """``limit_ms``, or ``share`` of the median true value where that is more."""
    return max(limit_ms, share * rank_percentile(truths, 50))


def misses(
    level: int, errors: TimingErrors, q: float, limit_ms: float = TARGET_MS, share: float = TARGET_SHARE
) -> list[str]:
    """Where the q-th percentile of |error| of a metric exceeds :func:`allowed_ms`: one line each."""
    found = []
    for metric in METRICS:
        values, truths = errors_of(errors, metric)
        worst = rank_percentile([abs(value) for value in values], q)
        allowed = allowed_ms(truths, limit_ms, share)
        if worst > allowed:
            found.append(
                f"C={level}: {metric} |error| p{q:g} {worst:.3f} ms > {allowed:.3f} ms "
                f"(the larger of {limit_ms:g} ms and {share:.0%} of the true median)"
            )
    return found


def run_pinned_sweep(
    url: str, out: Path, level: int, output_len: int, *, prompts_per_level: str, warmup: str
) -> list[dict[str, Any]]:
    """One `fairbench sweep` point at concurrency ``level``, pinned to CLIENT_CPU; its request records."""
    command = [sys.executable, "-m", "fairbench", "sweep", "--url", url, "--input-len", "128"]
    command += ["--output-len", str(output_len), "--concurrency", str(level)]
    command += ["--prompts-per-level", prompts_per_level, "--warmup", warmup, "--vocab-size", str(VOCAB_SIZE)]
    command += ["--out", str(out), "--progress", "lines", "--no-energy"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # Pinned right after the fork: the interpreter's start-up is not timed.
    os.sched_setaffinity(process.pid, {CLIENT_CPU})
    _, stderr = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"fairbench sweep failed at C={level}: {stderr.strip()}")
    with gzip.open(out / "requests" / f"c{level}-r0.jsonl.gz", "rt") as handle:
        return [json.loads(line) for line in handle]


def measure(
    levels: Sequence[int],
    output_len: int,
    *,
    prompts_per_level: str = "4x",
    warmup: str = "1x",
    first_token_ms: float = FIRST_TOKEN_MS,
    chunk_gap_ms: float = CHUNK_GAP_MS,
) -> list[tuple[int, TimingErrors]]:
    """Each level's errors: the server pinned to SERVER_CPU, one sweep per level pinned to CLIENT_CPU."""
    if not {SERVER_CPU, CLIENT_CPU} <= os.sched_getaffinity(0):
        raise RuntimeError(f"needs cores {SERVER_CPU} and {CLIENT_CPU}: server and client get one each")
    rows = []
    with (
        ServerProcess(first_token_ms=first_token_ms, chunk_gap_ms=chunk_gap_ms, cpu=SERVER_CPU) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for level in levels:
            out = Path(tmp) / f"c{level}"
            records = run_pinned_sweep(
                server.url, out, level, output_len, prompts_per_level=prompts_per_level, warmup=warmup
            )
            # Every record since the last call, warmup included: the measured ones are looked up by id.
            sent = {record["id"]: record for record in server.send_times(clear=True)}
            rows.append((level, timing_errors(records, sent)))
    return rows
