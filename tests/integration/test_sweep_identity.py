"""`fairbench sweep` as a real process: its point lines name their sweep, from its options or by default,
and a resume keeps the identity of the points already there or refuses another in one line."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from tests.support.sse_server import StartServer
from tests.support.sweep_process import points, run_sweep

SHORT = ("--input-len", "8", "--output-len", "4", "--warmup", "0", "--concurrency", "1,2")
IDENTITY = ("--campaign", "demo", "--run-id", "r1", "--host", "lab1", "--config", "tp8")
NAMED = {"campaign": "demo", "run_id": "r1", "host": "lab1", "config": "tp8"}


def identities(out: Path) -> list[dict[str, object]]:
    return [{key: line[key] for key in NAMED} for line in points(out)]


def test_a_resume_keeps_the_identity_of_the_points_there_and_refuses_another(
    sse_server: StartServer, tmp_path: Path
) -> None:
    url, out = sse_server().url, tmp_path / "run"
    assert run_sweep(url, out, *SHORT, *IDENTITY).returncode == 0
    points_file = out / "points.jsonl"
    points_file.write_text(points_file.read_text().splitlines(keepends=True)[0])  # as a crash would leave

    refused = run_sweep(url, out, *SHORT, "--resume", "--config", "ep4")
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"fairbench sweep: error: {points_file}: cannot resume as another sweep: config 'tp8' -> 'ep4' "
        "(the points there are of campaign 'demo', run_id 'r1', host 'lab1', config 'tp8'); measure into "
        "another directory"
    )
    assert len(points(out)) == 1

    # Options left out are the points'; this machine's name does not replace the host they name.
    resumed = run_sweep(url, out, *SHORT, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert identities(out) == [NAMED, NAMED]


def test_by_hand_a_sweep_names_this_machine_as_its_host_and_nothing_else(
    sse_server: StartServer, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    assert run_sweep(sse_server().url, out, *SHORT).returncode == 0
    by_hand = {"campaign": None, "run_id": None, "host": platform.node(), "config": None}
    assert identities(out) == [by_hand, by_hand]


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("--host", "", "must name something: it is empty"),
        ("--config", "tp8\nExecStart=x", "'tp8\\nExecStart=x' holds a control character"),
    ],
)
def test_an_identity_that_names_nothing_is_refused_in_one_line(
    tmp_path: Path, option: str, value: str, problem: str
) -> None:
    refused = run_sweep("http://127.0.0.1:9", tmp_path / "run", *SHORT, f"{option}={value}")
    assert refused.returncode == 2
    assert refused.stderr == f"fairbench sweep: error: argument {option}: {problem}\n"
    assert not (tmp_path / "run").exists()
