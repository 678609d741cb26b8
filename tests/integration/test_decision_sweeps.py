"""Sweeps that decide as they go, against ``fairbench sim``: open-loop arrivals past the server's capacity,
the search for the highest concurrency meeting an SLO, and automatic repeats under injected noise.

Each is a real ``fairbench sweep`` process against a real simulator process; the truth each is checked
against is the simulator's own (its performance model run in virtual time, or the noise level it was
told to inject), never numbers written into the test.
"""

from __future__ import annotations

from pathlib import Path
from statistics import mean, stdev

import pytest
from tests.support import sweep_process
from tests.support.sim_process import REPO, running_sim, running_sims

from fairbench.measure.repeats import AutoRepeats, stop_reason
from fairbench.sim.predict import highest_concurrency_meeting, predict_point

# Timing-sensitive (open-loop pacing, the SLO search and the repeats' noise are measured in real time): make
# test runs these alone.
pytestmark = pytest.mark.timing

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


def test_the_search_finds_the_highest_concurrency_under_an_slo_within_one_step_of_the_simulators_model(
    tmp_path: Path,
) -> None:
    flags = ("--model-path", TEST_MODEL, "--sim-time-scale", "10", "--chunked-prefill-size", "4096")
    input_len, output_len, resolution = 256, 32, 4

    def prompts(concurrency: int) -> int:  # --prompts-per-level 2x, at least 16
        return max(16, 2 * concurrency)

    out = tmp_path / "run"
    with running_sim(tmp_path, *flags) as sim:
        config = sim.config()
        # The limit halfway between the model's median TPOT at C=24 and C=25: the model's answer is 24, and
        # the limit is as far from either point's prediction as it can be. The median, not the tail: the
        # client sends a wave's requests over a few ms, and the first to arrive wait through the prefill of
        # the rest, which the model (a wave arriving at once) leaves out of its tail.
        at = [predict_point(config, input_len, output_len, c, prompts(c), as_served=True) for c in (24, 25)]
        limit = sum(point.percentile_ms("tpot", 50) for point in at) / 2
        truth = highest_concurrency_meeting(
            config, input_len, output_len, limits={"tpot_p50_ms": limit}, num_prompts=prompts, upper=64
        )
        swept = run_sweep(
            sim.url,
            out,
            *("--concurrency", "1,64", "--input-len", str(input_len), "--output-len", str(output_len)),
            *("--prompts-per-level", "2x", "--warmup", "0", f"--slo=tpot_p50_ms={limit}"),
            *("--search-resolution", str(resolution)),
        )
    assert swept.returncode == 0, swept.stderr
    assert truth is not None and 8 < truth < 60
    points = sweep_process.points(out)
    listed = [point for point in points if point["level_source"] == "listed"]
    probes = [point for point in points if point["level_source"] == "bisect"]
    assert [point["max_concurrency"] for point in listed] == [1, 64]
    assert [point["slo_met"] for point in listed] == [True, False]
    # Each probe halves the bracket between the last level that met the SLO and the first that missed it.
    met, missed = 1, 64
    for probe in probes:
        assert probe["max_concurrency"] == (met + missed) // 2
        assert probe["slo_met"] == (probe["slo_measured"]["tpot_p50_ms"] <= limit)
        if probe["slo_met"]:
            met = probe["max_concurrency"]
        else:
            missed = probe["max_concurrency"]
    assert missed - met <= resolution < 2 * (missed - met)
    assert abs(met - truth) <= resolution, f"found {met}, the model says {truth}"
    for point in probes:  # each probe is a point like any other, with its requests on disk
        assert len(sweep_process.requests_of(out, point["point_id"])) == prompts(point["max_concurrency"])


def _by_level(points: list[dict[str, object]]) -> dict[object, list[dict[str, object]]]:
    levels: dict[object, list[dict[str, object]]] = {}
    for point in points:
        levels.setdefault(point["max_concurrency"], []).append(point)
    return levels


def test_automatic_repeats_go_on_while_the_injected_noise_keeps_the_interval_wide(tmp_path: Path) -> None:
    # The same server twice: without noise, and with 6 % run-to-run variation (one speed factor per point,
    # seeded). Repeats go on until a level's 95 % interval is within ±3 %, 3 to 7 times. At 20 times the
    # profile's time a decode step is about 45 ms, so the event loop's timer jitter leaves the quiet server
    # steady to a few tenths of a per cent (at 5 times, points of 0.2 s varied by 2 %: as wide as the rule).
    common = ("--model-path", TEST_MODEL, "--sim-time-scale", "20")
    sweep_args = (
        *("--concurrency", "8,16", "--input-len", "64", "--output-len", "16"),
        *("--prompts-per-level", "16", "--warmup", "0", "--repeats", "auto:3:7:3"),
    )
    quiet_out, noisy_out = tmp_path / "quiet", tmp_path / "noisy"
    with running_sims(tmp_path, common, (*common, "--sim-noise", "6", "--sim-seed", "3")) as (quiet, noisy):
        for sim, out in ((quiet, quiet_out), (noisy, noisy_out)):
            swept = run_sweep(sim.url, out, *sweep_args)
            assert swept.returncode == 0, swept.stderr
    policy = AutoRepeats(3, 7, 3.0)
    for out in (quiet_out, noisy_out):
        points = sweep_process.points(out)
        for level, measured in _by_level(points).items():
            values = [float(point["output_throughput"]) for point in measured]
            assert [point["repeat"] for point in measured] == list(range(len(measured)))
            # Each repeat was taken because the ones before left the interval too wide, and the last says
            # why there is no other: the rule, recomputed from the points themselves.
            for count in range(policy.minimum, len(values)):
                assert stop_reason(values[:count], policy) is None, (level, count)
            assert measured[-1]["repeats_stopped"] == stop_reason(values, policy)
            assert all("repeats_stopped" not in point for point in measured[:-1])
    quiet_levels = _by_level(sweep_process.points(quiet_out))
    noisy_levels = _by_level(sweep_process.points(noisy_out))
    assert all(len(measured) == 3 for measured in quiet_levels.values())  # steady: the minimum suffices
    assert sum(len(measured) for measured in noisy_levels.values()) > 6  # noise: more were needed
    # The extra repeats go round the levels that need them, the fewest repeats first.
    extra = [(point["max_concurrency"], point["repeat"]) for point in sweep_process.points(noisy_out)[6:]]
    assert extra == sorted(extra, key=lambda level_repeat: (level_repeat[1], level_repeat[0]))
    noisy_values = [float(point["output_throughput"]) for point in noisy_levels[16]]
    quiet_values = [float(point["output_throughput"]) for point in quiet_levels[16]]
    assert stdev(noisy_values) / mean(noisy_values) > 2 * stdev(quiet_values) / mean(quiet_values)
