"""``fairbench sweep --trace`` against ``fairbench sim``: each request of the window goes out at its time in
the trace divided by the speedup, the achieved rate is the scheduled one, and the prefix cache serves what
the trace's hash ids share (the simulator's radix cache, the responses and /metrics agreeing)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from tests.support import sweep_process
from tests.support.sim_process import REPO, running_sim

from fairbench.measure.trace_replay import load_window, own_rate, window_sha256
from fairbench.measure.trace_samples import write_sample
from fairbench.measure.traces import reusable_tokens
from fairbench.measure.workload import TraceWindow

SIM = ("--model-path", "sim/test-model", "--enable-metrics", "--sim-time-scale", "0.05")
REQUESTS = 40
RATE = 20.0
"""The sample's Poisson arrivals: two seconds of trace."""


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_replay_sends_each_request_at_its_scaled_time_with_the_traces_sharing(
    tmp_path: Path, suffix: str
) -> None:
    trace = tmp_path / f"sample{suffix}"
    write_sample(trace, REQUESTS, RATE, seed=5)
    window = load_window(TraceWindow(str(trace), count=32))
    rate = own_rate(window)
    out = tmp_path / "out"
    with running_sim(tmp_path, *SIM) as sim:
        done = sweep_process.run_sweep(
            sim.url,
            out,
            *("--trace", str(trace), "--trace-count", "32", "--trace-speedup", "1,3"),
            *("--api", "generate", "--warmup", "0", "--flush-cache"),
            cwd=REPO,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        # The trace rewritten (other requests in the window): its points cannot be resumed as this replay's.
        write_sample(trace, REQUESTS, RATE, seed=6)
        again = sweep_process.run_sweep(
            sim.url,
            out,
            *("--trace", str(trace), "--trace-count", "32", "--trace-speedup", "1,3", "--resume"),
            *("--api", "generate", "--warmup", "0", "--flush-cache"),
            cwd=REPO,
            timeout=60,
        )
    assert again.returncode != 0 and "cannot resume with another trace" in again.stderr, again.stderr
    assert json.loads((out / "sweep.json").read_text())["trace_sha256"] == window_sha256(window)
    points = sweep_process.points(out)
    assert [point["trace_speedup"] for point in points] == pytest.approx([1.0, 3.0])
    for point, speedup in zip(points, (1, 3), strict=True):
        assert point["completed"] == 32 and point["failed"] == 0, point
        assert point["dataset_name"] == ("mooncake" if suffix == ".jsonl" else "azure")
        assert point["arrival"] == "trace" and point["request_rate"] == pytest.approx(rate * speedup)
        assert point["total_input_tokens"] == sum(request.input_len for request in window)
        # The schedule is the trace's: each request timed from its arrival divided by the speedup.
        records = sorted(sweep_process.requests_of(out, point["point_id"]), key=lambda r: r["start_ns"])
        due_s = [(r["start_ns"] - records[0]["start_ns"]) / 1e9 for r in records]
        assert due_s == pytest.approx([request.arrival_ms / 1000 / speedup for request in window], abs=1e-6)
        # ... and sent then: a replay is late by its client's wake-ups only (tests/perf holds the bound).
        assert statistics.median(r["send_delay_ns"] for r in records) < 20e6, point["median_send_delay_ms"]
        assert point["achieved_request_rate"] == pytest.approx(point["request_rate"], rel=0.15)
        # The server's own clock says the same: each request reached it within milliseconds of its time.
        assert point["server_arrival_delay_median_ms"] < 20, point["server_arrival_delay_median_ms"]
        # What the trace's hash ids share, the cache serves, as the responses and the counter both say;
        # the design (an unbounded cache, one request at a time) bounds it.
        assert point["designed_cached_tokens"] == sum(reusable_tokens(window))
        assert point["cached_tokens"] == point["server_cached_tokens"] <= point["designed_cached_tokens"]
        if suffix == ".jsonl":
            assert point["cached_tokens"] > 0.5 * point["designed_cached_tokens"] > 0, point
        else:  # an Azure trace records no shared content
            assert point["designed_cached_tokens"] == 0
