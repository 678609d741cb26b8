"""One rank of ``fairbench nccl``: times all-reduces of bf16 tensors with torch.distributed over NCCL.

Run by path, one process per GPU, under the serving venv's Python (it has torch; fairbench is not
installed there), so this file imports torch and the standard library only. ``fairbench.nccl.runner`` starts
the ranks and turns the raw times into statistics; this script only measures.

Protocol (``fairbench.nccl.runner`` speaks the other side; tests/support/fake_nccl_worker.py runs this file
on a fake torch, so the tests see this protocol):

- ``--count-gpus``: print the number of visible CUDA devices and exit.
- otherwise each rank joins the group (``--rank``/``--world-size``/``--master-addr``/``--master-port``, or
  the ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` variables torchrun sets) on GPU ``rank``,
  and for each of ``--sizes`` (bytes, comma-separated) runs ``--warmup`` all-reduces, then ``--iters``
  timed ones, each between two CUDA events (eager launches: the time includes launch gaps, as a server
  without CUDA graphs would see them). Unless ``--no-graph``, it then captures ``--graph-ops``
  all-reduces into one CUDA graph and times ``--iters`` replays; each replay's time / graph-ops is one
  sample. A barrier separates the sizes.
- rank 0 writes a line ``PROGRESS_PREFIX {"bytes": ..., "eager_median_us": ..., "graph_median_us": ...}``
  to stderr after each size, and at the end one JSON document to stdout::

      {"protocol": 1, "world_size": 2, "device": "NVIDIA H200", "torch": "2.9.1", "nccl": "2.28.9",
       "cuda": "13.0", "sizes": [{"bytes": 14336, "eager_us": [...], "graph_us": [...] | null,
                                  "graph_error": null | "why capture failed"}]}

A failed capture is recorded, and later sizes run eagerly only: after a failed capture NCCL's state is
not trusted for another one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

import torch  # type: ignore[import-not-found, unused-ignore]
import torch.distributed as dist  # type: ignore[import-not-found, unused-ignore]

PROTOCOL = 1
PROGRESS_PREFIX = "fairbench-nccl-progress"
GRAPH_WARMUP_REPLAYS = 2
SIDE_STREAM_WARMUP = 3
"""All-reduces on a side stream before a capture, as torch's CUDA graph notes advise."""


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count-gpus", action="store_true", help="print the number of visible GPUs")
    parser.add_argument("--rank", type=int, default=int(env.get("RANK", "0")))
    parser.add_argument("--world-size", type=int, default=int(env.get("WORLD_SIZE", "1")))
    parser.add_argument("--master-addr", default=env.get("MASTER_ADDR", "127.0.0.1"))
    parser.add_argument("--master-port", type=int, default=int(env.get("MASTER_PORT", "29500")))
    parser.add_argument("--sizes", default="", help="message sizes in bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--graph-ops", type=int, default=10)
    parser.add_argument("--no-graph", action="store_true")
    return parser.parse_args(argv)


def _elapsed_us(pairs: list[tuple[Any, Any]], ops: int = 1) -> list[float]:
    torch.cuda.synchronize()
    # CUDA events report milliseconds.
    return [float(start.elapsed_time(end)) * 1000.0 / ops for start, end in pairs]


def _event_pair() -> tuple[Any, Any]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def eager_times(tensor: Any, warmup: int, iters: int) -> list[float]:
    for _ in range(warmup):
        dist.all_reduce(tensor)
    pairs = [_event_pair() for _ in range(iters)]
    for start, end in pairs:
        start.record()
        dist.all_reduce(tensor)
        end.record()
    return _elapsed_us(pairs)


def graph_times(tensor: Any, ops: int, warmup: int, iters: int) -> list[float]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(SIDE_STREAM_WARMUP):
            dist.all_reduce(tensor)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(ops):
            dist.all_reduce(tensor)
    for _ in range(max(warmup // ops, GRAPH_WARMUP_REPLAYS)):
        graph.replay()
    pairs = [_event_pair() for _ in range(iters)]
    for start, end in pairs:
        start.record()
        graph.replay()
        end.record()
    times = _elapsed_us(pairs, ops)
    del graph
    return times


def _nccl_version() -> str:
    version = torch.cuda.nccl.version()
    if isinstance(version, tuple):
        return ".".join(map(str, version))
    # Older torch: one integer, e.g. 22809 for 2.28.9 (major*10000 + minor*100 + patch since NCCL 2.9).
    number = int(version)
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


def _barrier(rank: int) -> None:
    torch.cuda.synchronize()
    dist.barrier(device_ids=[rank])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.cuda.set_device(args.rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://{args.master_addr}:{args.master_port}",
        rank=args.rank,
        world_size=args.world_size,
    )
    graph_failed: str | None = None
    results = []
    for size in (int(part) for part in args.sizes.split(",") if part):
        # bf16: two bytes per element. Zeros stay zeros however often they are summed.
        tensor = torch.zeros(size // 2, dtype=torch.bfloat16, device="cuda")
        eager = eager_times(tensor, args.warmup, args.iters)
        graph: list[float] | None = None
        graph_error = graph_failed
        if not args.no_graph and graph_failed is None:
            try:
                graph = graph_times(tensor, args.graph_ops, args.warmup, args.iters)
            except RuntimeError as exc:
                graph_failed = graph_error = f"{type(exc).__name__}: {exc}"
        results.append({"bytes": size, "eager_us": eager, "graph_us": graph, "graph_error": graph_error})
        del tensor
        _barrier(args.rank)
        if args.rank == 0:
            progress = {
                "bytes": size,
                "eager_median_us": statistics.median(eager),
                "graph_median_us": statistics.median(graph) if graph else None,
            }
            print(PROGRESS_PREFIX, json.dumps(progress), file=sys.stderr, flush=True)
    document = {
        "protocol": PROTOCOL,
        "world_size": args.world_size,
        "device": torch.cuda.get_device_name(args.rank),
        "torch": str(torch.__version__),
        "nccl": _nccl_version(),
        "cuda": str(torch.version.cuda),
        "sizes": results,
    }
    dist.destroy_process_group()
    return document


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.count_gpus:
        print(torch.cuda.device_count())
        return 0
    document = measure(args)
    if args.rank == 0:
        print(json.dumps(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
