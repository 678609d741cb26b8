"""Fixtures shared by tests/unit and tests/integration.

``sse_server`` starts the SGLang-compatible streaming test server
(``tests/support/sse_server/``) with the knobs a test names::

    def test_ttft(sse_server):
        server = sse_server(first_token_ms=100, chunk_gap_ms=20)      # in a thread
        fast = sse_server(faults=[FaultRule("reset", after_chunks=2)])
        timed = sse_server(first_token_ms=50, process=True, cpu=0)     # own interpreter
        ... server.url ...  server.send_times()  server.stats()

Every server a test started is stopped when the test ends.

In CI (``CI`` set) a skipped test fails, unless tests/support/ci_skips.py accepts its skip.

``real_sglang`` is one real SGLang server of the tiny model for the whole session (started once, in about
20-100 s, by tests/support/real_sglang.py). A test that brings it down is marked ``ends_real_sglang`` and
runs after every other test (a cold start saved); one that may bring a server down midway starts its own
with ``tests.support.real_sglang.start``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# The repository root, so that ``tests.support`` imports the same way under pytest
# (which puts only tests/ on sys.path) as under ``python -m tests.support.sse_server``.
_REPO_ROOT = str(Path(__file__).resolve().parents[1])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from tests.support import ci_skips  # noqa: E402 - needs the path above
from tests.support import real_sglang as real_sglang_support  # noqa: E402 - needs the path above
from tests.support.sse_server import (  # noqa: E402 - needs the path above
    FaultRule,
    RunningServer,
    ServerConfig,
    ServerProcess,
    ServerThread,
    StartServer,
)


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C delivered as a terminal delivers it: a shell that starts a command in the background without
    job control (``make test &`` in a script) makes SIGINT ignored, which every process it starts inherits,
    and the tests of Ctrl-C would then see none. A handler is reset to the default in each child."""
    del config
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return message.removeprefix("Skipped: ")


def _fail_skip_in_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    """A skip CI does not accept becomes a failure that says what was missing."""
    if not (os.environ.get("CI") and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if ci_skips.accepted(report.nodeid, reason) is None:
        report.outcome = "failed"
        report.longrepr = (
            f"skipped in CI, where every test must run: {reason}\n"
            "(the skips CI accepts are listed, each with its reason, in tests/support/ci_skips.py)"
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that end the shared real SGLang server last (a stable sort: the rest keep their order). Every
    pytest-xdist worker sorts alike, so the real_sglang group's worker runs them at the group's end."""
    items.sort(key=lambda item: item.get_closest_marker("ends_real_sglang") is not None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail_skip_in_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_skip_in_ci(report)
    return report


@pytest.fixture
def sse_server() -> Iterator[StartServer]:
    """Factory: ``sse_server(config=None, *, process=False, **knobs) -> RunningServer``.

    ``knobs`` are ServerConfig fields (``first_token_ms``, ``chunk_gap_ms``,
    ``tokens_per_chunk``, ``output_len_override``, ``eos_at``, ``faults``, ``api_key``,
    ``keep_alive_timeout_s``, ``cpu``, ...); ``faults`` may be a list of FaultRule or of
    ``--fault`` specs such as ``"reset:every=2:after=3"``. ``process=True`` runs the
    server in a child process (no shared GIL: use it when timing matters).
    The result has ``url``, ``port``, ``config``, ``send_times(clear=False)``,
    ``stats()`` and ``stop()``.
    """
    started: list[RunningServer] = []

    def start(config: ServerConfig | None = None, *, process: bool = False, **knobs: Any) -> RunningServer:
        if "faults" in knobs:
            knobs["faults"] = tuple(
                rule if isinstance(rule, FaultRule) else FaultRule.parse(rule) for rule in knobs["faults"]
            )
        server: RunningServer
        server = ServerProcess(config, **knobs).start() if process else ServerThread(config, **knobs).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture(scope="session")
def real_sglang(tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_sglang_support.RealServer]:
    """A healthy real SGLang server (campaigns/lab-sglang.yml's baseline flags), shared by the session."""
    server = real_sglang_support.start(tmp_path_factory.mktemp("sglang"))
    yield server
    server.stop()


FAKE_PYNVML = Path(__file__).resolve().parent / "support" / "fake_nvml" / "pynvml.py"
MakeNvml = Callable[..., ModuleType]
"""``fake_nvml``'s value: ``make(gpus=[{...}], init_error=False)``."""


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> MakeNvml:
    """``fake_nvml(gpus=[{...}], init_error=False)``: a fresh fake pynvml module with those GPUs
    (tests/support/fake_nvml/pynvml.py)."""

    def make(**config: Any) -> ModuleType:
        spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE_PYNVML)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
        spec.loader.exec_module(module)
        module.configure(config)
        return module

    return make
