"""The helper processes of a sweep (client workers, the server-metrics sampler): started and stopped alike.

They are ``spawn``ed: a fresh interpreter with no copy of the parent's event loop, threads or open
connections. Each talks to the parent over a pipe and leaves when it reads None.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

CONTEXT = multiprocessing.get_context("spawn")
STOP_WAIT_S = 10.0


def start_child(
    target: Callable[..., None], args: tuple[Any, ...], name: str
) -> tuple[Connection, BaseProcess]:
    """Start ``target(*args, conn)`` in a child process; returns the parent's end of its pipe, and it."""
    parent_end, child_end = CONTEXT.Pipe()
    process = CONTEXT.Process(target=target, args=(*args, child_end), name=name, daemon=True)
    process.start()
    child_end.close()
    return parent_end, process


def stop_child(conn: Connection, process: BaseProcess) -> None:
    """Ask the child to leave, wait for it (killed after STOP_WAIT_S), close the pipe."""
    with contextlib.suppress(OSError):  # it is gone already
        conn.send(None)
    process.join(timeout=STOP_WAIT_S)
    if process.is_alive():
        process.kill()
        process.join()
    conn.close()
