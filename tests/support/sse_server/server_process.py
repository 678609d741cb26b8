"""The server in a child process (``python -m tests.support.sse_server``), on its own core if asked."""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import IO, Any

from tests.support.sse_server.config import ServerConfig

REPO_ROOT = Path(__file__).resolve().parents[3]
_LISTENING = re.compile(r"^listening on (.+):(\d+)$")


class ServerProcess:
    """The server in a child process (``python -m tests.support.sse_server``).

    Its own interpreter and, with ``ServerConfig(cpu=N)``, its own core: what a client
    benchmark measures against. ``send_times()`` and ``stats()`` ask it over HTTP.
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        python: str = sys.executable,
        startup_timeout_s: float = 15.0,
        **knobs: Any,
    ) -> None:
        config = config or ServerConfig()
        self.config = dataclasses.replace(config, **knobs) if knobs else config
        self._python = python
        self._startup_timeout_s = startup_timeout_s
        self._process: subprocess.Popen[str] | None = None
        # The server's stderr goes to a file that lives as long as this object: nobody
        # drains a pipe while the server runs, and a full pipe would stop it mid-benchmark.
        self._stderr: IO[str] = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.host = self.config.host
        self.port = 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def start(self) -> ServerProcess:
        command = [self._python, "-m", "tests.support.sse_server", *self.config.to_cli_args()]
        self._process = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=self._stderr, text=True
        )
        ready = threading.Event()
        lines: list[str] = []

        def read_first_line() -> None:
            assert self._process is not None and self._process.stdout is not None
            lines.append(self._process.stdout.readline().strip())
            ready.set()

        threading.Thread(target=read_first_line, daemon=True).start()
        if not ready.wait(self._startup_timeout_s) or not (match := _LISTENING.match(lines[0])):
            self.stop()
            raise RuntimeError(f"test server did not start: {lines[:1]} {self.stderr()[-2000:]}")
        self.port = int(match.group(2))
        return self

    def stderr(self) -> str:
        """What the server wrote to stderr so far (tracebacks of a failed test)."""
        self._stderr.seek(0)
        return self._stderr.read()

    def _get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read())

    def send_times(self, clear: bool = False) -> list[dict[str, Any]]:
        document = self._get_json("/debug/send_times" + ("?clear=1" if clear else ""))
        return document["requests"]  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        return self._get_json("/debug/stats")  # type: ignore[no-any-return]

    def stop(self) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
