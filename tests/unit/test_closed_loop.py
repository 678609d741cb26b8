"""The closed loop's workers: an unexpected error in one ends them all."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from fairbench.measure.client import StreamClient
from fairbench.measure.closed_loop import LocalTickets, PreparedRequest, run_closed_loop
from fairbench.measure.records import RequestRecord
from fairbench.measure.workload import Prompt


class BrokenClient:
    """Answers each request after ``answer_s``, except ``failing_rid``, which raises soon after its send;
    once ``closed``, a request raises as a closed StreamClient does."""

    def __init__(self, failing_rid: str, answer_s: float) -> None:
        self.failing_rid = failing_rid
        self.answer_s = answer_s
        self.sent: list[str] = []
        self.cancelled: list[str] = []
        self.closed = False

    async def request(self, prompt: Prompt, body: bytes, rid: str) -> RequestRecord:
        self.sent.append(rid)
        if self.closed:
            raise RuntimeError("StreamClient used outside 'async with'")
        if rid == self.failing_rid:
            await asyncio.sleep(0.01)
            raise AssertionError("a bug in the client")
        try:
            await asyncio.sleep(self.answer_s)
        except asyncio.CancelledError:
            self.cancelled.append(rid)
            raise
        return RequestRecord(prompt.index, prompt.prompt_len, prompt.output_len, rid=rid)


def test_an_unexpected_error_in_one_worker_cancels_the_others_before_it_is_raised() -> None:
    client = BrokenClient("r1", answer_s=0.2)
    requests = [PreparedRequest(Prompt(i, [1, 2], 2, 1), f"r{i}", b"{}") for i in range(20)]

    async def run() -> None:
        with pytest.raises(AssertionError, match="a bug in the client"):
            await run_closed_loop(
                cast(StreamClient, client),
                tickets=LocalTickets(requests, None),
                concurrency=4,
                on_done=lambda record: None,
            )
        client.closed = True  # what the sweep does next: it leaves the client's ``async with``
        await asyncio.sleep(2 * client.answer_s)  # time for a worker left running to send again

    asyncio.run(run())
    assert client.sent == ["r0", "r1", "r2", "r3"]
    assert sorted(client.cancelled) == ["r0", "r2", "r3"]
