"""The results directory: whole points or none, resume checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairbench.records import RequestRecord
from fairbench.results import ResultsDir, ResultsError, point_id

SETTINGS = {"api": "completions", "concurrency": [1, 2]}


def record(index: int) -> RequestRecord:
    return RequestRecord(index, 8, 4, 10, 50, [20, 30], [1, 3], 4, 200, "")


def test_point_and_its_records_round_trip(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "out")
    results.prepare(SETTINGS, resume=False)
    results.write_point({"point_id": point_id(2, 0), "completed": 2}, [record(0), record(1)])
    assert results.points() == [{"point_id": "c2-r0", "completed": 2}]
    assert results.completed_ids() == {"c2-r0"}
    assert results.read_requests("c2-r0") == [record(0), record(1)]
    assert not list(results.requests_dir.glob("*.tmp"))


def test_torn_last_line_is_cut_on_prepare(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    results.write_point({"point_id": "c1-r0"}, [record(0)])
    with results.points_path.open("a") as handle:
        handle.write('{"point_id": "c2-r0", "compl')  # a crash in the middle of an append
    results.prepare(SETTINGS, resume=True)
    assert results.completed_ids() == {"c1-r0"}
    assert results.points_path.read_text().endswith("}\n")


def test_existing_points_need_resume(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    results.write_point({"point_id": "c1-r0"}, [])
    with pytest.raises(ResultsError, match="already has points; pass --resume"):
        ResultsDir(tmp_path).prepare(SETTINGS, resume=False)


def test_resume_with_other_settings_is_refused_naming_them(tmp_path: Path) -> None:
    ResultsDir(tmp_path).prepare(SETTINGS, resume=False)
    with pytest.raises(
        ResultsError, match=r"sweep.json: cannot resume with other settings: api 'completions' -> 'chat'"
    ):
        ResultsDir(tmp_path).prepare({**SETTINGS, "api": "chat"}, resume=True)


def test_discard_partial_removes_interrupted_writes(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    leftover = results.requests_dir / "c4-r0.jsonl.gz.tmp"
    leftover.write_bytes(b"half")
    results.discard_partial()
    assert not leftover.exists()
