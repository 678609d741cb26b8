"""Real SGLang for the tests: a venv with the release the sglang role installs, and servers of the tiny model.

The venv (``FAIRBENCH_SGLANG_VENV``, default ~/.cache/fairbench/sglang-venv) is built once and reused by every
test that needs SGLang, its parser's tests included: ``uv pip install sglang==<sglang_version>`` with the uv
release the sglang role installs (both read from the role's defaults file), from the wheelhouse
``FAIRBENCH_SGLANG_WHEELHOUSE`` names when it is set (CI builds one for the lab hosts and reuses it here),
else from the package index (about 9.5 GB with the CUDA build of torch, which runs on the CPU too). A file
lock beside the venv makes a second builder (another pytest worker, or CI's build ahead of the tests) wait
for the first and then reuse its venv. ``python -m tests.support.real_sglang [COMMAND...]`` builds it and
exits; a COMMAND (CI's download of the wheelhouse) runs first under the same lock, so that the tests that
need SGLang, started meanwhile, wait for both instead of building from a wheelhouse still being filled.

A server is started the way campaigns/lab-sglang.yml starts its ``baseline`` config, with its own flags
on top, on the tiny model (tests/support/tiny_model.py) and a free loopback port. Where the venv cannot be
built the caller is skipped, which CI turns into a failure.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from tests.support.tiny_model import build as build_tiny_model

from fairbench.campaign.load import load_campaign

REPO = Path(__file__).resolve().parents[2]
LAB_CAMPAIGN = REPO / "campaigns" / "lab-sglang.yml"
_SGLANG_DEFAULTS = yaml.safe_load((REPO / "roles/sglang/defaults/main.yml").read_text())
SGLANG_VERSION = str(_SGLANG_DEFAULTS["sglang_version"])
UV_VERSION = str(_SGLANG_DEFAULTS["sglang_uv_version"])
VENV = Path(os.environ.get("FAIRBENCH_SGLANG_VENV", Path.home() / ".cache" / "fairbench" / "sglang-venv"))
# uv in a venv of its own beside SGLang's, as the sglang role bootstraps it on a host.
UV_VENV = VENV.with_name(VENV.name + "-uv")
BUILD_TIMEOUT_S = 1800
# Cold start on 2 cores (torch, then the tokenizer manager and the scheduler) took up to about 100 s.
START_TIMEOUT_S = 600


def unavailable(reason: str) -> None:
    """Skip the caller (in CI a failure: tests/support/ci_skips.py)."""
    pytest.skip(f"real SGLang is not available here: {reason}")


def _venv_python() -> Path:
    return VENV / "bin" / "python"


def _installed_version() -> str | None:
    if not _venv_python().exists():
        return None
    probe = [str(_venv_python()), "-c", "import importlib.metadata as m; print(m.version('sglang'))"]
    done = subprocess.run(probe, capture_output=True, text=True, check=False, timeout=120)
    return done.stdout.strip() if done.returncode == 0 else None


def _run_step(step: list[str]) -> None:
    done = subprocess.run(step, capture_output=True, text=True, check=False, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        unavailable(f"`{' '.join(step)}` failed:\n{tail}")


def _build() -> None:
    wheelhouse = os.environ.get("FAIRBENCH_SGLANG_WHEELHOUSE")
    source = ["--no-index", "--find-links", wheelhouse] if wheelhouse else []
    uv = str(UV_VENV / "bin" / "uv")
    _run_step([sys.executable, "-m", "venv", "--clear", str(UV_VENV)])
    _run_step([str(UV_VENV / "bin" / "pip"), "install", "--quiet", *source, f"uv=={UV_VERSION}"])
    _run_step([uv, "venv", "--quiet", "--clear", "--python", sys.executable, str(VENV)])
    install = [uv, "pip", "install", "--quiet", "--python", str(_venv_python())]
    _run_step([*install, *source, f"sglang=={SGLANG_VERSION}"])


@contextmanager
def _builder_lock() -> Iterator[None]:
    """Held by the one process building the venv (or preparing what it is built from)."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with VENV.with_name(VENV.name + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_venv(before_build: Sequence[str] = ()) -> Path:
    """The venv's Python, building the venv first when it lacks SGLANG_VERSION (one builder at a time).

    ``before_build``, a command, runs under the builder's lock whether or not the venv needs building."""
    if not before_build and _installed_version() == SGLANG_VERSION:
        return _venv_python()
    with _builder_lock():
        if before_build and subprocess.run(before_build, check=False).returncode:
            raise SystemExit(f"`{' '.join(before_build)}` failed: the venv is not built")
        if _installed_version() != SGLANG_VERSION:
            _build()
    if _installed_version() != SGLANG_VERSION:
        unavailable(f"{VENV}: sglang {SGLANG_VERSION} is still not importable after the build")
    return _venv_python()


def lab_argv(model_dir: Path, config: str = "baseline") -> list[str]:
    """campaigns/lab-sglang.yml's launch arguments for ``config``, serving ``model_dir``."""
    argv = list(load_campaign(LAB_CAMPAIGN).configs[config].sglang_argv)
    if argv[:1] != ["--model-path"]:
        raise AssertionError(f"{LAB_CAMPAIGN}: argv does not start with --model-path: {argv}")
    return ["--model-path", str(model_dir), *argv[2:]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RealServer:
    """One ``sglang.launch_server`` process; its output goes to ``log``."""

    url: str
    port: int
    model_dir: Path
    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM to the whole process group (SGLang's scheduler and detokenizer are children)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start(tmp_dir: Path, extra_args: Sequence[str] = (), *, config: str = "baseline") -> RealServer:
    """A real SGLang server of the tiny model, healthy (``/health_generate`` answered 200)."""
    python = ensure_venv()
    model_dir = build_tiny_model(tmp_dir / "tiny-gpt2")
    port = free_port()
    log = tmp_dir / f"sglang-{port}.log"
    argv = [str(python), "-m", "sglang.launch_server", *lab_argv(model_dir, config), *extra_args]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = RealServer(f"http://127.0.0.1:{port}", port, model_dir, log, process)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not server.alive():
            raise AssertionError(f"SGLang exited at start ({process.returncode}):\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.url}/health_generate", timeout=30) as reply:
                if reply.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    server.stop()
    raise AssertionError(f"SGLang not healthy after {START_TIMEOUT_S} s:\n{server.log_tail()}")


if __name__ == "__main__":
    started = time.monotonic()
    print(
        f"{ensure_venv(sys.argv[1:])}: sglang {SGLANG_VERSION}, ready in {time.monotonic() - started:.0f} s"
    )
