"""How exactly `fairbench sweep` measures: TTFT, TPOT and ITL against the server's own send times.

The test server (pinned to one core) records when it wrote each request's chunks, on
the same clock as the client (CLOCK_MONOTONIC); the client runs pinned to the other
core. At each concurrency, the truth of a request is the server's write times:
  TTFT  first chunk written - client send time
  TPOT  (last chunk written - first chunk written) / (output tokens - 1)
  ITL   gaps between consecutive chunks written
and the error is what the client measured minus that. Target (issue 2): within 1 ms,
or 2 %, at C = 1..256.

    .venv/bin/python tests/perf/accuracy.py [--levels 1,4,16,64,256] [--output-len 128]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from _harness import Server, spawn_pinned

FIRST_TOKEN_MS = 50.0
CHUNK_GAP_MS = 20.0
STATS = (("p50", 50), ("p99", 99), ("max", 100))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def sweep(url: str, out: Path, level: int, output_len: int) -> list[dict[str, Any]]:
    command = [sys.executable, "-m", "fairbench", "sweep", "--url", url, "--input-len", "128"]
    command += ["--output-len", str(output_len), "--concurrency", str(level), "--prompts-per-level", "4x"]
    command += ["--warmup", "1x", "--out", str(out), "--progress", "lines"]
    process = spawn_pinned(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if process.wait() != 0:
        raise RuntimeError(f"fairbench sweep failed at C={level}")
    with gzip.open(out / "requests" / f"c{level}-r0.jsonl.gz", "rt") as handle:
        return [json.loads(line) for line in handle]


def errors(records: list[dict[str, Any]], sent: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """Per request (TTFT, TPOT) and per gap (ITL): measured minus true, in ms, and relative."""
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "itl": [], "tpot_rel": []}
    for record in records:
        truth = sent[record["rid"]]
        chunks, true_chunks = record["chunk_ns"], truth["chunk_ns"]
        if len(chunks) != len(true_chunks):
            raise RuntimeError(f"{record['rid']}: {len(chunks)} chunks measured, {len(true_chunks)} sent")
        out["ttft"].append((chunks[0] - true_chunks[0]) / 1e6)
        tokens = record["output_len"]
        measured_tpot = (record["end_ns"] - chunks[0]) / (tokens - 1)
        true_tpot = (true_chunks[-1] - true_chunks[0]) / (tokens - 1)
        out["tpot"].append((measured_tpot - true_tpot) / 1e6)
        out["tpot_rel"].append((measured_tpot - true_tpot) / true_tpot)
        for (a, b), (ta, tb) in zip(pairwise(chunks), pairwise(true_chunks), strict=True):
            out["itl"].append(((b - a) - (tb - ta)) / 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,4,16,64,256")
    parser.add_argument("--output-len", type=int, default=128)
    args = parser.parse_args()
    server = Server(FIRST_TOKEN_MS, CHUNK_GAP_MS)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for level in map(int, args.levels.split(",")):
                server.send_times()  # forget the warmup of the previous level
                records = sweep(server.url, Path(tmp) / f"c{level}", level, args.output_len)
                sent = server.send_times()
                rows.append((level, errors(records, sent)))
    finally:
        server.stop()
    print(
        f"\nerror = measured - server's send times, in ms; first token after {FIRST_TOKEN_MS:g} ms", end=", "
    )
    print(f"then one every {CHUNK_GAP_MS:g} ms")
    columns = [(f"{metric} {stat}", metric, q) for metric in ("ttft", "tpot", "itl") for stat, q in STATS]
    columns.append(("|tpot| p99 %", "tpot_pct", 99))
    print(f"{'C':>5}" + "".join(f"{header:>14}" for header, _, _ in columns))
    for level, err in rows:
        err["tpot_pct"] = [abs(value) * 100 for value in err["tpot_rel"]]
        print(f"{level:>5}" + "".join(f"{percentile(err[key], q):>14.3f}" for _, key, q in columns))


if __name__ == "__main__":
    main()
