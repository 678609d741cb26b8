"""`fairbench sweep` meeting bad input, a server it cannot use, a second writer, and a failed point measured
again: real processes on loopback. However it ends, it ends in one line saying how (after the summary of
what was measured), never a traceback."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.support import sweep_process
from tests.support.sse_server import StartServer

from fairbench.hosts.ansible_support import sweep
from fairbench.measure.results import ResultsDir, ResultsError
from fairbench.measure.sweep import SweepSpec
from fairbench.measure.workload import WorkloadSpec

# A short workload: each sweep here is about how it ends, not what it measures.
SHORT = ("--input-len", "8", "--output-len", "4", "--warmup", "0")


def sweep_args(url: str, out: Path, *extra: str) -> list[str]:
    return sweep_process.sweep_args(url, out, *SHORT, *extra)


def run_sweep(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return sweep_process.run_sweep(url, out, *SHORT, *extra, timeout=60)


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    """The sweep's last word, after asserting it is an error with no traceback before it."""
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def summary_rows(stdout: str) -> list[list[str]]:
    """The summary table's rows (C, rep, ok, ...), without its header."""
    return [line.split() for line in stdout.splitlines() if line.split()[:1] and line.split()[0].isdigit()]


def records_in(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as handle:
        return [json.loads(line) for line in handle]


# --- one writer per results directory -------------------------------------------------------------------


@pytest.mark.timing  # the second sweep must start while the first still runs
def test_a_second_writer_is_refused_naming_the_directory(sse_server: StartServer, tmp_path: Path) -> None:
    server = sse_server(chunk_gap_ms=30)  # 0.1 s a request: the first sweep runs for seconds
    out = tmp_path / "run"
    first = subprocess.Popen(
        sweep_args(server.url, out, "--concurrency", "1,2"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not (out / "sweep.json").exists():  # written with the lock held
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.02)
        second = run_sweep(server.url, out, "--concurrency", "1,2", "--resume")
        assert last_line(second) == f"fairbench sweep: error: {out}: another sweep is still writing here"
        # The bench role's module takes the same lock.
        spec = SweepSpec(url=server.url, workload=WorkloadSpec(8, 4, vocab_size=30000), concurrency=[1, 2])
        with pytest.raises(ResultsError, match=f"^{out}: another sweep is still writing here$"):
            sweep(spec, out, check=False)
        assert first.wait(timeout=60) == 0
    finally:
        first.kill()
        first.communicate()
    assert [point["point_id"] for point in sweep_process.points(out)] == ["c1-r0", "c2-r0"]


# --- the model, recorded and checked on resume ----------------------------------------------------------


def test_a_resume_against_a_server_serving_another_model_is_refused_naming_both(
    sse_server: StartServer, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    first = sse_server(model_path="org/model-a")
    assert run_sweep(first.url, out, "--concurrency", "1,2").returncode == 0
    assert json.loads((out / "sweep.json").read_text())["model"] == "org/model-a"
    points_file = out / "points.jsonl"
    points_file.write_text(points_file.read_text().splitlines(keepends=True)[0])  # as a crash would leave

    other = sse_server(model_path="org/model-b")
    refused = run_sweep(other.url, out, "--concurrency", "1,2", "--resume")
    assert last_line(refused) == (
        f"fairbench sweep: error: {out / 'sweep.json'}: cannot resume against another model: the points "
        "there are of 'org/model-a', this sweep's is 'org/model-b'"
    )
    assert [row[:3] for row in summary_rows(refused.stdout)] == [["1", "0", "16"]]  # what is there
    assert len(sweep_process.points(out)) == 1

    # A directory from before the model was recorded resumes, and records it from then on.
    settings = json.loads((out / "sweep.json").read_text())
    del settings["model"]
    (out / "sweep.json").write_text(json.dumps(settings))
    resumed = run_sweep(other.url, out, "--concurrency", "1,2", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "sweep.json").read_text())["model"] == "org/model-b"
    assert len(sweep_process.points(out)) == 2


# --- a failed point measured again, on request ----------------------------------------------------------


def test_failed_points_are_measured_again_only_on_request_and_their_lines_are_kept(
    sse_server: StartServer, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    failing = sse_server(faults=["http_error:status=500"])
    assert run_sweep(failing.url, out, "--concurrency", "1,2").returncode == 1
    healthy = sse_server()
    spec = SweepSpec(url=healthy.url, workload=WorkloadSpec(8, 4, vocab_size=30000), concurrency=[1, 2])

    # Never silently: a plain resume has nothing to do, and the bench module plans nothing either.
    plain = run_sweep(healthy.url, out, "--concurrency", "1,2", "--resume")
    assert plain.returncode == 1 and "measuring again" not in plain.stderr
    assert sweep(spec, out, check=True).planned == []
    assert sweep(spec, out, check=True, remeasure_failed=True).planned == ["c1-r0", "c2-r0"]

    again = run_sweep(healthy.url, out, "--concurrency", "1,2", "--resume", "--remeasure-failed")
    assert again.returncode == 0, again.stderr
    assert "measuring again 2 point(s) that completed no request: c1-r0, c2-r0" in again.stderr
    assert [row[:3] for row in summary_rows(again.stdout)] == [["1", "0", "16"], ["2", "0", "20"]]
    failed_lines, new_lines = sweep_process.points(out)[:2], sweep_process.points(out)[2:]
    assert [line["completed"] for line in failed_lines] == [0, 0]
    assert [line["supersedes"] for line in new_lines] == [
        {"line": 1, "requests": "requests/c1-r0.line1.jsonl.gz"},
        {"line": 2, "requests": "requests/c2-r0.line2.jsonl.gz"},
    ]
    assert ResultsDir(out).points() == new_lines
    kept = records_in(out / "requests" / "c1-r0.line1.jsonl.gz")
    assert kept and all(record["error"].startswith("HTTP 500: ") for record in kept)
    assert all(record["error"] == "" for record in records_in(out / "requests" / "c1-r0.jsonl.gz"))


# --- bad input: one line, after the summary of what is there --------------------------------------------


def garbage_dataset(content: bytes) -> Callable[[Path], tuple[list[str], str]]:
    def case(tmp_path: Path) -> tuple[list[str], str]:
        path = tmp_path / "data.json"
        path.write_bytes(content)
        return ["--dataset", str(path)], f"--dataset: {path}"

    return case


def out_of(name: str, content: str) -> Callable[[Path], tuple[list[str], str]]:
    """A results directory holding ``name`` with ``content``, resumed."""

    def case(tmp_path: Path) -> tuple[list[str], str]:
        out = tmp_path / "run"
        out.mkdir()
        (out / name).write_text(content)
        return ["--out", str(out), "--resume"], str(out / name)

    return case


def out_is_a_file(tmp_path: Path) -> tuple[list[str], str]:
    (tmp_path / "file").write_text("")
    return [
        "--out",
        str(tmp_path / "file"),
    ], f"{tmp_path / 'file'}: cannot be a results directory: it is a file"


BAD_INPUTS = {
    "binary dataset": (garbage_dataset(b"\x89PNG\r\n\x1a\n\x00\xff"), ": not UTF-8 text (invalid start byte"),
    "dataset not JSON": (garbage_dataset(b'{"a": 1'), ":1: not valid JSON (Expecting ',' delimiter)"),
    "dataset of another shape": (garbage_dataset(b'{"a": 1}'), ": must be a JSON list of conversations"),
    "out is a file": (out_is_a_file, ""),
    "garbage sweep.json": (out_of("sweep.json", "garbage"), ":1: not valid JSON (Expecting value)"),
    "garbage points.jsonl": (out_of("points.jsonl", "[1]\n"), ":1: not a point (a JSON object)"),
}


@pytest.mark.parametrize(("case", "rest"), BAD_INPUTS.values(), ids=BAD_INPUTS)
def test_bad_input_ends_in_one_line_naming_it(
    sse_server: StartServer,
    tmp_path: Path,
    case: Callable[[Path], tuple[list[str], str]],
    rest: str,
) -> None:
    args, named = case(tmp_path)
    result = run_sweep(sse_server().url, tmp_path / "default-out", "--concurrency", "1", *args)
    assert last_line(result).startswith(f"fairbench sweep: error: {named}{rest}"), result.stderr


def test_an_unwritable_results_directory_is_named(sse_server: StartServer) -> None:
    # sysfs takes no new directory, whoever asks (root included).
    result = run_sweep(sse_server().url, Path("/sys/fairbench-results"), "--concurrency", "1")
    assert last_line(result).startswith(
        "fairbench sweep: error: /sys/fairbench-results: cannot be a results directory: "
    )


# --- a server it cannot use: the reason, in words ---------------------------------------------------------


@pytest.fixture
def plain_http() -> Iterator[Callable[[bytes], str]]:
    """Factory: a plain http.server answering every GET with 200 and ``body``; returns its URL."""
    servers: list[ThreadingHTTPServer] = []

    def start(body: bytes) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


MODEL_LISTS = {
    "not JSON": (b"hello", "answered HTTP 200, not JSON: 'hello'"),
    "a list": (
        b"[]",
        "answered [], not an OpenAI model list naming a model; give the model's name (--model)",
    ),
    "no model": (b'{"data": []}', 'answered {"data": []}, not an OpenAI model list naming a model'),
    "an id not text": (b'{"data": [{"id": 3}]}', 'answered {"data": [{"id": 3}]}, not an OpenAI model list'),
    "null": (b"null", "answered null, not an OpenAI model list naming a model"),
}


@pytest.mark.parametrize(("body", "message"), MODEL_LISTS.values(), ids=MODEL_LISTS)
def test_a_model_list_that_is_not_the_openai_one_is_named(
    plain_http: Callable[[bytes], str], tmp_path: Path, body: bytes, message: str
) -> None:
    url = plain_http(body)
    result = run_sweep(url, tmp_path / "run", "--concurrency", "1")
    assert last_line(result).startswith(f"fairbench sweep: error: {url}/v1/models {message}"), result.stderr
    assert not (tmp_path / "run" / "points.jsonl").exists()


def test_tls_to_a_plain_http_server_says_so(
    plain_http: Callable[[bytes], str], sse_server: StartServer, tmp_path: Path
) -> None:
    # http.server answers the TLS handshake with an HTTP error; the streaming server does not answer it.
    answering = plain_http(b"{}").replace("http://", "https://")
    result = run_sweep(answering, tmp_path / "a", "--concurrency", "1")
    assert last_line(result).startswith(
        f"fairbench sweep: error: cannot reach {answering}/v1/models: TLS handshake failed ([SSL: "
    )
    assert last_line(result).endswith("); if the server speaks plain HTTP, use http://")
    silent = sse_server().url.replace("http://", "https://")
    result = run_sweep(silent, tmp_path / "b", "--concurrency", "1", "--connect-timeout", "1")
    assert last_line(result) == (
        f"fairbench sweep: error: cannot reach {silent}/v1/models: no TLS connection within 1 s; "
        "if the server speaks plain HTTP, use http://"
    )


def test_a_host_name_that_does_not_resolve_is_named(tmp_path: Path) -> None:
    result = run_sweep("http://fairbench.invalid:30000", tmp_path / "run", "--concurrency", "1")
    assert last_line(result).startswith(
        "fairbench sweep: error: cannot reach http://fairbench.invalid:30000/v1/models: host name "
        "'fairbench.invalid' not resolved ("
    )


# --- Ctrl-C ------------------------------------------------------------------------------------------------

# The sweep started as `fairbench sweep` is, with Ctrl-C arriving while its command module is imported.
INTERRUPTED_IMPORT = """
import os, signal, sys

class CtrlCDuringImport:
    def find_spec(self, name, path=None, target=None):
        if name == "aiohttp":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlCDuringImport())
from fairbench.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timing  # Ctrl-C must land during start-up, at a fixed time
def test_ctrl_c_while_starting_up_is_one_line(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-c",
        INTERRUPTED_IMPORT,
        *sweep_args("http://127.0.0.1:9", tmp_path / "run")[3:],
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stderr) == (130, "fairbench sweep: interrupted\n")


@pytest.mark.timing  # Ctrl-C must land after the first point, at a fixed time
def test_ctrl_c_during_a_sweep_shows_what_was_measured(sse_server: StartServer, tmp_path: Path) -> None:
    server = sse_server(chunk_gap_ms=30)
    out = tmp_path / "run"
    process = subprocess.Popen(
        sweep_args(server.url, out, "--concurrency", "1,4,8"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not ((out / "points.jsonl").exists() and (out / "points.jsonl").read_text()):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "fairbench sweep: interrupted"
    assert "Traceback" not in stderr
    assert [row[:3] for row in summary_rows(stdout)] == [["1", "0", "16"]]
