"""``fairbench sim`` over two nodes: real processes on loopback meeting at rank 0's ``--dist-init-addr``.

Rank 0 serves the API but is unhealthy until rank 1 has joined; rank 1 answers only SGLang's dummy health
routes; a lost rank takes the server down; SIGTERM to rank 0 stops both in order. The heartbeats run
every 0.2 s here (a node silent for 0.6 s is lost), so each case takes about as long as its processes
take to start.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HEARTBEAT = ("--sim-heartbeat-s", "0.2")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sim_command(*flags: str) -> list[str]:
    return [sys.executable, "-m", "fairbench", "sim", "--model-path", "sim/test-model", *flags]


@dataclass
class Node:
    """One simulator process: its node rank, its HTTP port, and its stderr in a file."""

    rank: int
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def exit_status(self, within_s: float) -> int:
        try:
            return self.process.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"node rank {self.rank} still runs after {within_s} s; its log:\n{self.log()}")


@dataclass
class Cluster:
    """The processes a test started, stopped (and reaped) when it ends."""

    tmp_path: Path
    rendezvous_port: int
    nodes: list[Node]

    def start(self, rank: int, *flags: str, nnodes: int = 2, tp_size: int = 2) -> Node:
        port = free_port()
        log_path = self.tmp_path / f"rank{rank}-{len(self.nodes)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                sim_command(
                    *("--host", "127.0.0.1", "--port", str(port), "--tp-size", str(tp_size)),
                    *("--nnodes", str(nnodes), "--node-rank", str(rank)),
                    *("--dist-init-addr", f"127.0.0.1:{self.rendezvous_port}", *HEARTBEAT),
                    *flags,
                ),
                cwd=REPO,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        node = Node(rank, port, process, log_path)
        self.nodes.append(node)
        return node


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster(tmp_path, free_port(), [])
    yield started
    for node in started.nodes:
        if node.process.poll() is None:
            node.process.send_signal(signal.SIGCONT)  # a frozen one must be able to die
            node.process.kill()
        node.process.wait(timeout=10)


def wait_for(condition: Callable[[], bool], what: str, within_s: float = 15) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        time.sleep(0.02)


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def wait_listening(node: Node) -> None:
    def up() -> bool:
        assert node.process.poll() is None, f"node rank {node.rank} exited:\n{node.log()}"
        return listening(node.port)

    wait_for(up, f"node rank {node.rank} listens on {node.port}")


def request(url: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """The status and body of a GET, or of a POST of ``body`` as JSON."""
    data = None if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"content-type": "application/json"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


COMPLETION = {"prompt": list(range(12)), "max_tokens": 5, "ignore_eos": True, "stream": True}


def streamed_events(url: str) -> list[Any]:
    """The ``data:`` payloads of a streamed completion, ``[DONE]`` as that string."""
    status, body = request(f"{url}/v1/completions", COMPLETION)
    assert status == 200, body
    payloads = [line[6:] for line in body.decode().splitlines() if line.startswith("data: ")]
    return [payload if payload == "[DONE]" else json.loads(payload) for payload in payloads]


def joined_pair(cluster: Cluster) -> tuple[Node, Node]:
    """Rank 0 and rank 1, both started and rank 0 healthy."""
    rank0 = cluster.start(0)
    wait_listening(rank0)
    rank1 = cluster.start(1)
    wait_listening(rank1)
    wait_for(lambda: request(f"{rank0.url}/health_generate")[0] == 200, "rank 0 healthy")
    return rank0, rank1


# --- joining ----------------------------------------------------------------------------------------------


def test_rank_0_is_unhealthy_and_refuses_requests_until_rank_1_joins_then_serves(cluster: Cluster) -> None:
    rank0 = cluster.start(0)
    wait_listening(rank0)
    assert request(f"{rank0.url}/health")[0] == 503
    assert request(f"{rank0.url}/health_generate")[0] == 503
    status, body = request(f"{rank0.url}/v1/completions", COMPLETION)
    assert status == 503
    assert json.loads(body)["message"].endswith("1 of 2 nodes have joined")
    rank1 = cluster.start(1)
    wait_for(lambda: request(f"{rank0.url}/health_generate")[0] == 200, "rank 0 healthy")
    events = streamed_events(rank0.url)
    assert events[-1] == "[DONE]"
    assert sum(len(event["choices"][0]["text"] or "") > 0 for event in events[:-1] if event["choices"]) >= 1
    log = rank0.log()
    assert "node rank 1 joined from 127.0.0.1:" in log
    assert "all 2 nodes joined" in log
    assert rank1.process.poll() is None


def test_rank_1_serves_only_the_dummy_health_routes_after_joining(cluster: Cluster) -> None:
    rank1 = cluster.start(1)
    # Until it has joined it listens nowhere (SGLang starts the dummy server once its schedulers are up).
    wait_for(lambda: "joining rank 0" in rank1.log(), "rank 1 tries to join")
    time.sleep(0.5)
    assert rank1.process.poll() is None
    assert not listening(rank1.port)
    rank0 = cluster.start(0)
    wait_listening(rank1)
    assert [request(f"{rank1.url}{path}")[0] for path in ("/health", "/health_generate", "/ping")] == [
        200,
        200,
        200,
    ]
    assert request(f"{rank1.url}/v1/completions", COMPLETION) == (404, b'{"detail":"Not Found"}')
    assert request(f"{rank1.url}/server_info")[0] == 404
    wait_for(lambda: request(f"{rank0.url}/health_generate")[0] == 200, "rank 0 healthy")


def test_server_info_on_rank_0_reports_the_node_flags_as_modelled(cluster: Cluster) -> None:
    rank0, _ = joined_pair(cluster)
    status, body = request(f"{rank0.url}/server_info")
    assert status == 200
    info = json.loads(body)
    assert (info["nnodes"], info["node_rank"], info["dist_init_addr"]) == (
        2,
        0,
        f"127.0.0.1:{cluster.rendezvous_port}",
    )
    assert info["sim"]["nodes"] == {"nnodes": 2, "node_rank": 0, "joined": 2}
    assert {"--nnodes", "--node-rank", "--dist-init-addr"} <= set(info["sim"]["modelled_flags"])
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(info["sim"]["not_modelled_flags"])


def test_a_rank_with_nobody_listening_gives_up_after_its_join_timeout(cluster: Cluster) -> None:
    started = time.monotonic()
    rank1 = cluster.start(1, "--sim-join-timeout-s", "0.5")
    assert rank1.exit_status(within_s=10) == 1
    assert time.monotonic() - started < 8
    assert (
        f"error: node rank 1: could not reach rank 0 at 127.0.0.1:{cluster.rendezvous_port} within 0.5 s "
        "(--sim-join-timeout-s)"
    ) in rank1.log()
    assert not listening(rank1.port)


def test_rank_0_gives_up_when_the_other_ranks_do_not_join_in_time(cluster: Cluster) -> None:
    rank0 = cluster.start(0, "--sim-join-timeout-s", "1")
    assert rank0.exit_status(within_s=10) == 1
    assert "only 1 of 2 nodes joined within 1 s (--sim-join-timeout-s)" in rank0.log()


def test_a_second_rank_0_on_the_same_dist_init_address_exits_naming_the_flag(cluster: Cluster) -> None:
    rank0 = cluster.start(0)
    wait_for(lambda: "waiting on" in rank0.log(), "rank 0 listens on its dist-init address")
    second = cluster.start(0)
    assert second.exit_status(within_s=10) == 1
    assert (
        f"fairbench sim: error: --dist-init-addr: cannot listen on 127.0.0.1:{cluster.rendezvous_port}: "
        in second.log()
    )
    assert rank0.process.poll() is None


@pytest.mark.parametrize(
    ("joiner", "refusal"),
    [
        ({"rank": 1}, "node rank 1 already joined from 127.0.0.1:"),
        ({"rank": 1, "nnodes": 4, "tp_size": 4}, "it has --nnodes 4, rank 0 has --nnodes 2"),
    ],
    ids=["duplicate-rank", "other-nnodes"],
)
def test_rank_0_refuses_a_duplicate_rank_or_another_node_count_and_keeps_serving(
    cluster: Cluster, joiner: dict[str, int], refusal: str
) -> None:
    rank0, rank1 = joined_pair(cluster)
    intruder = cluster.start(**joiner)
    assert intruder.exit_status(within_s=10) == 1
    assert f"refused node rank 1: {refusal}" in intruder.log()
    assert "refused node rank 1 from 127.0.0.1:" in rank0.log()
    assert request(f"{rank0.url}/health_generate")[0] == 200
    assert rank1.process.poll() is None


def test_rank_0_refuses_a_rank_outside_the_server_and_drops_a_connection_that_is_no_node(
    cluster: Cluster,
) -> None:
    rank0 = cluster.start(0)
    wait_listening(rank0)
    address = ("127.0.0.1", cluster.rendezvous_port)
    wait_for(lambda: "waiting on" in rank0.log(), "rank 0 listens on its dist-init address")
    for join, answer in (
        (b"join 0 2\n", "refused --node-rank 0 is outside 1..1"),
        (b"join 5 2\n", "refused --node-rank 5 is outside 1..1"),
        (b"GET / HTTP/1.1\r\n\r\n", ""),
    ):
        with socket.create_connection(address, timeout=5) as sock:
            sock.sendall(join)
            assert sock.makefile().readline().strip() == answer
    assert rank0.process.poll() is None
    assert "ignored a connection from 127.0.0.1:" in rank0.log()
    assert request(f"{rank0.url}/health")[0] == 503
    cluster.start(1)
    wait_for(lambda: request(f"{rank0.url}/health_generate")[0] == 200, "rank 0 healthy")


# --- a node lost ------------------------------------------------------------------------------------------


def test_killing_rank_1_makes_rank_0_exit_with_a_failure_naming_it(cluster: Cluster) -> None:
    rank0, rank1 = joined_pair(cluster)
    rank1.process.kill()
    killed = time.monotonic()
    assert rank0.exit_status(within_s=5) == 1
    assert time.monotonic() - killed < 3
    log = rank0.log()
    assert "error: node rank 1 (127.0.0.1:" in log
    assert "left: connection closed; shutting down" in log


def test_a_frozen_rank_1_is_noticed_by_its_missing_heartbeats(cluster: Cluster) -> None:
    rank0, rank1 = joined_pair(cluster)
    rank1.process.send_signal(signal.SIGSTOP)  # its sockets stay open: only the heartbeats stop
    frozen = time.monotonic()
    assert rank0.exit_status(within_s=5) == 1
    assert 0.5 < time.monotonic() - frozen < 3
    assert "left: no heartbeat for 0.6 s; shutting down" in rank0.log()


def test_rank_1_exits_with_a_failure_when_rank_0_dies(cluster: Cluster) -> None:
    rank0, rank1 = joined_pair(cluster)
    rank0.process.kill()
    assert rank1.exit_status(within_s=5) == 1
    assert "error: node rank 1: lost rank 0 at" in rank1.log()


# --- stopping ---------------------------------------------------------------------------------------------


def test_heartbeats_keep_an_idle_pair_up_and_sigterm_to_rank_0_stops_both_with_status_0(
    cluster: Cluster,
) -> None:
    rank0, rank1 = joined_pair(cluster)
    time.sleep(1.5)  # 2.5 times the silence after which either side would count the other as lost
    assert (rank0.process.poll(), rank1.process.poll()) == (None, None)
    rank0.process.terminate()
    assert rank0.exit_status(within_s=5) == 0
    assert rank1.exit_status(within_s=5) == 0
    assert "node rank 1: rank 0 shut the server down" in rank1.log()


def test_sigterm_to_rank_1_exits_0_at_once_and_rank_0_follows_in_order(cluster: Cluster) -> None:
    rank0, rank1 = joined_pair(cluster)
    rank1.process.terminate()
    assert rank1.exit_status(within_s=3) == 0
    assert rank0.exit_status(within_s=3) == 0
    assert "is stopping; shutting down" in rank0.log()


# --- flags ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--tp-size", "2", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "127.0.0.1:5000"],
            "--node-rank: must be an integer from 0 to 1 (below --nnodes 2), got 2",
        ),
        (
            ["--tp-size", "2", "--nnodes", "2", "--node-rank", "1"],
            "--dist-init-addr: required with --nnodes 2",
        ),
        (
            ["--tp-size", "3", "--nnodes", "2", "--dist-init-addr", "127.0.0.1:5000"],
            "--tp-size: tp_size must be divisible by number of nodes: --tp-size 3 x --pp-size 1 over "
            "--nnodes 2",
        ),
        (
            ["--tp-size", "2", "--nnodes", "2", "--dist-init-addr", "127.0.0.1"],
            "--dist-init-addr: '127.0.0.1': expected HOST:PORT",
        ),
    ],
    ids=["node-rank-past-nnodes", "no-dist-init-addr", "tp-not-divisible", "addr-without-port"],
)
def test_node_flags_that_cannot_be_served_are_refused_naming_the_flag(flags: list[str], message: str) -> None:
    result = subprocess.run(sim_command(*flags), cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(f"fairbench sim: error: {message}")
