"""Disaggregated configs (campaign.disaggregation): their servers expanded from the campaign file, the units
and ports a host runs them on, the mistakes refused before anything is deployed, and a job's start order
(hosts.config_run): the servers, then the router; stopped in reverse; a failing server named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fairbench.campaign.disaggregation import HostPorts, served_units, worker_units
from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import Campaign
from fairbench.hosts import config_run
from fairbench.hosts.ansible_support import ServingError
from fairbench.hosts.clean_state import CleanState
from fairbench.hosts.config_run import CleanSettings, JobRun, StageError, WorkerUnit, run_job
from fairbench.measure.sweep import SweepSpec
from fairbench.measure.workload import WorkloadSpec

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = {
    "api": "generate",
    "dataset": "random-ids",
    "input_len": 64,
    "output_len": 32,
    "concurrency": [1],
    "prompts_per_level": 1,
    "warmup": 0,
}
PORTS = HostPorts(
    host="127.0.0.1", port=30001, worker_port=30100, bootstrap_port=32100, router_metrics_port=29001
)


def _campaign(
    configs: dict[str, Any], common: dict[str, Any] | None = None, api: str = "generate"
) -> Campaign:
    workload = {**WORKLOAD, "api": api}
    data = {"name": "pd", "engine": "sim", "model": "m", "configs": configs, "workload": workload}
    if common:
        data["common"] = common
    return parse_campaign(yaml.safe_dump(data), "pd.yml", REPO)


def _errors(configs: dict[str, Any]) -> list[str]:
    with pytest.raises(CampaignError) as failed:
        _campaign(configs)
    return failed.value.messages


def test_each_role_takes_the_configs_args_its_own_over_them_and_the_gpus_in_turn() -> None:
    campaign = _campaign(
        {
            "tp8": {"args": {"tp-size": 8}},
            "pd": {
                "args": {"tp-size": 4},
                "disaggregation": {
                    "prefill": {},
                    "decode": {"servers": 2, "args": {"tp-size": 2}},
                    "router": {"args": {"policy": "round_robin"}},
                },
            },
            "pd-child": {"extends": "pd", "args": {"chunked-prefill-size": 4096}},
            "back": {"extends": "pd", "disaggregation": None},
        },
        common={"args": {"max-running-requests": 64}},
    )
    pd = campaign.configs["pd"]
    assert pd.disaggregation is not None
    servers = {server.name: server for server in pd.disaggregation.servers}
    assert list(servers) == ["prefill-0", "decode-0", "decode-1"]
    assert [servers[name].gpu_ids for name in servers] == [(0, 1, 2, 3), (4, 5), (6, 7)]
    assert servers["decode-1"].args == {
        "base-gpu-id": 6,
        "disaggregation-mode": "decode",
        "max-running-requests": 64,
        "tp-size": 2,
    }
    assert servers["prefill-0"].unit == "fairbench-pd-pd-prefill-0.service"
    assert (pd.unit, pd.gpus, pd.gpus_formula) == (
        "fairbench-pd-pd.service",
        8,
        "prefill 1 x 4 GPUs + decode 2 x 2 GPUs",
    )
    # A child inherits the roles, its own args under each; null makes it one server again.
    child = campaign.configs["pd-child"].disaggregation
    assert child is not None and all(server.args["chunked-prefill-size"] == 4096 for server in child.servers)
    assert campaign.configs["back"].disaggregation is None and campaign.configs["back"].gpus == 4
    assert "disaggregation" not in campaign.configs["tp8"].to_json()


def test_the_units_run_the_servers_on_the_hosts_ports_and_the_router_in_front_of_them() -> None:
    campaign = _campaign(
        {
            "pd": {
                "disaggregation": {
                    "prefill": {"servers": 2},
                    "decode": {},
                    "router": {"args": {"policy": "random"}},
                }
            }
        }
    )
    units = served_units(campaign.configs["pd"].to_json(), PORTS)
    assert [(unit["name"], unit["program"], unit["url"]) for unit in units] == [
        ("prefill-0", "engine", "http://127.0.0.1:30100"),
        ("prefill-1", "engine", "http://127.0.0.1:30101"),
        ("decode-0", "engine", "http://127.0.0.1:30102"),
        ("router", "router", "http://127.0.0.1:30001"),
    ]
    assert units[1]["argv"][-6:] == [
        "--host", "127.0.0.1", "--port", "30101", "--disaggregation-bootstrap-port", "32101",
    ]  # fmt: skip
    assert units[-1]["argv"] == [
        "--pd-disaggregation",
        "--prefill", "http://127.0.0.1:30100", "32100",
        "--prefill", "http://127.0.0.1:30101", "32101",
        "--decode", "http://127.0.0.1:30102",
        "--host", "127.0.0.1", "--port", "30001",
        "--prometheus-host", "127.0.0.1", "--prometheus-port", "29001",
        "--policy", "random",
    ]  # fmt: skip
    assert [worker["name"] for worker in worker_units(campaign.configs["pd"].to_json(), PORTS)] == [
        "prefill-0",
        "prefill-1",
        "decode-0",
    ]
    single = _campaign({"tp1": {}}).configs["tp1"].to_json()
    (unit,) = served_units(single, PORTS)
    assert (unit["role"], unit["argv"][-4:]) == ("server", ["--host", "127.0.0.1", "--port", "30001"])
    assert worker_units(single, PORTS) == []


def test_mistakes_of_a_disaggregated_config_are_one_line_each_before_anything_is_deployed() -> None:
    errors = _errors(
        {
            "no-decode": {"disaggregation": {"prefill": {}}},
            "shared": {
                "disaggregation": {
                    "prefill": {"args": {"tp-size": 4, "base-gpu-id": 0}},
                    "decode": {"args": {"tp-size": 4, "base-gpu-id": 2, "disaggregation-mode": "decode"}},
                    "router": {"args": {"polcy": "random", "port": 1}},
                }
            },
            "two-hosts": {"nodes": 2, "disaggregation": {"prefill": {}, "decode": {}}},
            "fake": {
                "args": {"disaggregation-transfer-backend": "fake"},
                "disaggregation": {"prefill": {}, "decode": {}},
            },
        }
    )
    assert errors == [
        "pd.yml: configs.no-decode.disaggregation: has no decode group: a disaggregated config needs prefill "
        "servers and decode servers (servers, args)",
        "pd.yml: configs.shared.disaggregation.decode.args.disaggregation-mode: set per server by fairbench "
        "from the config's disaggregation key",
        "pd.yml: configs.shared.disaggregation.router.args.polcy: is not a flag of sglang-router 0.3.2 (did "
        "you mean 'policy'?)",
        "pd.yml: configs.shared.disaggregation.router.args.port: set per host by the serving role, not by "
        "the campaign",
        "pd.yml: configs.fake.disaggregation: its prefill servers would use disaggregation-transfer-backend "
        "fake, which SGLang 0.5.23 refuses for a prefill server (fake stands in for the transfer on a decode "
        "server alone)",
        "pd.yml: configs.shared.disaggregation: decode-0 and prefill-0 would share GPU 2, 3: each GPU serves "
        "one server (set base-gpu-id apart, or leave it to fairbench)",
        "pd.yml: configs.two-hosts.nodes: a disaggregated config runs its servers and router on one host, "
        "not 2: give each server its GPUs on that host",
    ]


# --- a job's start order ------------------------------------------------------------------------------


class _Host:
    """systemctl and the health checks as a job sees them, in the order it calls them."""

    def __init__(self, failing: str | None = None) -> None:
        self.calls: list[str] = []
        self.failing = failing

    def systemctl(self, action: str, unit: str) -> None:
        self.calls.append(f"{action} {unit}")

    def healthy(self, url: str, unit: str, timeout_s: float, *paths: str) -> dict[str, Any]:
        self.calls.append(f"healthy {unit} {' '.join(paths)}".rstrip())
        if unit == self.failing:
            raise ServingError(f"{unit} is failed (exited, result exit-code, exit status 1)")
        return {"unit": unit}


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: _Host) -> JobRun:
    monkeypatch.setattr(config_run, "_systemctl", host.systemctl)
    monkeypatch.setattr(config_run, "wait_until_healthy", host.healthy)
    monkeypatch.setattr(config_run, "wait_clean", lambda **_: CleanState(clean=True, found=[], details={}))
    monkeypatch.setattr(config_run, "host_facts", lambda *_: {})
    monkeypatch.setattr(config_run, "_save_journal", lambda job, since: host.calls.append("journal"))
    # The sweep of a server that is never there: what matters here is what ran before and after it.
    monkeypatch.setattr(config_run, "sweep_workloads", lambda *_, **__: host.calls.append("sweep"))
    spec = SweepSpec(url="http://127.0.0.1:9", workload=WorkloadSpec(8, 4, vocab_size=1000), concurrency=[1])
    clean = CleanSettings(
        port=9, user="nobody", unit_pattern="fairbench-*", baseline=None, tolerance_mib=None, timeout_s=1
    )
    workers = [
        WorkerUnit(f"pd-{name}.service", name, "http://127.0.0.1:9") for name in ("prefill-0", "decode-0")
    ]
    return JobRun("pd.service", spec.url, tmp_path, {"": spec}, clean, 60, 10, workers=workers)


def test_a_job_starts_the_servers_then_the_router_and_stops_them_in_reverse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = _Host()
    run_job(_job(tmp_path, monkeypatch, host))
    assert host.calls == [
        "restart pd-prefill-0.service",
        "restart pd-decode-0.service",
        "healthy pd-prefill-0.service",
        "healthy pd-decode-0.service",
        "restart pd.service",
        "healthy pd.service /readiness /get_server_info",
        "sweep",
        "stop pd.service",
        "stop pd-decode-0.service",
        "stop pd-prefill-0.service",
        "journal",
    ]
    # Each server's /server_info beside its unit; the config's is its decode server's.
    assert (tmp_path / "servers" / "prefill-0" / "server_info.json").is_file()
    assert '"pd-decode-0.service"' in (tmp_path / "server_info.json").read_text()


def test_a_server_that_fails_fails_the_job_at_health_naming_it_and_every_unit_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = _Host(failing="pd-decode-0.service")
    job = _job(tmp_path, monkeypatch, host)
    with pytest.raises(StageError) as failed:
        run_job(job)
    assert failed.value.stage == "health"
    assert str(failed.value).startswith("decode-0: pd-decode-0.service is failed")
    # The router never started; every unit is stopped, the journal (every unit's) saved.
    assert "restart pd.service" not in host.calls
    assert host.calls[-4:] == [
        "stop pd.service",
        "stop pd-decode-0.service",
        "stop pd-prefill-0.service",
        "journal",
    ]


def test_random_token_ids_through_completions_are_refused_beside_a_disaggregated_config() -> None:
    # sglang-router 0.3.2 answers a token-id prompt on /v1/completions with 422: every request would fail.
    with pytest.raises(CampaignError) as failed:
        _campaign({"pd": {"disaggregation": {"prefill": {}, "decode": {}}}}, api="completions")
    assert failed.value.messages == [
        "pd.yml: workload.api: completions with random token ids: sglang-router refuses token-id prompts "
        "there (422), so pd would answer none: use api generate (token ids) or chat (text)"
    ]
