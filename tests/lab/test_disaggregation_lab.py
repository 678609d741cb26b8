"""A disaggregated config end to end on the lab hosts (tests/lab/campaign-pd.yml): its prefill and decode
servers (the simulator in prefill and decode mode) and the real sglang-router in front, each its own unit,
deployed, started in order, swept through the router, stopped and reported beside a single server; and one
whose decode server never starts, which fails at health naming it while the other configs run.

Results go to a temporary directory (``-e bench_results_root=...``), never into results/. Skipped when no lab
is up.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.lab.test_fleet_lab import accepting_sglang, run_campaign, status_of
from tests.support.lab_hosts import answering_lab_hosts

from fairbench.campaign.load import load_campaign
from fairbench.campaign.model import SINGLE_WORKLOAD

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = "tests/lab/campaign-pd.yml"


def _config_dir(run_dir: Path, hosts: list[str], config: str) -> Path:
    (found,) = [run_dir / host / config for host in hosts if (run_dir / host / config).is_dir()]
    return found


def test_a_disaggregated_config_is_deployed_started_in_order_swept_through_its_router_and_compared(
    tmp_path: Path,
) -> None:
    hosts = answering_lab_hosts()
    run_id = f"pd-{time.time_ns()}"
    done = run_campaign(accepting_sglang(CAMPAIGN, tmp_path), tmp_path, run_id)
    assert done.returncode != 0, "a config failed: the playbook says so"
    run_dir = tmp_path / "labpd" / run_id
    campaign = load_campaign(REPO / CAMPAIGN)
    levels = list(campaign.workloads[SINGLE_WORKLOAD].concurrency)

    pd = _config_dir(run_dir, hosts, "pd")
    assert status_of(pd)["status"] == "ok", (status_of(pd), done.stdout[-4000:])
    points = [json.loads(line) for line in (pd / "points.jsonl").read_text().splitlines()]
    assert [point["max_concurrency"] for point in points] == levels
    assert all(point["completed"] == point["num_prompts"] and point["failed"] == 0 for point in points)
    # Each server as its role, its unit and /server_info kept; the router's unit is the config's.
    for name, mode in (("prefill-0", "prefill"), ("decode-0", "decode")):
        info = json.loads((pd / "servers" / name / "server_info.json").read_text())
        assert (info["disaggregation_mode"], info["tp_size"]) == (mode, 2)
        unit = (pd / "servers" / name / "unit.service").read_text()
        assert f"--disaggregation-mode {mode}" in unit and f"SyslogIdentifier={name}" in unit
    router_unit = (pd / "unit.service").read_text()
    assert "-m sglang_router.launch_router --pd-disaggregation --prefill http://127.0.0.1:" in router_unit
    assert json.loads((pd / "server_info.json").read_text())["disaggregation_mode"] == "decode"
    # One journal, every unit's lines, each naming its server.
    journal = (pd / "journal.log").read_text()
    assert all(f" {name}[" in journal for name in ("prefill-0", "decode-0", "router")), journal[-3000:]

    broken = _config_dir(run_dir, hosts, "pd-no-decode")
    status = status_of(broken)
    assert (status["status"], status["stage"]) == ("failed", "health"), status
    assert status["reason"].startswith("decode-0: "), status["reason"]
    assert "no profile 'no-such-profile'" in "\n".join(status["journal_tail"])
    assert not (broken / "points.jsonl").exists()

    assert status_of(_config_dir(run_dir, hosts, "tp4"))["status"] == "ok"
    report = (run_dir / "report.md").read_text()
    verdict = report[report.index("## Verdict") : report.index("## Headline")]
    assert "**pd**" in verdict and "**tp4**" in verdict, verdict
    assert "**pd-no-decode**: failed at stage `health`" in report
