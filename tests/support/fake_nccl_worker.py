"""bench/fairbench/nccl/worker.py itself, run on a fake torch: its arguments, output and errors, without GPUs.

The worker is run by path, as ``fairbench nccl`` runs it, after ``torch``, ``torch.cuda`` and
``torch.distributed`` are replaced by the stand-ins below: whatever the worker writes is the real worker's
protocol. Only what torch would measure is made up. An all-reduce of S bytes takes 10 + S/1000 us (with
``NCCL_PROTO=LL`` 5 % less below 4 MiB and 3.5x above, the trade-off the real LL protocol showed on
H200s); one replayed in a CUDA graph takes half that; timing events read this clock, so every sample of
a size is that time exactly.

Each rank writes what it was started with and what it measured (rank, world size, port, its NCCL_*
environment; the sizes it all-reduced, whether it captured a graph) to
``$FAKE_NCCL_RECORD/rank<R>-<pid>.json`` when ``FAKE_NCCL_RECORD`` is set, once it joins the group and
again as it exits.

Knobs, from the environment: ``FAKE_NCCL_GPUS`` (the CUDA devices torch sees, default 2);
``FAKE_NCCL_FAIL`` = ``VARIABLE=VALUE:RANK``: joining the group fails on that rank, as NCCL's init does,
when the variable has that value (a variant that breaks NCCL); ``FAKE_NCCL_HANG=1``: rank 0 never
completes joining; ``FAKE_NCCL_GRAPH_FAIL=BYTES``: capturing a graph of all-reduces of BYTES or more fails.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

REAL_WORKER = Path(__file__).resolve().parents[2] / "bench/fairbench/nccl/worker.py"
LL_LIMIT_BYTES = 4 * 2**20
BF16_BYTES = 2
DEVICE_NAME = "Fake GPU"
TORCH_VERSION = "0.0-fake"
NCCL_VERSION = (2, 99, 0)
CUDA_VERSION = "99.0"
GRAPH_CAPTURE_ERROR = "CUDA error: operation not permitted when stream is capturing"


def eager_us(size: int, env: dict[str, str]) -> float:
    """Microseconds for ``size`` bytes: 10 + S/1000; with NCCL_PROTO=LL 5 % less below 4 MiB, 3.5x above."""
    time_us = 10.0 + size / 1000.0
    if env.get("NCCL_PROTO") == "LL":
        return time_us * (0.95 if size < LL_LIMIT_BYTES else 3.5)
    return time_us


class _Device:
    """One rank's GPU: a clock that all-reduces advance, and what the rank did, for its record."""

    def __init__(self) -> None:
        self.now_us = 0.0
        self.env = {key: value for key, value in os.environ.items() if key.startswith("NCCL_")}
        self.capturing: _Graph | None = None
        self.record: dict[str, Any] = {"sizes": [], "graph": False}

    def save_record(self) -> None:
        directory = os.environ.get("FAKE_NCCL_RECORD")
        if directory and "rank" in self.record:
            path = Path(directory) / f"rank{self.record['rank']}-{os.getpid()}.json"
            path.write_text(json.dumps(self.record))


DEVICE = _Device()


class Tensor:
    def __init__(self, elements: int) -> None:
        self.nbytes = elements * BF16_BYTES


class Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.at_us: float | None = None

    def record(self) -> None:
        self.at_us = DEVICE.now_us

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds, as CUDA events report them."""
        assert self.at_us is not None and end.at_us is not None, "an event that was never recorded"
        return (end.at_us - self.at_us) / 1000.0


class Stream:
    def wait_stream(self, other: Stream) -> None:
        pass


class _Graph:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def replay(self) -> None:
        DEVICE.now_us += sum(eager_us(size, DEVICE.env) / 2 for size in self.sizes)


def _zeros(elements: int, dtype: object = None, device: object = None) -> Tensor:
    tensor = Tensor(elements)
    DEVICE.record["sizes"].append(tensor.nbytes)
    return tensor


@contextmanager
def _stream(stream: Stream) -> Iterator[None]:
    yield


@contextmanager
def _graph(graph: _Graph) -> Iterator[None]:
    DEVICE.capturing = graph
    try:
        yield
    finally:
        DEVICE.capturing = None
    DEVICE.record["graph"] = True
    limit = os.environ.get("FAKE_NCCL_GRAPH_FAIL")
    if limit and any(size >= int(limit) for size in graph.sizes):
        raise RuntimeError(GRAPH_CAPTURE_ERROR)


def _init_process_group(backend: str, init_method: str, rank: int, world_size: int) -> None:
    DEVICE.record.update(
        rank=rank, world_size=world_size, master_port=int(init_method.rsplit(":", 1)[1]), env=DEVICE.env
    )
    DEVICE.save_record()
    atexit.register(DEVICE.save_record)
    fail = os.environ.get("FAKE_NCCL_FAIL")
    if fail:
        assignment, failing_rank = fail.rsplit(":", 1)
        key, value = assignment.split("=", 1)
        if os.environ.get(key) == value and int(failing_rank) == rank:
            raise RuntimeError(f"NCCL error: NCCL WARN fake failure: {key}={value} is not supported")
    if rank == 0 and os.environ.get("FAKE_NCCL_HANG"):
        time.sleep(3600)


def _all_reduce(tensor: Tensor) -> None:
    if DEVICE.capturing is not None:
        DEVICE.capturing.sizes.append(tensor.nbytes)
    else:
        DEVICE.now_us += eager_us(tensor.nbytes, DEVICE.env)


def _module(name: str, **attributes: Any) -> ModuleType:
    module = ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def install_fake_torch() -> None:
    """``torch`` and the parts of it the worker uses, in ``sys.modules``."""
    cuda = _module(
        "torch.cuda",
        set_device=lambda device: None,
        device_count=lambda: int(os.environ.get("FAKE_NCCL_GPUS", "2")),
        get_device_name=lambda device=None: DEVICE_NAME,
        synchronize=lambda: None,
        Event=Event,
        Stream=Stream,
        current_stream=Stream,
        stream=_stream,
        CUDAGraph=_Graph,
        graph=_graph,
        nccl=_module("torch.cuda.nccl", version=lambda: NCCL_VERSION),
    )
    distributed = _module(
        "torch.distributed",
        init_process_group=_init_process_group,
        all_reduce=_all_reduce,
        barrier=lambda device_ids=None: None,
        destroy_process_group=lambda: None,
    )
    version = _module("torch.version", cuda=CUDA_VERSION)
    _module(
        "torch",
        __version__=TORCH_VERSION,
        bfloat16="bfloat16",
        zeros=_zeros,
        cuda=cuda,
        distributed=distributed,
        version=version,
    )


def main() -> None:
    install_fake_torch()
    sys.argv[0] = str(REAL_WORKER)
    runpy.run_path(str(REAL_WORKER), run_name="__main__")


if __name__ == "__main__":
    main()
