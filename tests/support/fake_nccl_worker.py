"""A stand-in for bench/fairbench/nccl_worker.py without torch or GPUs: the same arguments and protocol.

Each rank writes what it was started with (rank, world size, port, sizes, its NCCL_* environment) to
``$FAKE_NCCL_RECORD/rank<R>-<pid>.json``. Rank 0 reports synthetic times (``eager_us``), half of them
in a graph, so bandwidths are known in advance. With ``NCCL_PROTO=LL`` small messages are faster and
large ones far slower, the trade-off the real LL protocol showed on H200s.

Knobs, from the environment: ``FAKE_NCCL_GPUS`` (what ``--count-gpus`` prints, default 2);
``FAKE_NCCL_FAIL`` = ``VARIABLE=VALUE:RANK``: that rank fails with a message on stderr when the variable
has that value (a variant that breaks NCCL); ``FAKE_NCCL_HANG=1``: rank 0 never finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

LL_LIMIT_BYTES = 4 * 2**20


def eager_us(size: int, env: dict[str, str]) -> float:
    """Microseconds for ``size`` bytes: 10 + S/1000; with NCCL_PROTO=LL 5 % less below 4 MiB, 3.5x above."""
    time_us = 10.0 + size / 1000.0
    if env.get("NCCL_PROTO") == "LL":
        return time_us * (0.95 if size < LL_LIMIT_BYTES else 3.5)
    return time_us


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count-gpus", action="store_true")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=0)
    parser.add_argument("--sizes", default="")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--graph-ops", type=int, default=10)
    parser.add_argument("--no-graph", action="store_true")
    args = parser.parse_args()
    if args.count_gpus:
        print(os.environ.get("FAKE_NCCL_GPUS", "2"))
        return 0
    record = Path(os.environ["FAKE_NCCL_RECORD"])
    sizes = [int(part) for part in args.sizes.split(",") if part]
    started = {
        "rank": args.rank,
        "world_size": args.world_size,
        "master_port": args.master_port,
        "sizes": sizes,
        "iters": args.iters,
        "graph": not args.no_graph,
        "env": {key: value for key, value in os.environ.items() if key.startswith("NCCL_")},
    }
    (record / f"rank{args.rank}-{os.getpid()}.json").write_text(json.dumps(started))
    fail = os.environ.get("FAKE_NCCL_FAIL")
    if fail:
        assignment, rank = fail.rsplit(":", 1)
        key, value = assignment.split("=", 1)
        if os.environ.get(key) == value and int(rank) == args.rank:
            print(f"NCCL WARN fake failure: {key}={value} is not supported", file=sys.stderr)
            return 3
    if args.rank != 0:
        return 0
    if os.environ.get("FAKE_NCCL_HANG"):
        time.sleep(3600)
    results = []
    for size in sizes:
        # A little spread around the exact time, symmetric, so the median is exact.
        eager = [eager_us(size, started["env"]) * factor for factor in (0.9, 1.0, 1.1)] * (
            args.iters // 3 or 1
        )
        graph = None if args.no_graph else [value / 2 for value in eager]
        results.append({"bytes": size, "eager_us": eager, "graph_us": graph, "graph_error": None})
        progress = {"bytes": size, "eager_median_us": eager_us(size, started["env"]), "graph_median_us": None}
        print("fairbench-nccl-progress", json.dumps(progress), file=sys.stderr, flush=True)
    document = {
        "protocol": 1,
        "world_size": args.world_size,
        "device": "Fake GPU",
        "torch": "0.0-fake",
        "nccl": "2.99.0",
        "cuda": "99.0",
        "sizes": results,
    }
    print(json.dumps(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
