"""An open loop: requests sent on a schedule of random arrivals, whatever the server's pace.

The schedule (:func:`arrival_offsets_s`) is drawn before the clock starts. :func:`run_open_loop` sends
request i at its scheduled time, with at most ``max_in_flight`` in flight; a request whose time has come
while every slot is taken waits for one and is still timed from its scheduled time
(``RequestRecord.start_ns``). A server that cannot keep up then shows as a TTFT that grows over the
point, and as an achieved rate (:func:`achieved_rate`) below the target, instead of the client quietly
sending slower and timing each request from its late send.

Arrivals follow vLLM's ``benchmarks/serve.py`` (``get_request``): gaps between requests are
Gamma(shape = burstiness, scale = 1 / (rate x burstiness)), of mean 1 / rate; burstiness 1 is Poisson
(exponential gaps). Two differences from it, and one from ``sglang.bench_serving``:

- The first request goes out at offset 0, as ``sglang.bench_serving`` sends it (it sleeps a gap *after*
  each request); vLLM sleeps a gap before the first too. The point's clock (its duration) starts with a
  request instead of an idle gap that no request occupies, and n requests span n - 1 gaps, which is what
  :func:`achieved_rate` counts.
- vLLM rescales the cumulative offsets so that the last lands exactly on count / rate; these are plain
  cumulative sums, so the gaps are the distribution's own and the run-to-run spread of the offered load
  stays in the repeats.
- Sends are scheduled against absolute times from the loop's start, as vLLM does; sglang sleeps each gap
  after the previous send, so its lateness accumulates.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns

from fairbench.measure.client import StreamClient
from fairbench.measure.closed_loop import ErrorRateStop, PreparedRequest
from fairbench.measure.event_loop import resolve
from fairbench.measure.records import RequestRecord
from fairbench.measure.workload import ARRIVALS, DEFAULT_ARRIVAL, DEFAULT_BURSTINESS, POISSON

NS_PER_S = 1_000_000_000
LOOKAHEAD_NS = 50_000_000
"""How long before its time each request's task starts. At its time only its own timer stands between
it and its send: a dispatcher woken then to start the task would add a whole pass of the event loop, a
pass that at a high load handles hundreds of reads first. Not earlier: a long schedule is never all
tasks at once, and a stop ends every started task within this time."""
MOST_WAITING = 1024
"""The most started tasks not yet sending (waiting for their time or for a slot): a loop past the
server's capacity, whose due requests pile up behind the slots, starts the next one only once one of them
sends. They are sent in order all the same, each timed from its due time."""


def arrival_offsets_s(
    count: int,
    rate: float,
    *,
    arrival: str = DEFAULT_ARRIVAL,
    burstiness: float = DEFAULT_BURSTINESS,
    seed: int,
) -> list[float]:
    """The scheduled send time of each of ``count`` requests, in seconds from the point's start.

    offsets[0] = 0 and offsets[i] = offsets[i-1] + gap_i, the gaps drawn from ``random.Random(seed)``:
    - ``poisson``: exponential, mean 1 / rate (``expovariate(rate)``); ``burstiness`` must be 1;
    - ``gamma``: Gamma(shape k = burstiness, scale = 1 / (rate x k)) (``gammavariate``), of mean 1 / rate
      and coefficient of variation (std / mean) 1 / sqrt(k): k = 1 is Poisson, k < 1 burstier, k > 1
      more regular.
    Raises ValueError naming the rule: count >= 0, rate > 0 and finite (an infinite rate is the closed
    loop), burstiness > 0 and finite, arrival one of ``ARRIVALS``.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a positive finite number of requests per second, got {rate}")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise ValueError(f"burstiness must be a positive finite number, got {burstiness}")
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    if arrival == POISSON and burstiness != DEFAULT_BURSTINESS:
        raise ValueError(
            f"burstiness {burstiness} needs arrival 'gamma' (poisson is gamma with burstiness 1)"
        )
    rng = random.Random(seed)
    if arrival == POISSON:
        gaps = [rng.expovariate(rate) for _ in range(count - 1)]
    else:
        scale = 1.0 / (rate * burstiness)
        gaps = [rng.gammavariate(burstiness, scale) for _ in range(count - 1)]
    offsets = [0.0] * min(count, 1)
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    return offsets


def achieved_rate(send_ns: Sequence[int]) -> float:
    """The rate requests actually went out at, in requests per second: (n - 1) / (last send - first
    send), with the sends in ``perf_counter_ns`` and n >= 2 of them (any order).

    n - 1 because n sends delimit n - 1 gaps and the span is their sum: this is the reciprocal of the mean
    gap, the quantity the target rate sets (n / span would make two sends 1 s apart 2 requests per
    second). Compare it with the target rate of the campaign, or with the same formula over the
    schedule's offsets to leave out the schedule's own sampling spread. Infinite when every send happened
    at the same instant; ValueError for fewer than 2 sends.
    """
    if len(send_ns) < 2:
        raise ValueError(f"an achieved rate needs at least 2 sends, got {len(send_ns)}")
    span_ns = max(send_ns) - min(send_ns)
    return (len(send_ns) - 1) * NS_PER_S / span_ns if span_ns else math.inf


@dataclass(slots=True)
class OpenLoopResult:
    """What an open loop sent and observed."""

    records: list[RequestRecord]
    """One per request sent, in the order they ended."""
    stopped_early: bool
    """The error rate passed ``max_error_rate``: the requests not yet sent never were."""
    start_ns: int
    """The schedule's origin: request i was due at start_ns + offsets_s[i] (its record's ``start_ns``)."""
    send_ns: list[int]
    """When each request sent was written to the connection (``start_ns + send_delay_ns`` of its record),
    in send order: the input of :func:`achieved_rate`."""


async def run_open_loop(
    client: StreamClient,
    *,
    requests: Sequence[PreparedRequest],
    offsets_s: Sequence[float],
    max_in_flight: int,
    on_done: Callable[[RequestRecord], None],
    max_error_rate: float | None = None,
    start_ns: int | None = None,
) -> OpenLoopResult:
    """Send ``requests[i]`` at start + ``offsets_s[i]`` (start = ``start_ns``, else ``perf_counter_ns()``
    on entry), never more than ``max_in_flight`` at once; returns what was sent and observed.

    The schedule is walked in order: LOOKAHEAD_NS before request i is due its task starts, which waits
    until the due time, then for a free slot (in due order), then passes its due time to
    ``client.request`` as ``scheduled_ns``. A request that waited for a slot goes out late, not never, and
    the ones after it wait behind it. The client's
    connection pool must hold ``max_in_flight`` connections (``StreamClient(concurrency=...)``): a
    request queued inside the pool would count as sent.

    When ``max_error_rate`` is given, the loop stops sending as the closed loop does (``ErrorRateStop``);
    those in flight are allowed to end.
    """
    if len(offsets_s) != len(requests):
        raise ValueError(f"offsets_s has {len(offsets_s)} offsets for {len(requests)} requests")
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(max_in_flight)
    records: list[RequestRecord] = []
    tasks: list[asyncio.Task[None]] = []
    rule = ErrorRateStop(max_error_rate)
    stopped = False
    # What the wait for the next due time awaits (asyncio.sleep's own future and timer): a stop wakes it
    # at once instead of after a gap that, with bursty arrivals, can last many seconds.
    wake: asyncio.Future[None] = loop.create_future()
    origin_ns = perf_counter_ns() if start_ns is None else start_ns
    waiting = 0
    room: asyncio.Future[None] = loop.create_future()
    """Resolved when a started task stops waiting: the dispatcher may start another."""

    def halted() -> bool:
        """Whether a stop came while the caller waited (a call: a check of the flag itself would be
        read, by the type checker, as the one made before the wait)."""
        return stopped

    async def send(request: PreparedRequest, due_ns: int) -> None:
        nonlocal stopped, waiting
        try:
            # Until due: a timer may fire a clock tick early, and a request never goes out before its time.
            while not stopped and (wait_ns := due_ns - perf_counter_ns()) > 0:
                alarm = loop.create_future()
                loop.call_later(wait_ns / NS_PER_S, resolve, alarm)
                await alarm
            if stopped:
                return
            await slots.acquire()
        finally:
            waiting -= 1
            resolve(room)
        if halted():  # a stop releases the slot of the request that ended: the next waiter returns too
            slots.release()
            return
        try:
            record = await client.request(request.prompt, request.body, request.rid, scheduled_ns=due_ns)
        finally:
            slots.release()
        records.append(record)
        on_done(record)
        if rule.passed(record):
            stopped = True
            resolve(wake)

    async def dispatch() -> None:
        nonlocal wake, waiting, room
        for request, offset_s in zip(requests, offsets_s, strict=True):
            due_ns = origin_ns + round(offset_s * NS_PER_S)
            while not stopped and (wait_ns := due_ns - LOOKAHEAD_NS - perf_counter_ns()) > 0:
                wake = loop.create_future()
                timer = loop.call_later(wait_ns / NS_PER_S, resolve, wake)
                await wake
                timer.cancel()
            while not stopped and waiting >= MOST_WAITING:
                room = loop.create_future()
                await room
            if stopped:
                return
            waiting += 1
            tasks.append(loop.create_task(send(request, due_ns)))

    try:
        await dispatch()
    except asyncio.CancelledError:
        for task in tasks:  # as gather cancels a closed loop's workers
            task.cancel()
        raise
    await asyncio.gather(*tasks)
    send_ns = sorted(record.start_ns + record.send_delay_ns for record in records)
    return OpenLoopResult(records, stopped, origin_ns, send_ns)
