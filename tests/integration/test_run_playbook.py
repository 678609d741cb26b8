"""``fairbench run`` driving real ansible-playbook on a tiny project of its own (``--project-dir``).

The project's one playbook greets, says something else, then waits for a gate file: a run can be watched
while it is in progress, stopped with Ctrl-C there, or let through. Its roles/ is the repository's, so the
run's directory is the bench role's ``bench_run_dir``, as Ansible resolves it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fairbench.campaign.load import load_campaign

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = REPO / "campaigns" / "demo.yml"
FAIRBENCH = Path(sys.executable).parent / "fairbench"
ANSIBLE_VAULT = Path(sys.executable).parent / "ansible-vault"
RUN_TIMEOUT_S = 120

pytestmark = pytest.mark.skipif(
    not (FAIRBENCH.exists() and ANSIBLE_VAULT.exists()),
    reason="fairbench or ansible-core is not installed beside this Python (make venv)",
)

PLAYBOOK = """\
- name: Tiny
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Greet
      ansible.builtin.debug:
        msg: "greeting={{ greeting | default('none') }} run_id={{ run_id }}"
      tags: [greet]
    - name: Say the other
      ansible.builtin.debug:
        msg: the other
      tags: [other]
    - name: Wait for the gate
      ansible.builtin.wait_for:
        path: "{{ gate }}"
        timeout: 90
    - name: Through the gate
      ansible.builtin.debug:
        msg: through
"""


@dataclass
class Project:
    root: Path
    inventory: Path
    gate: Path
    inventory_results: Path
    """bench_results_root, as the inventory's group_vars set it."""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    (root / "playbooks").mkdir(parents=True)
    (root / "playbooks" / "site.yml").write_text(PLAYBOOK)
    (root / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = False\n")
    (root / "roles").symlink_to(REPO / "roles")
    inventory = tmp_path / "inventory" / "hosts.yml"
    (inventory.parent / "group_vars" / "all").mkdir(parents=True)
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    inventory_results = tmp_path / "inventory-results"
    (inventory.parent / "group_vars" / "all" / "bench.yml").write_text(
        f"bench_results_root: {inventory_results}\n"
    )
    return Project(root, inventory, tmp_path / "gate", inventory_results)


@dataclass
class Running:
    process: subprocess.Popen[str]
    log: Path

    def wait_for_log(self, text: str) -> str:
        """The log once it holds ``text``, while fairbench still runs."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.communicate()
            if self.log.exists() and text in (content := self.log.read_text()):
                return content
            time.sleep(0.1)
        raise AssertionError(f"{self.log} never held {text!r}")

    def end(self) -> tuple[int, str]:
        out, _ = self.process.communicate(timeout=RUN_TIMEOUT_S)
        return self.process.returncode, out


Start = Callable[..., Running]
"""start(run_dir, *flags, stdin=""): fairbench run under way, its run id run_dir's name."""


@pytest.fixture
def start(project: Project) -> Iterator[Start]:
    started: list[subprocess.Popen[str]] = []

    def run(run_dir: Path, *flags: str, stdin: str = "") -> Running:
        argv = [str(FAIRBENCH), "run", str(CAMPAIGN), "-i", str(project.inventory)]
        argv += ["--project-dir", str(project.root), "--run-id", run_dir.name, "-e", f"gate={project.gate}"]
        typed = project.root.parent / f"stdin-{len(started)}"
        typed.write_text(stdin)
        with typed.open() as typed_in:
            process = subprocess.Popen(
                [*argv, *flags],
                stdin=typed_in,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                # No terminal: a prompt reads stdin; and Ctrl-C goes to fairbench alone.
                start_new_session=True,
            )
        started.append(process)
        return Running(process, run_dir / "ansible.log")

    yield run
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_the_log_is_in_the_run_directory_as_ansible_runs_with_the_options_given(
    project: Project, start: Start, tmp_path: Path
) -> None:
    (tmp_path / "vars.yml").write_text("greeting: from-a-file\n")
    results = tmp_path / "e-results"
    run_dir = results / "demo" / "r-options"
    running = start(
        run_dir,
        *("-e", f"bench_results_root={results}", "-e", f"@{tmp_path / 'vars.yml'}"),
        *("-v", "--tags", "greet,untagged"),
    )
    so_far = running.wait_for_log("TASK [Wait for the gate]")
    assert "greeting=from-a-file run_id=r-options" in so_far and "PLAY RECAP" not in so_far
    project.gate.touch()
    code, out = running.end()
    log = running.log.read_text()
    assert code == 0, out
    assert out.splitlines()[-1] == f"ansible's output: {running.log}"
    # -v: ansible-playbook's first verbose line; --tags: the other task is left out.
    assert re.search(r"\| Using .*/ansible\.cfg as config file", log), log
    assert "TASK [Say the other]" not in log and "TASK [Through the gate]" in log and "PLAY RECAP" in log
    # -e beats the inventory, as in the play: nothing went where the inventory, or the default, would put it.
    assert not project.inventory_results.exists() and not (project.root / "results").exists()


def test_ctrl_c_leaves_the_log_with_what_ran_and_says_where_it_is(project: Project, start: Start) -> None:
    run_dir = project.inventory_results / "demo" / "r-interrupted"
    running = start(run_dir)
    running.wait_for_log("TASK [Wait for the gate]")
    running.process.send_signal(signal.SIGINT)
    code, out = running.end()
    log = running.log.read_text()
    assert code == 130, out
    assert out.splitlines()[-2:] == [
        f"ansible's output: {running.log}",
        "interrupted: sweeps already started go on on their hosts; --run-id r-interrupted resumes",
    ]
    # Without -v or --tags: no verbose line, and every task up to the gate ran, none after it.
    assert "TASK [Greet]" in log and "TASK [Say the other]" in log and "TASK [Wait for the gate]" in log
    assert "as config file" not in log and "TASK [Through the gate]" not in log and "PLAY RECAP" not in log


def test_prompted_secrets_reach_ansible_playbook_and_fairbenchs_run_id_wins(
    project: Project, start: Start, tmp_path: Path
) -> None:
    vault_password = tmp_path / "vault-password"
    vault_password.write_text("s3cret\n")
    secrets = tmp_path / "secrets.yml"
    secrets.write_text("greeting: from-the-vault\nrun_id: not-this-one\n")
    subprocess.run(
        [str(ANSIBLE_VAULT), "encrypt", "--vault-password-file", str(vault_password), str(secrets)],
        check=True,
        capture_output=True,
        env={**os.environ, "ANSIBLE_CONFIG": str(project.root / "ansible.cfg")},
    )
    assert secrets.read_text().startswith("$ANSIBLE_VAULT")
    project.gate.touch()
    run_dir = project.inventory_results / "demo" / "r-vault"
    # -K: ansible-playbook asks at its start, and would wait there for ever unanswered.
    running = start(run_dir, "-K", "-J", "-e", f"@{secrets}", stdin="become-pw\ns3cret\n")
    code, out = running.end()
    assert code == 0, out
    assert "greeting=from-the-vault run_id=r-vault" in running.log.read_text()


def test_a_resume_with_a_changed_campaign_is_refused_before_ansible_playbook_plays(
    project: Project, start: Start
) -> None:
    """The run's directory as Ansible names it (the inventory's bench_results_root) holds another campaign:
    the run ends naming what differs, and the playbook never starts (no ansible.log)."""
    run_dir = project.inventory_results / "demo" / "r-changed"
    run_dir.mkdir(parents=True)
    recorded = load_campaign(CAMPAIGN).to_json()
    recorded["configs"]["ep4"]["args"]["ep-size"] = 2
    (run_dir / "campaign.json").write_text(json.dumps(recorded))
    project.gate.touch()
    code, out = start(run_dir).end()
    assert code == 2, out
    assert (
        f"fairbench run: error: {run_dir}: a resume of this run with another campaign: " in out
        and "  configs.ep4.args.ep-size: 2 -> 4\n" in out
        and "resume with it on purpose: --allow-changed-campaign (" in out
    ), out
    assert sorted(path.name for path in run_dir.iterdir()) == ["campaign.json"]
    # Allowed, the playbook plays (this project's does not record the campaign: the bench role does).
    code, out = start(run_dir, "--allow-changed-campaign").end()
    assert code == 0, out
    assert "TASK [Through the gate]" in (run_dir / "ansible.log").read_text()
