"""The plan of a campaign run (fleet/forecast.py) and what it is built from: the points a sweep sends and the
simulator's time for them (fleet/estimate.py, sim/predict.py), an earlier run's times (fleet/history.py), and
the queue played on a clock (fleet/schedule.py). Expected figures are worked out here by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairbench.campaign.load import load_campaign, parse_campaign
from fairbench.campaign.model import SINGLE_WORKLOAD, Campaign
from fairbench.fleet.estimate import repeat_points, search_probes, sim_config
from fairbench.fleet.forecast import (
    DECLARED,
    LEARNED,
    LEAST,
    MOST,
    SIMULATOR,
    UNKNOWN,
    ForecastFileError,
    clock_text,
    forecast,
    read_forecast,
    write_forecast,
)
from fairbench.fleet.history import ConfigTimes, History, LevelTimes, earlier_run, read_history
from fairbench.fleet.plan import plan
from fairbench.fleet.queue import RUNNING, new_state
from fairbench.fleet.schedule import makespan
from fairbench.measure.status import JobRan, record_status
from fairbench.sim.predict import Arrival, arrivals_duration_s, conversations_duration_s, predict_point

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "campaigns" / "demo.yml"


def campaign(**top: Any) -> Campaign:
    """Two configs of 2 GPUs each (a, b) on engine sglang, one workload of concurrency 1 and 4, 2 repeats;
    ``top`` replaces top-level keys, ``workload`` keys are merged."""
    document: dict[str, Any] = {
        "name": "plan",
        "engine": "sglang",
        "model": "m",
        "configs": {"a": {"args": {"tp-size": 2}}, "b": {"args": {"tp-size": 2, "ep-size": 2}}},
        "workload": {
            "api": "completions",
            "dataset": "random-ids",
            "input_len": 64,
            "output_len": 16,
            "concurrency": [1, 4],
            "prompts_per_level": 16,
            "warmup": 0,
            "repeats": 2,
        },
    }
    workload = top.pop("workload", {})
    document.update(top)
    document["workload"].update(workload)
    return parse_campaign(yaml.safe_dump(document), "plan.yml", REPO)


def learned(**configs: tuple[float, float, float]) -> History:
    """An earlier run whose config ``name`` started in ``load_s`` and measured C=1 and C=4 in the given
    seconds, its sweeps adding nothing to its points (factor 1); no overhead between jobs."""
    times = {
        name: ConfigTimes(
            load_s=load_s,
            starts=1,
            sweep_factor=1.0,
            levels={
                (SINGLE_WORKLOAD, "c1"): LevelTimes(c1, 1.0),
                (SINGLE_WORKLOAD, "c4"): LevelTimes(c4, 1.0),
            },
        )
        for name, (load_s, c1, c4) in configs.items()
    }
    return History(Path("results/plan/earlier"), times, None)


# --- the simulator's virtual clock --------------------------------------------------------------------------


def demo_config() -> Any:
    return sim_config(load_campaign(DEMO).configs["tp8"].argv)


def test_one_turn_conversations_of_equal_requests_are_predict_points_closed_loop() -> None:
    config = demo_config()
    for concurrency, requests in ((1, 16), (16, 16), (64, 128)):
        point = predict_point(config, 256, 128, concurrency, requests, as_served=True)
        assert conversations_duration_s(config, [[256]] * requests, 128, concurrency, as_served=True) == (
            pytest.approx(point.duration_s, rel=1e-12)
        )


def test_a_conversation_waits_its_think_time_between_turns() -> None:
    config = demo_config()
    one = conversations_duration_s(config, [[256]], 128, 1, as_served=True)
    two = conversations_duration_s(config, [[256, 256]], 128, 1, think_time_s=2.5, as_served=True)
    # Two turns one after the other, from an idle server each, and the think time between them.
    assert two == pytest.approx(2 * one + 2.5, rel=1e-9)


def test_an_open_loop_sends_each_request_at_its_offset_and_waits_for_a_slot() -> None:
    config = demo_config()
    single = predict_point(config, 256, 128, 1, 1, as_served=True).duration_s
    spaced = [Arrival(offset, 256, 128) for offset in (0.0, 10.0, 20.0)]
    # Far apart: each request finds an idle server; the point ends with the last one.
    assert arrivals_duration_s(config, spaced, 8, as_served=True) == pytest.approx(20.0 + single, rel=1e-9)
    # Due together with one slot: one after the other, as a closed loop of one.
    together = [Arrival(0.0, 256, 128)] * 3
    closed = predict_point(config, 256, 128, 1, 3, as_served=True).duration_s
    assert arrivals_duration_s(config, together, 1, as_served=True) == pytest.approx(closed, rel=1e-9)


# --- what a sweep sends -------------------------------------------------------------------------------------


def test_the_demos_points_count_their_warmups_whole_conversations_and_primers() -> None:
    demo = load_campaign(DEMO)
    random = {point.tag: point for point in repeat_points("random", demo.workloads["random"])}
    # prompts_per_level 1x and warmup 1x, at least 16 measured.
    assert [(p.measured, p.warmup, p.primers) for p in random.values()] == [
        (16, 1, 0),
        (16, 16, 0),
        (64, 64, 0),
        (256, 256, 0),
    ]
    agentic = repeat_points("agentic", demo.workloads["agentic"])
    # 3x turns (at least 16): 6 conversations of 3 turns at C=1, 16 at C=16, 64 at C=64; warmup 3 requests
    # is one conversation; one shared system prompt primed.
    assert [(p.measured, p.warmup, p.primers) for p in agentic] == [(18, 3, 1), (48, 3, 1), (192, 3, 1)]


def test_the_search_probes_most_where_the_listed_levels_are_widest_apart() -> None:
    workload = campaign(
        workload={"concurrency": [1, 16, 64, 256], "search_resolution": 8}, slo={"ttft_p99_ms": 100}
    ).workloads[SINGLE_WORKLOAD]
    count, probe = search_probes(SINGLE_WORKLOAD, workload)
    # 64 to 256: 192 -> 96 -> 48 -> 24 -> 12 -> 6 <= 8, five probes, each timed as C=256.
    assert count == 5
    assert probe is not None and probe.tag == "c256"
    assert search_probes(SINGLE_WORKLOAD, campaign().workloads[SINGLE_WORKLOAD]) == (0, None)


# --- the plan -----------------------------------------------------------------------------------------------


def test_a_spread_plan_times_each_job_and_plays_the_queue_over_the_hosts() -> None:
    found = forecast(
        campaign(),
        {"gpu_hosts": ["h1", "h2"]},
        placement="spread",
        hosts_from="test",
        history=learned(a=(5.0, 4.0, 6.0), b=(5.0, 10.0, 20.0)),
    )
    a, b = found.configs["a"], found.configs["b"]
    # job_s = start + one repeat's points + between jobs (0 here).
    assert (a.job_s[LEAST], b.job_s[LEAST]) == (15.0, 35.0)
    assert (a.start_from, a.points_from) == (LEARNED, LEARNED)
    least = found.outlook[LEAST]
    assert (least.jobs, least.points, least.requests) == (4, 8, 4 * 2 * 16)
    # GPU-hours: 2 jobs of each, 2 GPUs each.
    assert least.gpu_hours == pytest.approx((2 * 15 + 2 * 35) * 2 / 3600)
    assert least.start_gpu_hours == pytest.approx(4 * 5 * 2 / 3600)
    # Round 0 drawn from seed 1 as b then a, round 1 its reverse: h1 takes b#r0 (0-35), h2 a#r0 (0-15),
    # then the config it has not measured, b#r1 (15-50); h1 a#r1 (35-50).
    assert least.wall_s == pytest.approx(50.0)
    assert found.outlook[MOST] == least  # a fixed count: the least is the most


def test_hosts_an_earlier_run_found_sharing_a_machine_take_turns_in_the_plan_unless_isolated(
    tmp_path: Path,
) -> None:
    earlier = learned(a=(5.0, 4.0, 6.0), b=(5.0, 10.0, 20.0))
    run = tmp_path / "earlier"
    run.mkdir()
    machines = {"shared": [{"hosts": ["h1", "h2", "gone"], "evidence": []}], "isolated": False}
    (run / "fleet.json").write_text(json.dumps({"machines": machines}))
    shared = read_history(run, [SINGLE_WORKLOAD]).shared
    assert shared == [["h1", "h2", "gone"]]
    turns = History(earlier.run_dir, earlier.configs, None, shared)
    pools = {"gpu_hosts": ["h1", "h2"]}
    # One job at a time: 2 x 15 + 2 x 35 s, where two machines took 50 s.
    found = forecast(campaign(), pools, placement="spread", hosts_from="test", history=turns)
    assert found.outlook[LEAST].wall_s == pytest.approx(100.0)
    isolated = forecast(
        campaign(isolated_hosts=True), pools, placement="spread", hosts_from="test", history=turns
    )
    assert isolated.outlook[LEAST].wall_s == pytest.approx(50.0)
    (run / "fleet.json").write_text("{")  # unreadable: no turns known
    assert read_history(run, [SINGLE_WORKLOAD]).shared == []


def test_every_host_runs_every_repeat_in_one_job_per_host() -> None:
    found = forecast(
        campaign(workload={"repeats": {"min": 2, "max": 3}}),
        {"gpu_hosts": ["h1", "h2"]},
        placement="every-host",
        hosts_from="test",
        history=learned(a=(5.0, 4.0, 6.0), b=(5.0, 10.0, 20.0)),
    )
    least, most = found.outlook[LEAST], found.outlook[MOST]
    assert (least.jobs, most.jobs) == (4, 4)
    assert (least.points, most.points) == (4 * 2 * 2, 4 * 3 * 2)
    assert found.configs["b"].job_s == {LEAST: 5 + 2 * 30.0, MOST: 5 + 3 * 30.0}
    # Each host runs a, then b: 25 + 65 at the least, 35 + 95 at the most (a: 5 + 2 x 10, 5 + 3 x 10).
    assert (least.wall_s, most.wall_s) == pytest.approx((25 + 65, 35 + 95))


def test_automatic_repeats_plan_their_min_at_the_least_and_their_max_at_the_most() -> None:
    found = forecast(
        campaign(workload={"repeats": {"min": 2, "max": 5}}),
        {"gpu_hosts": ["h1"]},
        placement="spread",
        hosts_from="test",
        history=learned(a=(0.0, 1.0, 1.0), b=(0.0, 1.0, 1.0)),
    )
    assert (found.repeats[LEAST], found.repeats[MOST]) == (2, 5)
    assert (found.outlook[LEAST].jobs, found.outlook[MOST].jobs) == (4, 10)
    # One host: the wall time is every job's time in turn.
    assert (found.outlook[LEAST].wall_s, found.outlook[MOST].wall_s) == (8.0, 20.0)


def test_without_a_model_or_a_run_only_the_counts_and_the_declared_starts_are_known() -> None:
    found = forecast(
        campaign(expected_start_s=300), {"gpu_hosts": ["h1"]}, placement="spread", hosts_from="test"
    )
    cost = found.configs["a"]
    assert (cost.start_s, cost.start_from, cost.points_from) == (300.0, DECLARED, UNKNOWN)
    least = found.outlook[LEAST]
    assert (least.jobs, least.points, least.gpu_hours, least.wall_s) == (4, 8, None, None)
    # The server starts alone: 4 starts of 300 s on 2 GPUs.
    assert least.start_gpu_hours == pytest.approx(4 * 300 * 2 / 3600)


def test_the_start_is_learned_over_declared_over_the_simulators_load_time() -> None:
    document = yaml.safe_load(DEMO.read_text())
    document["common"]["sim"]["sim-load-seconds"] = 7
    demo = parse_campaign(yaml.safe_dump(document), "demo.yml", DEMO.parent)
    pools = {"gpu_hosts": ["h1"]}
    assert forecast(demo, pools, placement="spread", hosts_from="t").configs["tp8"].start_s == 7.0
    assert forecast(demo, pools, placement="spread", hosts_from="t").configs["tp8"].start_from == SIMULATOR
    declared = parse_campaign(yaml.safe_dump({**document, "expected_start_s": 9}), "demo.yml", DEMO.parent)
    assert forecast(declared, pools, placement="spread", hosts_from="t").configs["tp8"].start_s == 9.0
    earlier = History(Path("r"), {"tp8": ConfigTimes(load_s=3.0, starts=2)}, None)
    cost = forecast(declared, pools, placement="spread", hosts_from="t", history=earlier).configs["tp8"]
    # The earlier run had no points of the workloads: those come from the model.
    assert (cost.start_s, cost.start_from, cost.points_from) == (3.0, LEARNED, SIMULATOR)


def test_the_demos_plan_counts_every_point_and_request_of_its_repeats() -> None:
    found = forecast(load_campaign(DEMO), {"gpu_hosts": ["lab1", "lab2"]}, placement="spread", hosts_from="t")
    # A repeat: random 17 + 32 + 128 + 512 requests, agentic 22 + 52 + 196, over 7 levels; 7 configs.
    per_repeat = 17 + 32 + 128 + 512 + 22 + 52 + 196
    least, most = found.outlook[LEAST], found.outlook[MOST]
    assert (least.jobs, least.points, least.requests) == (21, 21 * 7, 21 * per_repeat)
    assert (most.jobs, most.points, most.requests) == (28, 28 * 7, 28 * per_repeat)
    assert all(cost.points_from == SIMULATOR for cost in found.configs.values())


def test_a_plan_is_kept_as_plan_json_and_read_back_whole(tmp_path: Path) -> None:
    found = forecast(load_campaign(DEMO), {"gpu_hosts": ["lab1"]}, placement="spread", hosts_from="t")
    write_forecast(tmp_path, found)
    assert read_forecast(tmp_path) == found
    assert read_forecast(tmp_path / "none") is None
    (tmp_path / "plan.json").write_text('{"campaign": "demo"}')
    with pytest.raises(ForecastFileError, match=r"plan\.json: not a plan fairbench wrote \(KeyError"):
        read_forecast(tmp_path)


def test_durations_read_as_seconds_minutes_or_hours() -> None:
    assert [clock_text(s) for s in (None, 4.25, 42.4, 185, 8040)] == [
        "unknown",
        "4.2 s",
        "42 s",
        "3 min 5 s",
        "2 h 14 min",
    ]


# --- the queue on a clock -----------------------------------------------------------------------------------


def test_a_queue_mid_run_ends_when_its_running_jobs_and_the_rest_have_run() -> None:
    document = campaign().to_json()
    pools = {"gpu_hosts": ["h1", "h2"]}
    queue = new_state(
        placement="spread", pools=pools, jobs=plan(document, pools, placement="spread"), excluded={},
        equivalence=None, sticky={}, repeats=2,
    )  # fmt: skip
    first = next(job for job in queue["jobs"] if job["id"] == "a#r0")
    first.update(state=RUNNING, hosts=["h1"], claimed_at=100.0)
    seconds = {"a": 10.0, "b": 30.0}
    # a#r0 runs on h1 until 115; h2 takes b#r0 at 105 (until 135); h1 the config it has not measured,
    # b#r1 at 115 (145); h2 a#r1 at 135 (145).
    end = makespan(
        queue, ["h1", "h2"], lambda job: seconds[job["config"]], now=105.0, running_ends={"a#r0": 115.0}
    )
    assert end == 145.0


def test_a_server_over_two_hosts_waits_for_both() -> None:
    document = campaign(configs={"a": {"args": {"tp-size": 2}}, "wide": {"args": {"tp-size": 2}, "nodes": 2}})
    pools = {"gpu_hosts": ["h1", "h2"]}
    jobs = plan(document.to_json(), pools, placement="spread")
    queue = new_state(placement="spread", pools=pools, jobs=jobs, excluded={}, equivalence=None, sticky={})
    seconds = {"a": 10.0, "wide": 20.0}
    # Round 0 drawn from seed 1 as wide then a, round 1 its reverse: wide#r0 on both (0-20); h1 a#r0
    # (20-30), h2 a#r1 (20-30); wide#r1 on both (30-50).
    assert [job["config"] for job in queue["jobs"]] == ["wide", "a", "a", "wide"]
    assert makespan(queue, ["h1", "h2"], lambda job: seconds[job["config"]]) == 50.0


# --- an earlier run's times ---------------------------------------------------------------------------------


def write_job(run: Path, host: str, job: str, *, timeline: dict[str, float], durations: list[float]) -> None:
    """``job`` (``config#r<repeat>``) as the bench role records it on the control node: its points at C=1
    and C=4 of the given durations, and its status.json entry with its timeline."""
    config, repeat_text = job.split("#r")
    repeat = int(repeat_text)
    directory = run / host / config
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "points.jsonl").open("a") as points:
        for level, duration in zip((1, 4), durations, strict=True):
            line = {
                "point_id": f"c{level}-r{repeat}", "repeat": repeat, "max_concurrency": level,
                "request_rate": "inf", "duration": duration, "num_prompts": 16, "warmup_requests": 16,
                "completed": 16,
            }  # fmt: skip
            points.write(json.dumps(line) + "\n")
    record_status(
        directory, host=host, config=config, unit="u", run_id=run.name, failure=None,
        job=JobRan(job, (repeat,), (host,), timeline),
    )  # fmt: skip


def test_an_earlier_runs_starts_points_and_overhead_are_learned(tmp_path: Path) -> None:
    run = tmp_path / "plan" / "r1"
    # a#r0 on h1: started at 0, healthy at 4, swept 10 to 25 (points 3 + 9 = 12 s: factor 15 / 12).
    write_job(run, "h1", "a#r0", timeline=timeline(0, 4, 10, 25), durations=[3.0, 9.0])
    # a#r1 on h1 next: started at 27, healthy at 33 (load 6), first request at 35: overhead (35 - 25) - 6.
    write_job(run, "h1", "a#r1", timeline=timeline(27, 33, 35, 50), durations=[5.0, 7.0])
    history = read_history(run, [SINGLE_WORKLOAD])
    times = history.configs["a"]
    assert (times.load_s, times.starts) == (5.0, 2)
    assert times.sweep_factor == pytest.approx((15 + 15) / (12 + 12))
    assert times.point_s(SINGLE_WORKLOAD, "c1") == pytest.approx(4.0 * 30 / 24)
    assert times.point_s(SINGLE_WORKLOAD, "c16") is None
    assert history.between_jobs_s == pytest.approx(4.0)
    assert earlier_run(tmp_path / "plan") == run
    assert earlier_run(tmp_path / "plan", besides=run) is None
    assert earlier_run(tmp_path / "nothing") is None


def timeline(started: float, healthy: float, first: float, last: float) -> dict[str, float]:
    return {
        "unit_started_at": started,
        "healthy_at": healthy,
        "first_request_at": first,
        "last_point_ended_at": last,
    }


def test_what_an_earlier_run_cannot_tell_is_left_out_and_the_rest_learned(tmp_path: Path) -> None:
    run = tmp_path / "plan" / "r1"
    write_job(run, "h1", "a#r0", timeline=timeline(0, 4, 10, 25), durations=[3.0, 9.0])
    broken = run / "h2" / "b"
    broken.mkdir(parents=True)
    (broken / "status.json").write_text(json.dumps({"status": "ok", "jobs": ["x", {"job": 1}]}))
    (broken / "points.jsonl").write_text('{"point_id": "c1-r0", "duration": "long"}\nnot json\n')
    with (run / "h1" / "a" / "points.jsonl").open("a") as points:
        points.write('{"point_id": "c4-r1", "repeat": 1, "duration": -1}\n{"torn')
    history = read_history(run, [SINGLE_WORKLOAD])
    assert list(history.configs) == ["a"]
    assert history.configs["a"].point_s(SINGLE_WORKLOAD, "c4") == pytest.approx(9.0 * 15 / 12)
