"""Progress of a sweep: a live bar on a terminal, plain lines otherwise (logs, Ansible).

A sweep run by Ansible also keeps its progress in a JSON state file (``fairbench run`` shows it live): the
point in flight and the lines of the points finished so far.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from fairbench.measure.records import RequestRecord

BAR_WIDTH = 24
BAR_REFRESH_S = 0.25
LINE_EVERY_S = 10.0
STATE_EVERY_S = 1.0


class Progress:
    """Counts finished requests of the point in flight and shows them."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        live: bool | None = None,
        state_path: Path | None = None,
        prefix: str = "",
    ) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.state_path = state_path
        self.prefix = prefix
        """Put before each point's label: the workload's name where a job sweeps several."""
        self._finished_lines: list[str] = []
        self._state_written = 0.0
        self._label = ""
        self._total = 0
        self._done = 0
        self._failed = 0
        self._tokens = 0
        self._started = 0.0
        self._last_shown = 0.0

    def start(self, label: str, total: int) -> None:
        self._label, self._total = self.prefix + label, total
        self._done = self._failed = self._tokens = 0
        self._started = self._last_shown = time.monotonic()
        self._show(force=True)
        self._write_state(force=True)

    def request_done(self, record: RequestRecord) -> None:
        if record.success:
            self.requests_done(1, 0, record.output_len)
        else:
            self.requests_done(0, 1, 0)

    def requests_done(self, ok: int, failed: int, tokens: int) -> None:
        """``ok`` more requests succeeded with ``tokens`` output tokens, ``failed`` more failed (the
        client's worker processes report theirs in batches)."""
        self._done += ok + failed
        self._failed += failed
        self._tokens += tokens
        self._show(force=self._done == self._total)
        self._write_state(force=False)

    def finish(self, summary: str) -> None:
        line = f"{self._label}: {summary}"
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(line + "\n")
        self.stream.flush()
        self._finished_lines.append(line)
        self._write_state(force=True)

    def state(self) -> dict[str, Any]:
        """The point in flight (label, requests done of total, failed, output tok/s), the finished lines."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        return {
            "label": self._label,
            "done": self._done,
            "total": self._total,
            "failed": self._failed,
            "output_tokens_per_s": round(self._tokens / elapsed, 1),
            "finished": list(self._finished_lines),
        }

    def note(self, message: str) -> None:
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(message + "\n")
        self.stream.flush()

    def _write_state(self, *, force: bool) -> None:
        now = time.monotonic()
        if self.state_path is None or not (force or now - self._state_written >= STATE_EVERY_S):
            return
        self._state_written = now
        # Replaced whole, so a reader never sees half a document.
        partial = self.state_path.with_name(self.state_path.name + ".tmp")
        partial.write_text(json.dumps(self.state()), encoding="utf-8")
        partial.replace(self.state_path)

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
