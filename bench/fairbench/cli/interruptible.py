"""A command's coroutine run to its end, with Ctrl-C taken the same way on every Python the hosts run.

Python 3.11's ``asyncio.run`` takes the first Ctrl-C as a cancellation of the coroutine, whose clean-up
then runs, and raises KeyboardInterrupt once it has ended. 3.10's raises KeyboardInterrupt wherever the loop
happens to be, where a callback may swallow it (Python only prints it) and the command goes on; there the
same is done here.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Coroutine
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``; the first Ctrl-C cancels ``main``, then raises KeyboardInterrupt."""
    if sys.version_info >= (3, 11):
        return asyncio.run(main)
    return asyncio.run(_cancelled_by_ctrl_c(main))


async def _cancelled_by_ctrl_c(main: Coroutine[Any, Any, T]) -> T:
    """3.11's ``asyncio.Runner`` on SIGINT: its handler, where Python's default one is in place in the main
    thread; a second Ctrl-C interrupts at once."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return await main
    task = asyncio.current_task()
    assert task is not None, "asyncio.run runs it as a task"
    loop = asyncio.get_running_loop()
    interrupts = 0

    def on_ctrl_c(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            raise KeyboardInterrupt
        task.cancel()
        loop.call_soon_threadsafe(lambda: None)  # wakes a loop waiting in select() for long

    signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        return await main
    except asyncio.CancelledError:
        if interrupts:
            raise KeyboardInterrupt from None
        raise
    finally:
        if signal.getsignal(signal.SIGINT) is on_ctrl_c:
            signal.signal(signal.SIGINT, signal.default_int_handler)
