"""One phase of a point (its warmup, or its measurement) driven by one client process.

A phase is a closed loop of C streams or an open loop of scheduled arrivals (closed_loop.py,
arrivals.py). ``drive`` runs it in the calling process's event loop from a given clock origin and
measures what the process spent on it; the sweep calls it directly with one client process, and each
of several worker processes calls it on its share (client_processes.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns

from fairbench.measure.arrivals import NS_PER_S, run_open_loop
from fairbench.measure.client import StreamClient
from fairbench.measure.closed_loop import LocalTickets, PreparedRequest, Tickets, run_closed_loop
from fairbench.measure.event_loop import ProcessUse, UseMeter
from fairbench.measure.records import RequestRecord


@dataclass(frozen=True, slots=True)
class Phase:
    """What a phase sends: its requests, and how."""

    requests: Sequence[PreparedRequest]
    in_flight: int
    """A closed loop's concurrency; an open loop's bound on requests in flight."""
    offsets_s: Sequence[float] | None = None
    """An open loop's arrival offsets, one per request; None: a closed loop."""
    max_error_rate: float | None = None
    think_time_s: float = 0.0
    """A closed loop's pause between a conversation's reply and its next turn."""


@dataclass(slots=True)
class PhaseResult:
    """What a phase observed, over every client process."""

    records: list[RequestRecord]
    """One per request sent, in the order they ended (per process)."""
    stopped_early: bool
    """The error rate stopped sending."""
    start_ns: int
    """The clock origin: when the first request could go out (an open loop's schedule starts here)."""
    end_ns: int
    """When the last process's last request ended."""
    processes: list[ProcessUse]
    """Each client process's use, in process order."""

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / NS_PER_S


async def drive(
    client: StreamClient,
    phase: Phase,
    *,
    on_done: Callable[[RequestRecord], None],
    start_ns: int | None = None,
    tickets: Tickets | None = None,
) -> PhaseResult:
    """Run ``phase`` in this process from ``start_ns`` (waiting for it; None: now), with the closed loop's
    requests from ``tickets`` (default: the phase's own, in order), measuring the process's use."""
    if start_ns is not None and (wait_ns := start_ns - perf_counter_ns()) > 0:
        await asyncio.sleep(wait_ns / NS_PER_S)
    meter = UseMeter()
    meter.start()
    origin_ns = perf_counter_ns() if start_ns is None else start_ns
    if phase.offsets_s is None:
        source = tickets if tickets is not None else LocalTickets(phase.requests, phase.max_error_rate)
        records = await run_closed_loop(
            client,
            tickets=source,
            concurrency=phase.in_flight,
            on_done=on_done,
            think_time_s=phase.think_time_s,
        )
        stopped = source.stopped
    else:
        result = await run_open_loop(
            client,
            requests=phase.requests,
            offsets_s=phase.offsets_s,
            max_in_flight=phase.in_flight,
            on_done=on_done,
            max_error_rate=phase.max_error_rate,
            start_ns=origin_ns,
        )
        records, stopped = result.records, result.stopped_early
    end_ns = perf_counter_ns()
    use = await meter.stop(len(records))
    return PhaseResult(records, stopped, origin_ns, end_ns, [use])
