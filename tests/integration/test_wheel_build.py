"""The bench role's wheel build (``python -m fairbench.hosts.wheel``): setuptools builds in the checkout's one
build/ directory, so a build waits for the one in progress (its lock, build/.wheel.lock), and then builds."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _build(source: Path, outdir: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "fairbench.hosts.wheel", str(source), f"--outdir={outdir}"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_build_waits_for_the_one_in_progress_in_the_same_checkout(tmp_path: Path) -> None:
    lock_path = REPO / "build" / ".wheel.lock"
    lock_path.parent.mkdir(exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another build in progress
        waiting = _build(REPO, tmp_path / "out")
        time.sleep(3)
        assert waiting.poll() is None, waiting.communicate()[0]
        assert not (tmp_path / "out").exists()
    output = waiting.communicate(timeout=300)[0]
    assert waiting.returncode == 0, output
    assert output.strip().splitlines()[-1].startswith("Successfully built fairbench-")
    assert len(list((tmp_path / "out").glob("fairbench-*.whl"))) == 1


def test_a_source_that_is_no_directory_is_named_by_the_build_and_nothing_is_created(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-checkout"
    build = _build(missing, tmp_path / "out")
    output = build.communicate(timeout=120)[0]
    assert build.returncode != 0 and f"Source {missing} is not a directory" in output
    assert not missing.exists()
