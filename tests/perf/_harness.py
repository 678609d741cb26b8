"""Shared by the benchmarks: the test server in a pinned process, and pinned client processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SERVER_CPU, CLIENT_CPU = 0, 1


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


def spawn_pinned(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a client process on CLIENT_CPU (pinned right after the fork: its start-up is not timed)."""
    process = subprocess.Popen(command, **kwargs)
    os.sched_setaffinity(process.pid, {CLIENT_CPU})
    return process
