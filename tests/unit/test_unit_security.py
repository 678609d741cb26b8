"""host.json's unit_security: systemd-analyze security's score of the config's unit, or why there is none."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from fairbench.hosts.unit_security import exposure, unit_security

BARE_UNIT = "[Unit]\nDescription=bare\n[Service]\nExecStart=/bin/true\n"


def _fake_analyze(directory: Path, stdout: str, stderr: str = "", code: int = 0) -> None:
    """A systemd-analyze on PATH that prints what it is told to (systemd is not PID 1 here)."""
    (directory / "out").write_text(stdout)
    (directory / "err").write_text(stderr)
    script = directory / "systemd-analyze"
    script.write_text(
        f'#!/bin/sh\necho "$@" > {directory}/argv\n'
        f"cat {directory}/out\ncat {directory}/err >&2\nexit {code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return tmp_path


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_score_is_read_from_systemds_own_output(tmp_path: Path) -> None:
    unit = tmp_path / "bare.service"
    unit.write_text(BARE_UNIT)
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    # A unit with no protection at all is rated near the top of systemd's scale.
    score = exposure(done.stdout)
    assert score is not None and 9.0 <= score <= 10.0, done.stdout


def test_a_rated_unit_records_its_score_and_rating(fake_path: Path) -> None:
    _fake_analyze(
        fake_path, "✗ UMask= ... 0.1\n\n→ Overall exposure level for fairbench-d-tp8.service: 1.8 OK 🙂\n"
    )
    assert unit_security("fairbench-d-tp8.service") == {"exposure": 1.8, "rating": "OK"}
    assert (fake_path / "argv").read_text().split() == ["security", "--no-pager", "fairbench-d-tp8.service"]


def test_a_host_that_cannot_rate_says_why_and_keeps_going(fake_path: Path) -> None:
    _fake_analyze(
        fake_path, "", "System has not been booted with systemd\nFailed to connect to bus: Host is down\n", 1
    )
    security = unit_security("fairbench-d-tp8.service")
    assert (security["exposure"], security["rating"]) == (None, None)
    assert security["reason"].endswith("fairbench-d-tp8.service: Failed to connect to bus: Host is down")


def test_a_host_without_systemd_analyze_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    security = unit_security("x.service")
    assert security["exposure"] is None and "No such file" in security["reason"], security
