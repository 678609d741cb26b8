"""Sends one request's planned events, each at its absolute due time, and records when content left."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tests.support.sse_server.stream_plan import Event
from tests.support.sse_server.templates import Substitutions

if TYPE_CHECKING:
    from tests.support.sse_server.connection import HttpConnection


class ScheduledStream:
    """One stream on its connection: the events of its plan, due relative to its dispatch."""

    __slots__ = (
        "_conn",
        "_events",
        "_head",
        "_log",
        "_loop",
        "_next",
        "_record",
        "_start",
        "_substitutions",
        "_timer",
    )

    def __init__(
        self,
        conn: HttpConnection,
        *,
        events: Sequence[Event],
        head: bytes | None,
        substitutions: Substitutions,
        record: dict[str, Any],
        start: float,
    ) -> None:
        self._conn = conn
        self._log = conn.server.log
        self._loop = conn.server.loop
        self._events = events
        self._head = head
        self._substitutions = substitutions
        self._record = record
        self._start = start  # loop.time() at dispatch: every event is due relative to it
        self._next = 0
        self._timer: asyncio.Handle | None = None

    def begin(self) -> None:
        self._schedule(self._start + self._events[0].offset_s)

    def _schedule(self, due: float) -> None:
        loop = self._loop
        # An event already due skips the timer heap (whose comparisons are Python code):
        # call_soon runs it on the loop's next pass, after the other streams' due events.
        if due <= loop.time():
            self._timer = loop.call_soon(self._fire)
        else:
            self._timer = loop.call_at(due, self._fire)

    def cancel(self, outcome: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._record["outcome"]:
            self._record["outcome"] = outcome

    def _fire(self) -> None:
        self._timer = None
        transport = self._conn.transport
        if transport is None:
            return
        _offset, frames, tokens, content_frame, action = self._events[self._next]
        self._next += 1
        if action == "reset":
            self._record["outcome"] = "reset"
            self._conn.reset()
            return
        if action == "stall":
            self._record["outcome"] = "stalled"  # the connection stays open, silent
            return
        write = transport.write
        if self._head is not None:
            write(self._head)
            self._head = None
        log = self._log
        for index, frame in enumerate(frames):
            for slot, value in self._substitutions:
                frame = frame.replace(slot, value)  # noqa: PLW2901 - filled copy of the template
            if index == content_frame:
                sent_ns = time.perf_counter_ns()
                record = self._record
                if record["first_chunk_ns"] == 0:
                    record["first_chunk_ns"] = sent_ns
                if log.record_chunk_times:
                    record["chunk_ns"].append(sent_ns)
                    record["chunk_tokens"].append(tokens)
                record["output_tokens"] += tokens
                log.content_chunks += 1
            write(frame)
        log.sse_events += len(frames)
        if self._next < len(self._events):
            self._schedule(self._start + self._events[self._next].offset_s)
        else:
            if not self._record["outcome"]:
                self._record["outcome"] = "complete"
            self._conn.response_done()
