"""fairbench run's display: ansible-runner events, in the shapes ansible-runner gives them, to lines."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from fairbench.cli.run_display import RunDisplay


def event(kind: str, host: str = "lab1", task: str = "a task", **res: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res}}


def facts(host: str = "lab1", **values: Any) -> dict[str, Any]:
    return event("runner_on_ok", host, "Set a fact", ansible_facts=values, changed=False)


def progress(label: str, done: int, finished: list[str], **more: Any) -> dict[str, Any]:
    state = {"label": label, "done": done, "total": 16, "failed": 0, "output_tokens_per_s": 1234.4}
    return {**state, "finished": finished, **more}


def play(display: RunDisplay, *events: dict[str, Any]) -> list[str]:
    assert all(display.handle(item) is False for item in events)  # runner keeps no event files
    stream = display.stream
    assert isinstance(stream, io.StringIO)
    return stream.getvalue().splitlines()


def job(config_dir: Path, host: str = "lab1", ranks: tuple[str, ...] = ("lab1",)) -> dict[str, Any]:
    """The Prepare task's facts: the job begins."""
    started = {"id": f"{config_dir.name}#r0", "hosts": list(ranks)}
    return facts(host, bench_config_dir=str(config_dir), bench_job=started)


def ended(host: str = "lab1") -> dict[str, Any]:
    """The job ended, its results left to be fetched."""
    return facts(host, bench_unfetched={"job": {"id": "x"}})


def config_events(config_dir: Path, *, outcome: dict[str, Any]) -> list[dict[str, Any]]:
    name = config_dir.name
    return [
        job(config_dir),
        event("runner_on_ok", task=f"Clean, start, sweep and stop {name}", changed=True),
        event("runner_retry", task="Follow", finished=False, progress=progress("c1-r0", 3, [])),
        event("runner_retry", task="Follow", finished=False, progress=progress("c4-r0", 0, ["c1-r0: ok"])),
        event(
            "runner_on_ok",
            task="Follow",
            finished=True,
            progress=progress("c4-r0", 16, ["c1-r0: ok", "c4-r0: ok"]),
            planned=["c1-r0", "c4-r0"],
        ),
        ended(),
        facts(bench_outcomes=[outcome]),
    ]


def test_a_job_shows_itself_each_finished_point_once_and_its_outcome(tmp_path: Path) -> None:
    display = RunDisplay(io.StringIO(), live=False)
    config_dir = tmp_path / "demo" / "run1" / "lab1" / "tp8"
    lines = play(
        display, *config_events(config_dir, outcome={"config": "tp8", "status": "ok", "failure": {}})
    )
    assert lines == [
        "lab1 tp8: job tp8#r0",
        "lab1 tp8: c1-r0 3/16 requests, 1,234 tok/s",
        "lab1 tp8: c1-r0: ok",
        "lab1 tp8: c4-r0: ok",
        "lab1 tp8: ok",
    ]
    assert display.run_dir == tmp_path / "demo" / "run1"
    assert display.failed_configs == []


def test_a_failed_job_shows_its_stage_reason_and_journal_but_not_each_failed_task(tmp_path: Path) -> None:
    config_dir = tmp_path / "demo" / "run1" / "lab2" / "crash"
    config_dir.mkdir(parents=True)
    journal = [f"journal line {index}" for index in range(15)]
    (config_dir / "status.json").write_text(json.dumps({"status": "failed", "journal_tail": journal}))
    failure = {"stage": "health", "reason": "the unit is failed\nsecond line"}
    display = RunDisplay(io.StringIO(), live=False)
    outcome = {"config": "crash", "dir": str(config_dir), "status": "failed", "failure": failure}
    lines = play(
        display,
        job(config_dir, "lab2", ("lab2", "lab1")),
        event("runner_on_failed", "lab2", "Follow", msg="the unit is failed"),
        ended("lab2"),
        # Fetched while the host's next job starts: its journal is the failed job's, not the next one's.
        job(config_dir.parent / "tp8", "lab2", ("lab2",)),
        facts("lab2", bench_outcomes=[outcome]),
    )
    assert lines == [
        "lab2 crash: job crash#r0 over lab2 + lab1",
        "lab2 tp8: job tp8#r0",
        "lab2 crash: FAILED at health: the unit is failed",
        *(f"    | journal line {index}" for index in range(5, 15)),
    ]
    assert display.failed_configs == ["lab2/crash"]


def test_outside_a_config_changes_and_failures_are_shown_with_the_host(tmp_path: Path) -> None:
    lines = play(
        RunDisplay(io.StringIO(), live=False),
        {"event": "playbook_on_play_start", "event_data": {"play": "Deploy"}},
        event("runner_on_ok", "lab1", "Copy the wheel", changed=True),
        event("runner_on_ok", "lab1", "Check the venv", changed=False),
        event(
            "runner_on_failed",
            "lab2",
            "Refuse big configs",
            msg="lab2: config a needs 8\nlab2: config b needs 8",
        ),
        event("runner_on_unreachable", "lab3", "Gathering Facts", msg="ssh: connect refused"),
    )
    assert lines == [
        "== Deploy",
        "lab1: changed: Copy the wheel",
        "lab2: FAILED Refuse big configs: lab2: config a needs 8",
        "    | lab2: config b needs 8",
        "lab3: unreachable: ssh: connect refused",
    ]


def test_a_resumed_job_with_nothing_left_says_so(tmp_path: Path) -> None:
    config_dir = tmp_path / "demo" / "run1" / "lab1" / "tp8"
    lines = play(
        RunDisplay(io.StringIO(), live=False),
        job(config_dir),
        event("runner_on_ok", task="Follow", finished=True, progress={}, planned=[]),
        ended(),
        facts(bench_outcomes=[{"config": "tp8", "status": "ok", "failure": {}}]),
    )
    assert lines == [
        "lab1 tp8: job tp8#r0",
        "lab1 tp8: every point already measured (a resumed run)",
        "lab1 tp8: ok",
    ]


def test_a_host_whose_deploy_failed_shows_every_config_it_marked_failed(tmp_path: Path) -> None:
    marked = [
        {"config": name, "status": "failed", "failure": {"stage": "deploy", "reason": "pip failed"}}
        for name in ("tp8", "ep4")
    ]
    display = RunDisplay(io.StringIO(), live=False)
    lines = play(display, facts(bench_outcomes=marked))
    assert lines == ["lab1 tp8: FAILED at deploy: pip failed", "lab1 ep4: FAILED at deploy: pip failed"]
    assert display.failed_configs == ["lab1/tp8", "lab1/ep4"]


def test_live_mode_keeps_the_sweeps_in_flight_on_one_status_line_below_the_lines(tmp_path: Path) -> None:
    display = RunDisplay(io.StringIO(), live=True)
    play(
        display,
        job(tmp_path / "d" / "r" / "lab1" / "tp8"),
        job(tmp_path / "d" / "r" / "lab2" / "ep4", "lab2", ("lab2",)),
        event("runner_retry", "lab1", finished=False, progress=progress("c1-r0", 3, [])),
        event("runner_retry", "lab2", finished=False, progress=progress("c4-r0", 5, ["c1-r0: ok"])),
    )
    text = display.stream.getvalue()  # type: ignore[attr-defined]
    status = "lab1 tp8 c1-r0 3/16 requests, 1,234 tok/s | lab2 ep4 c4-r0 5/16 requests, 1,234 tok/s"
    assert text.endswith("\r\033[K" + status)
    # The finished point was printed on a line of its own, the status line cleared before it.
    assert "\r\033[Klab2 ep4: c1-r0: ok\n" in text
    display.close()
    assert display.stream.getvalue().endswith("\r\033[K")  # type: ignore[attr-defined]


def test_recap_and_report_paths(tmp_path: Path) -> None:
    display = RunDisplay(io.StringIO(), live=False)
    report = {
        "event": "runner_on_ok",
        "event_data": {
            "host": "localhost",
            "task": "Render the report of the run",
            "task_action": "fairbench_report",
            "res": {"paths": ["/r/report.md", "/r/report.html"], "changed": False},
        },
    }
    stats = {
        "event": "playbook_on_stats",
        "event_data": {
            "ok": {"lab1": 40, "localhost": 5},
            "changed": {"lab1": 3},
            "failures": {"localhost": 1},
        },
    }
    lines = play(display, report, stats)
    assert display.report_paths == ["/r/report.md", "/r/report.html"]
    assert lines == [
        "lab1: ok=40 changed=3 failed=0 unreachable=0",
        "localhost: ok=5 changed=0 failed=1 unreachable=0",
    ]
