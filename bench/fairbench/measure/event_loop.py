"""The client's event loop while it measures: its lag, its CPU, and no garbage collection pauses."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

LAG_SAMPLE_INTERVAL_S = 0.01
LAG_KEYS = ("event_loop_lag_mean_ms", "event_loop_lag_p99_ms", "event_loop_lag_max_ms")


class LoopLagMonitor:
    """Samples how late the event loop wakes a 10 ms sleep: proof the client kept up."""

    def __init__(self) -> None:
        self.lags_s: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            before = perf_counter()
            await asyncio.sleep(LAG_SAMPLE_INTERVAL_S)
            self.lags_s.append(max(0.0, perf_counter() - before - LAG_SAMPLE_INTERVAL_S))

    def start(self) -> None:
        self.lags_s = []
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self) -> dict[str, float]:
        """The lag's mean, p99 and max in ms since ``start``."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        lags = sorted(self.lags_s) or [0.0]
        figures = (sum(lags) / len(lags), lags[min(len(lags) - 1, int(0.99 * len(lags)))], lags[-1])
        return {key: 1000 * value for key, value in zip(LAG_KEYS, figures, strict=True)}


@dataclass(frozen=True, slots=True)
class ProcessUse:
    """What one client process spent on a phase of a point."""

    cpu_s: float
    """Its CPU time (user + system, every thread of it) over the phase."""
    wall_s: float
    """The phase's wall time in that process."""
    requests: int
    """The requests it sent."""
    lag: dict[str, float]
    """``LoopLagMonitor.stop``'s figures."""
    runqueue_wait_s: float | None
    """Its time runnable but waiting for a core (``/proc/self/schedstat``); None where the kernel does not
    keep it."""

    @property
    def cpu_share(self) -> float:
        """cpu_s / wall_s: the share of one core the process kept busy (0 for an empty phase)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "cpu_s": self.cpu_s,
            "cpu_share": self.cpu_share,
            "runqueue_wait_share": None
            if self.runqueue_wait_s is None
            else self.runqueue_wait_s / self.wall_s,
            "requests": self.requests,
            **self.lag,
        }


def runqueue_wait_s() -> float | None:
    """This process's main thread's time spent runnable but waiting for a core, in seconds (the second
    field of ``/proc/thread-self/schedstat``); None where the kernel does not keep it."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class UseMeter:
    """Measures a ``ProcessUse`` in the running loop: ``start`` then ``stop``."""

    def __init__(self) -> None:
        self._monitor = LoopLagMonitor()
        self._cpu = 0.0
        self._wall = 0.0
        self._waited: float | None = None

    def start(self) -> None:
        self._monitor.start()
        self._cpu = time.process_time()
        self._wall = perf_counter()
        self._waited = runqueue_wait_s()

    async def stop(self, requests: int) -> ProcessUse:
        cpu_s = time.process_time() - self._cpu
        wall_s = perf_counter() - self._wall
        waited = runqueue_wait_s()
        wait_s = None if waited is None or self._waited is None else waited - self._waited
        return ProcessUse(cpu_s, wall_s, requests, await self._monitor.stop(), wait_s)


def resolve(future: asyncio.Future[None]) -> None:
    """Wake what awaits ``future``, unless it was woken already (a callback for timers and readers)."""
    if not future.done():
        future.set_result(None)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a point is measured.

    A full collection walks every live object - hundreds of thousands of buffered
    reads at C=256 - and stalls the event loop for up to seconds, which shows up
    as TTFT. Streams make no reference cycles, so reference counting frees them;
    the collection runs once the point has ended.
    """
    gc.collect()
    gc.freeze()  # what exists now (prompts, bodies) is never scanned again
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()
