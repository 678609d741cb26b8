"""A job's plan (hosts.config_run): what a resumed job does before it starts any server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairbench.campaign.model import SINGLE_WORKLOAD
from fairbench.hosts.config_run import CleanSettings, JobRun, StageError, run_job
from fairbench.measure.sweep import SweepSpec
from fairbench.measure.workload import WorkloadSpec


def _job(out: Path, *, remeasure_failed: bool, workloads: tuple[str, ...] = (SINGLE_WORKLOAD,)) -> JobRun:
    spec = SweepSpec(
        url="http://127.0.0.1:9",
        workload=WorkloadSpec(8, 4, vocab_size=1000),
        concurrency=[1],
        repeats=2,
        only_repeats=[0],
    )
    clean = CleanSettings(
        port=9, user="nobody", unit_pattern="fairbench-*", baseline=None, tolerance_mib=None, timeout_s=1
    )
    specs = dict.fromkeys(workloads, spec)
    return JobRun(
        "fairbench-demo-tp8.service", spec.url, out, specs, clean, 1, 10, remeasure_failed=remeasure_failed
    )


def _points(path: Path, *lines: dict[str, object]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "points.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


MEASURED = {"point_id": "c1-r0", "repeat": 0, "completed": 16, "failed": 0, "num_prompts": 16}
CRASHED = {"point_id": "c1-r1", "repeat": 1, "completed": 3, "failed": 13, "num_prompts": 16}


@pytest.mark.parametrize("remeasure_failed", [False, True])
def test_a_job_with_nothing_to_measure_fails_on_another_jobs_failed_point(
    tmp_path: Path, remeasure_failed: bool
) -> None:
    # This job's repeat 0 is measured; repeat 1, another job's, crashed. Measuring failed points again is
    # that job's to do: this one starts no server, and is not reported done while the directory has one.
    _points(tmp_path, MEASURED, CRASHED)
    job = _job(tmp_path, remeasure_failed=remeasure_failed)
    with pytest.raises(StageError) as failed:
        run_job(job)
    assert str(failed.value) == "points with failed requests: c1-r1: 3 of 16 requests completed"
    assert (job.stage, job.started, job.planned) == ("sweep", False, [])


def test_a_job_of_several_workloads_measured_whole_starts_no_server(tmp_path: Path) -> None:
    for workload in ("random", "agentic"):
        _points(tmp_path / workload, MEASURED)
    job = run_job(_job(tmp_path, remeasure_failed=False, workloads=("random", "agentic")))
    assert (job.stage, job.started, job.planned) == ("clean", False, [])


def test_a_job_of_several_workloads_plans_each_in_its_directory_and_names_its_failed_points(
    tmp_path: Path,
) -> None:
    _points(tmp_path / "random", MEASURED)
    _points(tmp_path / "agentic", MEASURED, CRASHED)
    job = _job(tmp_path, remeasure_failed=False, workloads=("random", "agentic", "long"))
    with pytest.raises(StageError) as failed:
        run_job(job)
    assert str(failed.value) == "points with failed requests: agentic/c1-r1: 3 of 16 requests completed"
    assert not job.started
    # Unless measured again, a failed point fails the job before any server starts; its plan names the
    # points each workload lacks, the one never swept included.
    assert job.planned == ["long/c1-r0"]
