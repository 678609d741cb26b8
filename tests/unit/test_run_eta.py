"""fairbench run's ETA (cli/run_eta.py): the plan's job times, corrected by the jobs done, played over the
queue as fleet.json holds it; and where the live display shows it. Expected instants are worked out here."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from fairbench.cli.run_display import RunDisplay
from fairbench.cli.run_eta import RunEta
from fairbench.fleet.forecast import LEAST, MOST, ConfigCost, Forecast, Outlook
from fairbench.fleet.plan import Job
from fairbench.fleet.queue import FLEET_FILE, OK, RUNNING, new_state
from fairbench.measure.repeats import AutoRepeats

HOSTS = ["h1", "h2"]


def plan(**job_s: tuple[float | None, float | None]) -> Forecast:
    """A plan whose config ``name`` takes ``(least, most)`` seconds a job."""
    costs = {
        name: ConfigCost(1, 0.0, "t", "t", {LEAST: least, MOST: most}, {LEAST: least, MOST: most})
        for name, (least, most) in job_s.items()
    }
    nothing = Outlook(0, 0, 0, None, None, None)
    return Forecast(
        campaign="c", engine="sim", placement="spread", pools={"gpu_hosts": HOSTS}, hosts_from="t",
        history=None, between_jobs_s=0.0, repeats={LEAST: 2, MOST: 2}, levels={"": 1}, probes={"": 0},
        configs=costs, outlook={LEAST: nothing, MOST: nothing},
    )  # fmt: skip


def queue(run_dir: Path, repeats: Any = 2, **jobs: dict[str, Any]) -> None:
    """fleet.json of configs a and b spread over h1 and h2, repeat-major; ``jobs``: each job's changes."""
    planned = [
        Job(f"{config}#r{repeat}", config, (repeat,), "gpu_hosts", tuple(HOSTS), 1)
        for repeat in range(2)
        for config in ("a", "b")
    ]
    data = new_state(
        placement="spread", pools={"gpu_hosts": HOSTS}, jobs=planned, excluded={}, equivalence=None,
        sticky={}, repeats=repeats,
    )  # fmt: skip
    for job in data["jobs"]:
        job.update(jobs.get(job["id"].replace("#", "_"), {}))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / FLEET_FILE).write_text(json.dumps(data))


def test_the_jobs_left_take_the_plans_time_times_what_the_jobs_done_took_over_theirs(tmp_path: Path) -> None:
    # a#r0 took 20 s where the plan said 10: every job is taken as twice its plan (a 20 s, b 60 s).
    queue(
        tmp_path,
        a_r0={"state": OK, "hosts": ["h1"], "claimed_at": 1000.0, "finished_at": 1020.0},
        b_r0={"state": RUNNING, "hosts": ["h2"], "claimed_at": 1000.0},
    )
    eta = RunEta(plan(a=(10.0, 10.0), b=(30.0, 30.0)), tmp_path).estimate(now=1020.0)
    assert eta is not None
    # h1 takes the config it has not measured, b#r1 (1020-1080); b#r0 ends at 1060 on h2, which takes
    # a#r1 (1060-1080).
    assert (eta.least_end, eta.most_end, eta.done, eta.jobs) == (1080.0, 1080.0, 1, 4)
    assert eta.text(1020.0) == "ETA 1 min 0 s, 1 of 4 jobs done"
    # A running job past its time ends now at the earliest.
    late = RunEta(plan(a=(10.0, 10.0), b=(30.0, 30.0)), tmp_path).estimate(now=1070.0)
    # b#r0 ends now, so h2 takes b#r1 (1070-1130) while h1 runs a#r1 (1070-1090).
    assert late is not None and late.least_end == 1130.0


def test_at_the_most_each_config_not_judged_yet_gets_every_repeat_it_may(tmp_path: Path) -> None:
    policy = AutoRepeats(2, 3, 2.0).to_json()
    queue(tmp_path, repeats=policy)
    eta = RunEta(plan(a=(10.0, 10.0), b=(10.0, 10.0)), tmp_path).estimate(now=0.0)
    assert eta is not None
    # At the least the 4 jobs on 2 hosts: 20 s; at the most a#r2 and b#r2 too: 30 s.
    assert (eta.least_end, eta.most_end) == (20.0, 30.0)
    assert eta.text(0.0) == "ETA 20 s (to 30 s), 0 of 4 jobs done"


def test_a_job_the_plan_has_no_time_for_leaves_the_eta_unknown(tmp_path: Path) -> None:
    queue(tmp_path)
    eta = RunEta(plan(a=(10.0, 10.0), b=(None, None)), tmp_path).estimate(now=0.0)
    assert eta is not None and eta.least_end is None
    assert eta.text(0.0) == "ETA unknown, 0 of 4 jobs done"
    assert RunEta(plan(a=(1.0, 1.0)), tmp_path / "not-yet").estimate() is None


def facts(host: str, **values: Any) -> dict[str, Any]:
    return {
        "event": "runner_on_ok",
        "event_data": {"host": host, "task": "t", "res": {"ansible_facts": values}},
    }


def test_the_display_says_the_eta_after_each_outcome_and_on_its_status_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "c" / "run1"
    queue(run_dir, a_r0={"state": OK, "hosts": ["h1"], "claimed_at": 0.0, "finished_at": 10.0})
    config_dir = run_dir / "h1" / "a"
    started = facts("h1", bench_config_dir=str(config_dir), bench_job={"id": "a#r0", "hosts": ["h1"]})
    ended = facts("h1", bench_outcomes=[{"config": "a", "status": "ok"}])
    plain = RunDisplay(io.StringIO(), live=False, eta=RunEta(plan(a=(10.0, 10.0), b=(30.0, 30.0)), run_dir))
    for item in (started, ended):
        plain.handle(item)
    lines = plain.stream.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines[:2] == ["h1 a: job a#r0", "h1 a: ok"]
    assert lines[2].startswith("ETA ") and lines[2].endswith(", 1 of 4 jobs done")
    live = RunDisplay(io.StringIO(), live=True, eta=RunEta(plan(a=(10.0, 10.0), b=(30.0, 30.0)), run_dir))
    flying = {
        "label": "c1-r0",
        "done": 3,
        "total": 16,
        "failed": 0,
        "output_tokens_per_s": 10.0,
        "finished": [],
    }
    live.handle(started)
    live.handle({"event": "runner_retry", "event_data": {"host": "h1", "res": {"progress": flying}}})
    status = live.stream.getvalue().rsplit("\r\033[K", 1)[-1]  # type: ignore[attr-defined]
    assert status.startswith("h1 a c1-r0 3/16 requests, 10 tok/s | ETA ")
    # Without a plan, nothing of it.
    bare = RunDisplay(io.StringIO(), live=False)
    for item in (started, ended):
        bare.handle(item)
    assert bare.stream.getvalue().splitlines() == ["h1 a: job a#r0", "h1 a: ok"]  # type: ignore[attr-defined]
