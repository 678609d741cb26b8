"""``fairbench.cli.interruptible.run``: Ctrl-C ends a command's coroutine alike on Python 3.10 and 3.11."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from fairbench.cli import interruptible


@pytest.fixture(autouse=True)
def python_default_ctrl_c() -> Iterator[None]:
    """Python's own SIGINT handler, as an interactive run has: a test run started in the background
    inherits SIGINT ignored, under which no Ctrl-C would arrive."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


class CtrlCWhenCollected:
    """Ctrl-C arrives in its ``__del__``: Python's default handler raises KeyboardInterrupt there, which
    Python only prints (as in a weakref callback of the loop's, where a sweep under 3.10 met it)."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def test_ctrl_c_cancels_the_coroutine_whose_clean_up_runs_then_interrupts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    steps: list[str] = []

    async def command() -> None:
        try:
            CtrlCWhenCollected()  # collected at once
            await asyncio.sleep(5)
            steps.append("went on")
        finally:
            await asyncio.sleep(0)  # the clean-up may still await
            steps.append("cleaned up")

    with pytest.raises(KeyboardInterrupt):
        interruptible.run(command())
    assert steps == ["cleaned up"]
    assert unraisable == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_ctrl_c_the_coroutine_returns_its_value() -> None:
    async def command() -> int:
        await asyncio.sleep(0)
        return 7

    assert interruptible.run(command()) == 7
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
