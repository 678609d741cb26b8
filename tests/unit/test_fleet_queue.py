"""The fleet's plan and work queue: which jobs a campaign makes, and which host takes which, concurrently."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from fairbench.fleet.plan import PLAY_POOL, PlanError, check_gpus, most_jobs, plan, pools, round_order
from fairbench.fleet.queue import (
    DONE,
    FAILED,
    OK,
    RUN,
    UNPLACED,
    WAIT,
    Finished,
    Queue,
    QueueState,
    new_state,
    sticky_hosts,
)
from fairbench.fleet.schedule import predict
from fairbench.measure.repeats import repeats_from_json


def campaign(
    *configs: dict[str, Any], repeats: int | dict[str, Any] = 1, placement: str = "spread"
) -> dict[str, Any]:
    return {
        "placement": placement,
        "configs": {config["name"]: {"nodes": 1, "hosts": None, **config} for config in configs},
        "workload": {"repeats": repeats},
    }


def state_of(
    data: dict[str, Any], hosts: list[str], sticky: dict[str, list[str]] | None = None
) -> QueueState:
    by_name = pools(data, {"gpu_hosts": hosts, "big": hosts[:1]}, hosts)
    jobs = plan(data, by_name, placement=data["placement"])
    return QueueState(
        new_state(
            placement=data["placement"],
            pools=by_name,
            jobs=jobs,
            excluded={},
            equivalence=None,
            sticky=sticky or {},
            repeats=repeats_from_json(data["workload"]["repeats"]),
        )
    )


def test_spread_makes_one_job_per_config_and_repeat_in_rounds_in_orders_drawn_from_the_seed() -> None:
    names = ["tp8", "tp8-nccl", "ep4", "ep8"]
    data = campaign(*({"name": name} for name in names), repeats=6)
    jobs = plan(data, {PLAY_POOL: ["a", "b"]}, placement="spread")
    rounds = [jobs[index : index + 4] for index in range(0, 24, 4)]
    assert [{job.repeats for job in found} for found in rounds] == [{(index,)} for index in range(6)]
    orders = [[job.config for job in found] for found in rounds]
    assert all(sorted(order) == sorted(names) for order in orders)
    assert orders == [round_order(names, 1, index) for index in range(6)]
    # Counterbalanced: each odd round the reverse of the round before it, each pair drawn anew.
    assert all(orders[index + 1] == orders[index][::-1] for index in (0, 2, 4))
    assert len({tuple(orders[index]) for index in (0, 2, 4)}) > 1
    assert all(job.hosts == ("a", "b") for job in jobs)
    # The same seed draws the same orders (a resume, the plan); another seed others.
    assert plan(data, {PLAY_POOL: ["a", "b"]}, placement="spread") == jobs
    reseeded = {**data, "workload": {**data["workload"], "seed": 2}}
    assert [job.config for job in plan(reseeded, {PLAY_POOL: ["a"]}, placement="spread")] != [
        job.config for job in jobs
    ]
    # One repeat is no round to draw: the campaign's order.
    once = plan(campaign(*({"name": name} for name in names)), {PLAY_POOL: ["a"]}, placement="spread")
    assert [job.id for job in once] == [f"{name}#r0" for name in names]


def test_every_host_makes_one_job_per_config_and_host_with_every_repeat() -> None:
    data = campaign({"name": "tp8"}, {"name": "ep4"}, repeats=3, placement="every-host")
    jobs = plan(data, {PLAY_POOL: ["a", "b"]}, placement="every-host")
    assert [job.id for job in jobs] == ["tp8@a", "tp8@b", "ep4@a", "ep4@b"]
    assert {job.repeats for job in jobs} == {(0, 1, 2)}
    assert [job.hosts for job in jobs] == [("a",), ("b",), ("a",), ("b",)]


def test_a_pinned_config_takes_only_its_group_and_an_unknown_group_is_refused() -> None:
    data = campaign({"name": "tp8", "hosts": "big"}, {"name": "ep4"})
    by_name = pools(data, {"big": ["b", "z"], "gpu_hosts": ["a", "b"]}, ["a", "b"])
    assert by_name == {PLAY_POOL: ["a", "b"], "big": ["b"]}  # z is not in the play
    jobs = plan(data, by_name, placement="spread")
    assert jobs[0].hosts == ("b",) and jobs[1].hosts == ("a", "b")
    with pytest.raises(PlanError, match="hosts: huge is no inventory group"):
        pools(campaign({"name": "tp8", "hosts": "huge"}), {"big": ["b"]}, ["a", "b"])


def test_a_server_over_more_hosts_than_its_pool_has_is_refused_and_one_short_of_usable_unplaced() -> None:
    data = campaign({"name": "tp16", "nodes": 2}, {"name": "tp8"})
    with pytest.raises(PlanError, match=r"tp16: its server spans 2 host\(s\), but pool gpu_hosts has 1: a"):
        plan(data, {PLAY_POOL: ["a"]}, placement="spread")
    by_name = {PLAY_POOL: ["a", "b"]}
    jobs = plan(data, by_name, placement="spread", excluded=["b"])
    queued = new_state(
        placement="spread",
        pools=by_name,
        jobs=jobs,
        excluded={"b": "pip failed"},
        equivalence=None,
        sticky={},
    )
    first, second = queued["jobs"]
    assert first["state"] == UNPLACED and second["state"] == "pending"
    assert first["reason"] == "needs 2 host(s) of pool gpu_hosts; usable: a; deploy failed on b (pip failed)"


def test_a_free_host_takes_the_next_job_while_a_slow_one_runs() -> None:
    state = state_of(campaign({"name": "slow"}, {"name": "b1"}, {"name": "b2"}), ["a", "b"])
    first = state.claim("a", 0.0)
    assert first.answer == RUN and first.job is not None and first.job["id"] == "slow#r0"
    second = state.claim("b", 0.0)
    assert second.job is not None and second.job["id"] == "b1#r0"
    state.finish("b1#r0", "b", ok=True, reason=None, now=1.0)
    third = state.claim("b", 1.0)  # a is still busy with slow: b does not wait for it
    assert third.job is not None and third.job["id"] == "b2#r0"
    state.finish("b2#r0", "b", ok=False, reason="sweep: boom", now=2.0)
    state.finish("b2#r0", "b", ok=False, reason="sweep: boom", now=2.5)  # a retried claim's finish
    assert state.claim("b", 2.0).answer == DONE
    state.finish("slow#r0", "a", ok=True, reason=None, now=3.0)
    assert state.claim("a", 3.0).answer == DONE
    assert [job["state"] for job in state.jobs] == [OK, OK, FAILED]
    assert state.job("b2#r0")["reason"] == "sweep: boom"


def test_a_server_over_two_hosts_is_gathered_led_by_its_first_claimer() -> None:
    state = state_of(campaign({"name": "one"}, {"name": "two", "nodes": 2}), ["a", "b"])
    assert state.claim("a", 0.0).job["id"] == "one#r0"  # type: ignore[index]
    waiting = state.claim("b", 0.0)
    assert waiting.answer == WAIT and "1 of its 2 hosts" in waiting.why
    state.finish("one#r0", "a", ok=True, reason=None, now=1.0)
    joined = state.claim("a", 1.0)  # a joins as rank 1; b leads
    assert joined.answer == WAIT and "rank 1 of two#r0, run by b" in joined.why
    led = state.claim("b", 1.0)
    assert led.answer == RUN and led.job is not None and led.job["hosts"] == ["b", "a"]
    assert state.claim("a", 1.5).answer == WAIT  # a serves as a rank until the job ends
    with pytest.raises(ValueError, match="not running with a as its rank 0"):
        state.finish("two#r0", "a", ok=True, reason=None, now=2.0)
    state.finish("two#r0", "b", ok=True, reason=None, now=2.0)
    assert state.claim("a", 2.0).answer == DONE and state.claim("b", 2.0).answer == DONE


def test_a_resumed_job_goes_back_to_the_host_that_measured_it_or_is_unplaced() -> None:
    state = state_of(campaign({"name": "tp8"}, {"name": "ep4"}), ["a", "b"], sticky={"tp8#r0": ["b"]})
    first = state.claim("a", 0.0)
    assert first.job is not None and first.job["id"] == "ep4#r0"  # tp8 is b's
    assert state.claim("b", 0.0).job["id"] == "tp8#r0"  # type: ignore[index]
    lost = state_of(campaign({"name": "tp8"}), ["a"], sticky={"tp8#r0": ["b"]})
    assert lost.claim("a", 0.0).answer == DONE
    assert lost.job("tp8#r0")["state"] == UNPLACED
    assert "led by b, which measured it before" in lost.job("tp8#r0")["reason"]


def test_predict_runs_the_queue_with_equal_job_times() -> None:
    data = campaign({"name": "c1"}, {"name": "c2"}, {"name": "c3"}, {"name": "big", "nodes": 2})
    state = state_of(data, ["a", "b"])
    predicted = predict(state.data, ["a", "b"])
    assert {host: [job["id"] for job in jobs] for host, jobs in predicted.items()} == {
        "a": ["c1#r0", "c3#r0"],
        "b": ["c2#r0", "big#r0"],
    }
    assert predicted["b"][1]["hosts"] == ["b", "a"]
    assert all(job["state"] == "pending" for job in state.jobs)  # the queue itself is untouched


def test_sticky_hosts_come_from_the_previous_queue_or_the_points_in_the_tree(tmp_path: Path) -> None:
    data = campaign({"name": "tp8"}, {"name": "ep4"}, repeats=2)
    jobs = plan(data, {PLAY_POOL: ["a", "b"]}, placement="spread")
    (tmp_path / "b" / "ep4").mkdir(parents=True)
    (tmp_path / "b" / "ep4" / "points.jsonl").write_text(
        json.dumps({"point_id": "c16-r1"}) + "\n" + "{torn\n", encoding="utf-8"
    )
    assert sticky_hosts(tmp_path, jobs) == {"ep4#r1": ["b"]}
    (tmp_path / "fleet.json").write_text(json.dumps({"jobs": [{"id": "tp8#r0", "hosts": ["a"]}]}))
    assert sticky_hosts(tmp_path, jobs) == {"tp8#r0": ["a"], "ep4#r1": ["b"]}


def _claim_all(run_dir: str, host: str, out: Any) -> None:
    queue = Queue(Path(run_dir))
    taken: list[str] = []
    finished = None
    while (claim := queue.claim(host, finished)).answer == RUN:
        assert claim.job is not None
        taken.append(claim.job["id"])
        finished = Finished(claim.job["id"], ok=True)
    out.put(taken)


def test_concurrent_claims_from_several_processes_take_every_job_once(tmp_path: Path) -> None:
    data = campaign(*({"name": f"c{index}"} for index in range(12)), repeats=3)
    hosts = ["a", "b", "c", "d"]
    state = state_of(data, hosts)
    Queue(tmp_path).create(state.data)
    out: Any = multiprocessing.get_context("spawn").Queue()
    workers = [
        multiprocessing.get_context("spawn").Process(target=_claim_all, args=(str(tmp_path), host, out))
        for host in hosts
    ]
    for worker in workers:
        worker.start()
    taken = [job for _ in workers for job in out.get(timeout=60)]
    for worker in workers:
        worker.join(timeout=60)
    assert sorted(taken) == sorted(job["id"] for job in state.jobs)
    final = Queue(tmp_path).read()
    assert {job["state"] for job in final["jobs"]} == {OK}
    assert sorted(final["finished_hosts"]) == hosts


def test_a_config_needing_more_gpus_per_host_than_a_host_of_its_pool_has_is_refused_naming_each() -> None:
    def config(name: str, gpus: int, **more: Any) -> dict[str, Any]:
        return {"name": name, "gpus_per_node": gpus, "gpus_formula": f"tp-size {gpus}", **more}

    facts = {
        "big": {"gpu_count": 8, "gpu_model": "NVIDIA H200"},
        "small": {"gpu_count": 0, "gpu_model": None, "reasons": {"gpu_model": "nvidia-smi: not found"}},
    }
    groups = {"h200": ["big"], "gpu_hosts": ["big", "small"]}
    pinned = {**campaign(config("tp8", 8, hosts="h200"), config("cpu", 0)), "engine": "sglang"}
    check_gpus(pinned, pools(pinned, groups, ["big", "small"]), facts)  # each fits the hosts of its pool
    spread = {**campaign(config("tp8", 8), config("tp16", 8, nodes=2)), "engine": "sglang"}
    with pytest.raises(PlanError) as refused:
        check_gpus(spread, pools(spread, groups, ["big", "small"]), facts)
    has = "the host has 0 (nvidia-smi: not found)"
    assert str(refused.value).splitlines() == [
        f"small: config tp8 needs 8 GPUs per host (tp-size 8), {has}",
        f"small: config tp16 needs 8 GPUs per host (tp-size 8, over 2 hosts), {has}",
    ]
    check_gpus({**spread, "engine": "sim"}, pools(spread, groups, ["big", "small"]), facts)  # needs none


def test_a_host_that_leaves_unplaces_the_servers_that_needed_it_and_nobody_waits() -> None:
    state = state_of(campaign({"name": "both", "nodes": 2}, {"name": "tp8"}), ["a", "b"])
    assert state.claim("a", 0.0).answer == WAIT  # a gathers the server over both hosts
    state.leave("b")  # b's units failed to deploy after the jobs were placed
    assert state.job("both#r0")["state"] == UNPLACED
    assert "left to take it: a" in state.job("both#r0")["reason"]
    taken = state.claim("a", 1.0)
    assert taken.job is not None and taken.job["id"] == "tp8#r0"  # a goes on with what it can run


def test_leaving_through_the_queue_file_answers_done(tmp_path: Path) -> None:
    state = state_of(campaign({"name": "both", "nodes": 2}), ["a", "b"])
    queue = Queue(tmp_path)
    queue.create(state.data)
    assert queue.claim("b", leaving=True).answer == DONE
    assert queue.claim("a").answer == DONE
    assert queue.read()["jobs"][0]["state"] == UNPLACED


def _points(repeat: int, throughputs: dict[int, float]) -> list[dict[str, Any]]:
    """What a job's follow returns of its config's directory: this repeat's points, another repeat's, and a
    search probe, which must not count."""
    listed = [
        {"repeat": repeat, "max_concurrency": level, "level_source": "listed", "output_throughput": value}
        for level, value in throughputs.items()
    ]
    others = [
        {"repeat": repeat + 100, "max_concurrency": 1, "level_source": "listed", "output_throughput": 1e9},
        {"repeat": repeat, "max_concurrency": 3, "level_source": "bisect", "output_throughput": 1e9},
    ]
    return listed + others


def test_automatic_repeats_under_spread_add_jobs_while_a_level_is_wide_up_to_the_maximum() -> None:
    auto = {"min": 2, "max": 4, "half_width_pct": 2.0}
    data = campaign({"name": "steady"}, {"name": "noisy"}, repeats=auto)
    state = state_of(data, ["a", "b"])
    planned = [f"{name}#r{index}" for index in (0, 1) for name in round_order(["steady", "noisy"], 1, index)]
    assert [job["id"] for job in state.jobs] == planned
    measured = {"steady": [100.0, 100.0, 100.0, 100.0], "noisy": [100.0, 120.0, 110.0, 130.0]}
    done: dict[str, int] = {"steady": 0, "noisy": 0}
    order = []
    host_of_idle = {}
    for _ in range(20):
        progressed = False
        for host in ("a", "b"):
            claim = state.claim(host, 0.0)
            host_of_idle[host] = claim.answer
            if claim.answer != RUN or claim.job is None:
                continue
            progressed = True
            job = claim.job
            order.append(job["id"])
            config = job["config"]
            value = measured[config][done[config]]
            done[config] += 1
            state.finish(
                job["id"], host, ok=True, reason=None, now=0.0, points=_points(job["repeats"][0], {2: value})
            )
        if not progressed and all(answer == DONE for answer in host_of_idle.values()):
            break
    # A round at a time: a third round once both rounds ended, a fourth once the third had, each with
    # steady too (noisy needs it, and the rounds stay complete); in the second round each host took the
    # config it had not measured yet.
    assert [set(order[index : index + 2]) for index in range(0, len(order), 2)] == [
        set(planned[:2]),
        set(planned[2:]),
        {"steady#r2", "noisy#r2"},
        {"steady#r3", "noisy#r3"},
    ]
    assert {(state.job(f"{name}#r1")["hosts"][0], name) for name in ("steady", "noisy")} == {
        (state.job(f"{other}#r0")["hosts"][0], name)
        for name, other in (("steady", "noisy"), ("noisy", "steady"))
    }
    assert [set(order) for order in state.data["rounds"]["orders"][2:]] == [{"steady", "noisy"}] * 2
    judged = state.data["judged"]
    assert judged["steady"] == {"count": 4, "stopped": "c2: interval ±0.00 % within ±2 % after 4 repeats"}
    assert judged["noisy"]["count"] == 4
    assert judged["noisy"]["stopped"].startswith("c2: maximum of 4 repeats reached with interval ±")
    assert state.job("noisy#r3")["throughputs"] == {"c2": 130.0}
    assert most_jobs(data, plan(data, {PLAY_POOL: ["a", "b"]}, placement="spread"), placement="spread") == 8


def test_automatic_repeats_judge_each_workloads_levels_apart() -> None:
    # A job of several workloads reports each level with its workload: at C=2 the random workload is
    # steady and the agentic one wide, which earns the config its next repeat (mixed, C=2 would look
    # steady only by averaging the two apart).
    auto = {"min": 2, "max": 3, "half_width_pct": 2.0}
    state = state_of(campaign({"name": "tp8"}, repeats=auto), ["a"])
    agentic = iter([100.0, 130.0, 115.0])
    for _ in range(3):
        claim = state.claim("a", 0.0)
        assert claim.answer == RUN and claim.job is not None
        repeat = claim.job["repeats"][0]
        points = [
            {"workload": "random", **_points(repeat, {2: 500.0})[0]},
            {"workload": "agentic", **_points(repeat, {2: next(agentic)})[0]},
        ]
        state.finish(claim.job["id"], "a", ok=True, reason=None, now=0.0, points=points)
    assert state.claim("a", 0.0).answer == DONE
    assert state.job("tp8#r2")["throughputs"] == {"random/c2": 500.0, "agentic/c2": 115.0}
    assert state.data["judged"]["tp8"]["count"] == 3


def test_a_host_waits_while_a_running_job_may_still_add_a_repeat_and_predict_plans_the_minimum() -> None:
    data = campaign({"name": "only"}, repeats={"min": 2, "max": 3, "half_width_pct": 1.0})
    state = state_of(data, ["a", "b", "c"])
    assert state.claim("a", 0.0).answer == RUN
    assert state.claim("b", 0.0).answer == RUN
    waiting = state.claim("c", 0.0)
    assert waiting.answer == WAIT and "automatic repeats of only" in waiting.why
    state.finish("only#r0", "a", ok=True, reason=None, now=1.0, points=_points(0, {1: 10.0}))
    assert state.claim("a", 1.0).answer == WAIT  # only#r1 still runs: a third repeat may come
    state.finish("only#r1", "b", ok=True, reason=None, now=2.0, points=_points(1, {1: 12.0}))
    third = state.claim("c", 2.0)
    assert third.answer == RUN and third.job is not None and third.job["id"] == "only#r2"
    assert state.claim("a", 2.0).answer == DONE  # the maximum is taken: nothing more can come
    predicted = predict(QueueState(json.loads(json.dumps(state_of(data, ["a"]).data))).data, ["a"])
    assert [job["id"] for job in predicted["a"]] == ["only#r0", "only#r1"]


def test_a_failed_job_gives_no_throughputs_and_a_config_with_none_gets_no_more_repeats() -> None:
    state = state_of(campaign({"name": "x"}, repeats={"min": 2, "max": 5, "half_width_pct": 1.0}), ["a"])
    for repeat in (0, 1):
        claim = state.claim("a", 0.0)
        assert claim.job is not None and claim.job["id"] == f"x#r{repeat}"
        state.finish(claim.job["id"], "a", ok=False, reason="start: boom", now=0.0)
    assert state.claim("a", 0.0).answer == DONE
    assert state.data["judged"]["x"] == {"count": 2, "stopped": "no level measured in 2 job(s)"}


def test_an_open_loops_rates_are_judged_apart_though_they_share_their_bound_in_flight() -> None:
    state = state_of(campaign({"name": "rates"}, repeats={"min": 2, "max": 2, "half_width_pct": 1.0}), ["a"])
    for repeat in (0, 1):
        claim = state.claim("a", 0.0)
        assert claim.job is not None
        points = [
            {"repeat": repeat, "max_concurrency": 8, "request_rate": rate, "output_throughput": 10 * rate}
            for rate in (0.5, 2.0)
        ]
        state.finish(claim.job["id"], "a", ok=True, reason=None, now=0.0, points=points)
    assert state.job("rates#r1")["throughputs"] == {"rps0.5": 5.0, "rps2": 20.0}
    assert state.data["judged"]["rates"]["stopped"].startswith("rps0.5: interval ±0.00 % within ±1 %")


def test_a_claim_says_whether_it_changed_the_queue_and_a_retried_wait_does_not(tmp_path: Path) -> None:
    state = state_of(campaign({"name": "one"}, {"name": "two", "nodes": 2}), ["a", "b"])
    queue = Queue(tmp_path)
    queue.create(state.data)
    first = queue.claim("a")
    assert (first.answer, first.changed) == (RUN, True)
    waiting = queue.claim("b")  # joins two's gathering: a change
    assert (waiting.answer, waiting.changed) == (WAIT, True)
    assert queue.claim("b").changed is False  # waiting on: nothing changes
    finished = Finished("one#r0", ok=True)
    joined = queue.claim("a", finished)  # records the finish, and a completes two's gathering as rank 1
    assert joined.changed is True
    again = queue.claim("a", finished)  # retried while it waits, the finish already recorded
    assert (again.answer, again.changed) == (WAIT, False)


@pytest.mark.parametrize(("hosts", "names", "rounds"), [(3, "abc", 6), (2, "abcd", 4), (4, "abcd", 4)])
def test_under_spread_each_config_meets_each_host_as_evenly_as_the_counts_allow(
    hosts: int, names: str, rounds: int
) -> None:
    # Jobs of equal length, the hosts claiming in turn: a host takes the config of the earliest round it
    # has measured least, so no config runs on one host every time.
    data = campaign(*({"name": name} for name in names), repeats=rounds)
    state = state_of(data, [f"h{index}" for index in range(hosts)])
    met = {(name, f"h{index}"): 0 for name in names for index in range(hosts)}
    while True:
        taken = [
            (host, claim.job)
            for host in sorted({host for _, host in met})
            if (claim := state.claim(host, 0.0)).job
        ]
        for host, job in taken:
            met[job["config"], host] += 1
            state.finish(job["id"], host, ok=True, reason=None, now=0.0)
        if not taken:
            break
    assert set(met.values()) == {len(names) * rounds // hosts // len(names)}
