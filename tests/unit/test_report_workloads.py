"""The report of a campaign of several workloads: one report per workload, each from that workload's points
alone, and an index that gives each workload's verdict and links to its report; the export's rows of each."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.support.report_files import point, write_run
from tests.unit.test_report_verdict import spread

from fairbench.cli.main import main
from fairbench.measure.results import ResultsError
from fairbench.report.build import write_reports
from fairbench.report.load import load_run, load_runs

WORKLOADS = ("random", "agentic")


def _points(levels: dict[int, float]) -> list[dict[str, Any]]:
    return [
        point(level, repeat, output_throughput=value)
        for level, center in levels.items()
        for repeat, value in enumerate(spread(center, 0.01, 3))
    ]


POINTS = {
    # tp8 leads on random ids, ep4 on the agentic workload: one verdict per workload, each its own.
    "random": {"tp8": _points({1: 120.0, 4: 480.0}), "ep4": _points({1: 100.0, 4: 400.0})},
    "agentic": {"tp8": _points({1: 50.0, 4: 150.0}), "ep4": _points({1: 70.0, 4: 210.0})},
}


def _several(tmp_path: Path, run_id: str = "run1", workloads: tuple[str, ...] = WORKLOADS) -> Path:
    """A run of two configs on two workloads: each config directory with its server's files, each
    workload's points and sweep.json in its own directory below it."""
    run = write_run(tmp_path, POINTS["random"], run_id=run_id)
    campaign = json.loads((run / "campaign.json").read_text())
    one = campaign.pop("workload")
    campaign["workloads"] = {name: {**one, "concurrency": [1, 4], "repeats": 3} for name in workloads}
    (run / "campaign.json").write_text(json.dumps(campaign))
    for config in ("tp8", "ep4"):
        directory = run / "lab1" / config
        for name in workloads:
            (directory / name).mkdir()
            shutil.copy(directory / "sweep.json", directory / name / "sweep.json")
            lines = "".join(json.dumps(line) + "\n" for line in POINTS[name][config])
            (directory / name / "points.jsonl").write_text(lines)
        (directory / "points.jsonl").unlink()
        (directory / "sweep.json").unlink()
    return run


def test_each_workload_is_read_from_its_own_directory(tmp_path: Path) -> None:
    run = _several(tmp_path)
    runs = load_runs(run)
    assert [view.workload for view in runs] == list(WORKLOADS)
    for view in runs:
        assert "workloads" not in view.campaign and view.campaign["workload"]["repeats"] == 3
        tp8 = next(result for result in view.results if result.name == "tp8")
        assert tp8.points_path == run / "lab1" / "tp8" / view.workload / "points.jsonl"
        assert tp8.points == POINTS[view.workload]["tp8"] and tp8.sweep_settings == {"gpus": 8}
        assert tp8.server_info == {} and tp8.ok  # the server's own files, once for every workload
    with pytest.raises(ResultsError, match=r"its campaign has no workload 'chat'; it has random, agentic"):
        load_run(run, "chat")


def test_each_workload_gets_its_report_and_the_index_gives_each_verdict(tmp_path: Path) -> None:
    run = _several(tmp_path)
    paths = write_reports([load_runs(run)], run)
    names = [path.relative_to(run).as_posix() for path in paths]
    assert names[:2] == ["report.md", "report.html"]
    assert {"report.random.md", "report.random.html", "report.agentic.md", "report.agentic.html"} <= set(
        names
    )
    assert any(name.startswith("plots/agentic/") for name in names)
    assert any(name.startswith("plots/random/") for name in names)
    agentic = (run / "report.agentic.md").read_text()
    assert agentic.startswith("# demo, workload agentic: run run1\n")
    assert "Order: ep4 > tp8" in agentic and "Order: tp8 > ep4" not in agentic
    assert "Order: tp8 > ep4" in (run / "report.random.md").read_text()
    index = (run / "report.md").read_text()
    random_part, agentic_part = index.split("## Workload agentic")
    assert "## Workload random" in random_part and "[report.random](report.random.md)" in random_part
    assert "### Verdict" in random_part and "Order: tp8 > ep4" in random_part
    assert "[report.agentic](report.agentic.md)" in agentic_part and "Order: ep4 > tp8" in agentic_part
    assert "## Headline" not in index  # each workload's first screen only
    html = (run / "report.html").read_text()
    assert '<a href="report.agentic.html">report.agentic</a>' in html


def test_two_runs_are_compared_workload_by_workload_where_both_have_it(tmp_path: Path) -> None:
    run_a = _several(tmp_path, "run1", ("random",))
    run_b = _several(tmp_path, "run2")
    out = tmp_path / "against"
    write_reports([load_runs(run_a), load_runs(run_b)], out)
    index = (out / "report.md").read_text()
    assert index.startswith("# demo: run run2 against run run1\n")
    assert "Not in both runs, so not compared: agentic." in index
    assert (
        (out / "report.random.md")
        .read_text()
        .startswith("# demo, workload random: run run2 against run run1")
    )
    assert not (out / "report.agentic.md").exists()


def test_fairbench_report_and_export_take_a_run_of_several_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _several(tmp_path)
    assert main(["report", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == str(run / "report.md")
    assert main(["export", str(run), "--csv", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0])[:5] == ["campaign", "run_id", "host", "config", "workload"]
    counted = {(row["workload"], row["config"]) for row in rows}
    assert counted == {(workload, config) for workload in WORKLOADS for config in ("tp8", "ep4")}
    assert len(rows) == 2 * 2 * 2 * 3  # workloads x configs x levels x repeats
