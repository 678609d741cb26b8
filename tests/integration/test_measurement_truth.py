"""Each point checked against the server's own counters and the client's own use, against ``fairbench sim``
with ``--enable-metrics``: a server capped below C, a client starved of CPU, prompts served from another
point's cache, and a client over several processes whose merged records make the same point.

The truth each check is held to is the simulator's counters or the conditions the test sets up (a cap, a
CPU hog, a repeated seed), never numbers written into the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.support import sweep_process
from tests.support.sim_process import REPO, running_sim

# Timing-sensitive (the client-bound and in-flight checks read the CPU the client got): make test runs these
# alone.
pytestmark = pytest.mark.timing

TEST_MODEL = "sim/test-model"
SIM = ("--model-path", TEST_MODEL, "--enable-metrics")
# Outputs long enough that prefills, whose requests SGLang's gauges count as neither running nor queued,
# take a small share of each point.
OUTPUT_LEN = 128
WORKLOAD = ("--input-len", "64", "--output-len", str(OUTPUT_LEN), "--server-metrics-interval", "0.1")


def run_sweep(url: str, out: Path, *args: str, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """The sweep's points, by id, once it succeeded."""
    command = [*prefix, *sweep_process.sweep_args(url, out, *WORKLOAD, *args)]
    swept = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, cwd=REPO)
    assert swept.returncode == 0, swept.stderr
    return {point["point_id"]: point for point in sweep_process.points(out)}


def flags_of(point: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {flag["flag"]: flag for flag in point["flags"]}


def test_a_server_capped_below_c_is_flagged_as_a_server_cap_and_its_counters_match_the_client(
    tmp_path: Path,
) -> None:
    with running_sim(tmp_path, *SIM, "--sim-time-scale", "2", "--max-running-requests", "4") as sim:
        points = run_sweep(sim.url, tmp_path / "run", "--concurrency", "4,16", "--prompts-per-level", "32")
    uncapped, capped = points["c4-r0"], points["c16-r0"]
    for point in (uncapped, capped):
        # The server counted exactly the tokens the client received, warmup left out.
        assert point["server_generation_tokens"] == point["total_output_tokens"] == 32 * OUTPUT_LEN
        assert point["server_prompt_tokens"] == point["total_input_tokens"]
        assert point["server_metric_samples"] >= 2
    assert uncapped["flags"] == []
    assert capped["server_running_max"] <= 4 < capped["server_queue_max"]
    # By the server's own Little's law: it held what the client had in flight, most of it in its queue.
    assert capped["server_in_flight_mean"] == pytest.approx(capped["concurrency"], rel=0.1)
    assert capped["server_queued_mean"] > 0.5 * capped["concurrency"]
    in_server = uncapped["server_in_flight_mean"] - uncapped["server_queued_mean"]
    assert in_server >= 0.9 * uncapped["concurrency"]
    flag = flags_of(capped)["running_below_concurrency"]
    assert "max_concurrency" in flag["on"]
    assert (
        "its /server_info says it runs up to 4 at once" in flag["reason"]
        and "its own Little's law" in flag["reason"]
    )
    assert capped["server_running_limit"] == uncapped["server_running_limit"] == 4
    assert capped["observations"] == [] and uncapped["observations"] == []


@contextmanager
def cpu_hog(cpu: int) -> Iterator[None]:
    """A busy loop pinned to ``cpu`` for as long as the block runs."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.sched_setaffinity(hog.pid, {cpu})
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def test_a_client_starved_of_cpu_is_flagged_client_bound(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two cores: the simulator on one, the client and a CPU hog on the other")
    client_cpu = cpus[-1]
    # The client shares its core with a busy loop that outweighs it (nice 10: about a tenth of its share).
    starved = ("taskset", "-c", str(client_cpu), "nice", "-n", "10")
    args = ("--concurrency", "8", "--prompts-per-level", "48", "--client-processes", "1")
    with running_sim(tmp_path, *SIM, "--sim-time-scale", "2") as sim:
        os.sched_setaffinity(sim.process.pid, set(cpus[:-1]))
        fair = run_sweep(sim.url, tmp_path / "fair", *args, prefix=starved[:3])["c8-r0"]
        with cpu_hog(client_cpu):
            hungry = run_sweep(sim.url, tmp_path / "hungry", *args, prefix=starved)["c8-r0"]
    assert "client_bound" not in flags_of(fair), fair["flags"]
    flag = flags_of(hungry)["client_bound"]
    assert "client process 0" in flag["reason"]
    assert "median_ttft_ms" in flag["on"]
    (use,) = hungry["client_process_use"]
    assert use["runqueue_wait_share"] > fair["client_process_use"][0]["runqueue_wait_share"]


def test_prompts_served_from_an_earlier_points_cache_are_flagged_as_prefix_reuse(tmp_path: Path) -> None:
    args = ("--concurrency", "4", "--prompts-per-level", "16", "--warmup", "0")
    with running_sim(tmp_path, *SIM, "--sim-time-scale", "2") as sim:
        first = run_sweep(sim.url, tmp_path / "first", *args)["c4-r0"]
        # Another directory, the same seed: the same prompts, which the server still holds.
        again = run_sweep(sim.url, tmp_path / "again", *args)["c4-r0"]
        flushed = run_sweep(sim.url, tmp_path / "flushed", *args, "--flush-cache")["c4-r0"]
    assert first["server_cached_tokens"] == 0 and first["flags"] == []
    assert again["server_cached_tokens"] > 0.9 * again["server_prompt_tokens"]
    assert "median_ttft_ms" in flags_of(again)["prefix_reuse"]["on"]
    assert flushed["flags"] == []


def test_a_client_over_several_processes_makes_the_same_point_from_merged_records(tmp_path: Path) -> None:
    args = ("--concurrency", "12", "--prompts-per-level", "48", "--flush-cache")
    with running_sim(tmp_path, *SIM, "--sim-time-scale", "2") as sim:
        one = run_sweep(sim.url, tmp_path / "one", *args, "--client-processes", "1")["c12-r0"]
        three = run_sweep(sim.url, tmp_path / "three", *args, "--client-processes", "3")["c12-r0"]
    assert (one["client_processes"], three["client_processes"]) == (1, 3)
    assert [use["requests"] for use in three["client_process_use"]] != [48, 0, 0]
    assert sum(use["requests"] for use in three["client_process_use"]) == 48
    records = sweep_process.requests_of(tmp_path / "three", "c12-r0")
    assert sorted(record["index"] for record in records) == list(range(48))
    assert three["completed"] == 48 and three["server_generation_tokens"] == three["total_output_tokens"]
    # One loop of 12 over three processes: the server ran 12 at a time, as with one process.
    assert three["server_running_max"] == 12 == one["server_running_max"]
    for point in (one, three):
        assert not {flag["flag"] for flag in point["flags"]} & {"server_tokens_differ", "prefix_reuse"}
    assert three["output_throughput"] == pytest.approx(one["output_throughput"], rel=0.15)
