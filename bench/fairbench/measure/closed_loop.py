"""The closed loop: C workers, each sending its next request the moment its last one ends.

It is the load pattern of ``sglang.bench_serving --request-rate inf --max-concurrency C``; the open
loop of scheduled arrivals is in arrivals.py. Both stop sending on the same error-rate rule. A worker
that takes a conversation's first turn sends its later turns too (conversation.py), so that C counts
conversations in flight. The workers take their requests from a ``Tickets`` source: the point's own
list in one process (``LocalTickets``), or one shared by the client's processes
(``client_processes.SharedTickets``), so that C streams over N processes still form one loop of C.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fairbench.measure.client import StreamClient
from fairbench.measure.conversation import converse
from fairbench.measure.records import RequestRecord
from fairbench.measure.workload import Prompt

# The error rate is judged only once this many requests of the level have ended,
# so that one early failure does not stop a level.
ERROR_RATE_MIN_REQUESTS = 8


def error_rate_exceeded(limit: float | None, ended: int, failed: int) -> bool:
    """The loops' rule for stopping early: more than ``limit`` of at least ERROR_RATE_MIN_REQUESTS ended
    requests failed; never without a limit."""
    return limit is not None and ended >= ERROR_RATE_MIN_REQUESTS and failed / ended > limit


@dataclass(slots=True)
class ErrorRateStop:
    """``error_rate_exceeded`` over the requests of one loop as they end: once it holds, no new request
    is sent (those in flight are allowed to end)."""

    limit: float | None
    ended: int = 0
    failed: int = 0

    def passed(self, record: RequestRecord) -> bool:
        """Count ``record``, which just ended; whether the loop must stop sending now."""
        self.ended += 1
        self.failed += not record.success
        return error_rate_exceeded(self.limit, self.ended, self.failed)


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A prompt with its request id and encoded body, made before the clock starts."""

    prompt: Prompt
    rid: str
    body: bytes
    later: tuple[tuple[Prompt, str], ...] = ()
    """Where ``prompt`` is a conversation's first turn: its later turns with their request ids, sent one
    after another by the same stream (``measure.conversation``)."""


class Tickets(Protocol):
    """Where a closed loop's workers take their next request, and say how each ended."""

    @property
    def stopped(self) -> bool:
        """Whether the error rate stopped the loop."""

    def take(self) -> PreparedRequest | None:
        """The next request to send; None when none is left or the loop stopped."""

    def ended(self, record: RequestRecord) -> None:
        """``record`` ended: count it for the error-rate rule."""


class LocalTickets:
    """The requests of a loop that runs in one process, in order."""

    def __init__(self, requests: Sequence[PreparedRequest], max_error_rate: float | None) -> None:
        self._requests = requests
        self._next = 0
        self._rule = ErrorRateStop(max_error_rate)
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def take(self) -> PreparedRequest | None:
        if self._stopped or self._next >= len(self._requests):
            return None
        self._next += 1
        return self._requests[self._next - 1]

    def ended(self, record: RequestRecord) -> None:
        self._stopped = self._rule.passed(record) or self._stopped


async def run_closed_loop(
    client: StreamClient,
    *,
    tickets: Tickets,
    concurrency: int,
    on_done: Callable[[RequestRecord], None],
    think_time_s: float = 0.0,
) -> list[RequestRecord]:
    """Send the requests ``tickets`` gives with ``concurrency`` in flight; returns their records.

    Each of ``concurrency`` workers takes a request, sends it, and takes the next once it ended, until the
    tickets run out or the error-rate rule stops them (those in flight are allowed to end). A request
    that starts a conversation is the whole conversation (``conversation.converse``, ``think_time_s``
    between its turns): ``concurrency`` counts conversations in flight.
    """
    records: list[RequestRecord] = []

    def ended(record: RequestRecord) -> None:
        records.append(record)
        on_done(record)
        tickets.ended(record)

    async def worker() -> None:
        while (request := tickets.take()) is not None:
            if not request.later:
                ended(await client.request(request.prompt, request.body, request.rid))
                continue
            await converse(
                client,
                (request.prompt, request.body, request.rid),
                request.later,
                think_time_s=think_time_s,
                ended=ended,
                stopped=lambda: tickets.stopped,
            )

    workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        # One worker's unexpected error ends the others at once: left running, they would go on sending
        # through a client its owner is closing, and bury that error under their own.
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    return records
