"""The per-request records the tests read back, with the counters behind GET /debug/stats.

Times are ``time.perf_counter_ns()``: the client's clock when it runs on the same machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class RequestLog:
    """Each streaming request's arrival, dispatch and content-chunk send times, and what became of it."""

    def __init__(self, record_chunk_times: bool) -> None:
        self.record_chunk_times = record_chunk_times  # off: only the first chunk's time is kept
        self.records: list[dict[str, Any]] = []
        self.requests_seen = 0
        self.content_chunks = 0
        self.sse_events = 0

    def count_request(self) -> int:
        """The next request's number, from 1."""
        self.requests_seen += 1
        return self.requests_seen

    def open(
        self,
        index: int,
        *,
        rid: str,
        path: str,
        arrival_ns: int,
        dispatch_ns: int,
        prompt_tokens: int,
        fault: str,
    ) -> dict[str, Any]:
        """A new request's record; the stream that serves it fills in the rest."""
        record: dict[str, Any] = {
            "index": index,
            "id": rid,
            "path": path,
            "arrival_ns": arrival_ns,
            "dispatch_ns": dispatch_ns,
            "first_chunk_ns": 0,
            "chunk_ns": [],
            "chunk_tokens": [],
            "prompt_tokens": prompt_tokens,
            "output_tokens": 0,
            "fault": fault,
            "status": 200,
            "outcome": "",
        }
        self.records.append(record)
        return record

    def copies(self, clear: bool = False) -> list[dict[str, Any]]:
        """Copies of the records, safe to hand to another thread."""
        records = [
            dict(r, chunk_ns=list(r["chunk_ns"]), chunk_tokens=list(r["chunk_tokens"])) for r in self.records
        ]
        if clear:
            self.records = []
        return records

    def take(self, clear: bool = False) -> list[dict[str, Any]]:
        """The records themselves, for a response written at once; ``clear`` starts a new list."""
        records = self.records
        if clear:
            self.records = []
        return records

    def document(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """What GET /debug/send_times and ``--send-times-file`` hold."""
        return {"clock": "time.perf_counter_ns", "pid": os.getpid(), "requests": records}

    def write(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps(self.document(self.records)))
