"""``fairbench run``'s command line and its ending, with ansible-runner replaced: nothing is played."""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import signal
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ansible_runner  # type: ignore[import-untyped]
import pytest
import yaml
from ansible_runner.exceptions import ConfigurationError  # type: ignore[import-untyped]

from fairbench.campaign.load import load_campaign
from fairbench.cli import run as run_command
from fairbench.cli.campaign_plan import summary_line
from fairbench.cli.inventory_hosts import InventoryHosts
from fairbench.cli.main import main
from fairbench.fleet.forecast import LEAST, MOST, read_forecast

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = REPO / "campaigns" / "demo.yml"


class FakeRunner:
    """``ansible_runner.run`` as it ends. Asked by ad-hoc ``debug`` for the run's directory (run_dir), it
    answers ``resolved`` (default: the role's default, the project's results/<campaign>/<run_id>); playing
    the playbook, it writes ``PLAY RECAP`` to the log Ansible was given and ends with its status."""

    def __init__(self, status: str = "successful", rc: int = 0, resolved: Path | None = None) -> None:
        self.status = status
        self.rc = rc
        self.resolved = resolved
        self.calls: list[dict[str, Any]] = []
        self.role_defaults: dict[str, Any] = {}

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        # The real one installs handlers that turn Ctrl-C and SIGTERM into a cancellation, and leaves them.
        signal.signal(signal.SIGINT, lambda number, frame: None)
        signal.signal(signal.SIGTERM, lambda number, frame: None)
        if "module" in kwargs:
            self.role_defaults = json.loads(Path(kwargs["inventory"][0]).read_text())
            asked = kwargs["extravars"]
            where = self.resolved or (
                Path(kwargs["project_dir"])
                / "results"
                / asked["bench_campaign"]["name"]
                / asked["bench_run_id"]
            )
            kwargs["event_handler"]({"event": "runner_on_ok", "event_data": {"res": {"msg": str(where)}}})
            return SimpleNamespace(status="successful", rc=0)
        if "ANSIBLE_LOG_PATH" in kwargs["envvars"]:
            Path(kwargs["envvars"]["ANSIBLE_LOG_PATH"]).write_text("PLAY RECAP\n")
        return SimpleNamespace(status=self.status, rc=self.rc)

    @property
    def play(self) -> dict[str, Any]:
        """The playbook's run."""
        return next(call for call in self.calls if "playbook" in call)

    @property
    def question(self) -> dict[str, Any]:
        """The ad-hoc run that asked for the run's directory."""
        return next(call for call in self.calls if "module" in call)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project for ansible-runner to be pointed at, with an inventory, and the bench role whose
    bench_run_dir names the run's directory."""
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("[]\n")
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    (tmp_path / "roles").symlink_to(REPO / "roles")
    return tmp_path


@pytest.fixture(autouse=True)
def runner(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    fake = FakeRunner()
    monkeypatch.setattr(ansible_runner, "run", fake)
    return fake


@pytest.fixture(autouse=True)
def inventory(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], str | None]]:
    """ansible-inventory as it reads an inventory of two GPU hosts: each call's sources and limit."""
    asked: list[tuple[list[str], str | None]] = []

    def read(sources: list[str], limit: str | None = None) -> InventoryHosts:
        asked.append((list(sources), limit))
        hosts = ["gpu1", "gpu2"]
        return InventoryHosts({"all": hosts, "gpu_hosts": hosts}, hosts, None)

    monkeypatch.setattr(run_command, "read_inventory", read)
    return asked


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
        (
            ["-e", "bench_resume_changed=true"],
            "-e/--extra-var: bench_resume_changed is set by --allow-changed-campaign",
        ),
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


def test_ansible_playbooks_own_options_reach_it_as_given_with_paths_made_absolute(
    project: Path,
    runner: FakeRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vars.yml").write_text("greeting: hello\n")
    flags = [
        *("-vv", "-t", "run", "--tags", "deploy", "--skip-tags", "nccl", "-C", "-D", "-f", "4"),
        *("-u", "admin", "--private-key", "keys/id", "-c", "ssh", "-T", "30"),
        *("--ssh-common-args", "-o ProxyJump=bastion", "--ssh-extra-args=-R 8080:localhost:80"),
        *("-b", "--become-method", "su", "--become-user", "svc", "--become-pass-file", "become.txt"),
        *("--vault-password-file", "vault.txt", "--vault-id", "lab@lab.txt", "--vault-id", "ci@prompt"),
        *("-e", "a=1 b='two words'", "-e", "@vars.yml", "-e", '{"c": 3}', "-l", "gpu1"),
    ]
    monkeypatch.setattr(getpass, "getpass", lambda prompt: "ci-secret")
    code, _, err = outcome(project, capsys, "--run-id", "r1", *flags)
    assert (code, err) == (0, "")
    extra = ["-e", "a=1 b='two words'", "-e", f"@{tmp_path / 'vars.yml'}", "-e", '{"c": 3}']
    vault = [
        f"--vault-password-file={tmp_path / 'vault.txt'}",
        f"--vault-id=lab@{tmp_path / 'lab.txt'}",
        "--vault-id=ci@prompt",
    ]
    assert shlex.split(runner.play["cmdline"]) == [
        "-vv",
        *("--tags=run", "--tags=deploy", "--skip-tags=nccl", "--check", "--diff", "--forks=4"),
        *("--user=admin", f"--private-key={tmp_path / 'keys' / 'id'}", "--connection=ssh", "--timeout=30"),
        *("--ssh-common-args=-o ProxyJump=bastion", "--ssh-extra-args=-R 8080:localhost:80"),
        *("--become", "--become-method=su", "--become-user=svc"),
        f"--become-password-file={tmp_path / 'become.txt'}",
        *vault,
        *extra,
    ]
    assert (runner.play["inventory"], runner.play["limit"]) == (
        [str(project / "hosts.yml")],
        "gpu1,localhost",
    )
    # fairbench's own variables: ansible-runner puts them after the command line's, so they win.
    assert runner.play["extravars"] == {
        "campaign": os.path.relpath(CAMPAIGN, project),
        "run_id": "r1",
        "bench_resume_changed": False,
    }
    # Asking Ansible for the run's directory takes what reading the variables takes, nothing else.
    assert shlex.split(runner.question["cmdline"]) == [
        *extra,
        *vault,
        *("--playbook-dir", str(project / "playbooks")),
    ]
    assert runner.question["inventory"][1:] == [str(project / "hosts.yml")]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("a=1 run_id=r2", "-e/--extra-var: run_id is set by --run-id"),
        ('{"campaign": "other.yml"}', "-e/--extra-var: campaign is set by the CAMPAIGN argument"),
        ("@{dir}/reserved.yml", "-e/--extra-var: @{dir}/reserved.yml sets run_id, which --run-id sets"),
        ("@{dir}/vaulted.yml", "-e/--extra-var: @{dir}/vaulted.yml sets run_id, which --run-id sets"),
        ("@{dir}/missing.yml", "-e/--extra-var: @{dir}/missing.yml: cannot read: No such file or directory"),
        ("@{dir}/list.yml", "-e/--extra-var: @{dir}/list.yml is not a mapping of variables"),
        ("./vars.yml", "-e/--extra-var: './vars.yml' names a file: write -e @./vars.yml"),
        ("greeting", "-e/--extra-var: 'greeting' is not KEY=VALUE with KEY a variable name"),
        ("{a: [", "-e/--extra-var: '{a: [' is not YAML: expected the node content, but found '<stream end>'"),
    ],
)
def test_an_extra_variable_that_cannot_be_handed_on_stops_the_run_before_ansible(
    project: Path, runner: FakeRunner, capsys: pytest.CaptureFixture[str], given: str, message: str
) -> None:
    (project / "reserved.yml").write_text("greeting: hello\nrun_id: r2\n")
    # A value vaulted on its own: the names stay readable, and this one is fairbench's.
    (project / "vaulted.yml").write_text("run_id: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n")
    (project / "list.yml").write_text("- run_id\n")
    code, _, err = outcome(project, capsys, "-e", given.replace("{dir}", str(project)))
    assert (code, err) == (2, f"fairbench run: error: {message.replace('{dir}', str(project))}\n")
    assert runner.calls == []


def test_an_encrypted_extra_vars_file_is_handed_on_unread(
    project: Path, runner: FakeRunner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    encrypted = tmp_path / "secrets.yml"
    encrypted.write_text("$ANSIBLE_VAULT;1.1;AES256\n6162636465\n")
    code, _, _ = outcome(project, capsys, "-e", f"@{encrypted}")
    assert code == 0
    assert shlex.split(runner.play["cmdline"]) == ["-e", f"@{encrypted}"]


def test_an_option_of_ansible_playbook_not_mirrored_is_refused_by_name(
    project: Path, runner: FakeRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = outcome(project, capsys, "--step")
    assert (code, err) == (2, "fairbench run: error: unrecognized arguments: --step\n")
    assert runner.calls == []


# ansible-playbook's prompts, as ansible-core 2.19 writes them (ansible/cli/__init__.py).
ANSIBLE_PROMPTS = {
    "ssh": "SSH password: ",
    "become": "BECOME password: ",
    "become after ssh": "BECOME password[defaults to SSH password]: ",
    "vault": "Vault password: ",
    "vault id ci": "Vault password (ci): ",
    "vault id default": "Vault password (default): ",
}


def answer(passwords: dict[str, str], prompt: str) -> str | None:
    """What ansible-runner types at ansible-playbook's ``prompt``: the first pattern that matches."""
    for pattern, secret in passwords.items():
        if re.compile(pattern, re.M).search(prompt):
            return secret
    return None


@pytest.mark.parametrize(
    "case",
    [
        (["-K"], ["b"], ["BECOME password: "], {"become": "b", "ssh": None, "vault": None}),
        (
            ["-k", "-K"],
            ["s", ""],
            ["SSH password: ", "BECOME password[defaults to SSH password]: "],
            {"ssh": "s", "become after ssh": "s"},
        ),
        (
            ["--ask-pass", "--ask-become-pass"],
            ["s", "b"],
            ["SSH password: ", "BECOME password[defaults to SSH password]: "],
            {"ssh": "s", "become after ssh": "b"},
        ),
        (["-J"], ["v"], ["Vault password: "], {"vault": "v", "vault id ci": None, "become": None}),
        (
            ["--vault-id", "ci@prompt", "--vault-id", "@prompt", "--vault-id", "lab@lab.txt"],
            ["c", "d"],
            ["Vault password (ci): ", "Vault password (default): "],
            {"vault id ci": "c", "vault id default": "d", "vault": None},
        ),
    ],
)
def test_ansible_playbooks_prompts_are_asked_here_and_answered_for_it(
    project: Path,
    runner: FakeRunner,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: tuple[list[str], list[str], list[str], dict[str, str | None]],
) -> None:
    """case: fairbench's flags, what the user types, fairbench's prompts, and what ansible-runner answers
    at each of ansible-playbook's (None: nothing)."""
    flags, typed, asked, answers = case
    prompts: list[str] = []

    def user(prompt: str) -> str:
        prompts.append(prompt)
        return typed[len(prompts) - 1]

    monkeypatch.setattr(getpass, "getpass", user)
    code, _, _ = outcome(project, capsys, *flags)
    assert (code, prompts) == (0, asked)
    for call in (runner.question, runner.play):
        assert {name: answer(call["passwords"], ANSIBLE_PROMPTS[name]) for name in answers} == answers


def test_end_of_input_at_a_prompt_stops_the_run_before_ansible_in_one_line(
    project: Path, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def closed(prompt: str) -> str:
        raise EOFError

    monkeypatch.setattr(getpass, "getpass", closed)
    code, _, err = outcome(project, capsys, "-J")
    assert (code, err) == (2, "fairbench run: error: -J/--ask-vault-pass: no password given (end of input)\n")
    assert runner.calls == []


def test_ansible_writes_its_log_in_the_run_directory_ansible_names(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere" / "demo" / "r1"
    fake = FakeRunner(resolved=elsewhere)
    monkeypatch.setattr(ansible_runner, "run", fake)
    code, out, _ = outcome(project, capsys, "--run-id", "r1")
    log = elsewhere / "ansible.log"
    assert code == 0
    assert "ANSIBLE_LOG_PATH" not in fake.question["envvars"]
    assert fake.play["envvars"]["ANSIBLE_LOG_PATH"] == str(log)
    assert f"ansible's output, as it runs: {log}" in out.splitlines()
    assert out.splitlines()[-1] == f"ansible's output: {log}"
    assert log.read_text() == "PLAY RECAP\n" and not (project / "results").exists()
    # Asked about: the role's own bench_run_dir, its defaults the first inventory source, beneath the rest.
    role = REPO / "roles" / "bench"
    run_dir_template = yaml.safe_load((role / "vars" / "main.yml").read_text())["bench_run_dir"]
    assert json.loads(fake.question["module_args"]) == {"msg": run_dir_template}
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    assert fake.role_defaults["all"]["vars"] | defaults == fake.role_defaults["all"]["vars"]
    assert fake.question["inventory"][1:] == [str(project / "hosts.yml")]


def test_a_resume_with_a_changed_campaign_is_refused_before_ansible_playbook_starts(
    project: Path, runner: FakeRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = project / "results" / "demo" / "r1"
    run_dir.mkdir(parents=True)
    recorded = load_campaign(CAMPAIGN).to_json()
    recorded["workloads"]["random"]["seed"] = 7
    (run_dir / "campaign.json").write_text(json.dumps(recorded))
    code, _, err = outcome(project, capsys, "--run-id", "r1")
    assert code == 2
    head, difference, advice = err.splitlines()
    assert head == (
        f"fairbench run: error: {run_dir}: a resume of this run with another campaign: 1 key(s) of the "
        "expanded campaign differ from the run's campaign.json (recorded -> now):"
    )
    assert difference == "  workloads.random.seed: 7 -> 1"
    assert "resume with it on purpose: --allow-changed-campaign (" in advice
    # Only the run's directory was asked for: nothing played, no log begun, campaign.json as it was.
    assert [call for call in runner.calls if "playbook" in call] == []
    assert sorted(path.name for path in run_dir.iterdir()) == ["campaign.json"]
    assert json.loads((run_dir / "campaign.json").read_text()) == recorded
    # Allowed, the play goes on, told so; the play itself keeps the recorded campaign.
    code, _, err = outcome(project, capsys, "--run-id", "r1", "--allow-changed-campaign")
    assert (code, err) == (0, "")
    assert runner.play["extravars"]["bench_resume_changed"] is True
    assert json.loads((run_dir / "campaign.json").read_text()) == recorded


def test_the_defaults_asked_with_are_the_roles_over_its_dependencies(
    tmp_path: Path, runner: FakeRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "own"
    (project / "playbooks").mkdir(parents=True)
    (project / "playbooks" / "site.yml").write_text("[]\n")
    (project / "hosts.yml").write_text("all: {}\n")
    files = {
        "bench/defaults": "bench_results_root: /srv/results\nshared_dir: /bench\n",
        "bench/vars": "bench_run_dir: '{{ bench_results_root }}/x'\n",
        "bench/meta": "dependencies:\n  - role: fairbench.fairbench.shared\n  - other.collection.elsewhere\n",
        "shared/defaults": "shared_dir: /shared\nshared_only: 1\n",
        "shared/meta": "dependencies: [base]\n",
        "base/defaults": "shared_only: 0\nbase_only: 2\n",
    }
    for where, text in files.items():
        (project / "roles" / where).mkdir(parents=True)
        (project / "roles" / where / "main.yml").write_text(text)
    code, _, _ = outcome(project, capsys)
    assert code == 0
    assert runner.role_defaults == {
        "all": {
            "vars": {
                "bench_results_root": "/srv/results",
                "shared_dir": "/bench",
                "shared_only": 1,
                "base_only": 2,
            }
        }
    }
    assert json.loads(runner.question["module_args"]) == {"msg": "{{ bench_results_root }}/x"}


def test_the_run_leaves_sigterm_as_it_found_it(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGTERM)
    code, _, _ = outcome(project, capsys, "--run-id", "r1")
    assert code == 0
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize(
    ("events", "why"),
    [
        (
            [
                {
                    "event": "runner_on_failed",
                    "event_data": {"res": {"msg": "'bench_results_root' is undefined"}},
                    "stdout": "fatal: [localhost]: FAILED!",
                }
            ],
            "'bench_results_root' is undefined",
        ),
        (
            # Before any task: Ansible's error line, then its explanation on lines of their own.
            [
                {"event": "verbose", "stdout": "[WARNING]: Failed to parse inventory"},
                {"event": "verbose", "stdout": "[ERROR]: Attempting to decrypt but no vault secrets found."},
                {"event": "verbose", "stdout": "Origin: /srv/secrets.yml\n"},
            ],
            "Attempting to decrypt but no vault secrets found.",
        ),
    ],
)
def test_a_run_directory_ansible_cannot_name_ends_the_run_in_one_line(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    events: list[dict[str, Any]],
    why: str,
) -> None:
    def failing(**kwargs: Any) -> Any:
        for item in events:
            kwargs["event_handler"](item)
        return SimpleNamespace(status="failed", rc=2)

    monkeypatch.setattr(ansible_runner, "run", failing)
    code, _, err = outcome(project, capsys)
    assert (code, err) == (
        1,
        f"fairbench run: error: Ansible could not name the run's directory (bench_run_dir): {why}\n",
    )


def test_inventories_reach_ansible_playbook_as_it_finds_them_from_the_project(
    project: Path,
    runner: FakeRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "more.yml").write_text("all: {}\n")
    code, _, _ = outcome(project, capsys, "-i", "more.yml", "-i", "gpu1,gpu2,")
    assert code == 0
    sources = [str(project / "hosts.yml"), str(tmp_path / "more.yml"), "gpu1,gpu2,"]
    assert (runner.play["inventory"], runner.question["inventory"][1:]) == (sources, sources)
    code, _, err = outcome(project, capsys, "-i", "missing.yml")
    assert (code, err) == (2, "fairbench run: error: -i/--inventory: missing.yml does not exist\n")


def test_the_plan_alone_is_printed_from_the_inventorys_hosts_and_nothing_is_played(
    project: Path,
    runner: FakeRunner,
    inventory: list[tuple[list[str], str | None]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = outcome(project, capsys, "--plan", "--fresh", "-l", "gpu1")
    assert (code, err) == (0, "")
    assert inventory == [([str(project / "hosts.yml")], "gpu1")]
    assert "playbook" not in {key for call in runner.calls for key in call}
    lines = out.splitlines()
    plan = lines.index(f"plan: 2 host(s) (gpu_hosts: gpu1, gpu2; {project / 'hosts.yml'}), placement spread")
    assert (
        lines[plan + 1]
        == "  repeats of each level: 3 to 4; workload random: 4 levels; workload agentic: 3 levels"
    )
    assert lines[-1].startswith("  at the most: 28 jobs (each a server start), 196 points, 26,852 requests; ")
    assert not (project / "results" / "demo").exists()


def test_a_run_starts_with_its_plan_in_a_line_and_keeps_it_for_the_report(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = outcome(project, capsys, "--run-id", "r1", "--fresh")
    assert code == 0
    kept = read_forecast(project / "results" / "demo" / "r1")
    assert kept is not None and kept.pools == {"gpu_hosts": ["gpu1", "gpu2"]}
    assert kept.outlook[LEAST].jobs == 21 and kept.outlook[MOST].jobs == 28
    assert summary_line(kept) in out.splitlines()
    assert summary_line(kept).startswith("plan: 21 to 28 jobs, ")
