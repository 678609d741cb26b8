"""The Ansible modules of library/ and the unit template, through ansible-playbook on this machine.

No lab hosts: every play runs on localhost with this interpreter (which imports fairbench), and the sweep
drives a ``fairbench sim`` started here. The lab tests (tests/lab/test_campaign_lab.py) run the same on
real systemd hosts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fairbench.campaign import load_campaign

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

pytestmark = pytest.mark.skipif(
    not ANSIBLE_PLAYBOOK.exists(), reason="ansible-core is not installed beside this Python (make venv)"
)


def run_play(
    tmp_path: Path, tasks: list[dict[str, Any]], *args: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One play of ``tasks`` on localhost; returns every task's registered result, by task name.

    Every task is registered and may fail (``ignore_errors``): a last task writes the results to a file
    (ansible-core has no JSON stdout callback without the ansible.posix collection).
    """
    results_file = tmp_path / "results.json"
    registered = [
        {**task, "register": f"task_{index}", "ignore_errors": True} for index, task in enumerate(tasks)
    ]
    names = {task["name"]: f"task_{index}" for index, task in enumerate(tasks)}
    dump = {
        "name": "Dump the results",
        "ansible.builtin.copy": {
            "content": "{{ {"
            + ", ".join(f"{name!r}: {var}" for name, var in names.items())
            + "} | to_json }}",
            "dest": str(results_file),
            "mode": "0644",
        },
        "check_mode": False,
    }
    play = [{"name": "Test play", "hosts": "localhost", "gather_facts": False, "tasks": [*registered, dump]}]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps(play))
    results_file.unlink(missing_ok=True)
    env = {
        **os.environ,
        **(env or {}),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LIBRARY": str(REPO / "library"),
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
    }
    argv = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(playbook), *args]
    argv += ["-e", f"ansible_python_interpreter={sys.executable}"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=300, check=False)
    if not results_file.exists():
        pytest.fail(f"ansible-playbook failed:\n{done.stdout}\n{done.stderr}")
    results: dict[str, Any] = json.loads(results_file.read_text())
    return results


# --- fairbench_campaign ---------------------------------------------------------------------------


def _load_task(path: str) -> dict[str, Any]:
    return {
        "name": "Load",
        "fairbench_campaign": {"path": path, "base_dir": "{{ '.' | ansible.builtin.realpath }}"},
    }


def test_campaign_module_returns_the_expanded_campaign_as_facts(tmp_path: Path) -> None:
    loaded = run_play(tmp_path, [_load_task("campaigns/demo.yml")])["Load"]
    assert not loaded.get("failed"), loaded
    assert loaded["changed"] is False
    expected = load_campaign(REPO / "campaigns/demo.yml").to_json() | {"source": "campaigns/demo.yml"}
    assert loaded["ansible_facts"]["fairbench_campaign"] == expected


def test_campaign_module_fails_naming_file_key_path_and_rule(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    demo = (REPO / "campaigns/demo.yml").read_text()
    broken.write_text(demo.replace("{tp-size: 8, ep-size: 4}", "{tp-size: 8, ep-size: 3}"))
    loaded = run_play(tmp_path, [_load_task(str(broken))])["Load"]
    assert loaded["failed"] is True
    assert f"{broken}: configs.ep4.args.ep-size: 3 does not divide tp-size 8" in loaded["errors"]
    assert "ansible_facts" not in loaded


# --- fairbench_sweep ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def sim_url() -> Iterator[str]:
    port = _free_port()
    fairbench = shutil.which("fairbench", path=str(Path(sys.executable).parent)) or "fairbench"
    server = subprocess.Popen(
        [fairbench, "sim", "--model-path", "test/model", "--port", str(port), "--sim-time-scale", "0.02"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("fairbench sim did not start")
            time.sleep(0.1)
    yield url
    server.terminate()
    server.wait(timeout=10)


WORKLOAD = {
    "api": "completions",
    "dataset": "random-ids",
    "input_len": 16,
    "output_len": 8,
    "concurrency": [1, 4],
    "prompts_per_level": "1x",
    "warmup": 0,
    "repeats": 1,
    "seed": 1,
}


def _sweep_task(url: str, out: Path, name: str = "Sweep") -> dict[str, Any]:
    return {"name": name, "fairbench_sweep": {"url": url, "workload": WORKLOAD, "out": str(out)}}


def test_sweep_module_check_mode_returns_the_plan_and_writes_nothing(tmp_path: Path, sim_url: str) -> None:
    out = tmp_path / "tp8"
    result = run_play(tmp_path, [_sweep_task(sim_url, out)], "--check", "--diff")["Sweep"]
    assert not result.get("failed"), result
    assert result["changed"] is True
    assert result["planned"] == ["c1-r0", "c4-r0"]
    assert result["written"] == []
    assert result["diff"]["after"] == "c1-r0\nc4-r0\n"
    assert not out.exists()


def test_sweep_module_writes_points_then_changes_nothing_on_resume(tmp_path: Path, sim_url: str) -> None:
    out = tmp_path / "tp8"
    results = run_play(tmp_path, [_sweep_task(sim_url, out, "First"), _sweep_task(sim_url, out, "Again")])
    first, again = results["First"], results["Again"]
    assert not first.get("failed"), first
    assert first["changed"] is True
    assert first["written"] == ["c1-r0", "c4-r0"]
    assert [level["max_concurrency"] for level in first["levels"]] == [1, 4]
    assert all(level["completed"] == 16 for level in first["levels"])
    assert (out / "points.jsonl").read_text().count("\n") == 2
    assert sorted(path.name for path in (out / "requests").iterdir()) == ["c1-r0.jsonl.gz", "c4-r0.jsonl.gz"]
    assert again["changed"] is False
    assert again["planned"] == [] and again["written"] == []


def test_sweep_module_fails_when_requests_fail(tmp_path: Path) -> None:
    # Nothing listens on this port: every request fails, and the point is not trusted.
    url = f"http://127.0.0.1:{_free_port()}"
    result = run_play(tmp_path, [_sweep_task(url, tmp_path / "down")])["Sweep"]
    assert result["failed"] is True
    assert "Cannot connect" in result["msg"] or "connect" in result["msg"].lower()


# --- fairbench_report ------------------------------------------------------------------------------


def test_report_module_renders_the_report_and_names_failed_configs(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo" / "run1"
    campaign = load_campaign(REPO / "campaigns/demo.yml").to_json()
    run_dir.mkdir(parents=True)
    (run_dir / "campaign.json").write_text(json.dumps(campaign))
    for config, status in (("tp8", {"status": "ok"}), ("ep4", {"status": "failed", "stage": "health"})):
        config_dir = run_dir / "lab1" / config
        config_dir.mkdir(parents=True)
        (config_dir / "status.json").write_text(json.dumps(status))
    task = [{"name": "Report", "fairbench_report": {"run_dir": str(run_dir)}}]
    # Configs of the campaign with no results at all count as failed too: never silently missing.
    not_ok = ["lab1/tp8-nccl", "lab1/ep4", "lab1/ep8", "lab1/ep8-eplb"]
    checked = run_play(tmp_path, task, "--check")["Report"]
    assert sorted(checked["failed_configs"]) == sorted(not_ok)
    assert checked["changed"] is False and not (run_dir / "report.md").exists()
    written = run_play(tmp_path, task)["Report"]
    assert sorted(written["failed_configs"]) == sorted(not_ok)
    assert str(run_dir / "report.md") in written["paths"] and str(run_dir / "report.html") in written["paths"]
    report = (run_dir / "report.md").read_text()
    assert "failed at stage `health`" in report


# --- the unit template ----------------------------------------------------------------------------


def _systemd_unit_filters() -> Any:
    path = REPO / "roles/serving/filter_plugins/systemd_unit.py"
    spec = importlib.util.spec_from_file_location("systemd_unit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exec_args_are_escaped_for_systemd() -> None:
    filters = _systemd_unit_filters()
    assert filters.systemd_exec_arg("--tp-size") == "--tp-size"
    assert filters.systemd_exec_arg(8) == "8"
    assert filters.systemd_exec_arg("a b") == '"a b"'
    assert filters.systemd_exec_arg('{"x": 1}') == '"{\\"x\\": 1}"'
    assert filters.systemd_exec_arg("50%") == '"50%%"'
    assert filters.systemd_exec_arg("$HOME") == '"$$HOME"'
    assert filters.systemd_environment(("NCCL_PROTO", "LL")) == '"NCCL_PROTO=LL"'
    assert filters.systemd_environment(("X", "a%b")) == '"X=a%%b"'


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_rendered_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """Every config of every campaign renders a unit that systemd accepts without a word on stderr."""
    venv = Path(sys.executable).parent.parent
    for campaign in ("campaigns/demo.yml", "campaigns/kimi-k2.6-pcie.yml", "tests/lab/campaign-short.yml"):
        units = tmp_path / Path(campaign).stem
        units.mkdir()
        render = {
            "name": "Render",
            "ansible.builtin.template": {
                "src": str(REPO / "templates/sglang.service.j2"),
                "dest": f"{units}/{{{{ serving_config.unit }}}}",
                "mode": "0644",
            },
            "loop": "{{ fairbench_campaign.configs.values() | list }}",
            "loop_control": {"loop_var": "serving_config"},
            "vars": {"serving_campaign": "{{ fairbench_campaign }}"},
        }
        results = run_play(
            tmp_path,
            [_load_task(campaign), render],
            # The role's defaults, and executables that exist here (verify checks ExecStart's).
            "-e", f"@{REPO}/roles/serving/defaults/main.yml",
            "-e", f"serving_fairbench_venv={venv} serving_sglang_python={sys.executable}",
            env={"ANSIBLE_FILTER_PLUGINS": str(REPO / "roles/serving/filter_plugins")},
        )  # fmt: skip
        assert not results["Render"].get("failed"), results["Render"]
        rendered = sorted(units.iterdir())
        assert len(rendered) == len(load_campaign(REPO / campaign).configs)
        verify = subprocess.run(
            ["systemd-analyze", "verify", *map(str, rendered)], capture_output=True, text=True, check=False
        )
        # User= names the lab hosts' fairbench user, which this machine may lack; nothing else may be said.
        complaints = [line for line in verify.stderr.splitlines() if "User" not in line]
        assert verify.returncode == 0 and not complaints, verify.stderr
