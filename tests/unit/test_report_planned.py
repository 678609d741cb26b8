"""The report's Planned against actual (report/planned.py): plan.json beside fleet.json's job times, figures
worked out here by hand."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.report_files import markdown, point, section, table, write_run

from fairbench.fleet.forecast import LEAST, MOST, ConfigCost, Forecast, Outlook, write_forecast
from fairbench.report.load import load_run

HEADING = "## Planned against actual"


def plan(tp8_s: float | None) -> Forecast:
    """tp8's jobs planned at ``tp8_s`` (None: unknown) and ep4's at 60 s to 90 s, 8 GPUs each."""
    costs = {
        "tp8": ConfigCost(8, 5.0, "t", "t", {LEAST: tp8_s, MOST: tp8_s}, {LEAST: tp8_s, MOST: tp8_s}),
        "ep4": ConfigCost(8, 5.0, "t", "t", {LEAST: 55.0, MOST: 85.0}, {LEAST: 60.0, MOST: 90.0}),
    }
    least = Outlook(4, 12, 200, None if tp8_s is None else 1.5, 0.04, None if tp8_s is None else 150.0)
    most = Outlook(6, 18, 300, None if tp8_s is None else 2.25, 0.07, None if tp8_s is None else 3725.0)
    return Forecast(
        campaign="demo", engine="sim", placement="spread", pools={"gpu_hosts": ["lab1", "lab2"]},
        hosts_from="inventory/lab.yml", history=None, between_jobs_s=0.0, repeats={LEAST: 2, MOST: 3},
        levels={"": 3}, probes={"": 0}, configs=costs, outlook={LEAST: least, MOST: most},
    )  # fmt: skip


def run_with(tmp_path: Path, forecast: Forecast | None) -> Path:
    points = [point(level, repeat) for repeat in (0, 1) for level in (1, 4, 16)]
    run = write_run(tmp_path, {"tp8": points, "ep4": points}, hosts=("lab1", "lab2"))
    jobs = [
        # (job, claimed at, finished at): 40 and 50 s of tp8, 70 and 80 s of ep4, the last ending at 130.
        ("tp8#r0", 0.0, 40.0), ("ep4#r0", 0.0, 70.0), ("tp8#r1", 40.0, 90.0), ("ep4#r1", 50.0, 130.0),
    ]  # fmt: skip
    fleet = {
        "placement": "spread",
        "pools": {"gpu_hosts": ["lab1", "lab2"]},
        "jobs": [
            {"id": job, "config": job.split("#")[0], "state": "ok", "claimed_at": start, "finished_at": end}
            for job, start, end in jobs
        ]
        + [{"id": "ep4#r2", "config": "ep4", "state": "pending", "claimed_at": None, "finished_at": None}],
    }
    (run / "fleet.json").write_text(json.dumps(fleet))
    if forecast is not None:
        write_forecast(run, forecast)
    return run


def test_the_plan_stands_beside_the_jobs_gpu_hours_and_wall_time_the_run_took(tmp_path: Path) -> None:
    text = section(markdown(load_run(run_with(tmp_path, plan(45.0)))), HEADING)
    rows = {
        name: (row["planned, at the least"], row["planned, at the most"], row["actual"])
        for name, row in table(text).items()
    }
    assert rows == {
        "jobs (server starts)": ("4", "6", "4"),
        # (40 + 70 + 50 + 80) s x 8 GPUs / 3600; the first claim at 0, the last end at 130.
        "GPU-hours": ("1.50", "2.25", f"{240 * 8 / 3600:,.2f}"),
        "wall time": ("2 min 30 s", "1 h 2 min", "2 min 10 s"),
    }
    per_config = table(text[text.index("| config |") - 1 :])
    assert per_config["tp8"] == {
        "config": "tp8",
        "planned job": "45 s",
        "actual job, mean": "45 s",
        "jobs": "2",
    }
    assert per_config["ep4"]["planned job"] == "1 min 0 s to 1 min 30 s"
    assert per_config["ep4"]["actual job, mean"] == "1 min 15 s"


def test_a_config_the_plan_could_not_time_shows_unknown(tmp_path: Path) -> None:
    text = section(markdown(load_run(run_with(tmp_path, plan(None)))), HEADING)
    assert table(text)["GPU-hours"]["planned, at the least"] == "unknown"
    assert table(text)["wall time"]["planned, at the most"] == "unknown"


def test_a_run_without_a_plan_has_no_such_section_and_a_broken_one_is_named(tmp_path: Path) -> None:
    run = run_with(tmp_path, None)
    assert HEADING not in markdown(load_run(run))
    (run / "plan.json").write_text("[]")
    said = section(markdown(load_run(run)), HEADING)
    assert said.strip() == (
        f"The plan cannot be read: {run / 'plan.json'}: not a plan fairbench wrote (TypeError: list indices "
        "must be integers or slices, not str)."
    )
