"""What a test holds of a started server, however it runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from tests.support.sse_server.config import ServerConfig


class RunningServer(Protocol):
    """What ServerThread and ServerProcess both offer a test."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def url(self) -> str: ...

    @property
    def port(self) -> int: ...

    def send_times(self, clear: bool = False) -> list[dict[str, Any]]: ...

    def stats(self) -> dict[str, Any]: ...

    def stop(self) -> None: ...


StartServer = Callable[..., RunningServer]
"""The ``sse_server`` fixture: ``sse_server(config=None, *, process=False, **knobs)``."""
