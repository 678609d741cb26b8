"""Real SGLang on a lab host (tests/lab/lab.sh up), the way a GPU host gets it: provisioned, served, swept.

``fairbench run`` plays site.yml on lab1 alone with ``sglang_on_cpu``: the sglang role installs sglang==0.5.23
from the wheelhouse it builds once on this machine (which the lab hosts see at the same path, as a fleet
sees an NFS export), the serving role copies the tiny model and renders the hardened units, and three
configs run in turn on the completions API: campaigns/lab-sglang.yml's ``baseline``, then ``vocab-256`` (its
embedding is smaller than its tokenizer, so real SGLang crashes on the first id above 255), then the
campaign's ``chunked-64``, which must still run after the crash, then ``bf16`` (the same weights computed in
bfloat16). Before each sweep every server answers the probes and fairbench's arithmetic task:
``chunked-64`` must answer exactly as ``baseline`` (prefill in chunks changes when, not what), and ``bf16``
shows where its answers part from float32's. A second run sweeps ``baseline`` again on the chat API.

Needs lab1 without SGLang: a fresh lab (``make lab-down lab-up``), or one that ran ``make lab-test``, whose
provisioning tests install their stub SGLang on lab2 only. Results go to a temporary directory, never into
results/.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.lab_hosts import INVENTORY, ansible_env, answering_lab_hosts, tool
from tests.support.unit_exposure import UNIT_EXPOSURE

from fairbench.hosts.unit_security import exposure

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
LAB_CAMPAIGN = REPO / "campaigns" / "lab-sglang.yml"
CONFIGS = ("baseline", "vocab-256", "chunked-64", "bf16")
HOST = "lab1"
# Provisioning (a 9.5 GB venv from the wheelhouse) and five cold server starts on 2 cores.
RUN_TIMEOUT_S = 2400


def _on_host(command: str) -> subprocess.CompletedProcess[str]:
    argv = [tool("ansible"), "-i", str(INVENTORY), HOST, "-o", "-m", "ansible.builtin.shell", "-a", command]
    env = ansible_env()
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


# A real crash: the embedding shrunk to 256 rows while the tokenizer keeps 512 ids, so the first prompt with
# an id above 255 makes SGLang's embedding lookup raise, and the whole server exits.
# And a change of numerics: the float32 weights computed in bfloat16.
EXTRA_CONFIGS = {
    # Random weights of its own size (the model's are for 512 ids, which would not load).
    "vocab-256": {"args": {"json-model-override-args": '{"vocab_size": 256}', "load-format": "dummy"}},
    "bf16": {"args": {"dtype": "bfloat16"}},
}
ANSWERS = {"match": {"chunked-64": "baseline"}}
ACCURACY = {"task": "arithmetic", "problems": 20, "max_tokens": 16}


def _campaign(tmp: Path, name: str, configs: tuple[str, ...], api: str) -> Path:
    """campaigns/lab-sglang.yml (and EXTRA_CONFIGS) with only ``configs``, on ``api``, with ANSWERS and
    ACCURACY."""
    data = yaml.safe_load(LAB_CAMPAIGN.read_text())
    data["name"] = name
    data["configs"] = {config: (data["configs"] | EXTRA_CONFIGS)[config] for config in configs}
    match = {config: other for config, other in ANSWERS["match"].items() if {config, other} <= set(configs)}
    data["answers"], data["accuracy"] = {"match": match}, ACCURACY
    data["workload"]["api"] = api
    path = tmp / f"{name}.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str
    run_dir: Path

    def config_dir(self, config: str) -> Path:
        return self.run_dir / HOST / config

    def status(self, config: str) -> dict[str, Any]:
        status: dict[str, Any] = json.loads((self.config_dir(config) / "status.json").read_text())
        return status

    def points(self, config: str) -> list[dict[str, Any]]:
        lines = (self.config_dir(config) / "points.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]


def _fairbench_run(campaign: Path, results: Path, *extra: str) -> Run:
    run_id = time.strftime("pytest-%Y%m%dT%H%M%S", time.gmtime())
    argv = [tool("fairbench"), "run", str(campaign), "-i", str(INVENTORY), "--run-id", run_id]
    argv += ["--limit", HOST, "-e", "sglang_on_cpu=true", "-e", f"bench_results_root={results}", *extra]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=RUN_TIMEOUT_S, check=False)
    name = yaml.safe_load(campaign.read_text())["name"]
    return Run(done.returncode, done.stdout + done.stderr, results / name / run_id)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run]:
    if HOST not in answering_lab_hosts():
        pytest.fail(f"{HOST} does not answer")
    if _on_host("test ! -e /opt/sglang").returncode:
        pytest.fail(f"{HOST} has /opt/sglang already: run this on a fresh lab (make lab-down lab-up)")
    tmp = tmp_path_factory.mktemp("sglang-lab")
    results = tmp / "results"
    completions = _fairbench_run(_campaign(tmp, "labsglang", CONFIGS, "completions"), results)
    chat = _fairbench_run(
        _campaign(tmp, "labsglang-chat", ("baseline",), "chat"),
        results,
        "--playbook",
        "playbooks/campaign.yml",
    )
    return completions, chat


def test_sglang_is_installed_from_the_shared_wheelhouse_without_a_copy(runs: tuple[Run, Run]) -> None:
    version = _on_host(
        "/opt/sglang/venv/bin/python -c 'import sglang; print(\"sglang\", sglang.__version__)'"
    )
    assert "sglang 0.5.23" in version.stdout, version.stdout + version.stderr
    assert _on_host("test ! -e /opt/sglang/wheelhouse").returncode == 0, "the wheelhouse was copied"


def test_each_config_ran_as_its_unit_of_the_real_engine(runs: tuple[Run, Run]) -> None:
    completions, _ = runs
    for config in CONFIGS:
        unit = (completions.config_dir(config) / "unit.service").read_text()
        assert "ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server --model-path " in unit
        assert "--device cpu" in unit and "ProtectSystem=strict" in unit
    info = json.loads((completions.config_dir("baseline") / "server_info.json").read_text())
    assert info["version"] == "0.5.23" and info["stream_interval"] == 1
    chunked = json.loads((completions.config_dir("chunked-64") / "server_info.json").read_text())
    assert chunked["chunked_prefill_size"] == 64
    bf16 = json.loads((completions.config_dir("bf16") / "server_info.json").read_text())
    assert bf16["dtype"] == "bfloat16"


def test_the_completions_sweeps_complete_inside_the_vocabulary(runs: tuple[Run, Run]) -> None:
    completions, _ = runs
    for config in ("baseline", "chunked-64", "bf16"):
        assert completions.status(config)["status"] == "ok", completions.output[-3000:]
        assert [(p["max_concurrency"], p["completed"], p["failed"]) for p in completions.points(config)] == [
            (1, 16, 0),
            (4, 16, 0),
            (16, 16, 0),
        ]
        vocabulary = json.loads((completions.config_dir(config) / "sweep.json").read_text())["vocabulary"]
        assert (vocabulary["size"], vocabulary["excluded"]) == (512, [511])
        # The campaign enables SGLang's metrics: its own count of generated tokens is the sweep's.
        assert all(
            p["server_generation_tokens"] == p["total_output_tokens"] for p in completions.points(config)
        ), [(p["server_generation_tokens"], p["total_output_tokens"]) for p in completions.points(config)]


def test_a_real_crash_fails_its_config_with_sglangs_traceback_and_the_next_config_runs(
    runs: tuple[Run, Run],
) -> None:
    completions, _ = runs
    status = completions.status("vocab-256")
    assert status["status"] == "failed" and status["stage"] == "sweep", status
    journal = (completions.config_dir("vocab-256") / "journal.log").read_text()
    assert "Traceback (most recent call last)" in journal
    assert "IndexError: index out of range in self" in journal
    # The progress display shows the crash with the journal's excerpt, and chunked-64 after it.
    assert "IndexError: index out of range in self" in completions.output
    assert completions.output.index("vocab-256") < completions.output.rindex("chunked-64")
    report = (completions.run_dir / "report.md").read_text()
    assert "vocab-256" in report and "failed" in report


def test_the_chat_api_sweeps_the_same_server(runs: tuple[Run, Run]) -> None:
    _, chat = runs
    assert chat.returncode == 0, chat.output[-3000:]
    assert chat.status("baseline")["status"] == "ok"
    assert [(p["completed"], p["failed"]) for p in chat.points("baseline")] == [(16, 0)] * 3
    assert json.loads((chat.config_dir("baseline") / "sweep.json").read_text())["vocabulary"] is None


def test_each_server_stopped_cleanly_under_the_hardened_unit(runs: tuple[Run, Run]) -> None:
    """Served and stopped with nothing killed, under the unit whose offline exposure the integration
    tests hold; systemd's own score of the loaded unit says the same."""
    completions, chat = runs
    for run, config in [(completions, "baseline"), (completions, "chunked-64"), (chat, "baseline")]:
        unit = run.status(config)["unit"]
        result = _on_host(f"systemctl show --property=Result --value {unit}")
        assert result.stdout.strip().endswith("(stdout) success"), _on_host(f"journalctl -u {unit}").stdout
        security = _on_host(f"systemd-analyze security --no-pager {unit}").stdout
        score = exposure(security)
        assert score is not None and score <= UNIT_EXPOSURE, security


def _answers(run: Run, config: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((run.config_dir(config) / "answers" / "start-r0.json").read_text())
    return found


def test_a_config_that_must_answer_the_same_does_and_another_dtype_shows_where_it_parts(
    runs: tuple[Run, Run],
) -> None:
    completions, chat = runs
    baseline, chunked, bf16 = (_answers(completions, config) for config in ("baseline", "chunked-64", "bf16"))
    for found in (baseline, chunked, bf16):
        assert found["api"] == "completions" and len(found["probes"]) == 16
        assert all(
            "error" not in probe and len(probe["token_ids"]) == len(probe["logprobs"])
            for probe in found["probes"]
        )
    # Greedy answers through SGLang's real tokenizer and weights: chunked prefill changes nothing.
    assert [p["token_ids"] for p in chunked["probes"]] == [p["token_ids"] for p in baseline["probes"]]
    assert (
        len({tuple(p["token_ids"]) for p in baseline["probes"]}) > 8
    )  # real answers, not one token repeated
    assert [p["token_ids"] for p in bf16["probes"]] != [p["token_ids"] for p in baseline["probes"]]
    # The arithmetic task ran on every server that stayed up (the tiny model's answers are noise).
    assert baseline["accuracy"]["task"] == "arithmetic" and baseline["accuracy"]["total"] == 20
    report = (completions.run_dir / "report.md").read_text()
    answers = report[report.index("## Answers") :]
    # The probes' table: its rows count identical answers out of 16.
    rows = {line.split("|")[1].strip(): line for line in answers.splitlines() if " of 16 |" in line}
    assert "| 16 of 16 |" in rows["chunked-64"] and "passes" in rows["chunked-64"], answers
    bf16_cells = [cell.strip() for cell in rows["bf16"].split("|")]
    assert bf16_cells[3] != "16 of 16" and bf16_cells[4] != "-", answers  # its divergences, where they start
    # Through the chat API, the server's chat template: the probes are answered there too.
    assert _answers(chat, "baseline")["api"] == "chat"
    assert all("error" not in probe for probe in _answers(chat, "baseline")["probes"])


def test_no_server_is_left_running(runs: tuple[Run, Run]) -> None:
    running = _on_host("systemctl list-units --type=service --state=running --plain --no-legend fairbench-*")
    assert running.returncode == 0 and "fairbench-" not in running.stdout.split("|", 1)[-1], running.stdout
