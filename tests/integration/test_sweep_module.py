"""The bench role's sweep module, through ansible-playbook on this machine: a point that failed entirely is
measured again when the task asks for it (``remeasure_failed``), never otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.sse_server import StartServer

from fairbench.results import ResultsDir

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(
    not (BIN / "ansible-playbook").exists(),
    reason="ansible-core is not installed beside this Python (make venv)",
)
ENV = {**os.environ, "ANSIBLE_LIBRARY": str(REPO / "library"), "ANSIBLE_LOCALHOST_WARNING": "0"}
WORKLOAD = {
    "api": "completions",
    "dataset": "random-ids",
    "input_len": 8,
    "output_len": 4,
    "concurrency": [1, 2],
    "prompts_per_level": 16,
    "warmup": 0,
    "repeats": 1,
    "seed": 1,
    "vocab_size": 30000,  # the test server has no model files
}


def sweep_task(tmp_path: Path, url: str, out: Path, *args: str, **options: Any) -> dict[str, Any]:
    """One fairbench_sweep task on localhost; its result."""
    result_file = tmp_path / "result.json"
    task = {"fairbench_sweep": {"url": url, "workload": WORKLOAD, "out": str(out), **options}}
    play = [
        {
            "name": "Sweep",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {**task, "name": "Sweep", "register": "swept", "ignore_errors": True},
                {
                    "name": "Save the result",
                    "ansible.builtin.copy": {"content": "{{ swept | to_json }}", "dest": str(result_file)},
                    "check_mode": False,
                },
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps(play))
    command = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook), *args]
    command += ["-e", f"ansible_python_interpreter={sys.executable}"]
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=300, check=False)
    assert result_file.exists(), done.stdout + done.stderr
    result: dict[str, Any] = json.loads(result_file.read_text())
    return result


def test_the_module_measures_failed_points_again_only_when_asked(
    sse_server: StartServer, tmp_path: Path
) -> None:
    out = tmp_path / "tp8"
    failed = sweep_task(tmp_path, sse_server(faults=["http_error:status=500"]).url, out)
    assert failed["failed"] and failed["written"] == ["c1-r0", "c2-r0"]
    healthy = sse_server().url

    again = sweep_task(tmp_path, healthy, out)
    assert again["failed"] and again["written"] == []
    planned = sweep_task(tmp_path, healthy, out, "--check", "--diff", remeasure_failed=True)
    assert planned["planned"] == ["c1-r0", "c2-r0"] and planned["changed"]
    assert planned["diff"]["after"] == "c1-r0\nc2-r0\nc1-r0\nc2-r0\n"  # appended: the failed lines stay

    remeasured = sweep_task(tmp_path, healthy, out, remeasure_failed=True)
    assert not remeasured.get("failed"), remeasured["msg"]
    assert remeasured["changed"] and remeasured["written"] == ["c1-r0", "c2-r0"]
    assert [level["completed"] for level in remeasured["levels"]] == [16, 16]
    assert len((out / "points.jsonl").read_text().splitlines()) == 4
    assert [point["supersedes"]["line"] for point in ResultsDir(out).points()] == [1, 2]


def test_the_option_is_documented() -> None:
    shown = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "module", "--json", "fairbench_sweep"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=True,
    )
    option = json.loads(shown.stdout)["fairbench_sweep"]["doc"]["options"]["remeasure_failed"]
    assert (option["type"], option["default"]) == ("bool", False)
