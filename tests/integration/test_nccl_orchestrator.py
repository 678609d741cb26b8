"""``fairbench nccl`` end to end with the real worker on a fake torch (tests/support/fake_nccl_worker.py).

No torch, no GPUs: bench/fairbench/nccl/worker.py runs as it is, and only what torch measures is made up
(an all-reduce of S bytes takes 10 + S/1000 us, half that in a CUDA graph). Each process records the rank
and environment it got, so these tests see what the workers are started with, and the worker's own
output, arguments and errors are what ``fairbench nccl`` reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from fairbench.nccl.runner import PROGRESS_PREFIX, WORKER_PROTOCOL, WORKER_SCRIPT

REPO = Path(__file__).resolve().parents[2]
FAKE_WORKER = REPO / "tests/support/fake_nccl_worker.py"
KIMI = REPO / "campaigns/kimi-k2.6-pcie.yml"


# --- one worker process ----------------------------------------------------------------------------------


def run_worker(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """One worker process, as ``fairbench nccl`` starts each rank."""
    argv = [sys.executable, str(FAKE_WORKER), *args]
    environment = {**os.environ, **env}
    return subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=60, check=False)


def test_rank_0_writes_progress_lines_then_one_protocol_document() -> None:
    argv = ["--rank", "0", "--world-size", "1", "--master-port", "29511", "--sizes", "2000,8000000"]
    done = run_worker(*argv, "--iters", "4", "--warmup", "2", "--graph-ops", "3")
    assert done.returncode == 0, done.stderr
    # 10 + S/1000 us per all-reduce of S bytes, half that per all-reduce of a replayed graph.
    assert json.loads(done.stdout) == {
        "protocol": 1,
        "world_size": 1,
        "device": "Fake GPU",
        "torch": "0.0-fake",
        "nccl": "2.99.0",
        "cuda": "99.0",
        "sizes": [
            {"bytes": 2000, "eager_us": [12.0] * 4, "graph_us": [6.0] * 4, "graph_error": None},
            {"bytes": 8000000, "eager_us": [8010.0] * 4, "graph_us": [4005.0] * 4, "graph_error": None},
        ],
    }
    assert done.stdout.count("\n") == 1
    progress = [line.split(" ", 1) for line in done.stderr.splitlines()]
    assert progress == [
        ["fairbench-nccl-progress", '{"bytes": 2000, "eager_median_us": 12.0, "graph_median_us": 6.0}'],
        [
            "fairbench-nccl-progress",
            '{"bytes": 8000000, "eager_median_us": 8010.0, "graph_median_us": 4005.0}',
        ],
    ]
    # What the sweep's side reads the document and the lines by.
    assert (PROGRESS_PREFIX, WORKER_PROTOCOL) == ("fairbench-nccl-progress", 1)


def test_only_rank_0_writes_and_count_gpus_prints_the_device_count() -> None:
    done = run_worker("--rank", "1", "--world-size", "2", "--sizes", "2000", "--iters", "2")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert run_worker("--count-gpus", FAKE_NCCL_GPUS="5").stdout == "5\n"


def test_a_failed_capture_is_recorded_and_later_sizes_run_eagerly_only() -> None:
    argv = ["--rank", "0", "--world-size", "1", "--sizes", "2000,8000000,16000000", "--iters", "2"]
    done = run_worker(*argv, FAKE_NCCL_GRAPH_FAIL="8000000")
    assert done.returncode == 0, done.stderr
    capture_error = "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert [
        (size["bytes"], size["graph_us"], size["graph_error"]) for size in json.loads(done.stdout)["sizes"]
    ] == [(2000, [6.0, 6.0], None), (8000000, None, capture_error), (16000000, None, capture_error)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "2000", "--iters", "many"], "argument --iters: invalid int value: 'many'"),
        (["--graphs"], "unrecognized arguments: --graphs"),
    ],
)
def test_the_worker_refuses_bad_arguments_as_argparse_does(argv: list[str], message: str) -> None:
    done = run_worker(*argv)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == f"{WORKER_SCRIPT.name}: error: {message}"


# --- the sweep: one worker per GPU per variant ------------------------------------------------------------


def run_nccl(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    """Runs the command; returns it and every worker process's record."""
    record = tmp_path / "record"
    record.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "fairbench", "nccl", *args, "--out", str(tmp_path / "out")]
    argv += ["--worker", str(FAKE_WORKER), "--python", sys.executable, "--iters", "6"]
    environment = {**os.environ, "FAKE_NCCL_RECORD": str(record), **env}
    done = subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=120, check=False)
    records = [json.loads(path.read_text()) for path in sorted(record.glob("rank*.json"))]
    return done, records


def _by_port(records: list[Any]) -> dict[int, list[Any]]:
    groups: dict[int, list[Any]] = defaultdict(list)
    for item in records:
        groups[item["master_port"]].append(item)
    return groups


def test_one_process_per_gpu_per_variant_with_the_variants_environment(tmp_path: Path) -> None:
    done, records = run_nccl(
        tmp_path,
        str(KIMI),
        "--hidden-size",
        "7168",
        "--variant",
        "p2p-off=NCCL_P2P_DISABLE=1",
        # Inherited NCCL settings must not leak into any variant, default included.
        NCCL_DEBUG="INFO",
        FAKE_NCCL_GPUS="3",
    )
    assert done.returncode == 0, done.stderr
    groups = _by_port(records)
    assert len(groups) == 3
    document = json.loads((tmp_path / "out/nccl.json").read_text())
    launch_envs = [variant["launch_env"] for variant in document["variants"]]
    assert [variant["name"] for variant in document["variants"]] == ["default", "tp8-nccl", "p2p-off"]
    for group in groups.values():
        assert sorted(item["rank"] for item in group) == [0, 1, 2]
        assert {item["world_size"] for item in group} == {3}
        envs = [item["env"] for item in group]
        assert all(env == envs[0] for env in envs)
        assert envs[0] in launch_envs
        launch_envs.remove(envs[0])
    assert launch_envs == []
    tuned = document["variants"][1]
    assert tuned["configs"] == ["tp8-nccl"] and tuned["launch_env"]["NCCL_PROTO"] == "LL"
    assert document["gpus"] == 3 and document["nccl"] == "2.99.0"
    assert len(tuned["sizes"]) == 14 and all(size["graph"] for size in tuned["sizes"])
    assert records[0]["sizes"] == [size["bytes"] for size in tuned["sizes"]]
    assert "tp8-nccl [14/14] 67,108,864 B" in done.stderr
    assert "results:" in done.stdout


def test_a_failing_worker_fails_its_variant_with_its_stderr_and_the_others_still_run(tmp_path: Path) -> None:
    done, records = run_nccl(
        tmp_path,
        "--hidden-size",
        "1024",
        "--gpus",
        "2",
        "--no-graph",
        "--variant",
        "broken=NCCL_P2P_DISABLE=1",
        FAKE_NCCL_FAIL="NCCL_P2P_DISABLE=1:1",
    )
    assert done.returncode == 1
    assert len(records) == 4
    document = json.loads((tmp_path / "out/nccl.json").read_text())
    default, broken = document["variants"]
    assert default["error"] is None and default["sizes"] and default["sizes"][0]["graph"] is None
    assert all(record["graph"] is False for record in records)
    assert "rank 1 (exit 1)" in broken["error"]
    assert "NCCL WARN fake failure: NCCL_P2P_DISABLE=1 is not supported" in broken["error"]
    assert "NCCL WARN fake failure" in done.stderr


def test_a_hanging_variant_is_killed_at_its_timeout(tmp_path: Path) -> None:
    done, _ = run_nccl(tmp_path, "--hidden-size", "1024", "--gpus", "2", "--timeout", "2", FAKE_NCCL_HANG="1")
    assert done.returncode == 1
    document = json.loads((tmp_path / "out/nccl.json").read_text())
    assert "timed out after 2 s" in document["variants"][0]["error"]


def test_bad_input_is_a_usage_error_naming_the_option(tmp_path: Path) -> None:
    done, records = run_nccl(tmp_path, "--hidden-size", "1024", "--variant", "x=NOT AN ASSIGNMENT")
    assert done.returncode == 2 and records == []
    assert "--variant 'x=NOT AN ASSIGNMENT'" in done.stderr
