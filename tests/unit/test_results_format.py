"""The results format: one line format and one supersede rule for the sweep and the report, and a
status.json that its one writer writes as its readers' rules expect it."""

from __future__ import annotations

import json
from pathlib import Path

from fairbench.measure.json_rules import checked_element, rule_errors
from fairbench.measure.records import RequestRecord
from fairbench.measure.results import ResultsDir
from fairbench.measure.results_format import (
    JOB_RULES,
    RANK_RULES,
    STATUS_FILE,
    STATUS_RULES,
    current_lines,
    encode_line,
    read_status,
    split_lines,
    whole_lines,
)
from fairbench.measure.status import Failure, JobRan, record_status
from fairbench.report.points import read_points

SETTINGS = {"api": "completions", "concurrency": [1]}


def test_split_lines_numbers_the_lines_that_hold_anything_and_names_a_torn_tail() -> None:
    data = b'{"a": 1}\n\n  \n{"b": 2}\n{"c"'
    assert split_lines(data) == ([(1, b'{"a": 1}'), (4, b'{"b": 2}')], 5)
    assert split_lines(data[: whole_lines(data)]) == ([(1, b'{"a": 1}'), (4, b'{"b": 2}')], None)
    assert split_lines(b"") == ([], None)


def test_a_line_superseding_the_current_one_replaces_it_and_any_other_does_not_count() -> None:
    failed = {"point_id": "c1-r0", "completed": 0}
    again = {"point_id": "c1-r0", "completed": 1, "supersedes": {"line": 1}}
    other = {"point_id": "c1-r0", "completed": 2, "supersedes": {"line": 1}}
    current, repeated = current_lines(
        [(1, failed), (2, {"point_id": "c2-r0", "completed": 1}), (3, again), (4, other)]
    )
    assert list(current) == ["c1-r0", "c2-r0"]
    assert current["c1-r0"] == (3, again)
    assert repeated == [(4, "c1-r0", 3)]


def test_the_sweep_and_the_report_read_the_same_points_from_one_file(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    record = RequestRecord(0, 8, 4, 10, 50, [20, 30], [1, 3], 4, 200, "")
    figures = {"max_concurrency": 1, "repeat": 0, "failed": 0, "output_throughput": 1.0}
    results.write_point({"point_id": "c1-r0", "completed": 0, **figures}, [])
    results.write_point({"point_id": "c1-r0", "completed": 1, **figures}, [record])
    data = results.points_path.read_bytes()
    assert data.endswith(encode_line(results.points()[0]).encode())
    points, problems, notes = read_points(results.points_path, data, {})
    assert (points, problems, notes) == (results.points(), [], [])


def test_status_json_as_its_writer_writes_it_keeps_every_rule_its_readers_read_it_by(tmp_path: Path) -> None:
    config_dir = tmp_path / "lab1" / "tp8"
    (config_dir / "ranks" / "lab2").mkdir(parents=True)
    (config_dir / "journal.log").write_text("rank 0 died\n")
    (config_dir / "ranks" / "lab2" / "journal.log").write_text("rank 1 died\n")
    timeline = {
        "unit_started_at": 1.0,
        "healthy_at": 2.0,
        "first_request_at": None,
        "last_point_ended_at": None,
    }
    ran = JobRan("tp8#r0", (0,), ("lab1", "lab2"), timeline)
    common = {"host": "lab1", "config": "tp8", "unit": "fairbench-demo-tp8.service", "run_id": "r1"}
    changed, written = record_status(config_dir, **common, failure=Failure("health", "exited"), job=ran)
    assert changed and read_status(config_dir) == written == json.loads(
        (config_dir / STATUS_FILE).read_text()
    )
    assert rule_errors(written, STATUS_RULES) == []
    (job,) = written["jobs"]
    problems: list[str] = []
    assert checked_element(job, JOB_RULES, "jobs[0]", "job", problems) == job
    (rank,) = job["ranks"]
    assert checked_element(rank, RANK_RULES, "jobs[0].ranks[0]", "rank", problems) == rank
    assert problems == []
    assert (job["journal_tail"], rank["journal_tail"]) == (["rank 0 died"], ["rank 1 died"])
    assert written["status"] == "failed" and written["hosts"] == ["lab1", "lab2"]
