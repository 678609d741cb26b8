"""The client over several processes: N workers, each its own event loop and connections, driving a share
of a phase's streams, so that the client never runs out of one core.

Each worker is started once per sweep (``spawn``: a fresh interpreter, no copy of the parent's loop or
threads) and drives one phase at a time (``load_phase.drive``):

* A closed loop of C streams gives worker i ``C // N`` of them (the first ``C % N`` one more). They take
  their requests from one counter shared by every worker (``SharedTickets``), so the loop is still one
  loop of C: whichever stream ends first sends the next request, and the error-rate rule counts every
  worker's requests.
* An open loop deals its arrivals round-robin (request j to worker j mod N, each keeping its scheduled
  time) and splits its bound on requests in flight as a closed loop splits C; each worker applies the
  error-rate rule to its own requests.

Every process reads ``time.perf_counter_ns()``, which on Linux is CLOCK_MONOTONIC: one clock for all of
them, so the records merge into one point as if one process had taken them. The phase starts at one
origin that the parent sets once every worker has its share. Workers report finished requests in batches
for the progress line, and their records and CPU use at the end.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import SynchronizedArray
from time import perf_counter_ns
from typing import Any

from fairbench.measure.child_process import CONTEXT, start_child, stop_child
from fairbench.measure.client import ApiFormat, StreamClient
from fairbench.measure.closed_loop import PreparedRequest, error_rate_exceeded
from fairbench.measure.event_loop import collector_paused, resolve
from fairbench.measure.load_phase import Phase, PhaseResult, drive
from fairbench.measure.progress import Progress
from fairbench.measure.records import RequestRecord

START_MARGIN_NS = 20_000_000
"""From the last worker's "ready" to the phase's origin: the time the parent's "go" takes to reach them."""
PROGRESS_EVERY_S = 0.25
_NEXT, _ENDED, _FAILED, _STOPPED = range(4)


class ClientProcessError(RuntimeError):
    """A worker process failed; the message carries its traceback."""


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What each worker's StreamClient is made from."""

    base_url: str
    api: str
    model: str
    concurrency: int
    api_key: str | None
    connect_timeout: float
    read_timeout: float

    def client(self) -> StreamClient:
        return StreamClient(
            self.base_url,
            ApiFormat(self.api, self.model),
            concurrency=self.concurrency,
            api_key=self.api_key,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
        )


def shares(total: int, parts: int) -> list[int]:
    """``total`` split over ``parts``: ``total // parts`` each, the first ``total % parts`` one more."""
    return [total // parts + (index < total % parts) for index in range(parts)]


class SharedTickets:
    """A closed loop's requests, taken in order by the streams of every worker (closed_loop.Tickets)."""

    def __init__(
        self, requests: Sequence[PreparedRequest], counters: SynchronizedArray[Any], limit: float | None
    ) -> None:
        self._requests = requests
        self._counters = counters
        self._limit = limit

    @property
    def stopped(self) -> bool:
        return bool(self._counters[_STOPPED])

    def take(self) -> PreparedRequest | None:
        counters = self._counters
        with counters.get_lock():
            index = counters[_NEXT]
            if counters[_STOPPED] or index >= len(self._requests):
                return None
            counters[_NEXT] = index + 1
        request: PreparedRequest = self._requests[index]
        return request

    def ended(self, record: RequestRecord) -> None:
        counters = self._counters
        with counters.get_lock():
            counters[_ENDED] += 1
            counters[_FAILED] += not record.success
            if error_rate_exceeded(self._limit, counters[_ENDED], counters[_FAILED]):
                counters[_STOPPED] = 1


class _Batches:
    """A worker's finished requests, sent to the parent every PROGRESS_EVERY_S as (ok, failed, tokens)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.counts = [0, 0, 0]

    def done(self, record: RequestRecord) -> None:
        if record.success:
            self.counts[0] += 1
            self.counts[2] += record.output_len
        else:
            self.counts[1] += 1

    def flush(self) -> None:
        if any(self.counts):
            self._conn.send(("done", *self.counts))
            self.counts = [0, 0, 0]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            self.flush()


async def _worker_phase(
    client: StreamClient, conn: Connection, phase: Phase, counters: SynchronizedArray[Any]
) -> PhaseResult:
    conn.send(("ready",))
    start_ns = conn.recv()
    batches = _Batches(conn)
    reporter = asyncio.get_running_loop().create_task(batches.run())
    closed = phase.offsets_s is None
    tickets = SharedTickets(phase.requests, counters, phase.max_error_rate) if closed else None
    try:
        with collector_paused():
            return await drive(client, phase, on_done=batches.done, start_ns=start_ns, tickets=tickets)
    finally:
        reporter.cancel()
        await asyncio.gather(reporter, return_exceptions=True)
        batches.flush()


def worker_main(settings: ClientSettings, counters: SynchronizedArray[Any], conn: Connection) -> None:
    """A worker process: drives each phase the parent sends until it sends None."""
    loop = asyncio.new_event_loop()
    client = settings.client()
    try:
        loop.run_until_complete(client.__aenter__())
        while (phase := conn.recv()) is not None:
            try:
                result = loop.run_until_complete(_worker_phase(client, conn, phase, counters))
            except Exception:  # the parent reports it, with the traceback
                conn.send(("error", traceback.format_exc()))
                continue
            conn.send(("result", result))
    finally:
        loop.run_until_complete(client.__aexit__(None, None, None))
        loop.close()


class ClientProcesses:
    """``count`` worker processes for one sweep; ``run`` drives a phase over them."""

    def __init__(self, count: int, settings: ClientSettings) -> None:
        self.count = count
        self._counters = CONTEXT.Array("q", 4)
        children = [
            start_child(worker_main, (settings, self._counters), f"fairbench-client-{index}")
            for index in range(count)
        ]
        self._conns = [conn for conn, _ in children]
        self._processes = [process for _, process in children]

    def close(self) -> None:
        for conn, process in zip(self._conns, self._processes, strict=True):
            stop_child(conn, process)

    def __enter__(self) -> ClientProcesses:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def split(self, phase: Phase) -> list[Phase | None]:
        """Each worker's share of ``phase`` (None: it has no stream in it)."""
        parts: list[Phase | None] = []
        for index, share in enumerate(shares(phase.in_flight, self.count)):
            # A closed loop's workers all take from the shared counter; an open loop's arrivals are dealt.
            requests, offsets = phase.requests, phase.offsets_s
            if offsets is not None:
                requests, offsets = requests[index :: self.count], offsets[index :: self.count]
            taking = share and requests
            parts.append(Phase(requests, share, offsets, phase.max_error_rate) if taking else None)
        return parts

    async def run(self, phase: Phase, progress: Progress) -> PhaseResult:
        """Drive ``phase`` over the workers; their records merged, their uses in worker order."""
        counters = self._counters
        with counters.get_lock():
            counters[:] = [0, 0, 0, 0]
        taking = [(conn, part) for conn, part in zip(self._conns, self.split(phase), strict=True) if part]
        for conn, part in taking:
            conn.send(part)
        for conn, _ in taking:
            await self._expect(conn, "ready", progress)
        start_ns = perf_counter_ns() + START_MARGIN_NS
        for conn, _ in taking:
            conn.send(start_ns)
        results = [await self._expect(conn, "result", progress) for conn, _ in taking]
        return PhaseResult(
            records=[record for result in results for record in result.records],
            # A closed loop's workers each report the shared stop; an open loop's their own.
            stopped_early=any(result.stopped_early for result in results),
            start_ns=start_ns,
            end_ns=max(result.end_ns for result in results),
            processes=[use for result in results for use in result.processes],
        )

    async def _expect(self, conn: Connection, kind: str, progress: Progress) -> Any:
        """Wait for the worker's ``kind`` message, passing its progress batches on; raises
        ClientProcessError when it failed or died."""
        loop = asyncio.get_running_loop()
        while True:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(conn.fileno(), resolve, readable)
            try:
                await readable
            finally:
                loop.remove_reader(conn.fileno())
            while conn.poll():
                try:
                    message = conn.recv()
                except EOFError:
                    raise ClientProcessError("a client worker process exited") from None
                if message[0] == "done":
                    progress.requests_done(*message[1:])
                elif message[0] == "error":
                    raise ClientProcessError(f"a client worker process failed:\n{message[1]}")
                elif message[0] == kind:
                    return message[1] if len(message) > 1 else None
