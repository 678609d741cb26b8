"""The results of one sweep on disk: ``points.jsonl``, ``requests/``, ``sweep.json``.

Durability rules: a point's request records are written to a temporary file and
renamed into place before its line is appended to ``points.jsonl``; the line is
flushed and fsynced at once. So a crash leaves either a whole point or none, and
a resumed sweep skips exactly the points whose line is present.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fairbench.records import RequestRecord

POINTS_FILE = "points.jsonl"
REQUESTS_DIR = "requests"
SWEEP_FILE = "sweep.json"
# A campaign run (results/<campaign>/<run_id>/) holds CAMPAIGN_FILE, and one sweep directory per
# host and config with a STATUS_FILE beside the sweep's own files.
CAMPAIGN_FILE = "campaign.json"
STATUS_FILE = "status.json"


class ResultsError(Exception):
    """The results directory cannot be used as asked; the message names the file and the rule."""


def point_id(concurrency: int, repeat: int) -> str:
    return f"c{concurrency}-r{repeat}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ResultsDir:
    """Append-only store of a sweep's points in one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.points_path = root / POINTS_FILE
        self.requests_dir = root / REQUESTS_DIR

    def prepare(self, settings: dict[str, Any], *, resume: bool) -> None:
        """Create the directory, or check that a resumed one was made with the same settings.

        ``settings`` are the inputs that decide what a point measures (URL excluded:
        a server may move); resuming with others would mix incomparable points.
        """
        sweep_path = self.root / SWEEP_FILE
        if self.points_path.exists() and not resume:
            raise ResultsError(
                f"{self.points_path}: already has points; pass --resume to continue, or another --out"
            )
        if resume and sweep_path.exists():
            previous = json.loads(sweep_path.read_text())
            changed = [
                f"{key} {previous.get(key)!r} -> {value!r}"
                for key, value in settings.items()
                if previous.get(key) != value
            ]
            if changed:
                raise ResultsError(f"{sweep_path}: cannot resume with other settings: {'; '.join(changed)}")
        self.requests_dir.mkdir(parents=True, exist_ok=True)
        tmp = sweep_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
        tmp.replace(sweep_path)
        self._drop_torn_tail()

    def _drop_torn_tail(self) -> None:
        """A crash during an append can leave a partial last line: cut it off."""
        if not self.points_path.exists():
            return
        data = self.points_path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end != len(data):
            with self.points_path.open("r+b") as handle:
                handle.truncate(end)

    def points(self) -> list[dict[str, Any]]:
        """Every complete point written so far, in order."""
        if not self.points_path.exists():
            return []
        lines = self.points_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def completed_ids(self) -> set[str]:
        return {point["point_id"] for point in self.points()}

    def requests_path(self, pid: str) -> Path:
        return self.requests_dir / f"{pid}.jsonl.gz"

    def write_point(self, point: dict[str, Any], records: Iterable[RequestRecord]) -> None:
        """Persist one finished point: its records first, then its line in points.jsonl."""
        pid = point["point_id"]
        final = self.requests_path(pid)
        tmp = final.with_name(final.name + ".tmp")
        # compresslevel 1: records are mostly integers; level 9 costs 5x the CPU for ~10 % less.
        with gzip.open(tmp, "wt", compresslevel=1) as handle:
            for record in records:
                handle.write(json.dumps(record.to_json(), separators=(",", ":")))
                handle.write("\n")
        tmp.replace(final)
        _fsync_dir(self.requests_dir)
        with self.points_path.open("a") as handle:
            handle.write(json.dumps(point) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def read_requests(self, pid: str) -> list[RequestRecord]:
        with gzip.open(self.requests_path(pid), "rt") as handle:
            return [RequestRecord.from_json(json.loads(line)) for line in handle]

    def discard_partial(self) -> None:
        """Remove temporary files left by an interrupted write."""
        if self.requests_dir.exists():
            for tmp in self.requests_dir.glob("*.tmp"):
                tmp.unlink()
