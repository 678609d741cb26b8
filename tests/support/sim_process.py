"""``fairbench sim`` run as its own process on a free loopback port, as the sweep tests drive it."""

from __future__ import annotations

import argparse
import itertools
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fairbench.cli.sim import configure
from fairbench.sim.args import SimConfig, resolve

REPO = Path(__file__).resolve().parents[2]
FAIRBENCH = [sys.executable, "-m", "fairbench"]
# No proxy for loopback, whatever the environment says (the sweep's aiohttp ignores it too).
LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_STARTED = itertools.count()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_status(url: str) -> int | None:
    """The status of a GET, or None when nothing answered."""
    try:
        with LOOPBACK.open(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


@dataclass
class Sim:
    flags: tuple[str, ...]
    """The SGLang and ``--sim-*`` flags it runs with (``--host`` and ``--port`` aside)."""
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def config(self) -> SimConfig:
        """The configuration the simulator resolved from its flags, for ``predict_point``."""
        parser = argparse.ArgumentParser()
        configure(parser)
        return resolve(parser.parse_args(list(self.flags)))

    def wait_until(self, condition: Callable[[Sim], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self):
            assert self.process.poll() is None, f"the simulator exited before {what}:\n{self.log_text()}"
            assert time.monotonic() < deadline, f"the simulator was not {what} within {timeout} s"
            time.sleep(0.05)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_sim(log_dir: Path, flags: Sequence[str]) -> Sim:
    port = free_port()
    # A log of its own even when two simulators started together were given the same free port: the one
    # that cannot listen says so in its log and is started again, while the other's log keeps its lines.
    log = log_dir / f"sim-{port}-{next(_STARTED)}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*FAIRBENCH, "sim", *flags, "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    return Sim(tuple(flags), f"http://127.0.0.1:{port}", process, log)


def ready_or_port_taken(sim: Sim, ready: str, timeout: float = 30) -> bool:
    """True once the simulator listens and ``ready`` answers 200 there; False when another process took
    its free port before it could listen (other test runs share the machine)."""
    deadline = time.monotonic() + timeout
    while not (f"running on {sim.url}" in sim.log_text() and http_status(sim.url + ready) == 200):
        if sim.process.poll() is not None:
            assert "cannot listen on" in sim.log_text(), f"the simulator exited:\n{sim.log_text()}"
            return False
        assert time.monotonic() < deadline, f"the simulator was not answering {ready} within {timeout} s"
        time.sleep(0.05)
    return True


@contextmanager
def running_sims(
    log_dir: Path, *flag_sets: Sequence[str], ready: str = "/health_generate"
) -> Iterator[list[Sim]]:
    """One ``fairbench sim FLAGS`` per flag set, each on a free loopback port, started together and
    yielded once ``ready`` answers 200 on all of them; stopped (and reaped) afterwards."""
    sims: list[Sim] = []
    try:
        sims.extend(start_sim(log_dir, flags) for flags in flag_sets)
        for index, flags in enumerate(flag_sets):
            for _ in range(3):
                if ready_or_port_taken(sims[index], ready):
                    break
                sims[index] = start_sim(log_dir, flags)
            else:
                raise AssertionError("three free ports in a row were taken by other processes")
        yield sims
    finally:
        for sim in sims:
            if sim.process.poll() is None:
                sim.process.terminate()
            try:
                sim.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                sim.process.kill()
                sim.process.wait()


@contextmanager
def running_sim(log_dir: Path, *flags: str, ready: str = "/health_generate") -> Iterator[Sim]:
    with running_sims(log_dir, flags, ready=ready) as (sim,):
        yield sim
