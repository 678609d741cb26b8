"""A point line names its sweep (campaign, run id, host, config); a resume keeps the identity of the points
already there, and refuses another."""

from __future__ import annotations

import asyncio
import io
import json
import platform
from pathlib import Path
from typing import Any

import pytest
from tests.support.sse_server import StartServer

from fairbench.measure.progress import Progress
from fairbench.measure.records import RequestRecord
from fairbench.measure.results import IDENTITY_KEYS, ResultsDir, ResultsError, RunIdentity
from fairbench.measure.sweep import Sweep, SweepSpec
from fairbench.measure.workload import WorkloadSpec

SETTINGS = {"api": "completions", "concurrency": [1, 2]}
TP8 = RunIdentity(campaign="demo", run_id="r1", host="lab1", config="tp8")


def record(index: int) -> RequestRecord:
    return RequestRecord(index, 8, 4, 10, 50, [20, 30], [1, 3], 4, 200, "")


def with_point(root: Path, **line: Any) -> ResultsDir:
    """A results directory holding one point line with ``line``'s keys besides its own."""
    results = ResultsDir(root)
    results.prepare(SETTINGS, resume=False)
    results.write_point({**line, "point_id": "c1-r0", "completed": 1}, [record(0)])
    return results


def test_a_resume_takes_the_fields_it_leaves_out_from_the_points_there(tmp_path: Path) -> None:
    results = with_point(tmp_path, **TP8.to_json())
    assert results.identity() == TP8
    assert results.resumed_identity(RunIdentity()) == TP8
    assert results.resumed_identity(RunIdentity(host="lab1")) == TP8


def test_a_resume_as_another_sweep_is_refused_naming_each_field(tmp_path: Path) -> None:
    results = with_point(tmp_path, **TP8.to_json())
    with pytest.raises(ResultsError) as refused:
        results.resumed_identity(RunIdentity(host="lab2", config="ep4"))
    assert str(refused.value) == (
        f"{results.points_path}: cannot resume as another sweep: host 'lab1' -> 'lab2'; "
        "config 'tp8' -> 'ep4' (the points there are of campaign 'demo', run_id 'r1', host 'lab1', "
        "config 'tp8'); measure into another directory"
    )


def test_a_field_the_points_there_left_out_cannot_be_given_on_resume(tmp_path: Path) -> None:
    # Their lines would name another sweep than the new ones.
    results = with_point(tmp_path, **RunIdentity(host="lab1").to_json())
    with pytest.raises(ResultsError, match=r"cannot resume as another sweep: campaign None -> 'demo' \("):
        results.resumed_identity(RunIdentity(campaign="demo"))


def test_points_from_before_lines_named_their_sweep_resume_as_any(tmp_path: Path) -> None:
    results = with_point(tmp_path)
    assert results.identity() is None
    assert results.resumed_identity(TP8) == TP8


def test_lines_of_two_sweeps_in_one_file_are_refused_naming_the_line(tmp_path: Path) -> None:
    results = with_point(tmp_path, **TP8.to_json())
    other = {**TP8.to_json(), "config": "ep4", "point_id": "c2-r0", "completed": 1}
    with results.points_path.open("a") as handle:
        handle.write(json.dumps(other) + "\n")
    with pytest.raises(ResultsError, match=rf"^{results.points_path}:2: a point of another sweep \("):
        results.identity()


def _sweep(url: str, out: Path, identity: RunIdentity) -> list[dict[str, Any]]:
    spec = SweepSpec(
        url=url,
        workload=WorkloadSpec(8, 4, vocab_size=30000),
        concurrency=[1, 2],
        warmup="0",
        energy=False,
        identity=identity,
    )
    asyncio.run(Sweep(spec, ResultsDir(out), Progress(io.StringIO(), live=False)).run(resume=True))
    return [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]


def test_each_point_line_names_its_sweep_first(sse_server: StartServer, tmp_path: Path) -> None:
    lines = _sweep(sse_server().url, tmp_path / "out", TP8)
    assert [list(line)[: len(IDENTITY_KEYS)] for line in lines] == [list(IDENTITY_KEYS)] * 2
    assert [RunIdentity(**{key: line[key] for key in IDENTITY_KEYS}) for line in lines] == [TP8, TP8]


def test_a_sweep_that_names_no_host_names_this_machine(sse_server: StartServer, tmp_path: Path) -> None:
    lines = _sweep(sse_server().url, tmp_path / "out", RunIdentity(config="tp8"))
    assert [(line["campaign"], line["host"], line["config"]) for line in lines] == [
        (None, platform.node(), "tp8")
    ] * 2
