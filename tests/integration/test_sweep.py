"""`fairbench sweep` as a real process against a real streaming server on loopback."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from tests.support.sse_server import RunningServer, StartServer
from tests.support.sweep_process import FAIRBENCH, points, requests_of, run_sweep, sweep_args

from fairbench.measure import bounds

# The result keys of sglang.bench_serving 0.5.23 (the "Results" part of its result line),
# written out here rather than imported, so the test does not trust the code it checks.
SGLANG_RESULT_KEYS = """duration completed total_input_tokens total_input_text_tokens
total_input_vision_tokens total_output_tokens request_throughput input_throughput output_throughput
total_throughput
mean_e2e_latency_ms median_e2e_latency_ms std_e2e_latency_ms p90_e2e_latency_ms p95_e2e_latency_ms
p99_e2e_latency_ms mean_ttft_ms median_ttft_ms std_ttft_ms p90_ttft_ms p95_ttft_ms p99_ttft_ms
mean_tpot_ms median_tpot_ms std_tpot_ms p90_tpot_ms p95_tpot_ms p99_tpot_ms mean_itl_ms median_itl_ms
std_itl_ms p90_itl_ms p95_itl_ms p99_itl_ms concurrency max_output_tokens_per_s max_concurrent_requests
max_concurrency backend dataset_name random_input_len random_output_len random_range_ratio""".split()  # noqa: SIM905


def test_points_carry_every_sglang_key_and_the_measured_timing(
    sse_server: StartServer, tmp_path: Path
) -> None:
    server = sse_server(first_token_ms=40, chunk_gap_ms=5, process=True, cpu=0)
    out = tmp_path / "run"
    result = run_sweep(
        server.url, out, "--input-len", "64", "--output-len", "20", "--concurrency", "1,4", "--warmup", "1x"
    )
    assert result.returncode == 0, result.stderr
    assert f"points:   {out / 'points.jsonl'}" in result.stdout
    assert f"requests: {out / 'requests'}/" in result.stdout
    lines = points(out)
    assert [(p["max_concurrency"], p["repeat"]) for p in lines] == [(1, 0), (4, 0)]
    sent = {record["id"]: record for record in server.send_times()}
    for point in lines:
        assert not set(SGLANG_RESULT_KEYS) - point.keys()
        assert point["completed"] == max(16, 10 * point["max_concurrency"])
        assert point["total_output_tokens"] == 20 * point["completed"]
        assert point["total_input_tokens"] == 64 * point["completed"]
        # The truth of the point's requests is the server's own record of its writes: TTFT from the
        # sweep's send time (as the sweep counts it) to the first chunk's write, TPOT the 19 gaps from
        # the first write to the last.
        writes = [(record, sent[record["rid"]]["chunk_ns"]) for record in requests_of(out, point["point_id"])]
        true_ttft_ms = median([(chunks[0] - record["start_ns"]) / 1e6 for record, chunks in writes])
        true_tpot_ms = median([(chunks[-1] - chunks[0]) / 19e6 for _, chunks in writes])
        # The server never writes early: 40 ms after its read of the request, which follows the send.
        assert true_ttft_ms >= 40
        # Bounds from 140 runs of this sweep (idle, running the unit tests, both cores busy, both). Each
        # chunk is read after its write, so the median TTFT can only be late, by the first chunk's way
        # back: loopback and the sweep's wake-up, 0.4 ms typically, 3.1 ms at worst (C=4, both cores
        # busy); the bound leaves 0.9 ms over that.
        assert 0 <= point["median_ttft_ms"] - true_ttft_ms < 4
        # TPOT is off by the difference of the first and the last chunk's way back, over 19 gaps: at
        # most 0.07 ms; twice that.
        assert point["median_tpot_ms"] == pytest.approx(true_tpot_ms, abs=0.15)
        assert point["per_user_tps"] == pytest.approx(1000 / point["median_tpot_ms"])
    records = requests_of(out, "c4-r0")
    assert len(records) == 40
    assert all(r["error"] == "" and sum(r["chunk_tokens"]) == 20 for r in records)
    # The summary table has a row per point.
    rows = [line.split() for line in result.stdout.splitlines() if line.split()[:1] in (["1"], ["4"])]
    assert [row[:3] for row in rows] == [["1", "0", "16"], ["4", "0", "40"]]


@pytest.mark.parametrize("api", ["completions", "chat", "generate"])
def test_every_api_streams_and_counts_server_tokens(
    sse_server: StartServer, tmp_path: Path, api: str
) -> None:
    server = sse_server(chunk_gap_ms=1, tokens_per_chunk=3)
    out = tmp_path / api
    result = run_sweep(
        server.url,
        out,
        "--api",
        api,
        "--input-len",
        "12",
        "--output-len",
        "10",
        "--concurrency",
        "2",
        "--warmup",
        "0",
        "--flush-cache",
    )
    assert result.returncode == 0, result.stderr
    (point,) = points(out)
    assert (
        point["backend"]
        == {"completions": "sglang-oai", "chat": "sglang-oai-chat", "generate": "sglang"}[api]
    )
    assert point["completed"] == 20 and point["failed"] == 0  # 10 x C
    assert point["total_output_tokens"] == 20 * 10
    # Chat prompts are text (12 words); the server's prompt count is what is recorded.
    assert point["total_input_tokens"] == 20 * 12
    sent = {record["id"]: record for record in server.send_times()}
    for record in requests_of(out, "c2-r0"):
        assert record["chunk_tokens"] == sent[record["rid"]]["chunk_tokens"] == [1, 3, 3, 3]


def test_measured_ttft_matches_the_servers_send_times(sse_server: StartServer, tmp_path: Path) -> None:
    server = sse_server(first_token_ms=30, chunk_gap_ms=10, process=True, cpu=0)
    out = tmp_path / "run"
    # A warmup of one request per slot opens the 8 connections: the measured requests reuse them.
    result = run_sweep(
        server.url, out, "--input-len", "16", "--output-len", "8", "--concurrency", "8", "--warmup", "1x"
    )
    assert result.returncode == 0, result.stderr
    sent = {record["id"]: record for record in server.send_times()}
    way_in_ms, way_back_ms = [], []
    for record in requests_of(out, "c8-r0"):
        truth = sent[record["rid"]]
        # One clock (CLOCK_MONOTONIC) in both processes: a request leaves before the server reads it,
        # and each chunk arrives after the server wrote it.
        assert record["start_ns"] <= truth["arrival_ns"]
        assert all(
            read >= written for read, written in zip(record["chunk_ns"], truth["chunk_ns"], strict=True)
        )
        way_in_ms.append((truth["arrival_ns"] - record["start_ns"]) / 1e6)
        way_back_ms.append((record["chunk_ns"][0] - truth["first_chunk_ns"]) / 1e6)
    # The measured TTFT is the server's own (from its read of the request to its write of the first
    # chunk) plus these two. Bounds from 80 runs (20 each: idle, running the unit tests, both cores busy,
    # both at once), about twice the worst seen:
    # the first chunk's way back is loopback and the sweep's wake-up, and, as a wave's 8 first chunks come
    # together, its reading of the others: median over the 16 requests 0.3-0.5 ms, at most 0.8 ms.
    assert median(way_back_ms) < 1.5, way_back_ms
    # The way in of the fastest request, with no other request to send before it, is the sweep's writing
    # of the request, loopback and the server's wake-up: 0.1-0.3 ms, at most 0.44 ms.
    assert min(way_in_ms) < 1, way_in_ms


def test_chunks_of_several_tokens_count_per_token(sse_server: StartServer, tmp_path: Path) -> None:
    server = sse_server(first_token_ms=10, chunk_gap_ms=16, tokens_per_chunk=4, process=True)
    out = tmp_path / "run"
    result = run_sweep(
        server.url, out, "--input-len", "8", "--output-len", "25", "--concurrency", "2", "--warmup", "0"
    )
    assert result.returncode == 0, result.stderr
    (point,) = points(out)
    # One chunk every 16 ms carrying 4 tokens: sglang's chunk ITL sees 16 ms, per token 4 ms.
    assert point["median_itl_ms"] == pytest.approx(16, rel=0.15)
    assert point["median_token_itl_ms"] == pytest.approx(4, rel=0.15)
    record = requests_of(out, "c2-r0")[0]
    assert record["chunk_tokens"] == [1, 4, 4, 4, 4, 4, 4]


@pytest.mark.parametrize(
    ("fault", "expected_error"),
    [
        ("http_error:every=3:status=503:message=overloaded now", "HTTP 503: "),
        ("malformed:every=3:after=2", "malformed stream line: "),
        ("reset:every=3:after=2", "connection failed: "),
        ("stall:every=3:after=2", "stalled: no data for 0.5 s"),
        ("error_event:every=3:after=2", "server error in stream: "),
    ],
)
def test_a_failed_request_is_recorded_and_the_sweep_goes_on(
    sse_server: StartServer, tmp_path: Path, fault: str, expected_error: str
) -> None:
    server = sse_server(chunk_gap_ms=1, faults=[fault])
    out = tmp_path / "run"
    result = run_sweep(
        server.url,
        out,
        *("--input-len", "8", "--output-len", "6", "--concurrency", "1,2", "--warmup", "0"),
        *("--read-timeout", "0.5"),
    )
    assert result.returncode == 0, result.stderr
    lines = points(out)
    assert [p["max_concurrency"] for p in lines] == [1, 2]
    for point in lines:
        records = requests_of(out, point["point_id"])
        failed = [r for r in records if r["error"]]
        assert point["failed"] == len(failed) > 0
        assert point["completed"] == len(records) - len(failed)
        assert all(r["error"].startswith(expected_error) for r in failed), failed[0]["error"]
    if fault.startswith("http_error"):
        assert failed[0]["status"] == 503
        assert "overloaded now" in failed[0]["error"]


def test_wrong_output_length_is_an_error_not_a_data_point(sse_server: StartServer, tmp_path: Path) -> None:
    server = sse_server(output_len_override=5)
    out = tmp_path / "run"
    result = run_sweep(
        server.url, out, "--input-len", "8", "--output-len", "6", "--concurrency", "1", "--warmup", "0"
    )
    (point,) = points(out)
    assert point["completed"] == 0
    assert point["stopped_early"] is True
    assert requests_of(out, "c1-r0")[0]["error"].startswith("output length 5 != requested 6")
    assert result.returncode == 1


def test_unreachable_url_fails_within_the_connect_timeout(tmp_path: Path, unaccepting_port: int) -> None:
    started = time.monotonic()
    result = run_sweep(
        f"http://127.0.0.1:{unaccepting_port}",
        tmp_path / "run",
        *("--input-len", "8", "--output-len", "4", "--concurrency", "1", "--connect-timeout", "1"),
    )
    assert result.returncode == 1
    assert time.monotonic() - started < 15
    assert result.stderr == (
        f"fairbench sweep: error: cannot reach http://127.0.0.1:{unaccepting_port}/v1/models: "
        "no connection within 1 s\n"
    )


@pytest.fixture
def unaccepting_port() -> Iterator[int]:
    """A loopback port whose listener never accepts: its queue is full, so a connection attempt times out
    (where an address that routes nowhere, such as TEST-NET-1, may be refused at once by a firewall)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        queued = [socket.socket() for _ in range(2)]
        for sock in queued:
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
        yield port
        for sock in queued:
            sock.close()


def test_refused_connection_is_a_clear_error(tmp_path: Path, unused_port: int) -> None:
    result = run_sweep(
        f"http://127.0.0.1:{unused_port}",
        tmp_path / "run",
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--concurrency",
        "1",
    )
    assert result.returncode == 1
    assert result.stderr == (
        f"fairbench sweep: error: cannot reach http://127.0.0.1:{unused_port}/v1/models: connection refused: "
        f"nothing listens on 127.0.0.1:{unused_port}\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "1,x"], "argument --concurrency: '1,x': 'x' is not a number"),
        (["--concurrency", "0"], f"argument --concurrency: '0': '0' {bounds.CONCURRENCY.problem(0)}"),
        (["--output-len", "-5"], f"argument --output-len: '-5' {bounds.TOKENS.problem(-5)}"),
        (["--input-len", "1e11"], f"argument --input-len: '1e11' {bounds.TOKENS.problem(1e11)}"),
        (["--prompts-per-level", "lots"], "argument --prompts-per-level: 'lots' is not a count"),
        (["--warmup", "infx"], f"argument --warmup: 'infx': N {bounds.COUNT_FACTOR.problem(math.inf)}"),
        (
            ["--concurrency", "100000", "--prompts-per-level", "1000x"],
            f"--prompts-per-level: '1000x' at concurrency 100000: {bounds.REQUESTS.problem(10**8)}",
        ),
        (["--url", "localhost:30000"], "--url: 'localhost:30000': must start with http:// or https://"),
        (["--url", "http://127.0.0.1:99999"], "--url: 'http://127.0.0.1:99999': Port out of range 0-65535"),
        (["--url", "http://:8000"], "--url: 'http://:8000': names no host"),
        (["--range-ratio", "1.5"], f"argument --range-ratio: '1.5' {bounds.SHARE.problem(1.5)}"),
        (["--range-ratio", "nan"], f"argument --range-ratio: 'nan' {bounds.SHARE.problem(math.nan)}"),
        (["--max-error-rate", "nan"], f"argument --max-error-rate: 'nan' {bounds.SHARE.problem(math.nan)}"),
        (
            ["--read-timeout", "nan"],
            f"argument --read-timeout: 'nan' {bounds.READ_TIMEOUT_S.problem(math.nan)}",
        ),
        (
            ["--read-timeout", "inf"],
            f"argument --read-timeout: 'inf' {bounds.READ_TIMEOUT_S.problem(math.inf)}",
        ),
        (
            ["--connect-timeout", "0"],
            f"argument --connect-timeout: '0' {bounds.CONNECT_TIMEOUT_S.problem(0.0)}",
        ),
        (["--seed", "-1"], f"argument --seed: '-1' {bounds.SEED.problem(-1)}"),
        (["--gpus", "0"], f"argument --gpus: '0' {bounds.GPUS.problem(0)}"),
        (["--energy-gpus", "0,1,0"], "argument --energy-gpus: '0,1,0' lists a GPU twice"),
        (
            ["--energy-gpus", "4096"],
            f"argument --energy-gpus: '4096': '4096' {bounds.GPU_INDEX.problem(4096)}",
        ),
        (["--out", ""], "argument --out: an empty path would write into the current directory: name one"),
        (
            ["--remeasure-failed", "--out", "x"],
            "--remeasure-failed: measures again points of a sweep already in --out: add --resume",
        ),
    ],
)
def test_invalid_arguments_get_one_line_naming_the_argument(
    tmp_path: Path, args: list[str], message: str
) -> None:
    base = ["--url", "http://127.0.0.1:9", "--input-len", "8", "--output-len", "4", "--concurrency", "1"]
    result = subprocess.run(
        [*FAIRBENCH, "sweep", "--out", str(tmp_path / "run"), *base, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("fairbench sweep: error: ")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr
    assert not list(tmp_path.iterdir())  # nothing written, not even the results directory


@pytest.mark.timing  # Ctrl-C must land inside the first point, at a fixed time
def test_ctrl_c_writes_nothing_half_done(sse_server: StartServer, tmp_path: Path) -> None:
    server = sse_server(chunk_gap_ms=20)
    out = tmp_path / "run"
    process = subprocess.Popen(
        sweep_args(
            server.url, out, "--input-len", "8", "--output-len", "50", "--concurrency", "1,2", "--warmup", "0"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2.0)  # inside the first point (16 requests x ~1 s)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert "Traceback" not in stderr
    assert (out / "points.jsonl").exists() is False or points(out) == []
    assert not list((out / "requests").glob("*"))


@pytest.fixture
def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_api_key_is_sent_as_bearer(sse_server: StartServer, tmp_path: Path) -> None:
    server: RunningServer = sse_server(api_key="s3cret")
    base = ("--input-len", "8", "--output-len", "4", "--concurrency", "1", "--warmup", "0")
    denied = run_sweep(server.url, tmp_path / "denied", *base)
    assert denied.returncode == 1
    assert "(stopped early: error rate)" in denied.stderr
    assert all(r["error"].startswith("HTTP 401: ") for r in requests_of(tmp_path / "denied", "c1-r0"))
    env = {**os.environ, "FAIRBENCH_API_KEY": "s3cret"}
    allowed = subprocess.run(
        sweep_args(server.url, tmp_path / "allowed", *base),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert allowed.returncode == 0, allowed.stderr


FAKE_NVML_DIR = Path(__file__).resolve().parents[1] / "support" / "fake_nvml"
ENERGY_KEYS = {
    "gpu_energy_j",
    "gpu_energy_per_gpu_j",
    "gpu_mean_power_w",
    "output_tokens_per_j",
    "gpu_energy_source",
    "gpu_power_sample_hz",
}


def run_sweep_with_nvml(
    url: str, out: Path, nvml: dict[str, Any], *extra: str
) -> subprocess.CompletedProcess[str]:
    """A sweep whose ``import pynvml`` finds tests/support/fake_nvml with the GPUs ``nvml`` describes."""
    path = os.pathsep.join(filter(None, [str(FAKE_NVML_DIR), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "FAKE_PYNVML": json.dumps(nvml)}
    base = ("--input-len", "8", "--output-len", "10", "--warmup", "0", *extra)
    return subprocess.run(
        sweep_args(url, out, *base), capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_points_carry_gpu_energy_where_nvml_sees_gpus(sse_server: StartServer, tmp_path: Path) -> None:
    server = sse_server(chunk_gap_ms=20)
    nvml = {"gpus": [{"watts": 100.0}, {"watts": 250.0}, {"watts": 400.0, "counter": False}]}
    out = tmp_path / "energy"
    # A warmup as long as a fifth of the point: energy sampled over it too would be 20 % too high.
    result = run_sweep_with_nvml(
        server.url, out, nvml, "--concurrency", "2,4", "--energy-gpus", "1,2", "--warmup", "2x"
    )
    assert result.returncode == 0, result.stderr
    assert "GPU energy: sampling GPU(s) 1,2 at 20 Hz" in result.stderr
    assert "tok/J" in result.stdout.splitlines()[0]  # the summary table's energy columns
    for point in points(out):
        assert point.keys() >= ENERGY_KEYS
        per_gpu = point["gpu_energy_per_gpu_j"]
        assert list(per_gpu) == ["1", "2"]
        # Sampled around the measured loop alone: about its duration at each GPU's power.
        assert per_gpu["1"] == pytest.approx(250.0 * point["duration"], rel=0.05)
        assert per_gpu["2"] == pytest.approx(400.0 * point["duration"], rel=0.05)
        assert point["gpu_energy_j"] == pytest.approx(per_gpu["1"] + per_gpu["2"])
        assert point["gpu_mean_power_w"] == pytest.approx(650.0, rel=0.01)
        assert point["output_tokens_per_j"] == pytest.approx(
            point["total_output_tokens"] / point["gpu_energy_j"]
        )
        assert point["gpu_energy_source"] == "mixed"
        assert point["gpu_power_sample_hz"] >= 10


@pytest.mark.parametrize(
    ("nvml", "extra", "note"),
    [
        ({"gpus": [{"watts": 100.0}], "init_error": True}, (), "GPU energy not measured: NVML did not start"),
        ({"gpus": []}, (), "GPU energy not measured: NVML sees no GPU"),
        ({"gpus": [{"watts": 100.0}]}, ("--no-energy",), None),
    ],
)
def test_without_gpus_the_energy_fields_are_absent(
    sse_server: StartServer, tmp_path: Path, nvml: dict[str, Any], extra: tuple[str, ...], note: str | None
) -> None:
    server = sse_server(chunk_gap_ms=1)
    out = tmp_path / "no-energy"
    result = run_sweep_with_nvml(server.url, out, nvml, "--concurrency", "2", *extra)
    assert result.returncode == 0, result.stderr
    (point,) = points(out)
    assert not ENERGY_KEYS & point.keys()
    assert "tok/J" not in result.stdout
    if note:
        assert note in result.stderr
    else:
        assert "GPU energy" not in result.stderr


def test_energy_gpus_that_do_not_exist_are_an_error(sse_server: StartServer, tmp_path: Path) -> None:
    server = sse_server()
    nvml = {"gpus": [{"watts": 100.0}, {"watts": 100.0}]}
    result = run_sweep_with_nvml(
        server.url, tmp_path / "x", nvml, "--concurrency", "1", "--energy-gpus", "1,2"
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "fairbench sweep: error: --energy-gpus: GPU index(es) 2 not found: NVML sees 2 GPU(s), 0-1"
    )
