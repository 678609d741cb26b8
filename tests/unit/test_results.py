"""The results directory: whole points or none, resume checks."""

from __future__ import annotations

import gzip
import json
import resource
import signal
from pathlib import Path

import pytest

from fairbench.measure.records import RequestRecord
from fairbench.measure.results import LOCK_FILE, TRACE_SHA256, ResultsDir, ResultsError
from fairbench.measure.results_format import point_id

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


def test_a_full_disk_fails_the_point_in_one_line_and_keeps_the_points_before(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    results.write_point({"point_id": "c1-r0", "completed": 1}, [record(0)])
    kept = results.points()
    # No file may grow past what points.jsonl holds: the next write fails as on a full disk (EFBIG, as
    # SIGXFSZ is ignored, instead of ENOSPC).
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (results.points_path.stat().st_size, limits[1]))
    try:
        with pytest.raises(ResultsError, match=r": cannot write point c2-r0: File too large; the points"):
            results.write_point({"point_id": "c2-r0", "completed": 1}, [record(0)] * 100)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert results.points() == kept


def test_torn_last_line_is_cut_on_prepare(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    results.write_point({"point_id": "c1-r0", "completed": 1}, [record(0)])
    with results.points_path.open("a") as handle:
        handle.write('{"point_id": "c2-r0", "compl')  # a crash in the middle of an append
    results.prepare(SETTINGS, resume=True)
    assert results.completed_ids() == {"c1-r0"}
    assert results.points_path.read_text().endswith("}\n")


def test_existing_points_need_resume(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    results.write_point({"point_id": "c1-r0", "completed": 0}, [])
    with pytest.raises(ResultsError, match="already has points; pass --resume"):
        ResultsDir(tmp_path).prepare(SETTINGS, resume=False)


def test_resume_with_other_settings_is_refused_naming_them(tmp_path: Path) -> None:
    ResultsDir(tmp_path).prepare(SETTINGS, resume=False)
    with pytest.raises(
        ResultsError, match=r"sweep.json: cannot resume with other settings: api 'completions' -> 'chat'"
    ):
        ResultsDir(tmp_path).prepare({**SETTINGS, "api": "chat"}, resume=True)


def test_a_setting_no_sweep_writes_is_named_on_one_line(tmp_path: Path) -> None:
    """A hand-edited sweep.json's key with a line break in it is quoted, so the message stays one line."""
    (tmp_path / "sweep.json").write_text(json.dumps({**SETTINGS, "a\nb": True}))
    with pytest.raises(ResultsError) as refused:
        ResultsDir(tmp_path).prepare(SETTINGS, resume=True)
    assert str(refused.value).endswith("cannot resume with other settings: 'a\\nb' True -> unset")


def test_discard_partial_removes_interrupted_writes(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    leftover = results.requests_dir / "c4-r0.jsonl.gz.tmp"
    leftover.write_bytes(b"half")
    results.discard_partial()
    assert not leftover.exists()


def failed_record(index: int) -> RequestRecord:
    return RequestRecord(index, 8, 4, 10, 20, error="connection failed: ClientConnectorError: refused")


def test_a_failed_point_measured_again_supersedes_its_line_and_keeps_its_records(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    results.write_point({"point_id": "c1-r0", "completed": 0}, [failed_record(0)])
    results.write_point({"point_id": "c2-r0", "completed": 2}, [record(0), record(1)])
    assert results.failed_ids() == {"c1-r0"}

    line = results.write_point({"point_id": "c1-r0", "completed": 1}, [record(0)])
    supersedes = {"line": 1, "requests": "requests/c1-r0.line1.jsonl.gz"}
    assert line == {"point_id": "c1-r0", "completed": 1, "supersedes": supersedes}
    # Nothing rewritten: the failed line is still the first.
    assert [json.loads(text) for text in results.points_path.read_text().splitlines()] == [
        {"point_id": "c1-r0", "completed": 0},
        {"point_id": "c2-r0", "completed": 2},
        line,
    ]
    assert results.points() == [line, {"point_id": "c2-r0", "completed": 2}]
    assert results.completed_ids() == {"c1-r0", "c2-r0"}
    assert results.failed_ids() == set()
    assert results.read_requests("c1-r0") == [record(0)]
    kept = tmp_path / supersedes["requests"]
    with gzip.open(kept, "rt") as handle:
        assert [RequestRecord.from_json(json.loads(text)) for text in handle] == [failed_record(0)]


def test_a_point_that_completed_requests_is_never_replaced(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.prepare(SETTINGS, resume=False)
    results.write_point({"point_id": "c1-r0", "completed": 1}, [record(0)])
    with pytest.raises(
        ResultsError, match=r"points.jsonl:1: c1-r0 was measured; only a failed point is redone"
    ):
        results.write_point({"point_id": "c1-r0", "completed": 1}, [record(0)])
    assert len(results.points_path.read_text().splitlines()) == 1


def test_a_point_written_twice_without_superseding_counts_once(tmp_path: Path) -> None:
    # What two writers at once left before the directory had a lock: the first line stands.
    (tmp_path / "points.jsonl").write_text(
        '{"point_id": "c1-r0", "completed": 16}\n{"point_id": "c1-r0", "completed": 0}\n'
    )
    results = ResultsDir(tmp_path)
    assert results.points() == [{"point_id": "c1-r0", "completed": 16}]
    assert results.failed_ids() == set()


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    first, second = ResultsDir(out), ResultsDir(out)
    with first.writer():
        assert (out / LOCK_FILE).exists()
        with first.writer():  # held already: the bench module holds it around the sweep's own
            pass
        with pytest.raises(ResultsError) as refused, second.writer():
            pass
        assert str(refused.value) == f"{out}: another sweep is still writing here"
    with second.writer():  # released with the first's hold
        pass


def test_a_file_is_no_results_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ResultsError) as refused, ResultsDir(tmp_path / "file").writer():
        pass
    assert str(refused.value) == f"{tmp_path / 'file'}: cannot be a results directory: it is a file"


def test_resume_against_another_model_is_refused_naming_both(tmp_path: Path) -> None:
    ResultsDir(tmp_path).prepare({**SETTINGS, "model": "org/a"}, resume=False)
    with pytest.raises(ResultsError) as refused:
        ResultsDir(tmp_path).prepare({**SETTINGS, "model": "org/b"}, resume=True)
    assert str(refused.value) == (
        f"{tmp_path / 'sweep.json'}: cannot resume against another model: the points there are of 'org/a', "
        "this sweep's is 'org/b'"
    )


def test_a_sweep_json_from_before_the_model_was_recorded_resumes_and_records_it(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text(json.dumps(SETTINGS))
    ResultsDir(tmp_path).prepare({**SETTINGS, "model": "org/a"}, resume=True)
    assert json.loads((tmp_path / "sweep.json").read_text())["model"] == "org/a"


def test_resume_of_a_replay_whose_trace_changed_is_refused_and_one_recorded_before_the_digest_resumes(
    tmp_path: Path,
) -> None:
    ResultsDir(tmp_path).prepare({**SETTINGS, TRACE_SHA256: "a" * 64}, resume=False)
    ResultsDir(tmp_path).prepare({**SETTINGS, TRACE_SHA256: "a" * 64}, resume=True)
    with pytest.raises(ResultsError) as refused:
        ResultsDir(tmp_path).prepare({**SETTINGS, TRACE_SHA256: "b" * 64}, resume=True)
    assert str(refused.value) == (
        f"{tmp_path / 'sweep.json'}: cannot resume with another trace: the requests of the window "
        "replayed there (sha256 aaaaaaaaaaaa...) differ from this sweep's (bbbbbbbbbbbb...): the trace file "
        "changed since"
    )
    (tmp_path / "sweep.json").write_text(json.dumps(SETTINGS))
    ResultsDir(tmp_path).prepare({**SETTINGS, TRACE_SHA256: "b" * 64}, resume=True)
    assert json.loads((tmp_path / "sweep.json").read_text())[TRACE_SHA256] == "b" * 64


@pytest.mark.parametrize(
    ("sweep", "points", "message"),
    [
        (b"garbage", b"", "sweep.json:1: not valid JSON (Expecting value)"),
        (b"[1]", b"", "sweep.json: not a sweep's settings (a JSON object)"),
        (b"\xff\xfe", b"", "sweep.json: not valid JSON ('utf-8' codec can't decode byte 0xff in position 0"),
        (None, b'{"point_id": "c1-r0", "completed": 1}\nxx\n', "points.jsonl:2: not a JSON line (Expecting"),
        (None, b"[1]\n", "points.jsonl:1: not a point (a JSON object)"),
        (
            None,
            b'{"point_id": "c1-r0", "completed": true}\n',
            "points.jsonl:1: a point needs a point_id (text) and completed (a count)",
        ),
    ],
)
def test_a_damaged_directory_is_named_with_its_file_and_line(
    tmp_path: Path, sweep: bytes | None, points: bytes, message: str
) -> None:
    if sweep is not None:
        (tmp_path / "sweep.json").write_bytes(sweep)
    (tmp_path / "points.jsonl").write_bytes(points)
    with pytest.raises(ResultsError) as refused:
        ResultsDir(tmp_path).prepare(SETTINGS, resume=True)
    assert str(refused.value).startswith(f"{tmp_path}/{message}")
