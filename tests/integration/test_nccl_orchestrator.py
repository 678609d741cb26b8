"""``fairbench nccl`` end to end with a fake worker (tests/support/fake_nccl_worker.py): no torch, no GPUs.

The fake speaks the real worker's protocol and records, per process, the rank and environment it got, so
these tests see what the real workers would be started with. The real worker runs only on GPU machines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FAKE_WORKER = REPO / "tests/support/fake_nccl_worker.py"
KIMI = REPO / "campaigns/kimi-k2.6-pcie.yml"


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
    assert "rank 1 (exit 3)" in broken["error"]
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
