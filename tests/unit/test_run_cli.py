"""``fairbench run``'s command line and its ending, with ansible-runner replaced: nothing is played."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ansible_runner  # type: ignore[import-untyped]
import pytest
from ansible_runner.exceptions import ConfigurationError  # type: ignore[import-untyped]

from fairbench.cli.main import main

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = REPO / "campaigns" / "demo.yml"


class FakeRunner:
    """``ansible_runner.run`` as it ends: its artifacts written, a status and an exit status."""

    def __init__(self, status: str = "successful", rc: int = 0) -> None:
        self.status = status
        self.rc = rc
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        # The real one installs a handler that turns Ctrl-C into a cancellation, and leaves it.
        signal.signal(signal.SIGINT, lambda number, frame: None)
        artifacts = Path(kwargs["private_data_dir"]) / "artifacts" / "ident"
        artifacts.mkdir(parents=True)
        (artifacts / "stdout").write_text("PLAY RECAP\n")
        return SimpleNamespace(status=self.status, rc=self.rc, config=SimpleNamespace(ident="ident"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project for ansible-runner to be pointed at, with an inventory."""
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("[]\n")
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    return tmp_path


@pytest.fixture(autouse=True)
def runner(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    fake = FakeRunner()
    monkeypatch.setattr(ansible_runner, "run", fake)
    return fake


def outcome(
    project: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[int | str | None, str, str]:
    """``fairbench run``'s exit status, stdout and stderr."""
    argv = ["run", str(CAMPAIGN), "-i", str(project / "hosts.yml"), "--project-dir", str(project), *flags]
    try:
        code: int | str | None = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_without_ansible_runner_the_run_ends_in_one_line(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ansible_runner", None)
    code, _, err = outcome(project, capsys)
    assert (code, err) == (
        1,
        "fairbench run: error: ansible-runner is not installed: pip install 'fairbench[control]'\n",
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--run-id", "../elsewhere"],
            "--run-id: '../elsewhere' must be letters, digits, '_', '.' and '-', starting with a letter "
            "or digit",
        ),
        (
            ["--run-id", ""],
            "--run-id: '' must be letters, digits, '_', '.' and '-', starting with a letter or digit",
        ),
        (["--limit", ""], "--limit: an empty pattern; leave the option out to run on every host"),
        (["-e", "run_id=r2"], "-e/--extra-var: run_id is set by --run-id"),
        (["-e", "campaign=other.yml"], "-e/--extra-var: campaign is set by the CAMPAIGN argument"),
    ],
)
def test_a_bad_argument_stops_the_run_before_ansible_in_one_line(
    project: Path, runner: FakeRunner, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    code, _, err = outcome(project, capsys, *flags)
    assert (code, err) == (2, f"fairbench run: error: {message}\n")
    assert runner.calls == []


def test_ctrl_c_during_the_play_says_how_to_resume_and_keeps_ansibles_output(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ansible_runner, "run", FakeRunner(status="canceled", rc=254))
    code, out, err = outcome(project, capsys, "--run-id", "r1")
    log = project / "results" / "demo" / "r1" / "ansible.log"
    assert code == 130
    assert out.splitlines()[-2:] == [
        f"ansible's output: {log}",
        "interrupted: sweeps already started go on on their hosts; --run-id r1 resumes",
    ]
    assert (err, log.read_text()) == ("", "PLAY RECAP\n")


def test_the_run_leaves_ctrl_c_as_it_found_it(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGINT)
    code, _, _ = outcome(project, capsys, "--run-id", "r1")
    assert code == 0
    assert signal.getsignal(signal.SIGINT) is before


def test_an_ansible_runner_error_ends_the_run_in_one_line(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing_playbook_command(**kwargs: Any) -> Any:
        raise ConfigurationError("ansible-playbook command not found")

    monkeypatch.setattr(ansible_runner, "run", missing_playbook_command)
    code, _, err = outcome(project, capsys)
    assert (code, err) == (1, "fairbench run: error: ansible-runner: ansible-playbook command not found\n")


def test_output_that_cannot_be_kept_is_one_line_and_the_run_still_ends(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "results").write_text("a file where the results directory belongs\n")
    code, _, err = outcome(project, capsys, "--run-id", "r1")
    log = project / "results" / "demo" / "r1" / "ansible.log"
    assert (code, err) == (
        0,
        f"fairbench run: error: cannot keep ansible's output as {log}: Not a directory\n",
    )
