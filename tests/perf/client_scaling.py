"""How the client scales over processes (`fairbench sweep --client-processes N`): CPU per token, ingest
throughput and TTFT error against N.

Every part runs C=256 streams of 128 input and 256 output tokens against the test server
(tests/support/sse_server/), in client_overhead.py's settings: realistic (100 ms to the first token,
20 ms between tokens, each token its own read) or saturated (no delays). Client CPU is sampled from /proc
every 50 ms over the client's whole process tree (the sweep and its worker processes) and taken over the
steady window, where all C streams are active.

  cpu     Realistic, --requests (1000) each, one server process on one core and the client on another:
          CPU microseconds per token of fairbench with 1 process, fairbench with --processes N (2, on the
          same one core), the raw byte-counting client (client_overhead.py's), and sglang.bench_serving
          from SGLang's venv (FAIRBENCH_SGLANG_VENV, default ~/.cache/fairbench/sglang-venv;
          --build-sglang-venv builds it, else the row says why it is not available). The window comes from
          the server's send times, so every client is timed alike. Machines are noisy: the ratio to the
          raw client is the figure to compare across runs.
  ingest  Saturated, per N = 1, 2, 4, ... up to the usable cores less a quarter: the client's
          processes on N cores, and a test-server process pinned to each other core (at most
          --server-processes), all on one port (SO_REUSEPORT: the kernel spreads the connections over
          them). Each N's tokens/s ingested, client CPU per token (window from the client's records: here
          the server writes ahead into the socket buffers), whether the point was flagged client_bound,
          and each server process's CPU share of its core over the window: near 1, the servers were the
          limit, not the client. (The test server spends more CPU per token than fairbench does, so it
          takes a few server cores to outrun one client process.)
  ttft    Realistic, the same layout per N (up to the usable cores less a quarter, or --processes where
          that is more: then N processes share the client's cores): the client's first-chunk time less
          the server's write of that chunk (one clock, CLOCK_MONOTONIC), median and p99, the server
          processes' records merged from a send-times file each.

On two cores the server gets one and the client the other, so ingest stops at N=1 there.

Targets: every request completes; in ingest every server process stays below SERVER_SHARE_LIMIT of its
core (else that N measured the server, not the client), and where it does each N ingests at least
SCALING_TARGET of N times N=1's steady rate; in ttft the median error is within accuracy.py's 1 ms
(TARGET_MS) at every N that has a core per process. The script exits 1, naming each miss.

    .venv/bin/python tests/perf/client_scaling.py [--parts cpu,ingest,ttft] [--processes 2]
        [--requests 1000] [--ingest-requests-per-process 2000] [--server-processes S]
        [--build-sglang-venv]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _harness import REPO, cpu_ns, spawn_pinned, tree_cpu_ns
from client_overhead import SETTINGS, VOCAB_SIZE, Setting, cpu_between, percentile, raw_client_command

sys.path.insert(0, str(REPO))

from tests.support import real_sglang
from tests.support.sse_server.config import ServerConfig
from tests.support.sse_server.server_process import ServerProcess
from tests.support.sweep_accuracy import TARGET_MS
from tests.support.tiny_model import build as build_tiny_model

CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 256, 128, 256
REALISTIC, SATURATED = SETTINGS
SAMPLE_INTERVAL_S = 0.05
SERVER_SHARE_LIMIT = 0.8
"""A server process busier than this share of its core may have held the client back."""
SCALING_TARGET = 0.5
"""N processes ingest at least this share of N times one process's rate."""
PARTS = ("cpu", "ingest", "ttft")


@dataclass(frozen=True)
class Layout:
    """Which usable cores serve and which are the client's, for a client of N processes."""

    server_cpus: list[int]
    client_cpus: list[int]

    @classmethod
    def for_client(cls, processes: int, most_servers: int | None = None) -> Layout:
        """The last N usable cores the client's (one at least, all but one at most), every other core a
        server's, or the first ``most_servers`` of them."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            sys.exit("needs two cores: server and client are pinned to different ones")
        client = min(processes, len(cpus) - 1)
        return cls(cpus[: len(cpus) - client][:most_servers], cpus[len(cpus) - client :])

    def describe(self) -> str:
        servers = f"{len(self.server_cpus)} server process{'es' if len(self.server_cpus) > 1 else ''}"
        return f"{servers} on {cpu_list(self.server_cpus)}, the client on {cpu_list(self.client_cpus)}"


def most_processes() -> int:
    """The largest N measured: the usable cores less a quarter of them (one at least) for the servers."""
    cores = len(os.sched_getaffinity(0))
    return max(1, cores - max(1, cores // 4))


def process_counts(most: int) -> list[int]:
    """1, 2, 4, ... below ``most``, then ``most``."""
    counts = [1]
    while counts[-1] * 2 < most:
        counts.append(counts[-1] * 2)
    return counts if counts[-1] == most else [*counts, most]


class ServerGroup:
    """Test-server processes on one port (SO_REUSEPORT), each pinned to a core of its own and writing its
    send times to a file of its own at exit: whichever process served a request, its record is read."""

    def __init__(self, setting: Setting, cpus: Sequence[int], directory: Path, chunk_times: bool) -> None:
        directory.mkdir(parents=True)
        self.files = [directory / f"send-times-{index}.json" for index in range(len(cpus))]
        config = ServerConfig(
            first_token_ms=setting.first_token_ms,
            chunk_gap_ms=setting.chunk_gap_ms,
            record_chunk_times=chunk_times,
            reuse_port=True,
        )
        self.processes: list[ServerProcess] = []
        try:
            for cpu, file in zip(cpus, self.files, strict=True):
                port = self.processes[0].port if self.processes else 0
                placed = dataclasses.replace(config, port=port, cpu=cpu, send_times_file=str(file))
                self.processes.append(ServerProcess(placed).start())
        except BaseException:
            self.stop()
            raise
        self.url = self.processes[0].url

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def stop(self) -> list[list[dict[str, Any]]]:
        """Stop every process; each one's send-time records."""
        for process in self.processes:
            process.stop()
        return [json.loads(file.read_text())["requests"] for file in self.files if file.exists()]


@dataclass
class ClientRun:
    """A client's process tree, sampled from /proc until it exited, with the servers beside it."""

    times_ns: list[int]
    client_cpu_ns: list[int]
    server_cpu_ns: list[list[int]]

    def client_cpu_s(self, start_ns: int, end_ns: int) -> float:
        return cpu_between(list(zip(self.times_ns, self.client_cpu_ns, strict=True)), start_ns, end_ns) / 1e9

    def server_shares(self, start_ns: int, end_ns: int) -> list[float]:
        """Each server process's share of its core over [start, end]."""
        return [
            cpu_between(list(zip(self.times_ns, cpu, strict=True)), start_ns, end_ns) / (end_ns - start_ns)
            for cpu in self.server_cpu_ns
        ]


def run_client(command: list[str], cpus: Sequence[int], servers: Sequence[int], log: Path) -> ClientRun:
    """Run ``command`` pinned to ``cpus``, sampling its tree's CPU and each server's; raises if it failed."""
    run = ClientRun([], [], [[] for _ in servers])
    with log.open("w") as output:
        process = spawn_pinned(command, cpus, stdout=output, stderr=subprocess.STDOUT)
    while process.poll() is None:
        moment, client = time.perf_counter_ns(), tree_cpu_ns(process.pid)
        server_cpus = [cpu_ns(pid) for pid in servers]
        if client is not None and None not in server_cpus:
            run.times_ns.append(moment)
            run.client_cpu_ns.append(client)
            for series, cpu in zip(run.server_cpu_ns, server_cpus, strict=True):
                series.append(cpu or 0)
        time.sleep(SAMPLE_INTERVAL_S)
    if process.returncode:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{' '.join(command[:4])} ... exited {process.returncode}:\n{tail}")
    return run


@dataclass(frozen=True)
class Window:
    """The steady window, where all C streams are active, and the tokens that arrived in it.

    From the C-th start to the (R - C + 1)-th end of R streams: the first end that no new request
    replaces. For a client that sends the next request the moment one ends, that is the first end after
    the last start (fairbench's own steady window, client_overhead.py's too); a client slower to send it
    (one new connection a request) would otherwise have its last starts fall after the others ended, and
    the window take in a whole round of fewer streams.
    """

    start_ns: int
    end_ns: int
    tokens: int

    @classmethod
    def of(cls, streams: Sequence[dict[str, Any]]) -> Window:
        """From streams with start_ns, end_ns, chunk_ns and chunk_tokens."""
        starts = sorted(stream["start_ns"] for stream in streams)
        ends = sorted(stream["end_ns"] for stream in streams)
        start, end = starts[CONCURRENCY - 1], ends[len(streams) - CONCURRENCY]
        tokens = sum(
            count
            for stream in streams
            for moment, count in zip(stream["chunk_ns"], stream["chunk_tokens"], strict=True)
            if start <= moment < end
        )
        return cls(start, end, tokens)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens * 1e9 / (self.end_ns - self.start_ns)


def server_streams(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The server's records as streams: from arrival to the last chunk written."""
    return [{"start_ns": r["arrival_ns"], "end_ns": r["chunk_ns"][-1], **r} for r in records if r["chunk_ns"]]


def unfinished(records: Sequence[dict[str, Any]], requests: int) -> int:
    """Requests the server did not stream to the end."""
    done = sum(1 for r in records if r["outcome"] == "complete" and r["output_tokens"] == OUTPUT_LEN)
    return requests - done


@dataclass
class Sweep:
    """One `fairbench sweep` point: its line, its request records, and the sampled run."""

    point: dict[str, Any]
    records: list[dict[str, Any]]
    run: ClientRun

    @property
    def failed(self) -> int:
        return sum(1 for record in self.records if record["error"])

    @property
    def client_bound(self) -> bool:
        return any(flag["flag"] == "client_bound" for flag in self.point["flags"])


def run_sweep(
    url: str, out: Path, requests: int, processes: int, *, cpus: Sequence[int], servers: Sequence[int] = ()
) -> Sweep:
    """One point at C=256 with ``processes`` client processes on ``cpus``, sampling ``servers`` beside it."""
    command = [sys.executable, "-m", "fairbench", "sweep", "--url", url, "--out", str(out)]
    command += ["--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--warmup", "0"]
    command += ["--concurrency", str(CONCURRENCY), "--prompts-per-level", str(requests)]
    command += ["--vocab-size", str(VOCAB_SIZE), "--client-processes", str(processes)]
    command += ["--no-energy", "--no-server-metrics", "--progress", "lines"]
    run = run_client(command, cpus, servers, out.with_suffix(".log"))
    with gzip.open(out / "requests" / f"c{CONCURRENCY}-r0.jsonl.gz", "rt") as handle:
        records = [json.loads(line) for line in handle]
    (point,) = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    return Sweep(point, records, run)


def sglang_python(build: bool) -> Path | str:
    """SGLang's venv Python, or why it is not available."""
    if build:
        try:
            return real_sglang.ensure_venv()
        except pytest.skip.Exception as skipped:
            return str(skipped.msg)
    if real_sglang._installed_version() != real_sglang.SGLANG_VERSION:
        return f"no sglang {real_sglang.SGLANG_VERSION} in {real_sglang.VENV} (--build-sglang-venv builds it)"
    return real_sglang._venv_python()


def bench_serving_command(python: Path, url: str, requests: int, tokenizer: Path, out: Path) -> list[str]:
    """sglang.bench_serving on the same workload: random token ids (``random`` would fetch ShareGPT's text),
    no warmup request (fairbench's runs have none either)."""
    return [
        str(python),
        *("-m", "sglang.bench_serving", "--backend", "sglang-oai", "--base-url", url),
        *("--dataset-name", "random-ids", "--random-range-ratio", "1"),
        *("--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN)),
        *("--num-prompts", str(requests), "--max-concurrency", str(CONCURRENCY), "--request-rate", "inf"),
        *("--tokenizer", str(tokenizer), "--warmup-requests", "0", "--disable-tqdm"),
        *("--output-file", str(out)),
    ]


def part_cpu(args: argparse.Namespace, tmp: Path, misses: list[str]) -> None:
    """CPU per token of each client in the realistic setting, one server core and one client core."""
    layout = Layout.for_client(1, most_servers=1)
    server_cpus, client_cpus = layout.server_cpus, layout.client_cpus
    python = sglang_python(args.build_sglang_venv)
    tokenizer = build_tiny_model(tmp / "tiny-model")
    raw, sglang = "raw byte-counting client", f"sglang.bench_serving {real_sglang.SGLANG_VERSION}"
    clients = {"fairbench, 1 process": 1, f"fairbench, {args.processes} processes": args.processes, raw: 0}
    clients[sglang] = 0
    rows: dict[str, tuple[float, float] | str] = {}
    for index, (name, processes) in enumerate(clients.items()):
        if name == sglang and isinstance(python, str):
            rows[name] = f"not available: {python}"
            continue
        group = ServerGroup(REALISTIC, server_cpus, tmp / f"cpu-{index}-servers", chunk_times=True)
        failed = 0
        try:
            if processes:
                sweep = run_sweep(group.url, tmp / f"cpu-{index}", args.requests, processes, cpus=client_cpus)
                run, failed = sweep.run, sweep.failed
            else:
                command = (
                    raw_client_command(group.url, args.requests)
                    if name == raw
                    else bench_serving_command(
                        Path(python), group.url, args.requests, tokenizer, tmp / "bench.jsonl"
                    )
                )
                run = run_client(command, client_cpus, [], tmp / f"cpu-{index}.log")
        finally:
            records = [record for process in group.stop() for record in process]
        if failed := max(failed, unfinished(records, args.requests)):
            misses.append(f"cpu, {name}: {failed} requests failed")
        window = Window.of(server_streams(records))
        cpu_us = run.client_cpu_s(window.start_ns, window.end_ns) * 1e6 / window.tokens
        rows[name] = (cpu_us, window.tokens_per_s)
    floor = rows[raw]
    assert isinstance(floor, tuple)
    print(
        f"\nCPU per token, realistic ({REALISTIC.first_token_ms:g} ms to the first token, "
        f"{REALISTIC.chunk_gap_ms:g} ms between tokens, one token a read): {args.requests} requests x "
        f"{OUTPUT_LEN} output tokens, {INPUT_LEN} input, C={CONCURRENCY}; server on cpu {server_cpus[0]}, "
        f"client (its whole process tree) on cpu {client_cpus[0]}; steady window from the server's send times"
    )
    print(f"{'client':34}{'us/token':>10}{'window tok/s':>14}{'ratio to raw':>14}")
    for name, row in rows.items():
        if isinstance(row, str):
            print(f"{name:34}  {row}")
        else:
            print(f"{name:34}{row[0]:10.2f}{row[1]:14,.0f}{row[0] / floor[0]:14.2f}")


def part_ingest(args: argparse.Namespace, tmp: Path, misses: list[str]) -> None:
    """Saturated ingest against N, the servers on every core the client does not get."""
    counts = process_counts(most_processes())
    print(
        f"\nIngest, saturated (no delays): {args.ingest_requests_per_process} requests x N, "
        f"{OUTPUT_LEN} output tokens, C={CONCURRENCY}; the client on N cores, test-server processes on one "
        f"port (SO_REUSEPORT) on the others; N up to {counts[-1]}, of {len(os.sched_getaffinity(0))} cores"
    )
    columns = ["  N", "servers", "point tok/s", "steady tok/s", "x N=1", "per proc", "us/token"]
    columns += ["proc cpu/runq max", "client_bound", "server cpu max/mean", "requests/server"]
    print(aligned(columns, columns))
    first: float | None = None
    for count in counts:
        layout = Layout.for_client(count, args.server_processes)
        requests = args.ingest_requests_per_process * count
        group = ServerGroup(SATURATED, layout.server_cpus, tmp / f"ingest-{count}-servers", chunk_times=False)
        try:
            out = tmp / f"ingest-{count}"
            sweep = run_sweep(group.url, out, requests, count, cpus=layout.client_cpus, servers=group.pids)
        finally:
            served = group.stop()
        window = Window.of(sweep.records)
        cpu_us = sweep.run.client_cpu_s(window.start_ns, window.end_ns) * 1e6 / window.tokens
        shares = sweep.run.server_shares(window.start_ns, window.end_ns)
        uses = sweep.point["client_process_use"]
        busiest = max(use["cpu_share"] for use in uses)
        waits = [use["runqueue_wait_share"] for use in uses if use["runqueue_wait_share"] is not None]
        waited = f"{max(waits):.2f}" if waits else "-"  # where the kernel keeps no schedstat
        first = first or window.tokens_per_s
        speedup = window.tokens_per_s / first
        split = sorted(len(records) for records in served)
        row = [f"{count}", f"{len(shares)}", f"{sweep.point['output_throughput']:,.0f}"]
        row += [f"{window.tokens_per_s:,.0f}", f"{speedup:.2f}", f"{speedup / count:.2f}", f"{cpu_us:.2f}"]
        row += [f"{busiest:.2f} / {waited}", "yes" if sweep.client_bound else "no"]
        row += [f"{max(shares):.2f} / {sum(shares) / len(shares):.2f}", f"{split[0]}-{split[-1]}"]
        print(aligned(row, columns))
        if sweep.failed:
            misses.append(f"ingest, N={count}: {sweep.failed} requests failed")
        if max(shares) > SERVER_SHARE_LIMIT:
            misses.append(f"ingest, N={count}: a server process used {max(shares):.2f} of its core")
        elif speedup < SCALING_TARGET * count:
            misses.append(f"ingest, N={count}: {speedup:.2f}x N=1's rate, below {SCALING_TARGET:g} x {count}")


def part_ttft(args: argparse.Namespace, tmp: Path, misses: list[str]) -> None:
    """The realistic setting's TTFT error against the servers' own send times, per N."""
    counts = process_counts(max(most_processes(), args.processes))
    print(
        f"\nTTFT error, realistic: client first chunk - server first chunk write, {args.requests} requests, "
        f"C={CONCURRENCY}; the client on N cores (where there are N beside a server's), servers on the others"
    )
    columns = ["  N", "p50 ms", "p99 ms", "max ms", "worst loop lag mean ms", "client_bound", "cores"]
    print(aligned(columns, columns))
    for count in counts:
        layout = Layout.for_client(count, args.server_processes)
        group = ServerGroup(REALISTIC, layout.server_cpus, tmp / f"ttft-{count}-servers", chunk_times=False)
        try:
            sweep = run_sweep(group.url, tmp / f"ttft-{count}", args.requests, count, cpus=layout.client_cpus)
        finally:
            sent = {record["id"]: record for records in group.stop() for record in records}
        errors_ms = [
            (record["chunk_ns"][0] - sent[record["rid"]]["first_chunk_ns"]) / 1e6
            for record in sweep.records
            if record["chunk_ns"]
        ]
        lag = max(use["event_loop_lag_mean_ms"] for use in sweep.point["client_process_use"])
        median = percentile(errors_ms, 50)
        row = [f"{count}", f"{median:.3f}", f"{percentile(errors_ms, 99):.3f}", f"{max(errors_ms):.3f}"]
        row += [f"{lag:.3f}", "yes" if sweep.client_bound else "no", layout.describe()]
        print(aligned(row[:-1], columns[:-1]) + "  " + row[-1])
        if sweep.failed:
            misses.append(f"ttft, N={count}: {sweep.failed} requests failed")
        if count <= len(layout.client_cpus) and median > TARGET_MS:
            misses.append(f"ttft, N={count}: median TTFT error {median:.3f} ms > {TARGET_MS:g} ms")


def aligned(cells: Sequence[str], headers: Sequence[str]) -> str:
    """A table's line: each cell right-aligned under its header, two spaces apart."""
    return "".join(cell.rjust(len(header) + 2) for cell, header in zip(cells, headers, strict=True))


def cpu_list(cpus: Sequence[int]) -> str:
    """``cpu 3`` or ``cpus 4-15`` (consecutive, as Layout hands them out)."""
    return f"cpus {cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else f"cpu {cpus[0]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which to run, of {','.join(PARTS)}")
    parser.add_argument("--processes", type=int, default=2, help="cpu: fairbench's processes beside 1")
    parser.add_argument("--requests", type=int, default=1000, help="cpu and ttft: requests a run")
    parser.add_argument("--ingest-requests-per-process", type=int, default=2000)
    parser.add_argument(
        "--server-processes",
        type=int,
        default=None,
        help="ingest, ttft: at most this many (default: one a core)",
    )
    parser.add_argument(
        "--build-sglang-venv",
        action="store_true",
        help="build SGLang's venv (uv, tests/support/real_sglang.py) if needed",
    )
    args = parser.parse_args()
    parts = args.parts.split(",")
    if min(args.requests, args.ingest_requests_per_process) <= CONCURRENCY:
        parser.error(f"a run needs more than C={CONCURRENCY} requests for a steady window")
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    misses: list[str] = []
    runs = {"cpu": part_cpu, "ingest": part_ingest, "ttft": part_ttft}
    with tempfile.TemporaryDirectory() as tmp:
        for part in parts:
            runs[part](args, Path(tmp) / part, misses)
    for miss in misses:
        print(f"MISSED {miss}")
    print("FAIL" if misses else "OK: every target met")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
