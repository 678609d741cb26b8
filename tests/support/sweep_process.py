"""`fairbench sweep` run as its own process, as a user runs it, and the files it writes read back."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FAIRBENCH = [sys.executable, "-m", "fairbench"]
# The test servers have no model files to learn a vocabulary from: token ids from a range given explicitly.
VOCAB = ("--vocab-size", "30000")


def sweep_args(url: str, out: Path, *extra: str, vocab: Sequence[str] = VOCAB) -> list[str]:
    """The command line of a sweep of ``url`` into ``out`` with line progress and ``extra`` arguments."""
    return [*FAIRBENCH, "sweep", "--url", url, "--out", str(out), "--progress", "lines", *vocab, *extra]


def run_sweep(
    url: str,
    out: Path,
    *extra: str,
    vocab: Sequence[str] = VOCAB,
    timeout: float = 120,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """The sweep to its end; one that hangs fails the test through ``TimeoutExpired``."""
    return subprocess.run(
        sweep_args(url, out, *extra, vocab=vocab),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )


def points(out: Path) -> list[dict[str, Any]]:
    """The points of ``out/points.jsonl``, in the order written."""
    return [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]


def requests_of(out: Path, pid: str) -> list[dict[str, Any]]:
    """The request records of point ``pid``."""
    with gzip.open(out / "requests" / f"{pid}.jsonl.gz", "rt") as handle:
        return [json.loads(line) for line in handle]
