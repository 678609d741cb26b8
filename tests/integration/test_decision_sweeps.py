"""Sweeps that decide as they go, against ``fairbench sim``: open-loop arrivals past the server's capacity,
the search for the highest concurrency meeting an SLO, and automatic repeats under injected noise.

Each is a real ``fairbench sweep`` process against a real simulator process; the truth each is checked
against is the simulator's own (its performance model run in virtual time, or the noise level it was
told to inject), never numbers written into the test.
"""

from __future__ import annotations

from pathlib import Path
from statistics import mean

from tests.support import sweep_process
from tests.support.sim_process import REPO, running_sim

TEST_MODEL = "sim/test-model"


def run_sweep(
    url: str, out: Path, *args: str, timeout: float = 180
) -> sweep_process.subprocess.CompletedProcess[str]:
    return sweep_process.run_sweep(url, out, *args, timeout=timeout, cwd=REPO)


def test_an_open_loop_past_the_servers_capacity_falls_behind_its_target_and_its_ttft_grows(
    tmp_path: Path,
) -> None:
    # The generic profile's decode step at batch b is (2 + 0.03 b) ms x the time scale: at scale 10 and 4
    # requests in flight, a 32-token request takes about 0.7 s, so the server completes about 5.7 requests
    # a second. 2 req/s it keeps up with; 20 req/s it cannot, and the bound of 4 in flight holds the rest.
    out = tmp_path / "run"
    with running_sim(tmp_path, "--model-path", TEST_MODEL, "--sim-time-scale", "10") as sim:
        swept = run_sweep(
            sim.url,
            out,
            *("--request-rate", "2,20", "--max-concurrency", "4", "--input-len", "64", "--output-len", "32"),
            *("--prompts-per-level", "24", "--warmup", "0"),
        )
    assert swept.returncode == 0, swept.stderr
    slow, fast = sweep_process.points(out)
    assert (slow["point_id"], fast["point_id"]) == ("rps2-r0", "rps20-r0")
    assert (slow["request_rate"], fast["request_rate"], fast["max_concurrency"]) == (2.0, 20.0, 4)
    assert slow["achieved_request_rate"] > 0.8 * 2  # the schedule's own spread, 23 Poisson gaps
    assert fast["achieved_request_rate"] < 0.5 * 20
    assert fast["median_send_delay_ms"] > 100 * slow["median_send_delay_ms"] + 100
    # TTFT counts each request's wait from when it was due: it grows over the fast point, not the slow one.
    records = sorted(sweep_process.requests_of(out, "rps20-r0"), key=lambda record: record["start_ns"])
    ttft_ms = [(record["chunk_ns"][0] - record["start_ns"]) / 1e6 for record in records]
    assert mean(ttft_ms[-6:]) > mean(ttft_ms[:6]) + 1000
    assert fast["median_ttft_ms"] > 5 * slow["median_ttft_ms"]
    assert "steady_output_throughput" not in fast  # the steady window is a closed loop's
