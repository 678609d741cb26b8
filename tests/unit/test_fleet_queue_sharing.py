"""The work queue with hosts that share a machine (fleet.json's ``machines``): one job at a time per machine,
taking turns, unless the campaign declares its hosts isolated; in memory, in predict, and from processes
claiming one queue file at once."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fairbench.fleet.plan import pools
from fairbench.fleet.queue import (
    DONE,
    OK,
    RUN,
    RUNNING,
    WAIT,
    Finished,
    Queue,
    QueueState,
    new_state,
)
from fairbench.fleet.schedule import predict
from fairbench.fleet.sharing import Evidence, SharedMachine, machines_json


def campaign(*configs: dict[str, Any]) -> dict[str, Any]:
    return {
        "placement": "spread",
        "configs": {config["name"]: {"nodes": 1, "hosts": None, **config} for config in configs},
        "workload": {"repeats": 1},
    }


def one_machine(*hosts: str) -> SharedMachine:
    return SharedMachine(hosts, (Evidence("kernel_boot", hosts, "one kernel"),))


def queued(
    data: dict[str, Any],
    hosts: Sequence[str],
    shared: Sequence[SharedMachine],
    *,
    isolated: bool = False,
    groups: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    from fairbench.fleet.plan import plan  # noqa: PLC0415

    by_name = pools(data, {"gpu_hosts": list(hosts), **(groups or {})}, list(hosts))
    return new_state(
        placement="spread",
        pools=by_name,
        jobs=plan(data, by_name, placement="spread"),
        excluded={},
        equivalence=None,
        sticky={},
        machines=machines_json(shared, isolated=isolated),
    )


def running(state: QueueState) -> list[list[str]]:
    return [job["hosts"] for job in state.jobs if job["state"] == RUNNING]


def test_hosts_of_one_machine_take_turns_while_another_host_runs_alongside() -> None:
    data = campaign(*({"name": f"c{index}"} for index in range(5)))
    state = QueueState(queued(data, ["a", "b", "c"], [one_machine("a", "b")]))
    assert state.claim("a", 0.0).job["id"] == "c0#r0"  # type: ignore[index]
    waiting = state.claim("b", 0.0)
    assert (waiting.answer, waiting.why) == (WAIT, "shares its machine with a, busy with c0#r0")
    assert state.claim("c", 0.0).job["id"] == "c1#r0"  # type: ignore[index]  # c is a machine of its own
    assert running(state) == [["a"], ["c"]]
    assert state.data["waiting_for_machine"] == {"b": 0.0}
    state.finish("c0#r0", "a", ok=True, reason=None, now=1.0)
    # b has waited for the machine: a, free again, lets it go first.
    yielded = state.claim("a", 1.0)
    assert (yielded.answer, yielded.why) == (WAIT, "b shares its machine and has waited longer")
    assert state.claim("b", 1.5).job["id"] == "c2#r0"  # type: ignore[index]
    assert state.data["waiting_for_machine"] == {"a": 1.0}
    assert state.claim("a", 2.0).why == "shares its machine with b, busy with c2#r0"
    state.finish("c2#r0", "b", ok=True, reason=None, now=3.0)
    assert state.claim("b", 3.0).answer == WAIT  # a's turn
    assert state.claim("a", 3.5).job["id"] == "c3#r0"  # type: ignore[index]
    assert running(state) == [["c"], ["a"]]


def test_a_campaign_that_declares_its_hosts_isolated_runs_them_at_the_same_time() -> None:
    data = campaign({"name": "c0"}, {"name": "c1"})
    state = QueueState(queued(data, ["a", "b"], [one_machine("a", "b")], isolated=True))
    assert state.claim("a", 0.0).answer == RUN and state.claim("b", 0.0).answer == RUN
    assert running(state) == [["a"], ["b"]]


def test_a_server_over_two_hosts_of_one_machine_is_one_job_and_the_third_host_waits() -> None:
    data = campaign({"name": "two", "nodes": 2}, {"name": "one"})
    state = QueueState(queued(data, ["a", "b", "c"], [one_machine("a", "b", "c")]))
    assert "1 of its 2 hosts" in state.claim("a", 0.0).why
    assert "rank 1 of two#r0, run by a" in state.claim("b", 0.0).why  # b joins the job a gathers
    assert state.claim("c", 0.0).why == "shares its machine with a, b, busy with two#r0"
    assert state.claim("a", 0.5).job["hosts"] == ["a", "b"]  # type: ignore[index]
    state.finish("two#r0", "a", ok=True, reason=None, now=1.0)
    assert state.claim("a", 1.0).answer == WAIT  # c waited
    assert state.claim("b", 1.0).answer == WAIT
    assert state.claim("c", 1.0).job["id"] == "one#r0"  # type: ignore[index]
    state.finish("one#r0", "c", ok=True, reason=None, now=2.0)
    assert [state.claim(host, 2.0).answer for host in ("a", "b", "c")] == [DONE, DONE, DONE]
    assert state.data["waiting_for_machine"] == {}


def test_a_host_waiting_for_a_job_it_cannot_start_yet_does_not_hold_back_one_that_can() -> None:
    # b waited first, for `solo`, which must wait for the server a gathers; c can join that server: it
    # goes, or both would wait for each other.
    data = campaign({"name": "pair", "nodes": 2, "hosts": "pairs"}, {"name": "solo", "hosts": "solos"})
    shared = [one_machine("a", "b", "c")]
    state = QueueState(queued(data, ["a", "b", "c"], shared, groups={"pairs": ["a", "c"], "solos": ["b"]}))
    assert state.claim("a", 0.0).answer == WAIT  # gathering pair#r0
    assert state.claim("b", 0.0).why == "shares its machine with a, busy with pair#r0"
    assert "rank 1 of pair#r0" in state.claim("c", 1.0).why
    assert state.claim("a", 1.0).job["hosts"] == ["a", "c"]  # type: ignore[index]
    state.finish("pair#r0", "a", ok=True, reason=None, now=2.0)
    assert state.claim("b", 2.0).job["id"] == "solo#r0"  # type: ignore[index]


def test_predict_hands_a_shared_machines_jobs_out_in_turns() -> None:
    data = campaign(*({"name": f"c{index}"} for index in range(4)))
    predicted = predict(queued(data, ["a", "b"], [one_machine("a", "b")]), ["a", "b"])
    assert {host: [job["id"] for job in jobs] for host, jobs in predicted.items()} == {
        "a": ["c0#r0", "c2#r0"],
        "b": ["c1#r0", "c3#r0"],
    }


def test_a_claim_that_waits_answers_as_soon_as_the_machine_is_free(tmp_path: Path) -> None:
    data = campaign({"name": "c0"}, {"name": "c1"})
    queue = Queue(tmp_path)
    queue.create(queued(data, ["a", "b"], [one_machine("a", "b")]))
    assert queue.claim("a").answer == RUN
    began = time.monotonic()
    still = queue.claim("b", wait_s=0.5)  # a's job runs on: b is told to wait once the time is up
    assert still.answer == WAIT and time.monotonic() - began >= 0.5

    def finish_a() -> None:
        time.sleep(0.5)
        queue.claim("a", Finished("c0#r0", ok=True))  # b waited longer: a yields the machine

    finisher = threading.Thread(target=finish_a)
    began = time.monotonic()
    finisher.start()
    taken = queue.claim("b", wait_s=30)
    finisher.join()
    assert taken.answer == RUN and taken.job is not None and taken.job["id"] == "c1#r0"
    assert time.monotonic() - began < 5  # the moment a finished, not at the end of the wait
    assert taken.changed


JOB_S = 0.2
"""How long each stand-in job of the processes below runs."""


def _take_turns(run_dir: str, host: str, start: Any, out: Any) -> None:
    """Claim, "run" each job for JOB_S, claim again; wait and retry while told to wait. Puts the host's
    (job, start, end) on ``out``, on CLOCK_MONOTONIC (one clock for every process of this machine)."""
    queue = Queue(Path(run_dir))
    ran: list[tuple[str, float, float]] = []
    finished = None
    start.wait()
    while (claim := queue.claim(host, finished)).answer != DONE:
        finished = None
        if claim.answer == WAIT:
            time.sleep(0.01)
            continue
        assert claim.job is not None
        began = time.monotonic()
        time.sleep(JOB_S)
        ran.append((claim.job["id"], began, time.monotonic()))
        finished = Finished(claim.job["id"], ok=True)
    out.put((host, ran))


def test_processes_claiming_one_queue_file_never_run_two_jobs_on_one_machine_at_once(tmp_path: Path) -> None:
    data = campaign(*({"name": f"c{index}"} for index in range(9)))
    hosts = ["a", "b", "c"]
    Queue(tmp_path).create(queued(data, hosts, [one_machine("a", "b")]))
    context = multiprocessing.get_context("spawn")
    start, out = context.Barrier(len(hosts)), context.Queue()
    workers = [context.Process(target=_take_turns, args=(str(tmp_path), host, start, out)) for host in hosts]
    for worker in workers:
        worker.start()
    ran = dict(out.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    assert sorted(job for jobs in ran.values() for job, _, _ in jobs) == [
        f"c{index}#r0" for index in range(9)
    ]
    assert {job["state"] for job in Queue(tmp_path).read()["jobs"]} == {OK}

    def overlap(x: str, y: str) -> bool:
        return any(s1 < e2 and s2 < e1 for _, s1, e1 in ran[x] for _, s2, e2 in ran[y])

    assert not overlap("a", "b")
    assert ran["a"] and ran["b"]  # they took turns: neither waited out the whole queue
    assert overlap("a", "c") or overlap("b", "c")  # c, a machine of its own, ran beside them
