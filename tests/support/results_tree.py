"""Results trees as the Ansible layer writes them, from real sweeps against ``fairbench sim``.

For each config of a campaign, as roles/bench/tasks/config.yml does on a host: start the server (the
simulator, with the config's argv and environment), wait for ``/health_generate``, save
``/server_info``, the host facts (``fairbench.hosts.ansible_support.host_facts``) and a unit file with its
``Environment=`` and ``ExecStart=`` lines, run ``python -m fairbench sweep``, stop the server, and write
journal.log and status.json. Nothing is hand-written: every number comes from a sweep.

A ``Deviation`` makes one server differ from what campaign.json declares (an extra flag or variable,
or a fault), which is what the report's fairness section exists to catch.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import Campaign, ServingConfig
from fairbench.hosts.ansible_support import host_facts
from fairbench.measure.results import CAMPAIGN_FILE
from fairbench.measure.status import JOURNAL_EXCERPT_LINES, ConfigStatus, Failure, journal_tail, write_status

REPO = Path(__file__).resolve().parents[2]
FAIRBENCH = [sys.executable, "-m", "fairbench"]
# The serving role's serving_environment, which every unit gets before the config's own variables.
SERVING_ENVIRONMENT = {"HF_HOME": "/var/cache/fairbench-serving/huggingface", "PYTHONUNBUFFERED": "1"}
LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Deviation:
    """How one config's server departs from campaign.json."""

    flags: tuple[str, ...] = ()
    """Launch flags it ran with that the campaign does not declare."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables in its unit that the campaign does not declare."""
    fault: str | None = None
    """A ``--sim-fault`` spec: the server fails during the sweep."""


def campaign_from(
    path: Path, *, configs: list[str], workload: Mapping[str, Any], sim: Mapping[str, Any]
) -> Campaign:
    """The campaign file at ``path``, keeping ``configs`` (parents included), with workload and common
    simulator flags overridden: the same configs, measured briefly."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["configs"] = {name: data["configs"][name] for name in configs}
    data["workload"] |= dict(workload)
    data["common"]["sim"] = data["common"].get("sim", {}) | dict(sim)
    return parse_campaign(yaml.safe_dump(data, sort_keys=False), str(path), path.parent)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int | None, bytes]:
    try:
        with LOOPBACK.open(url, timeout=5) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return error.code, b""
    except OSError:
        return None, b""


def _unit(campaign: Campaign, config: ServingConfig, env: Mapping[str, str], exec_start: list[str]) -> str:
    environment = [f'Environment="{name}={value}"' for name, value in env.items()]
    return "\n".join(
        [
            f"# Campaign {campaign.name}, config {config.name}.",
            "[Unit]",
            f"Description=fairbench {campaign.name}/{config.name}: {campaign.engine} {campaign.model}",
            "",
            "[Service]",
            "Type=exec",
            *environment,
            f"ExecStart={shlex.join(exec_start)}",
            "Restart=no",
            "",
        ]
    )


def _sweep_args(campaign: Campaign) -> list[str]:
    workload = campaign.workload
    return [
        *("--api", workload.api, "--dataset", workload.dataset),
        *("--input-len", str(workload.input_len), "--output-len", str(workload.output_len)),
        *("--concurrency", ",".join(map(str, workload.concurrency))),
        *("--prompts-per-level", str(workload.prompts_per_level.to_json())),
        *("--warmup", str(workload.warmup.to_json())),
        *("--repeats", str(workload.repeats), "--seed", str(workload.seed)),
        *(("--vocab-size", str(workload.vocab_size)) if workload.vocab_size else ()),
        *("--progress", "lines"),
    ]


def run_config(
    campaign: Campaign, config: ServingConfig, host: str, config_dir: Path, deviation: Deviation
) -> None:
    """One config on one host: serve, sweep, save every file the Ansible layer saves."""
    config_dir.mkdir(parents=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    fault = ["--sim-fault", deviation.fault] if deviation.fault else []
    exec_start = [
        *FAIRBENCH,
        "sim",
        *config.argv,
        *deviation.flags,
        *fault,
        *("--host", "127.0.0.1", "--port", str(port)),
    ]
    env = {**SERVING_ENVIRONMENT, **config.env, **deviation.env}
    (config_dir / "unit.service").write_text(_unit(campaign, config, env, exec_start))
    journal = config_dir / "journal.log"
    with journal.open("wb") as output:
        server = subprocess.Popen(
            exec_start, cwd=REPO, stdout=output, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )
    failure: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 30
        while _get(url + "/health_generate")[0] != 200:
            if server.poll() is not None or time.monotonic() > deadline:
                failure = {"stage": "health", "reason": f"{url}/health_generate never answered 200"}
                break
            time.sleep(0.05)
        if not failure:
            status, body = _get(url + "/server_info")
            info = json.loads(body) if status == 200 else {}
            (config_dir / "server_info.json").write_text(json.dumps(info, indent=2) + "\n")
            (config_dir / "host.json").write_text(json.dumps(host_facts(), indent=2) + "\n")
            sweep = subprocess.run(
                [*FAIRBENCH, "sweep", "--url", url, "--out", str(config_dir), *_sweep_args(campaign)],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if sweep.returncode != 0:
                last_line = (sweep.stderr.strip().splitlines() or ["failed"])[-1]
                failure = {
                    "stage": "sweep",
                    "reason": f"fairbench sweep exited {sweep.returncode}: {last_line}",
                }
    finally:
        server.terminate()
        server.wait(timeout=10)
    failed = Failure.from_json(failure) if failure else None
    status = ConfigStatus(
        host=host,
        config=config.name,
        unit=config.unit,
        run_id=config_dir.parent.parent.name,
        failure=failed,
        journal_tail=journal_tail(config_dir, failed, JOURNAL_EXCERPT_LINES),
    )
    write_status(config_dir, status)


def build_run(
    results_root: Path,
    campaign: Campaign,
    run_id: str,
    *,
    host: str = "lab1",
    deviations: Mapping[str, Deviation] | None = None,
    skip: tuple[str, ...] = (),
) -> Path:
    """``results_root/<campaign>/<run_id>``, every config swept in turn except ``skip`` (left missing)."""
    run_dir = results_root / campaign.name / run_id
    run_dir.mkdir(parents=True)
    (run_dir / CAMPAIGN_FILE).write_text(json.dumps(campaign.to_json(), indent=2) + "\n")
    for name, config in campaign.configs.items():
        if name not in skip:
            deviation = (deviations or {}).get(name, Deviation())
            run_config(campaign, config, host, run_dir / host / name, deviation)
    return run_dir


DEMO = REPO / "campaigns" / "demo.yml"
BRIEF_WORKLOAD = {
    "input_len": 32,
    "output_len": 16,
    "prompts_per_level": "1x",
    "warmup": 0,
    "concurrency": [1, 4],
    "repeats": 2,
}


def brief_run(results_root: Path, run_id: str = "brief") -> Path:
    """A run of the demo campaign's tp8 and ep4 in about a second: two short levels, two repeats each."""
    campaign = campaign_from(
        DEMO, configs=["tp8", "ep4"], workload=BRIEF_WORKLOAD, sim={"sim-time-scale": 0.02}
    )
    return build_run(results_root, campaign, run_id)


def fairbench_report(*args: Path | str) -> subprocess.CompletedProcess[str]:
    """``fairbench report ARGS`` as a user runs it, from the repository."""
    return subprocess.run(
        [sys.executable, "-m", "fairbench", "report", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
