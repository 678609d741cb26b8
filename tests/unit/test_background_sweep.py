"""A sweep in the background: followed through Ansible's async job file and its progress file; alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairbench.campaign.load import load_campaign
from fairbench.hosts.ansible_support import SWEEP_LOG, SWEEP_PROGRESS, background_sweep, sweep, sweep_spec
from fairbench.measure.results import ResultsDir, ResultsError

REPO = Path(__file__).resolve().parents[2]


def write_job(async_dir: Path, job: str, content: str) -> Path:
    async_dir.mkdir(exist_ok=True)
    job_file = async_dir / job
    job_file.write_text(content)
    return job_file


def test_running_job_returns_the_sweeps_progress(tmp_path: Path) -> None:
    out = tmp_path / "tp8"
    out.mkdir()
    write_job(tmp_path / "async", "1.2", json.dumps({"started": True, "finished": False}))
    assert background_sweep(tmp_path / "async", "1.2", out) == {"finished": False, "progress": {}}
    state = {"label": "c4-r0", "done": 3, "total": 16, "finished": ["c1-r0: 16/16 ok"]}
    (out / SWEEP_PROGRESS).write_text(json.dumps(state))
    assert background_sweep(tmp_path / "async", "1.2", out) == {"finished": False, "progress": state}


def test_half_written_job_file_is_a_job_still_starting(tmp_path: Path) -> None:
    write_job(tmp_path / "async", "1.2", '{"started": tr')
    assert background_sweep(tmp_path / "async", "1.2", tmp_path)["finished"] is False


def test_finished_job_returns_the_sweep_result_once_and_removes_the_job_file(tmp_path: Path) -> None:
    result = {"changed": True, "written": ["c1-r0"], "invocation": {}}
    job_file = write_job(tmp_path / "async", "1.2", json.dumps(result))
    (tmp_path / SWEEP_PROGRESS).write_text(json.dumps({"finished": ["c1-r0: 16/16 ok"]}))
    expected = {**result, "finished": True, "progress": {"finished": ["c1-r0: 16/16 ok"]}}
    assert background_sweep(tmp_path / "async", "1.2", tmp_path) == expected
    assert not job_file.exists()


def test_unknown_job_fails_naming_it(tmp_path: Path) -> None:
    status = background_sweep(tmp_path / "async", "9.9", tmp_path)
    assert status["finished"] is True and status["failed"] is True
    assert "9.9" in status["msg"]


def test_a_second_sweep_into_a_directory_being_written_is_refused(tmp_path: Path) -> None:
    # As a campaign re-run would meet the background sweep an interrupted run left going: the lock is the
    # results directory's own, the one fairbench sweep takes too.
    spec = sweep_spec(load_campaign(REPO / "campaigns/demo.yml").workloads["random"], "http://127.0.0.1:9")
    refused = pytest.raises(ResultsError, match=f"^{tmp_path}: another sweep is still writing here$")
    with ResultsDir(tmp_path).writer(), refused:
        sweep(spec, tmp_path, check=False)
    assert not (tmp_path / "points.jsonl").exists()
    assert not (tmp_path / SWEEP_LOG).exists()
