"""``fairbench sweep`` against ``fairbench sim``, both real processes on loopback, cross-checked.

Three witnesses of one run, none trusting another: the sweep's own files (``points.jsonl`` and
``requests/``), the simulator's record of what it sent and when (``--sim-trace``, ``perf_counter_ns`` on
the same host clock as the sweep's records), and the simulator's performance model run in virtual time
(``fairbench.sim.predict.predict_point``).

About time scales. ``predict_point`` models a closed loop whose client costs nothing: a wave of C requests
reaches the server at one instant, and the next wave the instant the last one ends. A real sweep on a
2-core machine needs of the order of a millisecond of CPU per request to send one and to take in its end
(more when other processes compete for the cores), so every wave of a point is longer than the model's
by ~C milliseconds, and a wave's requests reach the server spread over that time. The model's durations
are therefore stretched with ``--sim-time-scale`` until those milliseconds are 1-2 % of a wave, which
leaves the 5 % tolerance for what the tests are about; what remains of the client's share is measured
from the simulator's trace and named where an expectation includes it. At C=256 the spread is seconds,
so there the wave queues while the simulator "loads" (``--sim-load-seconds``), as the model has it.

That the simulator rejects an unknown flag exactly as SGLang does (argparse's "unrecognized arguments",
exit 2) is tested in tests/integration/test_sim_server.py and tests/unit/test_sim_args.py, not here.
"""

from __future__ import annotations

import json
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from statistics import mean, median
from typing import Any

import pytest
from tests.support import sweep_process
from tests.support.sim_process import (
    REPO,
    http_status,
    running_sim,
    running_sims,
)

from fairbench.campaign.load import load_campaign
from fairbench.sim.predict import predict_point

TEST_MODEL = "sim/test-model"


# Kimi K2.6's config.json vocab_size: the simulator serves the model without its files.
K26_VOCAB = ("--vocab-size", "163840")


def sweep_command(url: str, out: Path, *args: str) -> list[str]:
    return sweep_process.sweep_args(url, out, *args, vocab=K26_VOCAB)


def run_sweep(url: str, out: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return sweep_process.run_sweep(url, out, *args, vocab=K26_VOCAB, timeout=timeout, cwd=REPO)


def trace_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def generic(*flags: str) -> list[str]:
    return ["--model-path", TEST_MODEL, *flags]


# --- 1. accuracy: the sweep against the server's send times and against the model ---------------------------

# (concurrency, input length, output length, time scale) of the generic profile, whose decode step at
# batch b lasts t(b) = 2 + 0.03 b ms and whose prefill forward 0.5 ms + 1 us per input token, times the
# scale. --chunked-prefill-size is the input length, so each prefill forward takes one request, in the
# model as in the run: a wave's first token times do not then depend on which request reached the server
# first. C=1: 16 requests of 0.47 s in a row, with an input long enough for a TTFT of 87 ms. C=8 and
# C=32: two waves (prompts 2x) of 2.3 s and 3.5 s. The client's few ms per request (at a wave's start
# and end) stay within 2 % of either.
ACCURACY_RUNS = [(1, 8192, 20, 10.0), (8, 1024, 64, 15.0), (32, 1024, 64, 15.0)]


@pytest.mark.parametrize(("concurrency", "input_len", "output_len", "scale"), ACCURACY_RUNS)
@pytest.mark.timing  # it holds measured latencies to the simulator's model
def test_the_sweep_measures_what_the_simulator_sent_and_what_its_model_predicts(
    tmp_path: Path, concurrency: int, input_len: int, output_len: int, scale: float
) -> None:
    trace_path = tmp_path / "trace.jsonl"
    out = tmp_path / "run"
    flags = generic(
        *("--chunked-prefill-size", str(input_len), "--sim-time-scale", str(scale)),
        *("--sim-trace", str(trace_path)),
    )
    args = ("--input-len", str(input_len), "--output-len", str(output_len), "--concurrency", str(concurrency))
    with running_sim(tmp_path, *flags) as sim:
        result = run_sweep(sim.url, out, *args, "--warmup", "0", "--prompts-per-level", "2x")
        config = sim.config()
    assert result.returncode == 0, result.stderr

    (point,) = sweep_process.points(out)
    records = sweep_process.requests_of(out, point["point_id"])
    assert point["completed"] == len(records) == max(16, 2 * concurrency)
    assert all(record["error"] == "" for record in records)
    # The point's clock runs while its requests do, no longer: throughput is tokens over that time.
    span_s = (max(r["end_ns"] for r in records) - min(r["start_ns"] for r in records)) / 1e9
    assert span_s <= point["duration"] < span_s + 0.010, (point["duration"], span_s)
    assert point["output_throughput"] == pytest.approx(len(records) * output_len / point["duration"])

    # Every request the server finished is one the sweep recorded, once, and the other way round (the
    # health check's probe is not traced; there was no warmup).
    trace = trace_of(trace_path)
    sent = {entry["rid"]: entry for entry in trace}
    assert len(sent) == len(trace) == len(records)
    assert {record["rid"] for record in records} == set(sent)

    ttft_errors, ttft_truths, tpot_errors, tpot_truths = [], [], [], []
    for record in records:
        truth = sent[record["rid"]]
        # The sweep saw each of the server's writes as one content chunk with the same token count.
        assert record["chunk_tokens"] == truth["event_tokens"], record["rid"]
        assert record["output_len"] == truth["completion_tokens"] == output_len
        assert record["prompt_len"] == truth["prompt_tokens"] == input_len
        # One clock: a request leaves before the server has it; a chunk arrives after it was sent.
        assert record["start_ns"] < truth["received_ns"]
        assert all(
            arrived >= written for arrived, written in zip(record["chunk_ns"], truth["event_ns"], strict=True)
        )
        assert record["end_ns"] >= truth["event_ns"][-1]
        # The truth is the server's own send times, counted from the sweep's send time as TTFT is.
        ttft_truths.append(truth["event_ns"][0] - record["start_ns"])
        ttft_errors.append(record["chunk_ns"][0] - truth["event_ns"][0])
        true_tpot = (truth["event_ns"][-1] - truth["event_ns"][0]) / (output_len - 1)
        tpot_truths.append(true_tpot)
        tpot_errors.append(abs((record["end_ns"] - record["chunk_ns"][0]) / (output_len - 1) - true_tpot))

    ms = 1e6
    accuracy = (
        f"C={concurrency}: TTFT error median {median(ttft_errors) / ms:.3f} ms of"
        f" {median(ttft_truths) / ms:.2f} ms, TPOT error median {median(tpot_errors) / ms:.4f} ms of"
        f" {median(tpot_truths) / ms:.3f} ms"
    )
    print(accuracy)
    # The sweep's accuracy target (tests/perf/accuracy.py), judged on medians: within 1 ms or 2 %.
    assert median(ttft_errors) <= max(1 * ms, 0.02 * median(ttft_truths)), accuracy
    # TPOT spreads the error of two timestamps over output_len - 1 tokens: it must meet the 2 % alone.
    assert median(tpot_errors) <= 0.02 * median(tpot_truths), accuracy

    # The model, run in virtual time for exactly this run; its times are model seconds, before the scale.
    predicted = predict_point(config, input_len, output_len, concurrency, point["num_prompts"])
    expected_throughput = predicted.output_throughput / scale
    expected_tpot_ms = predicted.mean_tpot_s * scale * 1000
    # The model's TTFT runs from the instant a whole wave of C requests reaches the server to the send of
    # a request's first token; the sweep's from before it sends that request to the token's arrival. The
    # difference is the client's share, measured on this run from the server's own times: from the
    # request's send to its wave's first arrival (the client sends a wave over a few ms, so this is
    # negative for the last of a wave), plus the token's delivery. All requests of a wave end together, so
    # the waves are C requests at a time in order of arrival.
    arrivals = sorted((sent[record["rid"]]["received_ns"], record["start_ns"]) for record in records)
    wave_starts = [arrivals[i - i % concurrency][0] for i in range(len(arrivals))]
    client_share_ms = (
        mean(wave_start - start for wave_start, (_, start) in zip(wave_starts, arrivals, strict=True))
        + mean(ttft_errors)
    ) / ms
    expected_ttft_ms = predicted.mean_ttft_s * scale * 1000 + client_share_ms
    measured = (
        f"C={concurrency}: output {point['output_throughput']:.1f} tok/s (model {expected_throughput:.1f}), "
        f"mean TTFT {point['mean_ttft_ms']:.2f} ms (model + client {expected_ttft_ms:.2f}, of which client "
        f"{client_share_ms:.2f}), mean TPOT {point['mean_tpot_ms']:.3f} ms (model {expected_tpot_ms:.3f})"
    )
    print(measured)
    assert point["output_throughput"] == pytest.approx(expected_throughput, rel=0.05), measured
    assert point["mean_tpot_ms"] == pytest.approx(expected_tpot_ms, rel=0.05), measured
    assert point["mean_ttft_ms"] == pytest.approx(expected_ttft_ms, rel=0.05), measured


# --- 2. the K2.6 profile reproduces the measured campaign --------------------------------------------------

CAMPAIGN = REPO / "campaigns" / "kimi-k2.6-pcie.yml"
# The measurements the profile is calibrated to (its header, and campaigns/kimi-k2.6-pcie.yml's), written out
# rather than read from the profile: output tok/s at C=1 and at the peak (C=256) with input 1024 and output
# 512. EPLB's C=1 was not measured.
PUBLISHED = {"tp8": (98.0, 1291.0), "ep4": (69.0, 1531.0), "ep8": (65.0, 1500.0), "ep8-eplb": (None, 862.0)}
# The run: output 257 instead of 512 (32 rounds of --num-continuous-decode-steps 8 after the first token),
# the model four times faster. C=1 is 16 requests of 0.7-1 s. A point at C=256 is one wave: 44-53 s of
# prefill in the model, then 32 decode rounds, 17-26 s in real time. Each of the seven points has its own
# simulator and sweep, all side by side: 40-50 s in all on a 2-core machine.
K26_OUTPUT_LEN = 257
K26_SCALE = 0.25
# The model's wave has its 256 requests at the server at one instant. A sweep on a busy 2-core machine
# takes 0.1-3 s to send them, and whenever the queue runs dry meanwhile the engine decodes the first
# ones alone, which the model never does (up to 5 % more time for the wave in this run, nothing in the
# campaign's 100-s waves). So the simulators serving C=256 "load" this long from their start, their
# sweeps start at once, and the engine begins with the wave queued or arriving faster than it is
# prefilled (which the test checks). The loads differ so that no two waves end together: at a wave's
# end a simulator and its sweep deliver and take in 256 last chunks at once.
K26_LOAD_S = {"tp8": 8.0, "ep4": 11.0, "ep8": 14.0, "ep8-eplb": 8.0}


@pytest.mark.timing  # the client must send each wave as fast as the simulated server prefills it
def test_the_k26_profile_reproduces_the_published_campaign_through_a_sweep(tmp_path: Path) -> None:
    campaign = load_campaign(CAMPAIGN)
    workload = campaign.workloads["random"]  # the measured campaign's
    peak = max(workload.concurrency)
    points = [(name, 1) for name, (at_c1, _) in PUBLISHED.items() if at_c1 is not None]
    points += [(name, peak) for name in PUBLISHED]
    sim_flags = ["--sim-profile", "kimi-k2.6-8xpro6000", "--sim-time-scale", str(K26_SCALE)]
    traces = {(name, level): tmp_path / f"{name}-c{level}.trace.jsonl" for name, level in points}
    flag_sets = [
        [*campaign.configs[name].sglang_argv, *sim_flags, "--sim-trace", str(traces[name, level])]
        + (["--sim-load-seconds", str(K26_LOAD_S[name])] if level == peak else [])
        for name, level in points
    ]
    sweeps: dict[tuple[str, int], subprocess.Popen[str]] = {}
    # /v1/models answers while the model loads; the health checks only after.
    with running_sims(tmp_path, *flag_sets, ready="/v1/models") as sim_list, ExitStack() as stack:
        sims = dict(zip(points, sim_list, strict=True))
        for name, level in points:
            sweeps[name, level] = subprocess.Popen(
                sweep_command(
                    sims[name, level].url,
                    tmp_path / f"{name}-c{level}",
                    *("--input-len", str(workload.input_len), "--output-len", str(K26_OUTPUT_LEN)),
                    *("--concurrency", str(level), "--prompts-per-level", "1x", "--warmup", "0"),
                ),
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            stack.callback(sweeps[name, level].kill)
        finished = {key: sweep.communicate(timeout=90) for key, sweep in sweeps.items()}

    rows, failures = [], []
    for name, level in points:
        assert sweeps[name, level].returncode == 0, finished[name, level][1]
        published = PUBLISHED[name][0 if level == 1 else 1]
        assert published is not None
        config = sims[name, level].config()
        (point,) = sweep_process.points(tmp_path / f"{name}-c{level}")
        assert point["completed"] == point["num_prompts"] == max(16, level)
        # The model at the campaign's full length must give the table...
        full = predict_point(
            config, workload.input_len, workload.output_len, level, workload.prompts_at(level)
        )
        # ...and at the run's length, what the sweep measured.
        reduced = predict_point(config, workload.input_len, K26_OUTPUT_LEN, level, point["num_prompts"])
        waited_s = 0.0
        if level == peak:
            # The point's clock ran while the wave waited for the end of the load, until the first
            # prefill forward (of as many requests as one chunk holds) began: when it sent its first
            # tokens, less its modelled time.
            records = sweep_process.requests_of(tmp_path / f"{name}-c{level}", point["point_id"])
            sent = {entry["rid"]: entry for entry in trace_of(traces[name, level])}
            served = [sent[record["rid"]] for record in records]
            per_forward = config.limits.chunked_prefill_size // workload.input_len
            forward_ns = config.model.prefill_seconds(per_forward * workload.input_len, 1) * K26_SCALE * 1e9
            engine_start_ns = min(entry["event_ns"][0] for entry in served) - forward_ns
            waited_s = (engine_start_ns - min(record["start_ns"] for record in records)) / 1e9
            # And the model's wave holds: every prefill forward found its requests at the server.
            arrivals = sorted(entry["received_ns"] for entry in served)
            late = [
                index
                for index in range(per_forward - 1, len(arrivals), per_forward)
                if arrivals[index] > engine_start_ns + index // per_forward * forward_ns
            ]
            assert not late, f"{name}: the sweep sent its wave slower than the server prefilled it"
        expected = point["total_output_tokens"] / (reduced.duration_s * K26_SCALE + waited_s)
        got = point["output_throughput"]
        rows.append(
            f"{name:>8} C={level:<3} published {published:6.0f}, model {full.output_throughput:6.1f}"
            f" | output {K26_OUTPUT_LEN}: model {reduced.output_throughput / K26_SCALE:6.1f}, with"
            f" {waited_s:.2f} s of load {expected:6.1f}, measured {got:6.1f}"
            f" ({100 * (got / expected - 1):+.1f} %)"
        )
        if full.output_throughput != pytest.approx(published, rel=0.05):
            failures.append(f"{name} C={level}: the model at full length is not the table")
        if got != pytest.approx(expected, rel=0.05):
            failures.append(f"{name} C={level}: the sweep did not measure the model")
    table = "\n".join(rows)
    print(table)
    assert not failures, "\n".join([*failures, table])


# --- 3. faults: each produces the failure it names, and the sweep survives it -------------------------------
#
# fairbench sweep exits 1 when a point completed no request at all (or the server cannot be used), else 0
# (sweep_cli.run); either way every level it ran has its line in points.jsonl and its records.

# Short requests: 64 input tokens, 8 output tokens, about 16 ms each with the generic profile.
FAULT_WORKLOAD = ("--input-len", "64", "--output-len", "8", "--warmup", "0")


def timed_sweep(url: str, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = run_sweep(url, out, *args, timeout=60)
    return result, time.monotonic() - started


def check_points(out: Path, levels: list[int]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every level has its point and its records, and the point counts what the records say."""
    points = sweep_process.points(out)
    assert [point["max_concurrency"] for point in points] == levels
    checked = []
    for point in points:
        records = sweep_process.requests_of(out, point["point_id"])
        failed = [record for record in records if record["error"]]
        assert point["failed"] == len(failed)
        assert point["completed"] == len(records) - len(failed)
        assert all(record["output_len"] == 8 for record in records if not record["error"])
        checked.append((point, records))
    return checked


def test_crash_after_n_requests_fails_the_rest_with_a_connection_error(tmp_path: Path) -> None:
    out = tmp_path / "run"
    trace = tmp_path / "trace.jsonl"
    with running_sim(tmp_path, *generic("--sim-fault", "crash-after=20", "--sim-trace", str(trace))) as sim:
        result, took = timed_sweep(sim.url, out, *FAULT_WORKLOAD, "--concurrency", "1,2,4")
        assert sim.process.wait(timeout=5) == 1, sim.log_text()
    assert "crash-after=20: crashing" in sim.log_text()
    assert result.returncode == 1, result.stderr  # C=4 completed nothing
    assert "Traceback" not in result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("fairbench sweep: error: c4-r0: every request failed to connect (connection failed: ")
    )
    assert took < 30
    (c1, c1_records), (c2, c2_records), (c4, c4_records) = check_points(out, [1, 2, 4])
    # The first 20 requests are served: all 16 of C=1 and the first 4 of C=2, sent two at a time, unless
    # the 20th was still streaming (a round behind the 19th) when the 21st arrived and the server died.
    assert (c1["completed"], c4["completed"]) == (16, 0)
    assert c2["completed"] in (3, 4)
    # What the server finished, the sweep recorded as done; nothing else.
    done = {record["rid"] for record in c1_records + c2_records + c4_records if not record["error"]}
    assert done == {entry["rid"] for entry in trace_of(trace)}
    # Cut off mid-stream (after a 200), or with the request just sent, or refused: a connection error.
    failed = [record for record in c2_records + c4_records if record["error"]]
    assert all(record["error"].startswith("connection failed: ") for record in failed), failed[0]
    refused = (
        f"connection failed: ClientConnectorError: Cannot connect to host {sim.url.removeprefix('http://')}"
    )
    assert all(record["error"].startswith(refused) and record["status"] == 0 for record in c4_records)
    # With more than half its requests failed, a level stops early instead of trying every prompt.
    assert c2["stopped_early"] and c4["stopped_early"]
    assert len(c4_records) < c4["num_prompts"]


def test_a_server_that_dies_stops_the_sweep_with_a_line_and_the_summary(tmp_path: Path) -> None:
    """The levels after the first whose every request was refused are not tried: each would fail the same
    way. What was measured is kept and shown."""
    out = tmp_path / "run"
    with running_sim(tmp_path, *generic("--sim-fault", "crash-after=20")) as sim:
        result, took = timed_sweep(sim.url, out, *FAULT_WORKLOAD, "--concurrency", "1,2,4,8,16")
        assert sim.process.wait(timeout=5) == 1, sim.log_text()
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    host = sim.url.removeprefix("http://")
    assert result.stderr.strip().splitlines()[-1] == (
        "fairbench sweep: error: c4-r0: every request failed to connect (connection failed: "
        f"ClientConnectorError: Cannot connect to host {host} ssl:default [Connect call failed "
        f"('127.0.0.1', {sim.url.rsplit(':', 1)[1]})]): the server is down; 2 point(s) not measured"
    )
    check_points(out, [1, 2, 4])
    rows = [line.split() for line in result.stdout.splitlines() if line.split()[:1] in (["1"], ["2"], ["4"])]
    assert len(rows) == 3 and rows[0][:3] == ["1", "0", "16"]
    assert took < 30


def test_flushing_the_cache_of_a_server_that_died_is_one_line_after_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_sim(tmp_path, *generic("--sim-fault", "crash-after=20")) as sim:
        # The server dies during C=2 (not all of whose requests fail), and is gone when C=4's flush is sent.
        result, _ = timed_sweep(sim.url, out, *FAULT_WORKLOAD, "--concurrency", "1,2,4", "--flush-cache")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    port = sim.url.rsplit(":", 1)[1]
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairbench sweep: error: cannot reach {sim.url}/flush_cache: connection refused: nothing listens on "
        f"127.0.0.1:{port}"
    )
    check_points(out, [1, 2])
    table = [line.split()[:3] for line in result.stdout.splitlines()]
    assert table[1:3] == [["1", "0", "16"], ["2", "0", table[2][2]]]  # the summary, under its header


def test_hang_after_n_requests_stalls_them_and_the_read_timeout_ends_them(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # Five times slower (74 ms a request): request 17 still streams when 18 arrives and hangs the engine.
    flags = generic("--sim-fault", "hang-after=17", "--sim-time-scale", "5")
    with running_sim(tmp_path, *flags) as sim:
        result, took = timed_sweep(
            sim.url, out, *FAULT_WORKLOAD, "--concurrency", "1,2,4", "--read-timeout", "0.5"
        )
        assert sim.process.poll() is None, "a hung server is still running"
    assert "hang-after=17: hanging" in sim.log_text()
    assert result.returncode == 1, result.stderr  # C=2 completed nothing
    assert "Traceback" not in result.stderr
    # Every request of C=2 stalled: C=4 would only wait out the read timeout the same way.
    assert result.stderr.strip().splitlines()[-1] == (
        "fairbench sweep: error: c2-r0: every request stalled (stalled: no data for 0.5 s): the server "
        "stopped answering; 1 point(s) not measured"
    )
    (c1, _), (c2, c2_records) = check_points(out, [1, 2])
    assert (c1["completed"], c2["completed"]) == (16, 0)
    # Request 17 stalled mid-stream, 18 and the ones after it before their first byte: all the same way.
    assert {record["error"] for record in c2_records} == {"stalled: no data for 0.5 s"}
    assert c2["stopped_early"] and len(c2_records) < c2["num_prompts"]
    # Each stalled request ends within the read timeout plus the watchdog's period (a quarter of it).
    for record in c2_records:
        assert 0.5 <= (record["end_ns"] - record["start_ns"]) / 1e9 < 0.5 * 1.25 + 0.25
    # 8 failures at C=2 are 4 read timeouts in a row; the whole sweep, start-up included:
    assert took < 15


def test_http_500_rate_fails_about_that_share_with_the_servers_error(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_sim(tmp_path, *generic("--sim-fault", "http-500-rate=0.3")) as sim:
        result, _ = timed_sweep(sim.url, out, *FAULT_WORKLOAD, "--concurrency", "1,4")
    assert result.returncode == 0, result.stderr
    checked = check_points(out, [1, 4])
    records = [record for _, point_records in checked for record in point_records]
    failed = [record for record in records if record["error"]]
    # 56 requests, each failed with probability 0.3: 16.8 expected, 3.4 standard deviation.
    assert 4 <= len(failed) <= 30, len(failed)
    for record in failed:
        assert record["status"] == 500
        assert record["error"].startswith("HTTP 500: ")
        assert "Internal server error: simulated fault http-500-rate" in record["error"]
    assert not any(point["stopped_early"] for point, _ in checked)


def test_malformed_every_n_fails_the_requests_that_received_a_broken_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # A request streams 9 events (8 tokens, then the usage chunk): one in 40 broken fails one request in ~4.
    with running_sim(tmp_path, *generic("--sim-fault", "malformed-every=40")) as sim:
        result, _ = timed_sweep(sim.url, out, *FAULT_WORKLOAD, "--concurrency", "1,4")
    assert result.returncode == 0, result.stderr
    for point, records in check_points(out, [1, 4]):
        failed = [record for record in records if record["error"]]
        assert 0 < len(failed) < len(records) / 2, point["point_id"]
        # The sim cuts an event in half inside its JSON: the line still starts as an event does.
        assert all(record["error"].startswith('malformed stream line: data: {"id":') for record in failed)
        assert all(record["status"] == 200 for record in failed)


def test_slow_start_the_sweep_measures_a_serving_server_but_refuses_a_health_check_that_fails(
    tmp_path: Path,
) -> None:
    """The fault keeps /health at 503 while the server serves. The OpenAI APIs' sweep checks /v1/models
    (for the model name) and measures: readiness is the serving role's business, not the sweep's. The
    generate API's sweep checks /health, and a 503 there is a one-line error, before any point."""
    with running_sim(tmp_path, *generic("--sim-fault", "slow-start=120"), ready="/v1/models") as sim:
        assert http_status(sim.url + "/health") == 503
        measured, _ = timed_sweep(sim.url, tmp_path / "completions", *FAULT_WORKLOAD, "--concurrency", "2")
        refused, _ = timed_sweep(
            sim.url, tmp_path / "generate", *FAULT_WORKLOAD, "--concurrency", "2", "--api", "generate"
        )
        assert http_status(sim.url + "/health_generate") == 503
    assert measured.returncode == 0, measured.stderr
    ((point, records),) = check_points(tmp_path / "completions", [2])
    assert point["completed"] == len(records) == 20
    assert refused.returncode == 1
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"fairbench sweep: error: {sim.url}/health answered HTTP 503"), line
    assert not (tmp_path / "generate" / "points.jsonl").exists()
