"""The closed loop: C workers, each sending its next request the moment its last one ends.

It is the load pattern of ``sglang.bench_serving --request-rate inf --max-concurrency C``; the open
loop of scheduled arrivals is in arrivals.py. Both stop sending on the same error-rate rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from fairbench.measure.client import StreamClient
from fairbench.measure.records import RequestRecord
from fairbench.measure.workload import Prompt

# The error rate is judged only once this many requests of the level have ended,
# so that one early failure does not stop a level.
ERROR_RATE_MIN_REQUESTS = 8


@dataclass(slots=True)
class ErrorRateStop:
    """The loops' rule for stopping early: once more than ``limit`` of at least ERROR_RATE_MIN_REQUESTS
    ended requests failed, no new request is sent (those in flight are allowed to end); never without a
    limit."""

    limit: float | None
    ended: int = 0
    failed: int = 0

    def passed(self, record: RequestRecord) -> bool:
        """Count ``record``, which just ended; whether the loop must stop sending now."""
        self.ended += 1
        self.failed += not record.success
        return (
            self.limit is not None
            and self.ended >= ERROR_RATE_MIN_REQUESTS
            and self.failed / self.ended > self.limit
        )


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A prompt with its request id and encoded body, made before the clock starts."""

    prompt: Prompt
    rid: str
    body: bytes


async def run_closed_loop(
    client: StreamClient,
    *,
    requests: list[PreparedRequest],
    concurrency: int,
    on_done: Callable[[RequestRecord], None],
    max_error_rate: float | None = None,
) -> tuple[list[RequestRecord], bool]:
    """Send every request with ``concurrency`` in flight; returns (records, stopped early).

    When ``max_error_rate`` is given and the failed share of ended requests passes it,
    no new request is sent; those in flight are allowed to end.
    """
    records: list[RequestRecord] = []
    next_index = 0
    rule = ErrorRateStop(max_error_rate)
    stopped = False

    async def worker() -> None:
        nonlocal next_index, stopped
        while not stopped and next_index < len(requests):
            request = requests[next_index]
            next_index += 1
            record = await client.request(request.prompt, request.body, request.rid)
            records.append(record)
            on_done(record)
            if rule.passed(record):
                stopped = True

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(requests)))))
    return records, stopped
