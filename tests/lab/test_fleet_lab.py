"""Campaigns over a fleet, on the two lab hosts (tests/lab/lab.sh up 2), through campaign_report.yml.

- A campaign spread over both hosts (tests/lab/campaign-fleet.yml) measures each config once, one of them a
  server over both hosts (``nodes: 2``: a unit on each, rank 0 swept), and its report compares configs,
  never host x config pairs. The lab's hosts are containers on one kernel: found to share a machine, they
  take their jobs one at a time, and the report says so.
- A server over both hosts whose rank 1 is killed mid-sweep (tests/lab/campaign-fleet-kill.yml) fails with
  both ranks' journals, and the next config runs.
- Hosts that differ (one has an SGLang the other lacks) stop a spread campaign before anything is
  deployed, the difference named; accepted, the same campaign is placed.
- A server left over from an earlier config (a process on the serving port, outside fairbench's units) is
  found before the next config starts, and that config fails naming it.
- Automatic repeats under spread (tests/lab/campaign-decision.yml): the queue adds rounds while a noisy
  config needs them, up to its maximum, each with the steady one too (whose own interval was narrow at
  its minimum): the rounds stay complete for the paired verdict; every job searches for the highest
  concurrency meeting the campaign's SLO.

Results go to a temporary directory (``-e bench_results_root=...``), never into results/. Skipped when no
lab is up.
"""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.lab_hosts import INVENTORY, ansible_env, answering_lab_hosts, tool

from fairbench.campaign.load import load_campaign
from fairbench.campaign.model import SINGLE_WORKLOAD

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
FLEET = "tests/lab/campaign-fleet.yml"
KILL = "tests/lab/campaign-fleet-kill.yml"
DECISION = "tests/lab/campaign-decision.yml"
TIMEOUT_S = 1200
"""A campaign's playbook run; the lab's hosts share one kernel, so their jobs run one after another."""
SGLANG_SITE = "/opt/sglang/venv/lib/python3.11/site-packages"
"""Where the lab hosts' SGLang venv (the fairbench role's fairbench_sglang_venv_dir) keeps its packages."""


def lab_hostvars() -> dict[str, dict[str, Any]]:
    hosts: dict[str, dict[str, Any]] = yaml.safe_load(INVENTORY.read_text())["all"]["children"]["gpu_hosts"][
        "hosts"
    ]
    return hosts


def run_campaign(
    campaign: str,
    results_root: Path,
    run_id: str,
    *extra: str,
    playbook: str = "playbooks/campaign_report.yml",
) -> subprocess.CompletedProcess[str]:
    """The campaign run by ansible-playbook (campaign_report.yml: run and reported; these tests are not about
    provisioning, which site.yml adds), with its results under ``results_root``."""
    argv = [tool("ansible-playbook"), "-i", str(INVENTORY), playbook, "-e", f"campaign={campaign}"]
    argv += [
        "-e",
        f"run_id={run_id}",
        "-e",
        f"bench_results_root={results_root}",
        "-e",
        "bench_sweep_poll_s=1",
    ]
    return subprocess.run(
        [*argv, *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=ansible_env(),
        timeout=TIMEOUT_S,
        check=False,
    )


def on_host(host: str, command: str, tmp_path: Path) -> dict[str, Any]:
    """One shell command on one lab host through Ansible; its result (rc, stdout, stderr)."""
    tree = tmp_path / f"tree-{time.monotonic_ns()}"
    argv = [tool("ansible"), "-i", str(INVENTORY), host, "-m", "ansible.builtin.shell", "-a", command]
    subprocess.run(
        [*argv, "--tree", str(tree)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=ansible_env(),
        timeout=120,
        check=False,
    )
    result: dict[str, Any] = json.loads((tree / host).read_text())
    return result


def accepting_sglang(campaign: str, tmp_path: Path) -> str:
    """The campaign, accepting that the lab hosts' SGLang differs: the provisioning tests, which run first on
    hosts nothing has touched, leave a stub SGLang on one lab host only. Accepted, the difference is
    reported as a threat, as a real fleet's would be; where the hosts agree, nothing is."""
    path = tmp_path / Path(campaign).name
    path.write_text((REPO / campaign).read_text() + "accept_host_differences: [sglang]\n")
    return str(path)


def status_of(config_dir: Path) -> dict[str, Any]:
    status: dict[str, Any] = json.loads((config_dir / "status.json").read_text())
    return status


def test_a_spread_campaign_measures_each_config_once_and_compares_configs_not_hosts(tmp_path: Path) -> None:
    hosts = answering_lab_hosts()
    done = run_campaign(accepting_sglang(FLEET, tmp_path), tmp_path, "spread")
    assert done.returncode == 0, done.stdout[-4000:]
    run_dir = tmp_path / "labfleet" / "spread"
    campaign = load_campaign(REPO / FLEET)
    levels = list(campaign.workloads[SINGLE_WORKLOAD].concurrency)
    placed: dict[str, list[str]] = {}
    for config in campaign.configs:
        dirs = [run_dir / host / config for host in hosts if (run_dir / host / config).is_dir()]
        assert len(dirs) == 1, f"{config}: measured in {dirs}"
        status = status_of(dirs[0])
        assert status["status"] == "ok", status
        (job,) = status["jobs"]
        placed[config] = job["hosts"]
        assert job["hosts"][0] == dirs[0].parent.name  # swept from rank 0's host
        points = [json.loads(line) for line in (dirs[0] / "points.jsonl").read_text().splitlines()]
        assert [point["max_concurrency"] for point in points] == levels
        timeline = job["timeline"]
        assert timeline["unit_started_at"] < timeline["healthy_at"] < timeline["first_request_at"]
        assert timeline["first_request_at"] < timeline["last_point_ended_at"]
    # The server over both hosts: a unit on each, told its rank and rank 0's address when the job started.
    rank0, rank1 = placed["two-hosts"]
    assert {rank0, rank1} == set(hosts[:2])
    two = run_dir / rank0 / "two-hosts"
    unit = (two / "unit.service").read_text()
    assert (
        "--nnodes 2 --node-rank ${FAIRBENCH_NODE_RANK} --dist-init-addr ${FAIRBENCH_DIST_INIT_ADDR}" in unit
    )
    dist_port = lab_hostvars()[rank0]["serving_dist_init_port"]
    assert "all 2 nodes joined" in (two / "journal.log").read_text()
    assert f"joined rank 0 at 127.0.0.1:{dist_port}" in (two / "ranks" / rank1 / "journal.log").read_text()
    # Each job ran on one host at a time: the other two configs went one to each host, or both to one.
    fleet = json.loads((run_dir / "fleet.json").read_text())
    assert [job["state"] for job in fleet["jobs"]] == ["ok", "ok", "ok"]
    assert fleet["equivalence"]["refused"] == []
    # One kernel (systemd-nspawn containers): one machine, whose jobs ran one at a time.
    (machine,) = fleet["machines"]["shared"]
    assert set(hosts) <= set(machine["hosts"]), machine
    assert "kernel_boot" in [item["fact"] for item in machine["evidence"]], machine
    spans = sorted((job["claimed_at"], job["finished_at"]) for job in fleet["jobs"])
    assert all(ended <= began for (_, ended), (began, _) in itertools.pairwise(spans)), spans
    report = (run_dir / "report.md").read_text()
    assert "Hosts share a machine (fleet.json)" in report
    assert "@" + hosts[0] not in report and "@" + hosts[1] not in report  # no host x config pairs
    comparisons = report.split("### Comparisons", 1)[1].split("##", 1)[0]
    pairs = [line for line in comparisons.splitlines() if line.startswith("- **")]
    assert len(pairs) == 3, pairs  # 3 configs, 3 pairs
    assert f"| two-hosts | {rank0} + {rank1} (2 nodes) | ok |" in report
    assert "## Campaign overhead" in report


def _wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health_generate", timeout=1) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


def test_killing_one_rank_mid_sweep_fails_that_config_with_both_journals_and_the_next_runs(
    tmp_path: Path,
) -> None:
    answering_lab_hosts()
    run_dir = tmp_path / "labkill" / "kill"
    outcome: dict[str, subprocess.CompletedProcess[str]] = {}
    campaign = accepting_sglang(KILL, tmp_path)
    runner = threading.Thread(target=lambda: outcome.update(done=run_campaign(campaign, tmp_path, "kill")))
    runner.start()

    def gathered() -> list[str] | None:
        try:
            jobs = json.loads((run_dir / "fleet.json").read_text())["jobs"]
        except (OSError, ValueError):
            return None
        hosts: list[str] = jobs[0]["hosts"]
        return hosts if jobs[0]["state"] == "running" else None

    rank0, rank1 = _wait_for(gathered, 300, "the server over both hosts to be gathered")
    _wait_for(lambda: _healthy(lab_hostvars()[rank0]["serving_port"]), 120, "rank 0 to answer healthy")
    time.sleep(2)  # into the sweep: its first level takes about 8 s at this simulator speed
    unit = load_campaign(REPO / KILL).configs["two-hosts"].unit
    killed = on_host(rank1, f"systemctl kill --signal=SIGKILL {unit}", tmp_path)
    assert killed["rc"] == 0, killed
    runner.join(TIMEOUT_S)
    done = outcome["done"]
    assert done.returncode != 0, "a failed config fails the campaign"
    status = status_of(run_dir / rank0 / "two-hosts")
    assert (status["status"], status["stage"]) == ("failed", "sweep"), status
    (job,) = status["jobs"]
    assert job["hosts"] == [rank0, rank1]
    # Both ranks' journals: rank 0 saw rank 1 leave and took the server down; rank 1 was killed.
    assert any("node rank 1" in line and "left" in line for line in status["journal_tail"]), status
    (other,) = job["ranks"]
    assert other["host"] == rank1 and any("status=9/KILL" in line for line in other["journal_tail"]), other
    report = (run_dir / "report.md").read_text()
    assert "**two-hosts**: failed at stage `sweep`" in report
    # The next config ran, on one of the hosts, once both were clean again.
    after = [run_dir / host / "after" for host in (rank0, rank1) if (run_dir / host / "after").is_dir()]
    assert len(after) == 1 and status_of(after[0])["status"] == "ok", done.stdout[-4000:]


def test_hosts_that_differ_stop_a_spread_campaign_naming_the_difference_unless_accepted(
    tmp_path: Path,
) -> None:
    hosts = answering_lab_hosts()
    # A real difference: an SGLang (its distribution's metadata, all the fact reads) on a host that has none
    # (the provisioning tests leave one on a single host).
    without = [host for host in hosts if on_host(host, "test -e /opt/sglang/venv", tmp_path)["rc"] != 0]
    assert without, "every lab host has an SGLang venv: none to make differ (make lab-down lab-up)"
    differing = without[-1]
    dist = f"{SGLANG_SITE}/sglang-0.0.1.dist-info"
    installed = on_host(
        differing,
        f"python3 -m venv /opt/sglang/venv && mkdir -p {dist}"
        f" && printf 'Metadata-Version: 2.1\\nName: sglang\\nVersion: 0.0.1\\n' > {dist}/METADATA",
        tmp_path,
    )
    assert installed["rc"] == 0, installed
    try:
        refused = run_campaign(FLEET, tmp_path, "differ")
        assert refused.returncode != 0
        named = next((line for line in refused.stdout.splitlines() if "pool gpu_hosts: sglang: " in line), "")
        assert f"0.0.1 on {differing}" in named, refused.stdout[-4000:]
        assert "accept_host_differences: [sglang]" in refused.stdout
        assert "TASK [fairbench.fairbench.serving :" not in refused.stdout  # stopped before the units
        assert not list((tmp_path / "labfleet" / "differ").glob("*/*/points.jsonl"))
        accepting = tmp_path / "accepting.yml"
        accepting.write_text((REPO / FLEET).read_text() + "accept_host_differences: [sglang]\n")
        checked = run_campaign(
            str(accepting), tmp_path, "accepted", "--check", playbook="playbooks/campaign.yml"
        )
        assert checked.returncode == 0, checked.stdout[-4000:]
        assert (
            "TASK [fairbench.fairbench.bench : Place the jobs, after comparing the hosts of each pool]"
            in (checked.stdout)
        )
    finally:
        on_host(differing, "rm -rf /opt/sglang", tmp_path)


def _listening(port: int) -> bool:
    """Whether something listens on the port (the lab hosts share this machine's network)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_a_leftover_server_process_is_found_and_reported_before_the_next_config_starts(
    tmp_path: Path,
) -> None:
    hosts = answering_lab_hosts()
    host = hosts[0]
    port = lab_hostvars()[host]["serving_port"]
    # The campaign's configs of one host each, on that host alone.
    one_host = tmp_path / "one-host.yml"
    one_host.write_text(
        "\n".join(line for line in (REPO / FLEET).read_text().splitlines() if "nodes: 2" not in line) + "\n"
    )
    # A server of an earlier config that outlived its unit, on the serving port, in a unit of its own (not
    # one of fairbench's).
    leftover = "leftover-server"
    started = on_host(
        host,
        f"systemd-run --unit={leftover} --uid=nobody python3 -m http.server {port} --bind 127.0.0.1",
        tmp_path,
    )
    assert started["rc"] == 0, started
    try:
        _wait_for(lambda: _listening(port), 30, "the leftover server to listen")
        done = run_campaign(
            str(one_host),
            tmp_path,
            "leftover",
            "--limit",
            f"{host},localhost",
            "-e",
            "bench_clean_timeout_s=2",
        )
    finally:
        on_host(host, f"systemctl stop {leftover}", tmp_path)
    assert done.returncode != 0
    run_dir = tmp_path / "labfleet" / "leftover"
    for config in ("tp8", "ep4"):
        status = status_of(run_dir / host / config)
        assert (status["status"], status["stage"]) == ("failed", "clean"), status
        assert "the host is not clean before starting" in status["reason"]
        assert f"port {port} on 127.0.0.1 is held by pid" in status["reason"], status["reason"]
        assert f"unit {leftover}.service" in status["reason"]
        # Found before the config's own server was started: no unit saved, no point measured.
        assert not (run_dir / host / config / "points.jsonl").exists()
        assert not (run_dir / host / config / "unit.service").exists()
    # Once the leftover is gone, the host is clean again: the next config would start.
    assert not _listening(port)


def test_automatic_repeats_under_spread_add_rounds_while_the_noisy_config_needs_them_each_searching_the_slo(
    tmp_path: Path,
) -> None:
    hosts = answering_lab_hosts()
    # A run id of its own: the hosts keep their results, and a re-run would resume this run's points.
    run_id = f"auto-{time.time_ns()}"
    done = run_campaign(accepting_sglang(DECISION, tmp_path), tmp_path, run_id)
    assert done.returncode == 0, done.stdout[-4000:]
    run_dir = tmp_path / "labdecision" / run_id
    fleet = json.loads((run_dir / "fleet.json").read_text())
    jobs = {
        config: [job for job in fleet["jobs"] if job["config"] == config] for config in ("steady", "noisy")
    }
    assert [job["id"] for job in jobs["steady"]] == [f"steady#r{repeat}" for repeat in range(5)]
    assert [job["id"] for job in jobs["noisy"]] == [f"noisy#r{repeat}" for repeat in range(5)]
    assert all(job["state"] == "ok" for job in fleet["jobs"])
    # Judged by the queue on each job's own throughputs, which it kept.
    assert fleet["judged"]["steady"]["count"] == 5
    assert "within ±8 % after 5 repeats" in fleet["judged"]["steady"]["stopped"]
    assert "maximum of 5 repeats reached" in fleet["judged"]["noisy"]["stopped"]
    assert all(set(job["throughputs"]) == {"c1", "c64"} for job in fleet["jobs"])
    for config in ("steady", "noisy"):
        points = [
            json.loads(line)
            for host in hosts
            if (run_dir / host / config / "points.jsonl").is_file()
            for line in (run_dir / host / config / "points.jsonl").read_text().splitlines()
        ]
        for repeat in range(len(jobs[config])):
            mine = {point["max_concurrency"]: point for point in points if point["repeat"] == repeat}
            assert (mine[1]["slo_met"], mine[64]["slo_met"]) == (True, False), (config, repeat)
            probes = sorted(level for level, point in mine.items() if point["level_source"] == "bisect")
            met = max(level for level, point in mine.items() if point["slo_met"])
            missed = min(level for level, point in mine.items() if not point["slo_met"])
            assert probes and missed - met <= 4, (config, repeat, sorted(mine))
    report = (run_dir / "report.md").read_text()
    assert report.index("## Verdict") < report.index("## Headline")
