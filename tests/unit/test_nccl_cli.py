"""``fairbench nccl``'s command line: every bad argument ends in one line, before any worker starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fairbench.cli.main import main

FAKE_WORKER = Path(__file__).resolve().parents[1] / "support" / "fake_nccl_worker.py"


def outcome(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int | str | None, str]:
    """``fairbench nccl ARGV``'s exit status and the last line of its stderr."""
    try:
        code: int | str | None = main(["nccl", *argv])
    except SystemExit as exit_info:
        code = exit_info.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.splitlines()[-1] if err else ""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--hidden-size", "200000"],
            "argument --hidden-size: '200000' must be an integer from 1 to 131,072 (a model's hidden size), "
            "got 200000",
        ),
        (["--hidden-size", "nan"], "argument --hidden-size: 'nan' must be a finite number, got nan"),
        (
            ["--gpus", "5000"],
            "argument --gpus: '5000' must be an integer from 1 to 4,096 GPUs, got 5000",
        ),
        (
            ["--iters", "99999999999"],
            "argument --iters: '99999999999' must be an integer from 1 to 1,000,000 all-reduces, "
            "got 99999999999",
        ),
        (
            ["--timeout", "1e23"],
            "argument --timeout: '1e23' must be a number from 0.001 to 86400 seconds, got 1e+23",
        ),
        (
            ["--out", ""],
            "argument --out: an empty path would write into the current directory: name one",
        ),
    ],
)
def test_a_bad_number_or_path_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    argv = ["--hidden-size", "64", "--dry-run", *flags]
    assert outcome(capsys, *argv) == (2, f"fairbench nccl: error: {message}")


def test_a_model_configs_hidden_size_has_the_same_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"hidden_size": 10**9}))
    assert outcome(capsys, "--model-config", str(config), "--dry-run") == (
        2,
        f"fairbench nccl: error: --model-config: {config}: hidden_size must be an integer from 1 to 131,072 "
        "(a model's hidden size), got 1000000000",
    )


def test_an_out_that_cannot_be_a_directory_is_refused_before_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "out").write_text("a file\n")
    monkeypatch.setenv("FAKE_NCCL_RECORD", str(tmp_path))
    argv = ["--hidden-size", "64", "--gpus", "1", "--python", sys.executable, "--worker", str(FAKE_WORKER)]
    assert outcome(capsys, *argv, "--out", str(tmp_path / "out")) == (
        2,
        f"fairbench nccl: error: --out: cannot create {tmp_path / 'out'}: File exists",
    )
    assert list(tmp_path.glob("rank*.json")) == []  # no worker ran


def test_a_result_that_cannot_be_written_is_a_runtime_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "out" / "nccl.json.tmp").mkdir(parents=True)  # where the document is written first
    monkeypatch.setenv("FAKE_NCCL_RECORD", str(tmp_path))
    argv = ["--hidden-size", "64", "--gpus", "1", "--python", sys.executable, "--worker", str(FAKE_WORKER)]
    assert outcome(capsys, *argv, "--iters", "2", "--out", str(tmp_path / "out")) == (
        1,
        "fairbench nccl: error: --out: cannot write nccl.json: Is a directory",
    )
