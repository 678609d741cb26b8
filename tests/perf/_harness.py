"""Shared by the benchmarks: the test server in a pinned process, pinned client processes, and their CPU
from /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Collection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SERVER_CPU, CLIENT_CPU = 0, 1
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Server:
    """The test server in its own process, pinned to SERVER_CPU."""

    def __init__(self, first_token_ms: float, chunk_gap_ms: float) -> None:
        command = [
            sys.executable,
            "-m",
            "tests.support.sse_server",
            "--port=0",
            f"--cpu={SERVER_CPU}",
            f"--first-token-ms={first_token_ms}",
            f"--chunk-gap-ms={chunk_gap_ms}",
        ]
        self.process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"test server did not start: {line!r}")
        self.url = "http://" + line.split()[-1]

    def send_times(self) -> dict[str, dict[str, Any]]:
        with urllib.request.urlopen(self.url + "/debug/send_times?clear=1") as response:
            document = json.load(response)
        records = document["requests"] if isinstance(document, dict) else document
        return {record["id"]: record for record in records}

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def spawn_pinned(
    command: list[str], cpus: Collection[int] = (CLIENT_CPU,), **kwargs: Any
) -> subprocess.Popen[bytes]:
    """Start a client process on ``cpus`` (pinned right after the fork: its start-up is not timed; the
    processes it starts inherit them)."""
    process = subprocess.Popen(command, **kwargs)
    os.sched_setaffinity(process.pid, cpus)
    return process


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, utime + stime in nanoseconds) of a process from /proc (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) * 1_000_000_000 // CLOCK_TICKS


def tree_cpu_ns(root: int) -> int | None:
    """CPU nanoseconds of ``root`` and every live process under it, from /proc (None once root is gone).

    Only pids above root's are looked at: a child's pid is higher than its parent's, short of the pid
    counter wrapping around, which a benchmark's run does not see.
    """
    stat = _stat(root)
    if stat is None:
        return None
    tree, total = {root}, stat[1]
    for pid in sorted(int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) > root):
        child = _stat(pid)
        if child is not None and child[0] in tree:
            tree.add(pid)
            total += child[1]
    return total


def cpu_ns(pid: int) -> int | None:
    """CPU nanoseconds (user + system) of one process from /proc (None once it is gone)."""
    stat = _stat(pid)
    return None if stat is None else stat[1]
