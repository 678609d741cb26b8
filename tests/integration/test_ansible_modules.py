"""The Ansible modules of plugins/modules/ and the unit template, through ansible-playbook on this machine.

No lab hosts: every play runs on localhost with this interpreter (which imports fairbench), and the sweep
drives a ``fairbench sim`` started here. The lab tests (tests/lab/test_campaign_lab.py) run the same on
real systemd hosts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.fake_nvidia_smi import write_fake_nvidia_smi
from tests.support.report_files import replaced
from tests.support.sse_server import StartServer
from tests.support.unit_exposure import UNIT_EXPOSURE

from fairbench.answers.plan import AnswersPlan
from fairbench.answers.probes import draw, shipped_prompts
from fairbench.campaign.load import load_campaign
from fairbench.fleet.sharing import KERNEL_BOOT_TOLERANCE_S
from fairbench.hosts.clean_state import (
    COMPUTE_APPS_ARGS,
    DEFAULT_TOLERANCE_MIB,
    MEMORY_ARGS,
    command_line,
    unit_of_pid,
    user_processes,
)
from fairbench.hosts.machine import kernel_boot_s
from fairbench.hosts.unit_security import exposure
from fairbench.measure.results import ResultsDir

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def fqcn(module: str) -> str:
    """The name playbooks call a module of the fairbench.fairbench collection by."""
    return f"fairbench.fairbench.{module}"


pytestmark = pytest.mark.skipif(
    not ANSIBLE_PLAYBOOK.exists(), reason="ansible-core is not installed beside this Python (make venv)"
)


def run_play(
    tmp_path: Path,
    tasks: list[dict[str, Any]],
    *args: str,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> dict[str, Any]:
    """One play of ``tasks`` on localhost, its modules run by ``python``; returns every task's registered
    result, by task name.

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
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
    }
    argv = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(playbook), *args]
    argv += ["-e", f"ansible_python_interpreter={python}"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=300, check=False)
    if not results_file.exists():
        pytest.fail(f"ansible-playbook failed:\n{done.stdout}\n{done.stderr}")
    results: dict[str, Any] = json.loads(results_file.read_text())
    return results


# --- fairbench_campaign ---------------------------------------------------------------------------


def test_the_campaign_module_checks_the_run_id_or_names_a_new_run(tmp_path: Path) -> None:
    def load(name: str, **run_id: str) -> dict[str, Any]:
        return {
            "name": name,
            fqcn("fairbench_campaign"): {"path": str(REPO / "campaigns/demo.yml"), **run_id},
        }

    results = run_play(tmp_path, [load("Given", run_id="r1.a_b-2"), load("New"), load("Bad", run_id="../x")])
    assert results["Given"]["run_id"] == "r1.a_b-2"
    assert re.fullmatch(r"\d{8}T\d{6}Z", results["New"]["run_id"]), results["New"]
    assert results["Bad"]["failed"]
    assert (
        results["Bad"]["msg"]
        == "run_id: '../x' must be letters, digits, '_', '.' and '-', starting with a letter or digit"
    )


def _load_task(path: str) -> dict[str, Any]:
    return {
        "name": "Load",
        fqcn("fairbench_campaign"): {"path": path, "base_dir": "{{ '.' | ansible.builtin.realpath }}"},
    }


# Common settings, a chain of two extends, an unset in every section, a list value, a flag turned off and
# simulator flags: each rule of the expansion shows in the facts below.
EXPANDED_CAMPAIGN = """\
name: facts
engine: sim
model: org/model-7b
start_timeout_s: 900
common:
  args: {trust-remote-code: true, mem-fraction-static: 0.85, max-running-requests: 64,
         attention-backend: triton}
  env: {HF_HUB_OFFLINE: 1}
  sim: {sim-profile: generic, sim-time-scale: 0.5}
configs:
  tp2: {args: {tp-size: 2}}
  tp2-graphs: {extends: tp2, args: {cuda-graph-bs-decode: [1, 2, 4]}, env: {NCCL_PROTO: LL}}
  tp4-plain:
    extends: tp2-graphs
    args: {tp-size: 4, trust-remote-code: false}
    unset: {args: [attention-backend], env: [NCCL_PROTO], sim: [sim-time-scale]}
workload: {api: chat, dataset: random-ids, input_len: 64, output_len: 32, concurrency: [1, 8],
           prompts_per_level: 2x, warmup: 4}
"""


def _expanded_facts(source: str) -> dict[str, Any]:
    """EXPANDED_CAMPAIGN expanded by hand, as fairbench.campaign.load's docstring describes it:
    flags sorted by key after ``--model-path``, ``true`` a bare flag and ``false`` none, the simulator's
    flags last; ``declared`` what differs from common, ``unset`` the keys of common a config lost."""
    common_args = {
        "trust-remote-code": True,
        "mem-fraction-static": 0.85,
        "max-running-requests": 64,
        "attention-backend": "triton",
    }
    common_sim = {"sim-profile": "generic", "sim-time-scale": 0.5}
    model = ["--model-path", "org/model-7b"]
    no_unset = {"args": [], "env": [], "sim": []}
    tp2_argv = [
        *model,
        *("--attention-backend", "triton", "--max-running-requests", "64"),
        *("--mem-fraction-static", "0.85", "--tp-size", "2", "--trust-remote-code"),
    ]
    graphs_argv = [
        *model,
        *("--attention-backend", "triton", "--cuda-graph-bs-decode", "1", "2", "4"),
        *("--max-running-requests", "64", "--mem-fraction-static", "0.85", "--tp-size", "2"),
        "--trust-remote-code",
    ]
    plain_argv = [
        *model,
        *("--cuda-graph-bs-decode", "1", "2", "4", "--max-running-requests", "64"),
        *("--mem-fraction-static", "0.85", "--tp-size", "4"),
    ]
    return {
        "name": "facts",
        "source": source,
        "engine": "sim",
        "model": "org/model-7b",
        "start_timeout_s": 900,
        "placement": "spread",
        "accept_host_differences": [],
        "slo": {},
        # No answers key: the default plan, 16 probes of fairbench's set drawn from seed 1, through the
        # workload's chat API.
        "answers": AnswersPlan(draw(shipped_prompts(), 16, seed=1), api="chat").to_json(),
        "common": {"args": common_args, "env": {"HF_HUB_OFFLINE": "1"}, "sim": common_sim},
        "configs": {
            "tp2": {
                "name": "tp2",
                "unit": "fairbench-facts-tp2.service",
                "extends": [],
                "argv": [*tp2_argv, "--sim-profile", "generic", "--sim-time-scale", "0.5"],
                "sglang_argv": tp2_argv,
                "env": {"HF_HUB_OFFLINE": "1"},
                "args": {**common_args, "tp-size": 2},
                "sim": common_sim,
                "declared": {"args": {"tp-size": 2}, "env": {}, "sim": {}},
                "unset": no_unset,
                "gpus": 2,
                "gpus_formula": "tp-size 2",
                "nodes": 1,
                "gpus_per_node": 2,
                "hosts": None,
            },
            "tp2-graphs": {
                "name": "tp2-graphs",
                "unit": "fairbench-facts-tp2-graphs.service",
                "extends": ["tp2"],
                "argv": [*graphs_argv, "--sim-profile", "generic", "--sim-time-scale", "0.5"],
                "sglang_argv": graphs_argv,
                "env": {"HF_HUB_OFFLINE": "1", "NCCL_PROTO": "LL"},
                "args": {**common_args, "tp-size": 2, "cuda-graph-bs-decode": [1, 2, 4]},
                "sim": common_sim,
                "declared": {
                    "args": {"tp-size": 2, "cuda-graph-bs-decode": [1, 2, 4]},
                    "env": {"NCCL_PROTO": "LL"},
                    "sim": {},
                },
                "unset": no_unset,
                "gpus": 2,
                "gpus_formula": "tp-size 2",
                "nodes": 1,
                "gpus_per_node": 2,
                "hosts": None,
            },
            "tp4-plain": {
                "name": "tp4-plain",
                "unit": "fairbench-facts-tp4-plain.service",
                "extends": ["tp2-graphs", "tp2"],
                "argv": [*plain_argv, "--sim-profile", "generic"],
                "sglang_argv": plain_argv,
                "env": {"HF_HUB_OFFLINE": "1"},
                "args": {
                    "trust-remote-code": False,
                    "mem-fraction-static": 0.85,
                    "max-running-requests": 64,
                    "tp-size": 4,
                    "cuda-graph-bs-decode": [1, 2, 4],
                },
                "sim": {"sim-profile": "generic"},
                "declared": {
                    "args": {"trust-remote-code": False, "tp-size": 4, "cuda-graph-bs-decode": [1, 2, 4]},
                    "env": {},
                    "sim": {},
                },
                "unset": {"args": ["attention-backend"], "env": [], "sim": ["sim-time-scale"]},
                "gpus": 4,
                "gpus_formula": "tp-size 4",
                "nodes": 1,
                "gpus_per_node": 4,
                "hosts": None,
            },
        },
        "workload": {
            "api": "chat",
            "dataset": "random-ids",
            "input_len": 64,
            "output_len": 32,
            "concurrency": [1, 8],
            "prompts_per_level": "2x",
            "warmup": 4,
            "repeats": 1,
            "seed": 1,
        },
        "warnings": [
            f"{source}: configs.tp2-graphs.args.cuda-graph-bs-decode: CUDA graph settings differ from "
            "common: the comparison is unfair unless that is its point"
        ],
    }


def test_campaign_module_returns_the_expanded_campaign_as_facts(tmp_path: Path) -> None:
    campaign = tmp_path / "facts.yml"
    campaign.write_text(EXPANDED_CAMPAIGN)
    loaded = run_play(tmp_path, [_load_task(str(campaign))])["Load"]
    assert not loaded.get("failed"), loaded
    assert loaded["changed"] is False
    expected = _expanded_facts(str(campaign))
    facts = loaded["ansible_facts"]["fairbench_campaign"]
    assert facts == expected
    # Each warning is also the task's own, where ansible-playbook shows it.
    assert loaded["warnings"] == expected["warnings"]


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
    # The simulator serves its model without the model's files: the vocabulary is given.
    "vocab_size": 163840,
}


def _sweep_task(url: str, out: Path, name: str = "Sweep") -> dict[str, Any]:
    return {"name": name, fqcn("fairbench_sweep"): {"url": url, "workload": WORKLOAD, "out": str(out)}}


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


TRACE_CAMPAIGN = """\
name: replay
engine: sim
model: org/model-7b
configs: {base: {}}
workload: {api: completions, dataset: trace, trace: {path: traces/four.jsonl, start_s: 0.1},
           trace_speedup: [2], warmup: 0, vocab_size: 163840}
"""


def test_a_traces_file_goes_with_the_campaign_and_is_found_by_its_name_on_the_host(
    tmp_path: Path, sim_url: str
) -> None:
    """The campaign module names the trace as the workload's file (which the bench role copies to every
    host); the sweep module reads it by its name in data_dir, the campaign's copy gone."""
    (tmp_path / "traces").mkdir()
    trace = tmp_path / "traces" / "four.jsonl"
    rows = [
        {"timestamp": 100 * i, "input_length": 600, "output_length": 4, "hash_ids": [7, i]} for i in range(5)
    ]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    campaign = tmp_path / "replay.yml"
    campaign.write_text(TRACE_CAMPAIGN)
    loaded = run_play(tmp_path, [_load_task(str(campaign))])["Load"]
    assert not loaded.get("failed"), loaded
    assert loaded["ansible_facts"]["fairbench_workload_files"] == [str(trace)]
    workload = loaded["ansible_facts"]["fairbench_campaign"]["workload"]
    # What the trace sets itself is derived again where the workload is read: its window and speedups only.
    assert workload == {
        "api": "completions",
        "dataset": "trace",
        "trace": {"path": str(trace), "start_s": 0.1},
        "trace_speedup": [2.0],
        "max_concurrency": 4,
        "warmup": 0,
        "repeats": 1,
        "seed": 1,
        "vocab_size": 163840,
    }
    host_data = tmp_path / "host-data"
    host_data.mkdir()
    trace.rename(host_data / trace.name)
    task = {"url": sim_url, "workload": workload, "out": str(tmp_path / "out"), "data_dir": str(host_data)}
    result = run_play(tmp_path, [{"name": "Sweep", fqcn("fairbench_sweep"): task}])["Sweep"]
    assert not result.get("failed"), result
    (point,) = [json.loads(line) for line in (tmp_path / "out" / "points.jsonl").read_text().splitlines()]
    # The window from 0.1 s: four requests 100 ms apart, sent twice as fast, the second block their own.
    assert (point["completed"], point["trace_speedup"], point["request_rate"]) == (4, 2.0, 20.0)
    assert point["designed_cached_tokens"] == 3 * 512


def test_sweep_module_spreads_the_client_over_processes_spawned_under_ansible(
    tmp_path: Path, sim_url: str
) -> None:
    # The workers are spawned from the module's own Python, which Ansible runs from a zipped payload.
    task = _sweep_task(sim_url, tmp_path / "tp8")
    task[fqcn("fairbench_sweep")]["client_processes"] = 2
    result = run_play(tmp_path, [task])["Sweep"]
    assert not result.get("failed"), result
    points = [json.loads(line) for line in (tmp_path / "tp8" / "points.jsonl").read_text().splitlines()]
    # At C=1 one stream: one process takes part.
    assert [(p["client_processes"], p["completed"]) for p in points] == [(1, 16), (2, 16)]
    assert [sum(use["requests"] for use in p["client_process_use"]) for p in points] == [16, 16]


def test_sweep_module_fails_when_requests_fail(tmp_path: Path) -> None:
    # Nothing listens on this port: every request fails, and the point is not trusted.
    url = f"http://127.0.0.1:{_free_port()}"
    result = run_play(tmp_path, [_sweep_task(url, tmp_path / "down")])["Sweep"]
    assert result["failed"] is True
    assert "Cannot connect" in result["msg"] or "connect" in result["msg"].lower()


def test_sweep_module_samples_the_energy_of_the_gpus_it_is_given(tmp_path: Path, sim_url: str) -> None:
    # roles/bench passes the config's CUDA_VISIBLE_DEVICES, a comma-separated string; NVML is the fake one.
    fake_nvml = {"gpus": [{"watts": 100.0}, {"watts": 200.0}, {"watts": 300.0}]}
    env = {
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO / "tests/support/fake_nvml"), os.environ.get("PYTHONPATH")])
        ),
        "FAKE_PYNVML": json.dumps(fake_nvml),
    }
    tasks = [
        _sweep_task(sim_url, tmp_path / "ok", "Chosen"),
        _sweep_task(sim_url, tmp_path / "bad", "Missing"),
    ]
    tasks[0][fqcn("fairbench_sweep")]["energy_gpus"] = "0,2"
    tasks[1][fqcn("fairbench_sweep")]["energy_gpus"] = "1,3"
    results = run_play(tmp_path, tasks, env=env)
    assert not results["Chosen"].get("failed"), results["Chosen"]
    points = [json.loads(line) for line in (tmp_path / "ok" / "points.jsonl").read_text().splitlines()]
    assert [list(point["gpu_energy_per_gpu_j"]) for point in points] == [["0", "2"], ["0", "2"]]
    assert all(point["gpu_mean_power_w"] == pytest.approx(400.0, rel=0.01) for point in points)
    assert results["Missing"]["failed"] is True
    assert results["Missing"]["msg"] == "energy_gpus: GPU index(es) 3 not found: NVML sees 3 GPU(s), 0-2"


def test_sweep_module_measures_failed_points_again_only_when_asked(
    tmp_path: Path, sse_server: StartServer
) -> None:
    out = tmp_path / "tp8"
    failing, healthy = sse_server(faults=["http_error:status=500"]).url, sse_server().url
    planned = {**_sweep_task(healthy, out, "Planned"), "check_mode": True, "diff": True}
    planned[fqcn("fairbench_sweep")]["remeasure_failed"] = True
    remeasured = _sweep_task(healthy, out, "Remeasured")
    remeasured[fqcn("fairbench_sweep")]["remeasure_failed"] = True
    tasks = [_sweep_task(failing, out, "Failed"), _sweep_task(healthy, out, "Again"), planned, remeasured]
    results = run_play(tmp_path, tasks)
    assert results["Failed"]["failed"] and results["Failed"]["written"] == ["c1-r0", "c4-r0"]
    # A resume keeps a failed point unless asked: still failed, nothing written.
    assert results["Again"]["failed"] and results["Again"]["written"] == []
    assert results["Planned"]["planned"] == ["c1-r0", "c4-r0"] and results["Planned"]["changed"]
    # Appended: the failed lines stay.
    assert results["Planned"]["diff"]["after"] == "c1-r0\nc4-r0\nc1-r0\nc4-r0\n"
    done = results["Remeasured"]
    assert not done.get("failed"), done["msg"]
    assert done["changed"] and done["written"] == ["c1-r0", "c4-r0"]
    assert [level["completed"] for level in done["levels"]] == [16, 16]
    assert len((out / "points.jsonl").read_text().splitlines()) == 4
    assert [point["supersedes"]["line"] for point in ResultsDir(out).points()] == [1, 2]


def test_the_sweep_modules_remeasure_option_is_documented() -> None:
    shown = subprocess.run(
        [str(ANSIBLE_PLAYBOOK.parent / "ansible-doc"), "-t", "module", "--json", fqcn("fairbench_sweep")],
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
        timeout=120,
        check=True,
    )
    option = json.loads(shown.stdout)[fqcn("fairbench_sweep")]["doc"]["options"]["remeasure_failed"]
    assert (option["type"], option["default"]) == ("bool", False)


def test_sweep_module_names_the_sweep_in_each_line_and_plans_no_other_into_it(
    tmp_path: Path, sim_url: str
) -> None:
    # As roles/bench passes it; a re-run as another config is refused by the plan, before any server starts.
    out = tmp_path / "tp8"
    identity = {"campaign": "demo", "run_id": "r1", "host": "lab1", "config": "tp8"}
    first = _sweep_task(sim_url, out, "First")
    first[fqcn("fairbench_sweep")]["identity"] = identity
    other = {**_sweep_task(sim_url, out, "Other"), "check_mode": True}
    other[fqcn("fairbench_sweep")]["identity"] = {**identity, "config": "ep4"}
    results = run_play(tmp_path, [first, other])
    assert not results["First"].get("failed"), results["First"]
    lines = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    assert [{key: line[key] for key in identity} for line in lines] == [identity, identity]
    assert results["Other"]["failed"] is True
    assert "cannot resume as another sweep: config 'tp8' -> 'ep4'" in results["Other"]["msg"]
    assert len((out / "points.jsonl").read_text().splitlines()) == 2


def test_sweep_in_the_background_is_followed_to_its_result(tmp_path: Path, sim_url: str) -> None:
    # As roles/bench runs it: async with poll 0, then fairbench_sweep_status until the job has finished.
    out = tmp_path / "tp8"
    async_dir = tmp_path / "async"
    started = {**_sweep_task(sim_url, out, "Start"), "async": 600, "poll": 0}
    follow = {
        "name": "Follow",
        fqcn("fairbench_sweep_status"): {
            "jid": "{{ task_0.ansible_job_id }}",
            "out": str(out),
            "async_dir": str(async_dir),
        },
        "until": "task_1.finished",
        "retries": 100,
        "delay": 1,
    }
    results = run_play(tmp_path, [started, follow], env={"ANSIBLE_ASYNC_DIR": str(async_dir)})
    followed = results["Follow"]
    assert not followed.get("failed"), followed
    assert followed["finished"] is True and followed["changed"] is True
    assert followed["written"] == ["c1-r0", "c4-r0"]
    assert followed["out"] == str(out)
    # The job file is gone once its result was returned; the sweep's last state stays beside its points.
    assert list(async_dir.iterdir()) == []
    state = json.loads((out / "progress.json").read_text())
    assert state["finished"][-1].startswith("c4-r0: 16/16 ok")


def test_background_sweep_failure_fails_the_follow_task_with_the_sweeps_message(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    async_dir = tmp_path / "async"
    started = {**_sweep_task(url, tmp_path / "down", "Start"), "async": 600, "poll": 0}
    follow = {
        "name": "Follow",
        fqcn("fairbench_sweep_status"): {
            "jid": "{{ task_0.ansible_job_id }}",
            "out": str(tmp_path / "down"),
            "async_dir": str(async_dir),
        },
        "until": "task_1.finished",
        "retries": 100,
        "delay": 1,
    }
    followed = run_play(tmp_path, [started, follow], env={"ANSIBLE_ASYNC_DIR": str(async_dir)})["Follow"]
    assert followed["failed"] is True and followed["finished"] is True
    assert "connect" in followed["msg"].lower()


# --- fairbench_config_run --------------------------------------------------------------------------


def test_config_run_in_check_mode_plans_the_jobs_repeats_and_starts_nothing(
    tmp_path: Path, sim_url: str
) -> None:
    out = tmp_path / "out"
    workload = {**WORKLOAD, "repeats": 2}
    task = {
        "name": "Run",
        fqcn("fairbench_config_run"): {
            "url": sim_url,
            "workload": workload,
            "out": str(out),
            "repeats": [1],
            "unit": "fairbench-none-tp8.service",
            "clean": {"port": 9, "user": "nobody"},
        },
    }
    result = run_play(tmp_path, [task], "--check", "--diff")["Run"]
    assert not result.get("failed"), result
    levels = WORKLOAD["concurrency"]
    assert result["planned"] == [f"c{level}-r1" for level in levels]  # only this job's repeat
    assert result["server_started"] is False and result["changed"] is True
    assert result["diff"][0]["after"] == "".join(f"c{level}-r1\n" for level in levels)
    assert not (out / "points.jsonl").exists()


FAKE_SYSTEMCTL = """#!/usr/bin/env bash
# systemd for one unit, on a machine that runs none: restart runs the command in $FAKE_UNIT/command in the
# background, stop ends it, show says whether it runs; no unit is listed (the host is clean between jobs).
pid_file=$FAKE_UNIT/pid
running() {
    local state
    state=$( [[ -f $pid_file ]] && ps -o stat= -p "$(cat "$pid_file")" )
    [[ -n $state && $state != Z* ]]
}
case $1 in
    list-units) ;;
    restart)
        if running; then kill "$(cat "$pid_file")"; fi
        setsid bash -c "exec $(cat "$FAKE_UNIT/command")" </dev/null >>"$FAKE_UNIT/log" 2>&1 &
        echo $! >"$pid_file" ;;
    stop)
        if running; then kill "$(cat "$pid_file")"; while running; do sleep 0.05; done; fi ;;
    show)
        if running; then echo ActiveState=active; echo SubState=running
        else echo ActiveState=inactive; echo SubState=dead; fi
        echo Result=success; echo ExecMainStatus=0 ;;
    *) exit 1 ;;
esac
"""


def _fake_systemd(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment that puts FAKE_SYSTEMCTL (and a journalctl with no entries) first on PATH, and the
    folder of its one unit (its ``command``, ``pid`` and ``log``)."""
    bin_dir, unit = tmp_path / "bin", tmp_path / "unit"
    bin_dir.mkdir()
    unit.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "journalctl").write_text('#!/usr/bin/env bash\necho "-- No entries --"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_UNIT": str(unit)}, unit


def _sim_command(port: int) -> str:
    fairbench = Path(sys.executable).parent / "fairbench"
    return f"{fairbench} sim --model-path test/model --port {port} --sim-time-scale 0.02"


def test_a_job_run_again_with_remeasure_failed_measures_its_failed_points_again(tmp_path: Path) -> None:
    # As the bench role runs a job (roles/bench/tasks/config.yml), twice on one run id: the first time the
    # server crashes during the last level, which completes some of its requests; the second time (the
    # crash was the host's, since mended) with and without bench_remeasure_failed.
    env, unit = _fake_systemd(tmp_path)
    port, out = _free_port(), tmp_path / "out"
    server = _sim_command(port)

    def job(name: str, *, remeasure_failed: bool) -> dict[str, Any]:
        arguments = {
            "unit": "fairbench-demo-tp8.service",
            "url": f"http://127.0.0.1:{port}",
            "workload": WORKLOAD,
            "out": str(out),
            "repeats": [0],
            "remeasure_failed": remeasure_failed,
            "clean": {"port": port, "user": _idle_user(), "timeout_s": 10},
        }
        return {"name": name, fqcn("fairbench_config_run"): arguments}

    # c1 takes requests 1-16; c4's first four are in flight when the 21st is sent, which crashes the server.
    (unit / "command").write_text(f"{server} --sim-fault crash-after=20")
    first = run_play(tmp_path, [job("First", remeasure_failed=False)], env=env)["First"]
    assert first["failed"] and first["stage"] == "sweep", first
    crashed = {point["point_id"]: point for point in ResultsDir(out).points()}
    assert crashed["c1-r0"]["completed"] == 16
    assert 0 < crashed["c4-r0"]["completed"] < 16 and crashed["c4-r0"]["failed"] > 0

    (unit / "command").write_text(server)
    again = run_play(
        tmp_path, [job("Again", remeasure_failed=False), job("Remeasured", remeasure_failed=True)], env=env
    )
    # A resume keeps the failed point: the job fails at its plan, no server started.
    kept = again["Again"]
    assert kept["failed"] and kept["stage"] == "sweep" and kept["server_started"] is False, kept
    assert kept["planned"] == [] and "c4-r0: " in kept["msg"]
    remeasured = again["Remeasured"]
    assert not remeasured.get("failed"), remeasured["msg"]
    assert remeasured["server_started"] is True and remeasured["planned"] == ["c4-r0"]
    assert remeasured["sweep"]["written"] == ["c4-r0"] and remeasured["sweep"]["problems"] == []
    # The crashed point's line stays in points.jsonl, superseded by the new one.
    lines = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    assert [line["point_id"] for line in lines] == ["c1-r0", "c4-r0", "c4-r0"]
    assert lines[2]["supersedes"] == {"line": 2, "requests": "requests/c4-r0.line2.jsonl.gz"}
    assert [point["completed"] for point in ResultsDir(out).points()] == [16, 16]
    assert (out / "requests/c4-r0.line2.jsonl.gz").exists()


def test_a_job_of_several_workloads_sweeps_each_into_its_directory_on_one_server_start(
    tmp_path: Path,
) -> None:
    env, unit = _fake_systemd(tmp_path)
    port, out = _free_port(), tmp_path / "out"
    (unit / "command").write_text(_sim_command(port))
    workloads = {"random": WORKLOAD, "short": {**WORKLOAD, "output_len": 2, "concurrency": [2]}}
    arguments = {
        "unit": "fairbench-demo-tp8.service",
        "url": f"http://127.0.0.1:{port}",
        "workloads": workloads,
        "out": str(out),
        "repeats": [0],
        "clean": {"port": port, "user": _idle_user(), "timeout_s": 10},
    }
    result = run_play(tmp_path, [{"name": "Job", fqcn("fairbench_config_run"): arguments}], env=env)["Job"]
    assert not result.get("failed"), result
    assert result["planned"] == ["random/c1-r0", "random/c4-r0", "short/c2-r0"]
    assert result["sweep"]["written"] == result["planned"] and result["sweep"]["problems"] == []
    assert [(level["workload"], level["point_id"]) for level in result["sweep"]["levels"]] == [
        ("random", "c1-r0"),
        ("random", "c4-r0"),
        ("short", "c2-r0"),
    ]
    # Each workload's points in its own directory, the server's files once beside them; one start.
    assert [point["random_output_len"] for point in ResultsDir(out / "short").points()] == [2]
    assert [point["max_concurrency"] for point in ResultsDir(out / "random").points()] == [1, 4]
    assert not (out / "points.jsonl").exists() and (out / "server_info.json").exists()
    assert (out / "progress.json").exists() and not (out / "short" / "progress.json").exists()
    timeline = result["timeline"]
    assert timeline["unit_started_at"] < timeline["first_request_at"] < timeline["last_point_ended_at"]
    # Run again, every point is there: nothing is planned and no server starts.
    again = run_play(tmp_path, [{"name": "Again", fqcn("fairbench_config_run"): arguments}], env=env)["Again"]
    assert (again["planned"], again["server_started"]) == ([], False), again


# --- the bench role's GPU clock lock ----------------------------------------------------------------

CLOCK_NVIDIA_SMI = """#!/usr/bin/env bash
# nvidia-smi that locks and resets GPU clocks, each such call's arguments a line of $NVIDIA_SMI_CALLS; it
# refuses to lock a memory clock of 1 MHz as a GPU refuses one it does not support, and answers nothing else
# (the host facts find no GPU).
case "$*" in
    *-lgc*|*-lmc*|*-rgc|*-rmc) echo "$*" >>"$NVIDIA_SMI_CALLS" ;;&
    *"-lmc 1,1") echo "Setting locked memory clocks is not supported for GPU 00000000:00:06.0."; exit 3 ;;
    *-lgc*|*-lmc*|*-rgc|*-rmc) echo "All done." ;;
    *) exit 2 ;;
esac
"""


def _clock_job(
    tmp_path: Path, lock: dict[str, int | None], *mode: str, server_starts: bool = True
) -> tuple[dict[str, Any], list[str]]:
    """One job of a sim config whose server uses GPUs 0 and 1, run by the bench role's config.yml on this
    machine (systemd and nvidia-smi faked) under ``lock``, ``mode`` ansible-playbook's options: the job's
    failure (``bench_failure``) and host.json, and nvidia-smi's calls."""
    tmp_path.mkdir()
    env, unit = _fake_systemd(tmp_path)
    calls = tmp_path / "nvidia-smi-calls"
    nvidia_smi = Path(env["PATH"].split(os.pathsep)[0]) / "nvidia-smi"
    nvidia_smi.write_text(CLOCK_NVIDIA_SMI)
    nvidia_smi.chmod(0o755)
    port = _free_port()
    (unit / "command").write_text(_sim_command(port) if server_starts else "false")
    campaign = tmp_path / "clocks.yml"
    campaign.write_text(
        "name: clocks\nengine: sim\nmodel: test/model\n"
        "configs:\n  tp2: {args: {tp-size: 2}, env: {CUDA_VISIBLE_DEVICES: '0,1'}}\n"
        f"workload: {json.dumps({**WORKLOAD, 'concurrency': [1]})}\n"
    )
    no_environment = {"fairbench_environment_dir": str(tmp_path / "no-environment")}
    job = {
        "bench_campaign": "{{ fairbench_campaign }}",
        "bench_config": "{{ fairbench_campaign.configs.tp2 }}",
        "bench_run_id": "r1",
        "bench_job": {"id": "tp2#1", "repeats": [0], "extends_repeats": False, "hosts": ["localhost"]},
        "bench_unfetched": {},
        "bench_gpu_clock_lock": lock,
        "bench_venv_dir": str(Path(sys.executable).parent.parent),
        "bench_results_root": str(tmp_path / "results"),
        "bench_host_results_root": str(tmp_path / "host-results"),
        "bench_sweep_poll_s": 1,
        "bench_clean_timeout_s": 10,
        "serving_port": port,
        "serving_user": _idle_user(),
        "ansible_async_dir": str(tmp_path / "async"),
        **no_environment,
    }
    tasks = [
        _load_task(str(campaign)),
        {
            "name": "Environment",
            "ansible.builtin.include_role": {
                "name": fqcn("serving"),
                "tasks_from": "environment",
                "public": True,
            },
            "vars": no_environment,
        },
        {
            "name": "Job",
            "ansible.builtin.include_role": {"name": fqcn("bench"), "tasks_from": "config"},
            "vars": job,
        },
        {"name": "Outcome", "ansible.builtin.debug": {"var": "bench_failure"}},
    ]
    results = run_play(tmp_path, tasks, *mode, env={**env, "NVIDIA_SMI_CALLS": str(calls)})
    assert not results["Job"].get("failed"), results["Job"]
    host_json = tmp_path / "host-results/clocks/r1/tp2/host.json"
    outcome = {
        "failure": results["Outcome"]["bench_failure"],
        "host": json.loads(host_json.read_text()) if host_json.exists() else None,
    }
    return outcome, calls.read_text().splitlines() if calls.exists() else []


def test_the_gpu_clocks_are_locked_for_a_job_and_reset_after_it_however_it_ended(tmp_path: Path) -> None:
    done, calls = _clock_job(tmp_path / "ok", {"sm_mhz": 1500, "mem_mhz": 2619})
    assert done["failure"] == {}, done
    # The server's GPUs (its CUDA_VISIBLE_DEVICES), each clock at min = max; reset once the job ended.
    assert calls == ["-i 0,1 -lgc 1500,1500", "-i 0,1 -lmc 2619,2619", "-i 0,1 -rgc", "-i 0,1 -rmc"]
    assert done["host"]["gpu_clock_lock"] == {"sm_mhz": 1500, "mem_mhz": 2619}
    # A server that fails its start: the clocks are reset all the same.
    failed, calls = _clock_job(tmp_path / "failed", {"sm_mhz": 1500, "mem_mhz": None}, server_starts=False)
    assert failed["failure"]["stage"] == "health", failed
    assert calls == ["-i 0,1 -lgc 1500,1500", "-i 0,1 -rgc"]
    # A clock the GPU cannot lock fails the job at its start, naming the host and nvidia-smi's words, and
    # what was locked is reset; the server never started.
    refused, calls = _clock_job(tmp_path / "refused", {"sm_mhz": 1500, "mem_mhz": 1})
    assert refused["failure"]["stage"] == "start", refused
    assert refused["failure"]["reason"] == (
        "nvidia-smi could not lock the GPU clocks: localhost, memory clock: Setting locked memory clocks is "
        "not supported for GPU 00000000:00:06.0."
    )
    assert calls == ["-i 0,1 -lgc 1500,1500", "-i 0,1 -lmc 1,1", "-i 0,1 -rgc", "-i 0,1 -rmc"]
    assert refused["host"] is None
    # No lock: nvidia-smi is not asked, and host.json records none.
    unlocked, calls = _clock_job(tmp_path / "unlocked", {"sm_mhz": None, "mem_mhz": None})
    assert unlocked["failure"] == {} and calls == [] and unlocked["host"]["gpu_clock_lock"] is None
    # Check mode plans the job and touches no clock.
    checked, calls = _clock_job(tmp_path / "checked", {"sm_mhz": 1500, "mem_mhz": 2619}, "--check")
    assert checked["failure"] == {} and calls == [] and checked["host"] is None


# --- fairbench_fleet, fairbench_fleet_job ------------------------------------------------------------


def _fleet_campaign(**configs: dict[str, Any]) -> dict[str, Any]:
    expanded = {name: {"name": name, "nodes": 1, "hosts": None, **config} for name, config in configs.items()}
    return {
        "engine": "sim",
        "placement": "spread",
        "accept_host_differences": [],
        "configs": expanded,
        "workload": {"repeats": 1},
    }


def _fleet_task(run_dir: Path, campaign: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "Place",
        fqcn("fairbench_fleet"): {
            "campaign": campaign,
            "run_dir": str(run_dir),
            "groups": {"gpu_hosts": ["a", "b"]},
            "play_hosts": ["a", "b"],
            "facts": facts,
        },
    }


def test_fleet_module_places_the_jobs_and_the_job_module_hands_them_out(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    facts = {host: {"sglang": "0.5.23", "reasons": {}} for host in ("a", "b")}
    campaign = _fleet_campaign(tp8={}, ep4={}, both={"nodes": 2})
    claim = {fqcn("fairbench_fleet_job"): {"run_dir": str(run_dir), "host": "a"}}
    tasks = [
        _fleet_task(run_dir, campaign, facts),
        {"name": "First", **claim},
        {"name": "Second", fqcn("fairbench_fleet_job"): {"run_dir": str(run_dir), "host": "b"}},
        {
            "name": "Gather",
            fqcn("fairbench_fleet_job"): {
                "run_dir": str(run_dir),
                "host": "a",
                "finished": {"job": "tp8#r0", "ok": False, "reason": "sweep: boom"},
            },
        },
    ]
    results = run_play(tmp_path, tasks)
    placed = results["Place"]
    assert not placed.get("failed"), placed
    assert [job["id"] for job in placed["jobs"]] == ["tp8#r0", "ep4#r0", "both#r0"]
    assert {host: [job["id"] for job in jobs] for host, jobs in placed["predicted"].items()} == {
        "a": ["tp8#r0", "both#r0"],
        "b": ["ep4#r0"],
    }
    assert (results["First"]["answer"], results["First"]["job"]["id"]) == ("run", "tp8#r0")
    assert (results["Second"]["answer"], results["Second"]["job"]["id"]) == ("run", "ep4#r0")
    gathering = results["Gather"]  # a finished tp8 and now gathers the server over both hosts
    assert gathering["answer"] == "wait" and "has 1 of its 2 hosts" in gathering["why"], gathering
    queue = json.loads((run_dir / "fleet.json").read_text())
    assert [(job["id"], job["state"]) for job in queue["jobs"]] == [
        ("tp8#r0", "failed"),
        ("ep4#r0", "running"),
        ("both#r0", "gathering"),
    ]
    assert queue["jobs"][0]["reason"] == "sweep: boom"


def test_fleet_module_refuses_hosts_that_differ_and_writes_no_queue(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    facts = {"a": {"sglang": "0.5.23", "reasons": {}}, "b": {"sglang": "0.5.22", "reasons": {}}}
    refused = run_play(tmp_path, [_fleet_task(run_dir, _fleet_campaign(tp8={}), facts)])["Place"]
    assert refused["failed"] is True
    assert "pool gpu_hosts: sglang: 0.5.23 on a, 0.5.22 on b" in refused["msg"], refused["msg"]
    assert "accept_host_differences: [sglang]" in refused["msg"]
    assert not (run_dir / "fleet.json").exists()
    accepting = {**_fleet_campaign(tp8={}), "accept_host_differences": ["sglang"]}
    accepted = run_play(tmp_path, [_fleet_task(run_dir, accepting, facts)])["Place"]
    assert not accepted.get("failed"), accepted
    assert [item["fact"] for item in accepted["equivalence"]["accepted"]] == ["sglang"]
    assert json.loads((run_dir / "fleet.json").read_text())["equivalence"]["accepted"][0]["fact"] == "sglang"


def test_fleet_module_finds_hosts_that_share_a_machine_and_the_queue_runs_them_in_turn(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    # The lab's containers: no DMI table, one kernel boot instant.
    machine = {"product_uuid": None, "board": None, "kernel_boot": 1796524073.175671, "gpu_uuids": []}
    facts = {
        host: {"sglang": "0.5.23", "reasons": {}, "machine": {**machine, "reasons": {}}} for host in "ab"
    }

    def claim(name: str, host: str) -> dict[str, Any]:
        return {"name": name, fqcn("fairbench_fleet_job"): {"run_dir": str(run_dir), "host": host}}

    tasks = [_fleet_task(run_dir, _fleet_campaign(tp8={}, ep4={}), facts), claim("A", "a"), claim("B", "b")]
    results = run_play(tmp_path, tasks)
    placed = results["Place"]
    assert not placed.get("failed"), placed
    (shared,) = placed["machines"]["shared"]
    assert shared["hosts"] == ["a", "b"] and placed["machines"]["isolated"] is False
    assert shared["text"] == "a, b: one kernel, booted at 2026-12-06 02:27:53.175 UTC"
    assert json.loads((run_dir / "fleet.json").read_text())["machines"] == placed["machines"]
    assert (results["A"]["answer"], results["A"]["job"]["id"]) == ("run", "tp8#r0")
    assert (results["B"]["answer"], results["B"]["why"]) == (
        "wait",
        "shares its machine with a, busy with tp8#r0",
    )
    isolated = {**_fleet_campaign(tp8={}, ep4={}), "isolated_hosts": True}
    apart = run_play(tmp_path, [_fleet_task(run_dir, isolated, facts), claim("A", "a"), claim("B", "b")])
    assert apart["Place"]["machines"]["isolated"] is True
    assert (apart["A"]["answer"], apart["B"]["answer"]) == ("run", "run")


# --- fairbench_campaign_record ---------------------------------------------------------------------


def test_campaign_record_module_refuses_a_changed_resume_unless_allowed_and_keeps_the_recorded_one(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "demo" / "r1"
    first = load_campaign(REPO / "campaigns/demo.yml").to_json()
    second = replaced(first, "configs.tp8.args.tp-size", 4)

    def task(name: str, campaign: dict[str, Any], **options: Any) -> dict[str, Any]:
        args = {"run_dir": str(run_dir), "campaign": campaign, **options}
        return {"name": name, fqcn("fairbench_campaign_record"): args}

    run_dir.mkdir(parents=True)
    new = run_play(tmp_path, [task("Checked", first, save=False), task("Recorded", first)])
    assert new["Checked"]["differences"] == [] and new["Checked"]["changed"] is False
    assert new["Recorded"]["changed"] is True and new["Recorded"]["kept_as"] is None
    # Indented as to_nice_json wrote it when the role copied it, the campaign's order kept through Ansible.
    written = (run_dir / "campaign.json").read_text()
    assert written == json.dumps(first, indent=4) + "\n"
    assert list(json.loads(written)["workloads"]) == ["random", "agentic"]
    tasks = [
        task("Same", first),
        task("Refused", second, save=False),
        task("Not recorded", second),
        task("Allowed", second, save=False, allow_changed=True),
    ]
    resumed = run_play(tmp_path, tasks)
    assert resumed["Same"]["changed"] is False and resumed["Same"]["differences"] == []
    for name in ("Refused", "Not recorded"):
        assert resumed[name]["failed"], resumed[name]
        assert resumed[name]["msg"].startswith(f"{run_dir}: a resume of this run with another campaign: ")
        assert "  configs.tp8.args.tp-size: 8 -> 4" in resumed[name]["msg"].splitlines()
        assert "-e bench_resume_changed=true" in resumed[name]["msg"]
    assert "configs.tp8.args.tp-size: 8 -> 4" in resumed["Allowed"]["differences"]
    assert resumed["Allowed"]["changed"] is False and not resumed["Allowed"].get("failed")
    assert (run_dir / "campaign.json").read_text() == written
    # Recorded, allowed: in check mode nothing is written; then the recorded campaign is kept.
    checked = run_play(tmp_path, [task("Recorded", second, allow_changed=True)], "--check", "--diff")
    assert checked["Recorded"]["changed"] is True
    assert checked["Recorded"]["kept_as"] == str(run_dir / "campaign.1.json")
    assert sorted(path.name for path in run_dir.iterdir()) == ["campaign.json"]
    done = run_play(tmp_path, [task("Recorded", second, allow_changed=True)])["Recorded"]
    assert done["changed"] is True and done["kept_as"] == str(run_dir / "campaign.1.json")
    assert (run_dir / "campaign.1.json").read_text() == written
    assert json.loads((run_dir / "campaign.json").read_text()) == second


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
    task = [{"name": "Report", fqcn("fairbench_report"): {"run_dir": str(run_dir)}}]
    # Configs of the campaign with no results at all count as failed too: never silently missing. Spread
    # over the hosts (the campaign's placement), such a config ran on no host.
    not_ok = [
        "(no host)/tp8-nccl",
        "lab1/ep4",
        "(no host)/ep8",
        "(no host)/ep8-eplb",
        "(no host)/ep4-fp8kv",
        "(no host)/pd",
    ]
    checked = run_play(tmp_path, task, "--check")["Report"]
    assert sorted(checked["failed_configs"]) == sorted(not_ok)
    assert checked["changed"] is False and not (run_dir / "report.md").exists()
    written = run_play(tmp_path, task)["Report"]
    assert sorted(written["failed_configs"]) == sorted(not_ok)
    assert str(run_dir / "report.md") in written["paths"] and str(run_dir / "report.html") in written["paths"]
    report = (run_dir / "report.md").read_text()
    assert "failed at stage `health`" in report


# --- gpu_facts and the campaign's GPU preflight ----------------------------------------------------

H200X2 = REPO / "tests/fixtures/gpu/h200x2"


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path) -> Path:
    """An nvidia-smi answering with the recordings of a host with 2 H200s joined by NVLink (NV18), beside a
    systemctl that lists no unit (this machine runs no systemd): the preflight's idle baseline asks both."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _write_no_units_systemctl(bin_dir)
    return write_fake_nvidia_smi(bin_dir, H200X2)


def _write_no_units_systemctl(bin_dir: Path) -> None:
    systemctl = bin_dir / "systemctl"
    systemctl.write_text("#!/usr/bin/env bash\n[[ $1 == list-units ]] || exit 1\n")
    systemctl.chmod(0o755)


@pytest.mark.parametrize("mode", [[], ["--check"]], ids=["run", "check"])
def test_gpu_facts_module(tmp_path: Path, fake_nvidia_smi: Path, mode: list[str]) -> None:
    missing = tmp_path / "nowhere" / "nvidia-smi"
    broken = tmp_path / "broken-nvidia-smi"
    broken.write_text('#!/usr/bin/env bash\necho "Driver Version: 1  CUDA Version: 2"\n')
    broken.chmod(0o755)
    tasks = [
        {"name": name, fqcn("fairbench_gpu_facts"): {"nvidia_smi": str(path)}}
        for name, path in (("Facts", fake_nvidia_smi), ("Missing", missing), ("Broken", broken))
    ]
    results = run_play(tmp_path, tasks, *mode)
    result = results["Facts"]
    assert not result.get("failed"), result
    assert result["changed"] is False
    facts = result["ansible_facts"]["gpu_facts"]
    assert [gpu["name"] for gpu in facts["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert facts["gpus"][1]["uuid"] == "GPU-fad8c7f9-7d99-b7f2-4828-7cdc57816b3c"
    assert facts["gpus"][0]["memory_total_mib"] == 143771 and facts["gpus"][0]["numa_affinity"] == "0"
    assert (facts["driver_version"], facts["cuda_version"]) == ("580.159.04", "13.0")
    assert facts["links"] == {"0-1": "NV18"} and facts["interconnect"] == "nvlink"
    # No nvidia-smi: no GPUs, and why; not a failure.
    assert not results["Missing"].get("failed"), results["Missing"]
    facts = results["Missing"]["ansible_facts"]["gpu_facts"]
    assert facts["gpus"] == [] and facts["interconnect"] == "none"
    assert facts["reason"] == f"{missing} not found (not on PATH, or not an executable)"
    # Output the parsers do not know: a failure naming the command and the line.
    assert results["Broken"]["failed"] is True
    message = results["Broken"]["msg"]
    assert message.startswith(f"{broken} --query-gpu=index,name,"), message
    assert "--format=csv: line 1: no column index, name," in message


def _campaign_file(tmp_path: Path, engine: str) -> Path:
    campaign = tmp_path / f"preflight-{engine}.yml"
    campaign.write_text(
        f"name: preflight-{engine}\n"
        f"engine: {engine}\n"
        "model: test/model\n"
        "configs:\n"
        "  tp2: {args: {tp-size: 2}}\n"
        "  tp8: {args: {tp-size: 8}}\n"
        "  tp2-dp2: {args: {tp-size: 2, dp-size: 2}}\n"
        "  dp-attention: {args: {tp-size: 2, dp-size: 2, enable-dp-attention: true}}\n"
        "workload: {api: completions, dataset: random-ids, input_len: 16, output_len: 8, concurrency: [1],\n"
        "           prompts_per_level: 16, warmup: 0}\n"
    )
    return campaign


PREFLIGHT_TASK = {
    "name": "Preflight",
    "ansible.builtin.include_role": {"name": fqcn("bench"), "tasks_from": "preflight.yml"},
    "vars": {
        "bench_campaign": "{{ fairbench_campaign }}",
        "bench_venv_python": {"stat": {"exists": True}},
        "bench_venv_dir": str(Path(sys.executable).parent.parent),
    },
}
"""The preflight tasks alone, in this interpreter's venv (the whole campaign would go on to deploy here)."""


def test_the_preflight_gathers_facts_and_refuses_nothing_for_the_simulator(
    tmp_path: Path, fake_nvidia_smi: Path
) -> None:
    # tp8 runs on the simulator.
    gathered = {
        "name": "Gathered",
        "ansible.builtin.set_fact": {"gathered": "{{ ansible_facts['gpu_facts'] }}"},
    }
    load = _load_task(str(_campaign_file(tmp_path, "sim")))
    path = {"PATH": f"{fake_nvidia_smi.parent}:{os.environ['PATH']}"}
    results = run_play(tmp_path, [load, PREFLIGHT_TASK, gathered], env=path)
    assert not results["Preflight"].get("failed"), results["Preflight"]
    facts = results["Gathered"]["ansible_facts"]["gathered"]
    assert len(facts["gpus"]) == 2 and facts["interconnect"] == "nvlink"


@pytest.mark.parametrize("engine", ["sim", "sglang"])
def test_a_failing_nvidia_smi_fails_the_preflight_only_for_gpu_servers(tmp_path: Path, engine: str) -> None:
    # As on a host whose driver is installed but sees no GPU (the lab's stub driver package).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    failing = bin_dir / "nvidia-smi"
    failing.write_text('#!/usr/bin/env bash\necho "No devices were found"\nexit 6\n')
    failing.chmod(0o755)
    tasks = [_load_task(str(_campaign_file(tmp_path, engine))), PREFLIGHT_TASK]
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    if engine == "sim":
        results = run_play(tmp_path, tasks, env=env)
        assert not results["Preflight"].get("failed"), results["Preflight"]
    else:
        # any_errors_fatal: the play stops there, before the task that would record the results.
        with pytest.raises(pytest.fail.Exception, match="No devices were found"):
            run_play(tmp_path, tasks, env=env)


def _campaign_play_in_check_mode(
    tmp_path: Path, fake_nvidia_smi: Path, campaign: Path, *args: str, hosts: tuple[str, ...] = ("lab1",)
) -> subprocess.CompletedProcess[str]:
    """playbooks/campaign.yml of ``campaign`` in check mode, on this machine as ``hosts`` (the GPUs of
    ``fake_nvidia_smi``), its results under tmp_path/results; ``args`` for ansible-playbook."""
    inventory = tmp_path / "inventory.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    every = dict.fromkeys(hosts, host)
    inventory.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": every}}}}))
    settings = {
        # The venv the module runs in: this one, which imports fairbench (check mode installs nothing).
        "bench_venv_dir": str(Path(sys.executable).parent.parent),
        # The Python that venv would be made with: one the server units can see (not under /root).
        "bench_python": "/usr/bin/python3",
        "bench_wheel_build_dir": str(tmp_path / "wheel"),
        "bench_results_root": str(tmp_path / "results"),
        "bench_host_data_dir": str(tmp_path / "host-data"),
        "bench_host_results_root": str(tmp_path / "host-results"),
    }
    argv = [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(REPO / "playbooks/campaign.yml"), "--check"]
    argv += ["-e", f"campaign={campaign}", "-e", json.dumps(settings), *args]
    env = {
        **os.environ,
        "PATH": f"{fake_nvidia_smi.parent}:{os.environ['PATH']}",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=600, check=False)


def test_the_campaign_stops_before_deploying_when_a_config_needs_more_gpus_than_the_host_has(
    tmp_path: Path, fake_nvidia_smi: Path
) -> None:
    """playbooks/campaign.yml on this machine as host lab1 (2 H200s, faked), in check mode: it changes
    nothing here even if the preflight let it through. Refused, it stops before the serving role."""
    done = _campaign_play_in_check_mode(tmp_path, fake_nvidia_smi, _campaign_file(tmp_path, "sglang"))
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    # Every offending config at once; tp2 fits, and data-parallel attention adds no GPUs.
    refused = [
        "lab1: config tp8 needs 8 GPUs per host (tp-size 8), the host has 2 (NVIDIA H200)",
        "lab1: config tp2-dp2 needs 4 GPUs per host (tp-size 2 x dp-size 2), the host has 2 (NVIDIA H200)",
    ]
    assert "\n".join(refused) in done.stdout, output
    assert "config tp2 " not in output and "config dp-attention " not in output
    # Stopped there: fairbench's venv step ran, the serving role and every later play did not.
    assert (
        "TASK [fairbench.fairbench.bench : Install fairbench and its dependencies into its venv]"
        in done.stdout
    )
    assert "TASK [fairbench.fairbench.serving :" not in done.stdout
    assert "PLAY [Record the campaign as run]" not in done.stdout
    assert not (tmp_path / "results").exists()
    assert not list(Path("/etc/systemd/system").glob("fairbench-preflight-sglang-*"))


def test_two_hosts_on_this_machine_are_found_to_share_it_before_anything_is_deployed(
    tmp_path: Path, fake_nvidia_smi: Path
) -> None:
    """Two inventory hosts on this machine (one kernel, the same two faked GPUs), the deploy in check mode:
    each host's own fleet facts tell the place step that they are one machine."""
    hosts = ("lab1", "lab2")
    campaign = _campaign_file(tmp_path, "sim")
    done = _campaign_play_in_check_mode(tmp_path, fake_nvidia_smi, campaign, "--tags", "deploy", hosts=hosts)
    output = " ".join(done.stdout.split())  # the YAML callback folds long messages
    assert done.returncode == 0, done.stdout[-3000:]
    gpus = ", ".join(sorted(re.findall(r"GPU-[0-9a-f-]{36}", (H200X2 / "nvidia-smi-query.csv").read_text())))
    booted = datetime.fromtimestamp(kernel_boot_s(), tz=timezone.utc)
    assert f"lab1, lab2: one kernel, booted at {booted:%Y-%m-%d %H:%M:%S}" in output, output[-3000:]
    assert f"UTC; the same GPU(s): {gpus}. Hosts of one machine take jobs one at a time" in output


# Without tags every play runs, the load play first; these are the two a host could be touched by alone.
@pytest.mark.parametrize("tags", [["--tags", "deploy"], ["--tags", "run"]], ids=["deploy", "run"])
def test_a_resume_with_a_changed_campaign_stops_the_campaign_before_any_host_is_touched(
    tmp_path: Path, fake_nvidia_smi: Path, tags: list[str]
) -> None:
    """playbooks/campaign.yml resuming a run whose campaign.json holds another campaign: refused in the
    load play, whatever the tags, before any play on a host (check mode: were it let through, it would
    change nothing here)."""
    campaign = _campaign_file(tmp_path, "sim")
    recorded = replaced(load_campaign(campaign).to_json(), "workload.concurrency", [1, 2])
    run_dir = tmp_path / "results" / "preflight-sim" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "campaign.json").write_text(json.dumps(recorded))
    done = _campaign_play_in_check_mode(tmp_path, fake_nvidia_smi, campaign, "-e", "run_id=r1", *tags)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert (
        f"{run_dir}: a resume of this run with another campaign: 1 key(s) of the expanded campaign differ "
        "from the run's campaign.json (recorded -> now):\n  workload.concurrency: [1, 2] -> [1]\n"
    ) in done.stdout, output
    assert "resume with it on purpose: -e bench_resume_changed=true (" in done.stdout, output
    assert "PLAY [Deploy fairbench]" not in done.stdout and "PLAY [Run the jobs]" not in done.stdout
    assert sorted(path.name for path in run_dir.iterdir()) == ["campaign.json"]
    assert json.loads((run_dir / "campaign.json").read_text()) == recorded


# --- fairbench_clean_state --------------------------------------------------------------------------


def _idle_user() -> str:
    """A user of this machine that runs no process, as the serving user does on a clean host."""
    for entry in sorted(pwd.getpwall(), key=lambda entry: entry.pw_name != "nobody"):
        if not user_processes(entry.pw_name):
            return entry.pw_name
    raise AssertionError("every user of this machine runs a process")


def _idle_gpu_host(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An nvidia-smi answering the clean-state queries with the recordings of an idle H200, and a systemctl
    that lists no unit, first on PATH: the nvidia-smi's path, and the environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    recorded = REPO / "tests/fixtures/gpu"
    nvidia_smi = bin_dir / "nvidia-smi"
    nvidia_smi.write_text(
        "#!/usr/bin/env bash\n"
        'case "$*" in\n'
        f"    {shlex.quote(' '.join(MEMORY_ARGS))}) cat {recorded / 'query-memory-idle.txt'} ;;\n"
        f"    {shlex.quote(' '.join(COMPUTE_APPS_ARGS))}) cat {recorded / 'compute-apps-idle.txt'} ;;\n"
        "    *) exit 2 ;;\n"
        "esac\n"
    )
    nvidia_smi.chmod(0o755)
    _write_no_units_systemctl(bin_dir)
    return nvidia_smi, {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_clean_state_module_fails_naming_the_port_and_its_holder_until_it_is_closed(tmp_path: Path) -> None:
    nvidia_smi, env = _idle_gpu_host(tmp_path)
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    args = {
        "port": port,
        "user": _idle_user(),
        "baseline": {"0": 0},
        "timeout_s": 1,
        "nvidia_smi": str(nvidia_smi),
    }
    held_tasks = [
        {"name": "Held", fqcn("fairbench_clean_state"): args},
        {"name": "Checked", fqcn("fairbench_clean_state"): {**args, "mode": "after"}, "check_mode": True},
    ]
    try:
        held = run_play(tmp_path, held_tasks, env=env)
    finally:
        holder.close()
    result = held["Held"]
    assert result["failed"] is True and result["clean"] is False, result
    head, *lines = result["msg"].splitlines()
    assert head.startswith("the host is not clean before starting (waited 1."), head
    me = f"pid {os.getpid()} ({command_line(os.getpid())}), unit {unit_of_pid(os.getpid()) or 'none'}"
    assert lines == result["found"] == [f"port {port} on 127.0.0.1 is held by {me}"]
    assert result["details"]["listeners"][0]["pids"] == [os.getpid()]
    assert result["waited_s"] >= 1 and result["stopped"] == [] and result["changed"] is False
    # Check mode checks once: a socket of no fairbench unit fails it too.
    checked = held["Checked"]
    assert checked["failed"] is True and checked["waited_s"] < 1, checked
    assert checked["msg"].startswith("the host did not become clean after stopping (")
    assert checked["found"] == result["found"]
    tasks = [
        {"name": "Free", fqcn("fairbench_clean_state"): args},
        {
            "name": "Baseline",
            fqcn("fairbench_clean_state"): {"record_baseline": True, "nvidia_smi": str(nvidia_smi)},
        },
    ]
    free = run_play(tmp_path, tasks, env=env)
    result = free["Free"]
    assert not result.get("failed"), result
    assert result["clean"] is True and result["found"] == [] and result["changed"] is False
    assert result["waited_s"] < 1
    assert result["details"]["gpus"] == [
        {
            "index": 0,
            "uuid": "GPU-2cf08462-e19e-d354-abe3-7895807b9363",
            "used_mib": 0,
            "baseline_mib": 0,
            "limit_mib": DEFAULT_TOLERANCE_MIB,
        }
    ]
    assert not free["Baseline"].get("failed"), free["Baseline"]
    assert free["Baseline"]["baseline"] == {"0": 0} and free["Baseline"]["changed"] is False


# --- the unit template ----------------------------------------------------------------------------


def _systemd_unit_filters() -> Any:
    path = REPO / "plugins/filter/systemd_unit.py"
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


def _render_units(tmp_path: Path, campaign: str) -> list[Path]:
    """The units of every config of ``campaign``, rendered by the template with the role's defaults."""
    venv = Path(sys.executable).parent.parent
    units = tmp_path / Path(campaign).stem
    units.mkdir()
    # The role's derived ports, as its vars/main.yml has them.
    role_vars = yaml.safe_load((REPO / "roles/serving/vars/main.yml").read_text())
    (tmp_path / "serving_ports.yml").write_text(yaml.safe_dump({"serving_ports": role_vars["serving_ports"]}))
    render = {
        "name": "Render",
        "ansible.builtin.template": {
            "src": str(REPO / "roles/serving/templates/config_server.service.j2"),
            "dest": f"{units}/{{{{ serving_unit.unit }}}}",
            "mode": "0644",
        },
        "loop": "{{ fairbench_campaign.configs.values() | fairbench.fairbench.serving_units(ports) }}",
        "loop_control": {"loop_var": "serving_unit"},
        "vars": {
            "serving_campaign": "{{ fairbench_campaign }}",
            "serving_config": "{{ fairbench_campaign.configs[serving_unit.config] }}",
            "ports": "{{ serving_ports }}",
        },
    }
    results = run_play(
        tmp_path,
        [_load_task(campaign), render],
        # The role's defaults, and executables that exist here (verify checks ExecStart's).
        "-e", f"@{REPO}/roles/serving/defaults/main.yml",
        "-e", f"@{tmp_path}/serving_ports.yml",
        "-e", f"serving_fairbench_venv={venv} serving_sglang_python={sys.executable}",
        "-e", f"serving_router_python={sys.executable}",
    )  # fmt: skip
    assert not results["Render"].get("failed"), results["Render"]
    rendered = sorted(units.iterdir())
    # One unit per config the file names, and one more per prefill or decode server.
    configs = load_campaign(REPO / campaign).configs.values()
    servers = sum(len(config.disaggregation.servers) for config in configs if config.disaggregation)
    assert len(rendered) == len(configs) + servers
    return rendered


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_rendered_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """Every config of every campaign renders a unit that systemd accepts without a word on stderr."""
    for campaign in ("campaigns/demo.yml", "campaigns/kimi-k2.6-pcie.yml", "tests/lab/campaign-short.yml"):
        rendered = _render_units(tmp_path, campaign)
        verify = subprocess.run(
            ["systemd-analyze", "verify", *map(str, rendered)], capture_output=True, text=True, check=False
        )
        # User= names the lab hosts' fairbench user, which this machine may lack; nothing else may be said.
        complaints = [line for line in verify.stderr.splitlines() if "User" not in line]
        assert verify.returncode == 0 and not complaints, verify.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_units_exposure_does_not_rise(tmp_path: Path) -> None:
    for campaign in ("campaigns/demo.yml", "campaigns/lab-sglang.yml"):
        for unit in _render_units(tmp_path, campaign):
            done = subprocess.run(
                ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            score = exposure(done.stdout)
            assert score is not None, done.stdout + done.stderr
            assert score <= UNIT_EXPOSURE, f"{unit.name}: {score}\n{done.stdout}"


# Each a character systemd ends a unit's line at, or (a trailing backslash) joins two lines with.
LINE_BREAKERS = {"newline": "\n", "carriage-return": "\r", "nul": "\0", "trailing-backslash": "\\"}
# Lines that, were they to become directives, systemd-analyze verify reports: a key it does not know and
# a command that does not exist.
INJECTED = "InjectedKey=1", "ExecStartPre=/nonexistent/injected"


def _injected(value: str, breaker: str) -> str:
    if breaker == "\\":
        return value + breaker  # joins the template's next line to this one
    return breaker.join([value, *INJECTED])


def _unit_directives(text: str) -> list[str]:
    """The (section, key) of each directive, read as systemd.syntax(7) says: lines end at a newline,
    carriage return or NUL; a line ending in an odd run of backslashes continues on the next."""
    directives: list[str] = []
    section = ""
    pending = ""
    for physical in re.split("[\n\r\0]", text):
        line = pending + physical.strip()
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        else:
            directives.append(f"{section}{line.split('=', 1)[0]}")
    return directives


def _broken_fields(
    campaign: dict[str, Any], config: dict[str, Any], broken: Callable[[str], str]
) -> dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """Every field the template writes, each broken alone: (campaign, config, role variable) overrides."""
    return {
        **{
            field: ({field: broken(campaign[field])}, {}, {})
            for field in ("name", "source", "model", "engine")
        },
        "config-name": ({}, {"name": broken(config["name"])}, {}),
        "argv": ({}, {"argv": [*config["argv"], "--served-model-name", broken("m")]}, {}),
        "env-value": ({}, {"env": {"NCCL_DEBUG": broken("INFO")}}, {}),
        "env-name": ({}, {"env": {broken("NCCL_DEBUG"): "INFO"}}, {}),
        "serving_user": ({}, {}, {"serving_user": broken("fairbench")}),
        "serving_home": ({}, {}, {"serving_home": broken("/var/lib/fairbench-serving")}),
        "serving_cache_dir": ({}, {}, {"serving_cache_dir": broken("/var/cache/fairbench-serving")}),
        "serving_host": ({}, {}, {"serving_host": broken("127.0.0.1")}),
        "serving_extra_writable_paths": ({}, {}, {"serving_extra_writable_paths": [broken("/srv/x")]}),
    }


def _unit_cases(campaign: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The clean rendering, and one for every field broken by each line breaker."""
    # With an environment entry of its own, which two of the broken renderings break.
    config = {**campaign["configs"]["tp8"], "env": {"NCCL_DEBUG": "INFO"}}
    cases = {"clean": {"campaign": campaign, "config": config, "role": {}}}
    for label, breaker in LINE_BREAKERS.items():
        fields = _broken_fields(campaign, config, lambda value, breaker=breaker: _injected(value, breaker))
        for field, (campaign_part, config_part, role) in fields.items():
            cases[f"{field}-{label}"] = {
                "campaign": {**campaign, **campaign_part},
                "config": {**config, **config_part},
                "role": role,
            }
    return cases


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_a_line_break_in_any_field_adds_no_directive_to_the_unit(tmp_path: Path) -> None:
    """Rendered from values ``fairbench validate`` refuses, the unit still holds exactly the template's
    directives: systemd-analyze verify finds neither injected line, and every rendering has the clean
    one's directives in the clean one's order."""
    venv = Path(sys.executable).parent.parent
    defaults = yaml.safe_load((REPO / "roles/serving/defaults/main.yml").read_text())
    role_vars = yaml.safe_load((REPO / "roles/serving/vars/main.yml").read_text())
    campaign = load_campaign(REPO / "campaigns/demo.yml").to_json()
    cases = _unit_cases(campaign)
    (tmp_path / "units").mkdir()
    tasks = [
        {
            "name": "Render",
            "ansible.builtin.template": {
                "src": str(REPO / "roles/serving/templates/config_server.service.j2"),
                "dest": f"{tmp_path}/units/{{{{ item.key }}}}.service",
                "mode": "0644",
            },
            "loop": "{{ fairbench_cases | dict2items }}",
            "vars": {
                "serving_campaign": "{{ item.value.campaign }}",
                "serving_config": "{{ item.value.config }}",
                "serving_unit": "{{ ([serving_config] | fairbench.fairbench.serving_units(ports))[0] }}",
                "ports": "{{ serving_ports }}",
                "serving_ports": role_vars["serving_ports"],
                **{
                    name: f"{{{{ item.value.role.get({name!r}, serving_defaults.{name}) }}}}"
                    for name in defaults
                },
                # Executables that exist here: verify checks ExecStart's.
                "serving_fairbench_venv": str(venv),
                "serving_sglang_python": sys.executable,
            },
        },
    ]
    (tmp_path / "cases.json").write_text(json.dumps({"fairbench_cases": cases, "serving_defaults": defaults}))
    results = run_play(
        tmp_path,
        tasks,
        "-e", f"@{tmp_path}/cases.json",
    )  # fmt: skip
    assert not results["Render"].get("failed"), results["Render"]
    units = {path.stem: path for path in (tmp_path / "units").iterdir()}
    assert sorted(units) == sorted(cases)
    verify = subprocess.run(
        ["systemd-analyze", "verify", *map(str, units.values())], capture_output=True, text=True, check=False
    )
    # systemd may find a broken value invalid (that is the point), but never one of the injected lines.
    injected = re.compile(r"Unknown key|Unknown section|outside of section|Command .* is not executable")
    assert not injected.search(verify.stderr), verify.stderr
    for name in ("clean", "model-newline", "argv-carriage-return", "env-value-trailing-backslash"):
        assert f"{name}.service" not in verify.stderr, verify.stderr
    expected = _unit_directives(units["clean"].read_text())
    assert len(expected) > 30
    for name, path in units.items():
        assert _unit_directives(path.read_text()) == expected, name


# --- the collection's modules as a whole ------------------------------------------------------------

MODULE_ARGS = {
    "fairbench_campaign": {"path": "campaign.yml"},
    "fairbench_campaign_record": {"run_dir": "/nonexistent", "campaign": {}},
    "fairbench_clean_state": {"port": 9, "user": "nobody"},
    "fairbench_config_run": {
        "url": "http://127.0.0.1:9",
        "workload": {},
        "out": "/nonexistent",
        "unit": "none.service",
        "clean": {"port": 9, "user": "nobody"},
    },
    "fairbench_fleet": {"campaign": {}, "run_dir": "/nonexistent", "groups": {}, "play_hosts": []},
    "fairbench_fleet_facts": {},
    "fairbench_fleet_job": {"run_dir": "/nonexistent", "host": "h"},
    "fairbench_gpu_facts": {},
    "fairbench_report": {"run_dir": "/nonexistent"},
    "fairbench_status": {"dir": "/nonexistent", "host": "h", "config": "c", "unit": "u", "run_id": "r"},
    "fairbench_sweep": {"url": "http://127.0.0.1:9", "workload": {}, "out": "/nonexistent"},
    "fairbench_sweep_status": {"jid": "1", "out": "/nonexistent"},
}
"""Arguments each module accepts, so that it gets as far as its fairbench imports."""
CONTROL_NODE_MODULES = {
    "fairbench_campaign",
    "fairbench_campaign_record",
    "fairbench_fleet",
    "fairbench_fleet_job",
    "fairbench_report",
    "fairbench_status",
}


def test_every_module_of_the_collection_is_tested_here() -> None:
    assert {path.stem for path in (REPO / "plugins/modules").glob("*.py")} == set(MODULE_ARGS)


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no /usr/bin/python3")
def test_a_python_without_fairbench_fails_each_module_naming_where_fairbench_belongs(tmp_path: Path) -> None:
    bare = subprocess.run(["/usr/bin/python3", "-c", "import fairbench"], capture_output=True, check=False)
    assert bare.returncode != 0, "/usr/bin/python3 imports fairbench: the test needs a Python without it"
    tasks = [{"name": name, fqcn(name): args} for name, args in MODULE_ARGS.items()]
    results = run_play(tmp_path, tasks, python="/usr/bin/python3")
    for name in MODULE_ARGS:
        result = results[name]
        assert result["failed"], (name, result)
        assert "Failed to import the required Python library (fairbench)" in result["msg"], result
        where = "the venv running ansible-playbook" if name in CONTROL_NODE_MODULES else "fairbench's venv"
        assert f"fairbench belongs in {where}" in result["msg"], result
        assert "No module named 'fairbench'" in result["msg"], result


def test_ansible_doc_documents_every_module() -> None:
    names = [fqcn(name) for name in MODULE_ARGS]
    shown = subprocess.run(
        [str(ANSIBLE_PLAYBOOK.parent / "ansible-doc"), "-t", "module", "--json", *names],
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    docs = json.loads(shown.stdout)
    for name in names:
        doc = docs[name]["doc"]
        assert doc["module"] == name.rsplit(".", 1)[1] and doc["short_description"], doc
        assert docs[name]["examples"] and docs[name]["return"], name


# --- fairbench_status ---------------------------------------------------------------------------------

JOURNAL = [
    "Dec 01 10:00:00 lab1 python[7]: loading the model",
    "Dec 01 10:00:01 lab1 python[7]: Traceback (most recent call last):",
    'Dec 01 10:00:01 lab1 python[7]:   File "/opt/sglang/x.py", line 3, in <module>',
    "Dec 01 10:00:01 lab1 python[7]: RuntimeError: CUDA out of memory",
    "Dec 01 10:00:02 lab1 systemd[1]: fairbench-x.service: Main process exited, status=1/FAILURE",
]


def _status_task(
    name: str, config_dir: Path, failure: dict[str, str] | None, *, check_mode: bool = False, **more: int
) -> dict[str, Any]:
    args = {"dir": str(config_dir), "host": "lab1", "config": "tp8", "unit": "fairbench-x-tp8.service"}
    args |= {"run_id": "r1", "failure": failure, **more}
    return {"name": name, fqcn("fairbench_status"): args, "check_mode": check_mode}


def test_status_of_a_config_that_ran_is_written_once(tmp_path: Path) -> None:
    config_dir = tmp_path / "run" / "lab1" / "tp8"
    tasks = [
        _status_task("Checked", config_dir, None, check_mode=True),
        _status_task("Written", config_dir, None),
        _status_task("Again", config_dir, None),
    ]
    results = run_play(tmp_path, tasks)
    expected = {
        "status": "ok",
        "stage": None,
        "reason": None,
        "journal_tail": [],
        "host": "lab1",
        "config": "tp8",
        "unit": "fairbench-x-tp8.service",
        "run_id": "r1",
        "hosts": ["lab1"],
        "jobs": [],
    }
    assert results["Checked"]["changed"] and results["Checked"]["status"] == expected
    assert json.loads((config_dir / "status.json").read_text()) == expected
    assert results["Written"]["changed"] and not results["Again"]["changed"]


def test_status_of_a_failed_config_quotes_its_journal_from_the_traceback_on(tmp_path: Path) -> None:
    health = tmp_path / "health"
    health.mkdir()
    (health / "journal.log").write_text("\n".join(JOURNAL) + "\n")
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    # An earlier run's journal: a config whose deploy failed ran no server, and quotes none.
    (deploy / "journal.log").write_text("\n".join(JOURNAL) + "\n")
    failure = {"stage": "health", "reason": "the unit exited"}
    tasks = [
        _status_task("Health", health, failure),
        _status_task("Short", health, failure, check_mode=True, journal_lines=2),
        _status_task("Deploy", deploy, {"stage": "deploy", "reason": "pip failed"}),
        _status_task("Unknown stage", tmp_path / "bad", {"stage": "lunch", "reason": "x"}),
    ]
    results = run_play(tmp_path, tasks)
    written = json.loads((health / "status.json").read_text())
    assert (written["status"], written["stage"], written["reason"]) == ("failed", "health", "the unit exited")
    assert written["journal_tail"] == JOURNAL[1:4]
    short = results["Short"]["status"]["journal_tail"]
    assert len(short) == 2 and short[-1] == JOURNAL[3], short
    assert json.loads((deploy / "status.json").read_text())["journal_tail"] == []
    assert results["Unknown stage"]["failed"] and "lunch" in results["Unknown stage"]["msg"]
    assert not (tmp_path / "bad").exists()


def test_fleet_facts_module_reads_the_hosts_facts_in_check_mode_too(
    tmp_path: Path, fake_nvidia_smi: Path
) -> None:
    from fairbench import __version__  # noqa: PLC0415

    missing = tmp_path / "nowhere" / "python"
    tasks = [
        {"name": "Venv", fqcn("fairbench_fleet_facts"): {"sglang_python": sys.executable}},
        {"name": "No venv", fqcn("fairbench_fleet_facts"): {"sglang_python": str(missing)}},
        {"name": "Bare", fqcn("fairbench_fleet_facts"): {}},
    ]
    path = f"{fake_nvidia_smi.parent}:{os.environ['PATH']}"
    results = run_play(tmp_path, tasks, "--check", env={"PATH": path})
    for name in ("Venv", "No venv", "Bare"):
        assert not results[name].get("failed"), results[name]
        assert results[name]["changed"] is False
    facts = results["Venv"]["ansible_facts"]["fleet_facts"]
    assert facts["fairbench"] == __version__
    assert facts["cpus"] == os.cpu_count() and facts["cpus"] >= 1
    assert isinstance(facts["memory_gib"], int) and facts["memory_gib"] >= 1
    assert (facts["gpu_model"], facts["gpu_count"], facts["driver"]) == ("NVIDIA H200", 2, "580.159.04")
    # This venv has no SGLang: the script ran there and found none.
    assert facts["sglang"] is None
    assert facts["reasons"]["sglang"] == f"no sglang distribution in {sys.executable}'s venv"
    assert results["No venv"]["ansible_facts"]["fleet_facts"]["reasons"]["nccl"] == (
        f"{missing} does not exist (no SGLang venv)"
    )
    # What tells this machine: its GPUs as nvidia-smi lists them, and the kernel this process runs on.
    machine = facts["machine"]
    assert len(machine["gpu_uuids"]) == 2 and all(gpu.startswith("GPU-") for gpu in machine["gpu_uuids"])
    assert abs(machine["kernel_boot"] - kernel_boot_s()) <= KERNEL_BOOT_TOLERANCE_S
    bare = results["Bare"]["ansible_facts"]["fleet_facts"]
    assert bare["reasons"]["sglang"] == "no SGLang venv on this host (no sglang_python given)"
