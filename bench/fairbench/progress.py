"""Progress of a sweep: a live bar on a terminal, plain lines otherwise (logs, Ansible)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from fairbench.records import RequestRecord

BAR_WIDTH = 24
BAR_REFRESH_S = 0.25
LINE_EVERY_S = 10.0


class Progress:
    """Counts finished requests of the point in flight and shows them."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._label = ""
        self._total = 0
        self._done = 0
        self._failed = 0
        self._tokens = 0
        self._started = 0.0
        self._last_shown = 0.0

    def start(self, label: str, total: int) -> None:
        self._label, self._total = label, total
        self._done = self._failed = self._tokens = 0
        self._started = self._last_shown = time.monotonic()
        self._show(force=True)

    def request_done(self, record: RequestRecord) -> None:
        self._done += 1
        if record.success:
            self._tokens += record.output_len
        else:
            self._failed += 1
        self._show(force=self._done == self._total)

    def finish(self, summary: str) -> None:
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(f"{self._label}: {summary}\n")
        self.stream.flush()

    def note(self, message: str) -> None:
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(message + "\n")
        self.stream.flush()

    def _show(self, *, force: bool) -> None:
        now = time.monotonic()
        # Plain lines only every LINE_EVERY_S: start and end of a point have lines of their own.
        due = now - self._last_shown >= (BAR_REFRESH_S if self.live else LINE_EVERY_S)
        if not (due or (force and self.live)):
            return
        self._last_shown = now
        elapsed = max(now - self._started, 1e-9)
        rate = self._tokens / elapsed
        counts = f"{self._done}/{self._total} requests, {self._failed} failed, {rate:,.0f} tok/s"
        if self.live:
            filled = BAR_WIDTH * self._done // max(self._total, 1)
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            self.stream.write(f"\r\033[K{self._label} [{bar}] {counts}")
        else:
            self.stream.write(f"{self._label}: {counts}\n")
        self.stream.flush()
