"""``fairbench export``: the points of a run the report uses, as one table, from trees written here line by
line (tests/integration/test_export_sim_run.py exports a tree of real sweeps)."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest
from tests.support.report_files import CAMPAIGN, lines, point

from fairbench.cli.main import main

IDENTITY = ["campaign", "run_id", "host", "config"]


def write_run(root: Path, points_of: dict[tuple[str, str], bytes]) -> Path:
    """A run of the demo campaign with each (host, config)'s points.jsonl as given; every config ok."""
    run = root / "demo" / "run1"
    run.mkdir(parents=True)
    configs = sorted({config for _, config in points_of}, key=list(CAMPAIGN["configs"]).index)
    (run / "campaign.json").write_text(
        json.dumps({**CAMPAIGN, "configs": {name: CAMPAIGN["configs"][name] for name in configs}})
    )
    for (host, config), content in points_of.items():
        directory = run / host / config
        directory.mkdir(parents=True)
        (directory / "status.json").write_text('{"status": "ok"}')
        (directory / "points.jsonl").write_bytes(content)
    return run


def export(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["export", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_one_row_per_point_the_report_uses_identity_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = point(1, completed=0, failed=16)
    again = point(1, supersedes={"line": 1, "requests": "requests/c1-r0.line1.jsonl.gz"})
    energy = point(4, gpu_energy_per_gpu_j={"0": 12.5})
    run = write_run(
        tmp_path,
        {
            ("lab1", "tp8"): lines(failed, point(4), again),
            ("lab1", "ep4"): lines(point(1, repeat=1)) + b"not json\n" + lines(energy),
            ("lab2", "tp8"): lines(point(1)),
        },
    )
    code, out, err = export(capsys, run, "--csv")
    assert code == 0
    assert out == f"{run / 'points.csv'}\n"
    rows = read_csv(run / "points.csv")
    # By host, the campaign's config order, then as measured; the failed line is history, not a row.
    assert [[row[key] for key in [*IDENTITY, "point_id", "completed"]] for row in rows] == [
        ["demo", "run1", "lab1", "tp8", "c1-r0", "16"],
        ["demo", "run1", "lab1", "tp8", "c4-r0", "16"],
        ["demo", "run1", "lab1", "ep4", "c1-r1", "16"],
        ["demo", "run1", "lab1", "ep4", "c4-r0", "16"],
        ["demo", "run1", "lab2", "tp8", "c1-r0", "16"],
    ]
    header = next(csv.reader(io.StringIO((run / "points.csv").read_text())))
    assert header == [*IDENTITY, *point(1), "supersedes", "gpu_energy_per_gpu_j"]
    assert json.loads(rows[0]["supersedes"]) == {"line": 1, "requests": "requests/c1-r0.line1.jsonl.gz"}
    assert rows[1]["supersedes"] == ""
    assert json.loads(rows[3]["gpu_energy_per_gpu_j"]) == {"0": 12.5}
    assert float(rows[3]["output_throughput"]) == energy["output_throughput"]
    # The damaged line is left out, and named.
    assert f"fairbench export: note: {run / 'lab1' / 'ep4' / 'points.jsonl'}:2: not JSON" in err


def test_the_tree_names_each_row_whatever_its_line_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    by_hand = {"campaign": None, "run_id": None, "host": "my-laptop", "config": None}
    run = write_run(tmp_path, {("lab1", "tp8"): lines(point(1, **by_hand), point(4))})
    assert export(capsys, run, "--csv", tmp_path / "all.csv")[0] == 0
    rows = read_csv(tmp_path / "all.csv")
    assert [[row[key] for key in IDENTITY] for row in rows] == [["demo", "run1", "lab1", "tp8"]] * 2
    assert list(rows[0])[:4] == IDENTITY and list(rows[0]).count("host") == 1


def test_csv_to_standard_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path, {("lab1", "tp8"): lines(point(1))})
    code, out, _ = export(capsys, run, "--csv", "-")
    assert code == 0
    assert [row["point_id"] for row in csv.DictReader(io.StringIO(out))] == ["c1-r0"]
    assert not (run / "points.csv").exists()


def test_parquet_without_pyarrow_names_the_package_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    run = write_run(tmp_path, {("lab1", "tp8"): lines(point(1))})
    code, out, err = export(capsys, run, "--csv", "--parquet")
    assert (code, out) == (2, "")
    assert err.startswith(
        "fairbench export: error: --parquet: needs the pyarrow package, which this Python lacks"
    )
    assert err.count("\n") == 1
    assert not (run / "points.csv").exists() and not (run / "points.parquet").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "name a table to write: --csv [OUT], --parquet [OUT], or both"),
        (("--parquet", "-"), "--parquet: a Parquet file cannot go to standard output: name a file"),
    ],
)
def test_a_request_that_writes_no_table_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    run = write_run(tmp_path, {("lab1", "tp8"): lines(point(1))})
    assert export(capsys, run, *args) == (2, "", f"fairbench export: error: {message}\n")


def test_a_directory_that_is_no_run_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = export(capsys, tmp_path, "--csv")
    assert code == 2
    assert err == f"fairbench export: error: {tmp_path / 'campaign.json'}: missing: is {tmp_path} a run " + (
        "(results/<campaign>/<run_id>)?\n"
    )


def test_parquet_holds_the_same_table_with_its_types(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parquet = pytest.importorskip("pyarrow.parquet")
    energy = point(4, gpu_energy_per_gpu_j={"0": 12.5})
    run = write_run(tmp_path, {("lab1", "tp8"): lines(point(1), energy), ("lab2", "tp8"): lines(point(1))})
    code, out, _ = export(capsys, run, "--csv", "--parquet")
    assert code == 0 and out.splitlines() == [str(run / "points.csv"), str(run / "points.parquet")]
    table = parquet.read_table(run / "points.parquet")
    rows = read_csv(run / "points.csv")
    assert table.column_names == list(rows[0]) and table.num_rows == len(rows) == 3
    columns = table.to_pydict()
    assert columns["host"] == ["lab1", "lab1", "lab2"] and columns["point_id"] == ["c1-r0", "c4-r0", "c1-r0"]
    # Numbers stay numbers; a nested object is its JSON text, absent where a point has none.
    assert (
        columns["completed"] == [16, 16, 16]
        and columns["output_throughput"][1] == energy["output_throughput"]
    )
    assert columns["gpu_energy_per_gpu_j"] == [None, json.dumps({"0": 12.5}), None]
