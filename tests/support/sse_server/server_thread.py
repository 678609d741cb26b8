"""The server on its own event loop in a daemon thread, for synchronous tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from tests.support.sse_server.config import ServerConfig
from tests.support.sse_server.server import SSEServer


class ServerThread:
    """The server on its own event loop in a daemon thread, for synchronous tests.

    ``with ServerThread(ServerConfig(chunk_gap_ms=5)) as server: urlopen(server.url + ...)``.
    The thread shares the GIL with the test; timing-sensitive benchmarks use ServerProcess.
    """

    def __init__(self, config: ServerConfig | None = None, **knobs: Any) -> None:
        self.server = SSEServer(config, **knobs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="sse-test-server", daemon=True)
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None

    @property
    def config(self) -> ServerConfig:
        return self.server.config

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> ServerThread:
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as error:
            self._startup_error = error
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.stop())
        self._loop.close()

    def _call(self, function: Callable[[], Any]) -> Any:
        async def call() -> Any:
            return function()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=10)

    def send_times(self, clear: bool = False) -> list[dict[str, Any]]:
        return self._call(lambda: self.server.send_times(clear))  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        return self._call(self.server.stats)  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
