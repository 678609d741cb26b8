"""``fairbench export`` as a user runs it, on a run tree of real sweeps against ``fairbench sim``."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from tests.support.results_tree import REPO, brief_run


def test_every_point_of_every_config_is_a_row_holding_each_key_of_its_line(tmp_path: Path) -> None:
    run = brief_run(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "fairbench", "export", str(run), "--csv", str(tmp_path / "run.csv")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == (f"{tmp_path / 'run.csv'}\n", "")
    with (tmp_path / "run.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    expected = [
        (config, json.loads(line))
        for config in ("tp8", "ep4")
        for line in (run / "lab1" / config / "points.jsonl").read_text().splitlines()
    ]
    assert len(rows) == len(expected) == 8  # 2 configs x 2 levels x 2 repeats
    for row, (config, line) in zip(rows, expected, strict=True):
        assert (row["campaign"], row["run_id"], row["host"], row["config"]) == (
            "demo",
            "brief",
            "lab1",
            config,
        )
        assert row["point_id"] == line["point_id"]
        for key, value in line.items():
            if key in ("campaign", "run_id", "host", "config"):
                continue  # the tree's, which the sweep by hand did not name (tests/support/results_tree.py)
            if isinstance(value, bool) or value is None or isinstance(value, str):
                assert row[key] == ("" if value is None else str(value)), key
            elif isinstance(value, dict | list):  # an object (slo_measured) is its JSON text
                assert json.loads(row[key]) == value, key
            else:
                assert float(row[key]) == value, key
