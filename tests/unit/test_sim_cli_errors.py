"""``fairbench sim`` as a user meets it: a bad flag or a failed start ends in one line and an exit status."""

from __future__ import annotations

import gc
import selectors
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fairbench.cli.main import main


def outcome(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int | str | None, str]:
    """``fairbench sim ARGV``'s exit status and its stderr."""
    try:
        code: int | str | None = main(["sim", "--model-path", "org/model", *argv])
    except SystemExit as exit_info:
        code = exit_info.code
    return code, capsys.readouterr().err


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_flag_the_simulator_cannot_serve_is_a_usage_error_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = outcome(["--tp-size", "0", "--sim-predict", "16,16"], capsys)
    assert code == 2
    assert err == "fairbench sim: error: --tp-size: must be an integer from 1 to 4,096 GPUs, got 0\n"


def test_a_port_in_use_is_a_runtime_error_naming_the_flags(
    busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = outcome(["--host", "127.0.0.1", "--port", str(busy_port)], capsys)
    assert code == 1
    assert err == (
        f"fairbench sim: error: --host/--port: cannot listen on 127.0.0.1:{busy_port}: error while "
        f"attempting to bind on address ('127.0.0.1', {busy_port}): address already in use\n"
    )


def test_a_trace_file_that_cannot_be_opened_is_a_runtime_error(
    tmp_path: Path, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = outcome(["--port", str(busy_port), "--sim-trace", str(tmp_path)], capsys)
    assert code == 1
    assert err == f"fairbench sim: error: --sim-trace: cannot append to {tmp_path}: Is a directory\n"


@pytest.mark.timing  # the signal must land while the loop is being built
def test_ctrl_c_while_the_event_loop_is_built_interrupts_with_no_traceback(
    busy_port: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    make_selector = selectors.DefaultSelector

    def selector_then_ctrl_c() -> selectors.BaseSelector:
        # The loop's selector is made first, its self-pipe after: Ctrl-C comes in between.
        main_thread = threading.main_thread().ident
        assert main_thread is not None
        signal.pthread_kill(main_thread, signal.SIGINT)
        return make_selector()

    monkeypatch.setattr(selectors, "DefaultSelector", selector_then_ctrl_c)
    code, err = outcome(["--port", str(busy_port)], capsys)
    gc.collect()
    assert (code, err) == (130, "fairbench sim: interrupted\n")
    assert unraisable == []
