"""The campaign layer end to end: playbooks/site.yml on the lab hosts (tests/lab/lab.sh up 2).

One campaign (tests/lab/campaign-short.yml: two of demo.yml's layouts and a server that crashes, on a fast
simulator) runs once for the module, through ``fairbench run`` (ansible-runner, live progress); the tests
read its results tree and its progress lines, then re-run parts of it with ansible-playbook. Results go to a
temporary directory (``-e bench_results_root=...``), never into results/. Skipped when no lab is up.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from tests.support.lab_hosts import INVENTORY, ansible_env, answering_lab_hosts, tool
from tests.support.unit_exposure import UNIT_EXPOSURE

from fairbench.campaign.load import load_campaign
from fairbench.campaign.model import SINGLE_WORKLOAD

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = "tests/lab/campaign-short.yml"
GOOD_CONFIGS = ("tp8", "ep4-nccl")
CRASHING_CONFIG = "crash"
NEVER_STARTING_CONFIG = "no-start"
PLAYBOOK_TIMEOUT_S = 1200
"""A playbook run; the lab's hosts share one kernel, so their jobs run one after another."""


@dataclass(frozen=True)
class PlaybookRun:
    returncode: int
    output: str

    def recap(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP: per host, its counters (ok, changed, failed, ...)."""
        found: dict[str, dict[str, int]] = {}
        for line in self.output.split("PLAY RECAP", 1)[-1].splitlines():
            match = re.match(r"(\S+)\s+:\s+(.*)", line)
            if match:
                found[match[1]] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match[2])}
        return found


@dataclass(frozen=True)
class CampaignRun:
    run_id: str
    results_root: Path
    hosts: list[str]
    first: PlaybookRun

    @property
    def run_dir(self) -> Path:
        return self.results_root / "labtest" / self.run_id

    def config_dir(self, host: str, config: str) -> Path:
        return self.run_dir / host / config


def ansible_playbook(playbook: str, *args: str) -> PlaybookRun:
    argv = [tool("ansible-playbook"), "-i", str(INVENTORY), playbook, *args]
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=ansible_env(),
        timeout=PLAYBOOK_TIMEOUT_S,
        check=False,
    )
    return PlaybookRun(result.returncode, result.stdout + result.stderr)


def ansible_command(host: str, command: str, tree: Path) -> dict[str, object]:
    """One command on one lab host through Ansible; its result (rc, stdout, stderr)."""
    argv = [tool("ansible"), "-i", str(INVENTORY), host, "-m", "ansible.builtin.command"]
    argv += ["-a", command, "--tree", str(tree)]
    subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, env=ansible_env(), timeout=120, check=False
    )
    result: dict[str, object] = json.loads((tree / host).read_text())
    return result


@pytest.fixture(scope="module")
def campaign_run(tmp_path_factory: pytest.TempPathFactory) -> CampaignRun:
    hosts = answering_lab_hosts()
    results_root = tmp_path_factory.mktemp("results")
    run_id = time.strftime("pytest-%Y%m%dT%H%M%S", time.gmtime())
    argv = [tool("fairbench"), "run", CAMPAIGN, "-i", str(INVENTORY), "--run-id", run_id]
    argv += ["-e", f"bench_results_root={results_root}", "-e", "bench_sweep_poll_s=1"]
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, timeout=PLAYBOOK_TIMEOUT_S, check=False
    )
    return CampaignRun(run_id, results_root, hosts, PlaybookRun(done.returncode, done.stdout + done.stderr))


def _points(config_dir: Path) -> list[dict[str, object]]:
    lines = (config_dir / "points.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_every_good_config_has_a_point_for_every_level_on_every_host(campaign_run: CampaignRun) -> None:
    levels = load_campaign(REPO / CAMPAIGN).workloads[SINGLE_WORKLOAD].concurrency
    for host in campaign_run.hosts:
        for config in GOOD_CONFIGS:
            config_dir = campaign_run.config_dir(host, config)
            status = json.loads((config_dir / "status.json").read_text())
            assert status["status"] == "ok", f"{host}/{config}: {status}\n{campaign_run.first.output[-3000:]}"
            points = _points(config_dir)
            assert [point["max_concurrency"] for point in points] == list(levels), f"{host}/{config}"
            for point in points:
                assert point["completed"] == point["num_prompts"], f"{host}/{config}: {point['point_id']}"
                assert (config_dir / "requests" / f"{point['point_id']}.jsonl.gz").is_file()
            assert json.loads((config_dir / "sweep.json").read_text())["concurrency"] == list(levels)


def test_units_server_info_and_host_facts_are_captured(campaign_run: CampaignRun) -> None:
    campaign = load_campaign(REPO / CAMPAIGN)
    serving_ports = {
        name: hostvars["serving_port"]
        for name, hostvars in yaml.safe_load(INVENTORY.read_text())["all"]["children"]["gpu_hosts"][
            "hosts"
        ].items()
    }
    for host in campaign_run.hosts:
        for config in (*GOOD_CONFIGS, CRASHING_CONFIG):
            config_dir = campaign_run.config_dir(host, config)
            unit = (config_dir / "unit.service").read_text()
            exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
            expected_argv = " ".join(campaign.configs[config].argv)
            assert f"/bin/fairbench sim {expected_argv} --host 127.0.0.1 --port {serving_ports[host]}" in (
                exec_start
            )
            for name, value in campaign.configs[config].env.items():
                assert f'Environment="{name}={value}"' in unit
            server_info = json.loads((config_dir / "server_info.json").read_text())
            assert server_info["model_path"] == campaign.model
            assert server_info["tp_size"] == 8
            host_facts = json.loads((config_dir / "host.json").read_text())
            assert host_facts["hostname"] == host
            assert host_facts["os"].startswith("Debian")
            assert "fairbench sim" in (config_dir / "journal.log").read_text()
    expected = campaign.to_json() | {"source": CAMPAIGN}  # named as on the command line
    assert json.loads((campaign_run.run_dir / "campaign.json").read_text()) == expected


def test_a_crashing_server_is_marked_failed_with_its_journal_and_the_next_config_runs(
    campaign_run: CampaignRun,
) -> None:
    assert campaign_run.first.returncode != 0, "site.yml must fail when a config failed"
    for host in campaign_run.hosts:
        assert f"{host}/{CRASHING_CONFIG}" in campaign_run.first.output
        status = json.loads((campaign_run.config_dir(host, CRASHING_CONFIG) / "status.json").read_text())
        assert status["status"] == "failed"
        assert status["stage"] == "sweep"
        assert "c4-r0" in status["reason"]
        journal = "\n".join(status["journal_tail"])
        assert "crash-after=36: crashing" in journal
        assert "status=1/FAILURE" in journal
        # The level before the crash was measured; the config after it ran (see the test above).
        assert _points(campaign_run.config_dir(host, CRASHING_CONFIG))[0]["completed"] == 16
    report = (campaign_run.run_dir / "report.md").read_text()
    for host in campaign_run.hosts:
        assert f"**{CRASHING_CONFIG}@{host}**: failed at stage `sweep`" in report
        assert f"### {CRASHING_CONFIG}@{host}: failed" in report
    assert "crash-after=36: crashing" in report  # the journal excerpt
    assert f"report: {campaign_run.run_dir}/report.md" in campaign_run.first.output


def test_fairbench_run_shows_each_job_and_every_level_as_it_completes(campaign_run: CampaignRun) -> None:
    lines = campaign_run.first.output.splitlines()
    levels = load_campaign(REPO / CAMPAIGN).workloads[SINGLE_WORKLOAD].concurrency
    for host in campaign_run.hosts:
        for config in GOOD_CONFIGS:
            prefix = f"{host} {config}: "
            shown = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
            assert [line for line in shown if line.startswith("job ") or line == "ok"] == [
                f"job {config}@{host}", "ok",
            ], shown  # fmt: skip
            finished = [line for line in shown if re.match(r"c\d+-r0: ", line)]
            assert [line.split("-")[0] for line in finished] == [f"c{level}" for level in levels], shown
            assert all(re.search(r"16/16 ok, [\d,]+ tok/s", line) for line in finished), finished
        failed = next(line for line in lines if line.startswith(f"{host} {CRASHING_CONFIG}: FAILED at sweep"))
        journal = lines[lines.index(failed) + 1 : lines.index(failed) + 12]
        assert any("crash-after=36: crashing" in line for line in journal), journal
    log = (campaign_run.run_dir / "ansible.log").read_text()
    assert "PLAY RECAP" in log and "Follow tp8@" in log


def test_a_server_that_dies_at_start_fails_the_health_stage_at_once(campaign_run: CampaignRun) -> None:
    for host in campaign_run.hosts:
        config_dir = campaign_run.config_dir(host, NEVER_STARTING_CONFIG)
        status = json.loads((config_dir / "status.json").read_text())
        assert status["status"] == "failed"
        assert status["stage"] == "health"
        assert "is failed" in status["reason"]  # the unit's state, long before start_timeout_s
        assert "no profile 'no-such-profile'" in "\n".join(status["journal_tail"])
        assert (config_dir / "unit.service").is_file()
        assert not (config_dir / "points.jsonl").exists()
    report = (campaign_run.run_dir / "report.md").read_text()
    for host in campaign_run.hosts:
        assert f"**{NEVER_STARTING_CONFIG}@{host}**: failed at stage `health`" in report
    assert "no profile 'no-such-profile'" in report  # the journal excerpt the role's status.json carries


def test_every_rendered_unit_passes_systemd_analyze_verify(campaign_run: CampaignRun, tmp_path: Path) -> None:
    campaign = load_campaign(REPO / CAMPAIGN)
    units = " ".join(f"/etc/systemd/system/{config.unit}" for config in campaign.configs.values())
    for host in campaign_run.hosts:
        result = ansible_command(host, f"systemd-analyze verify {units}", tmp_path)
        # verify reports unknown keys and bad values on stderr only, with exit status 0.
        assert (result["rc"], result["stderr"]) == (0, ""), f"{host}: {result['stderr']}"


def test_deploying_again_changes_nothing(campaign_run: CampaignRun) -> None:
    again = ansible_playbook(
        "playbooks/campaign.yml", "--tags", "deploy", "-e", f"campaign={CAMPAIGN}",
        "-e", f"run_id={campaign_run.run_id}", "-e", f"bench_results_root={campaign_run.results_root}",
    )  # fmt: skip
    assert again.returncode == 0, again.output[-3000:]
    recap = again.recap()
    changed_tasks = [
        section.split("]")[0] for section in again.output.split("TASK [")[1:] if "\nchanged: [" in section
    ]
    for host in campaign_run.hosts:
        assert recap[host]["changed"] == 0, f"changed: {changed_tasks}"
        assert recap[host]["failed"] == 0


def test_rerunning_the_same_run_id_writes_no_new_points(campaign_run: CampaignRun) -> None:
    configs = (*GOOD_CONFIGS, CRASHING_CONFIG)
    before = {
        (host, config): (campaign_run.config_dir(host, config) / "points.jsonl").read_bytes()
        for host in campaign_run.hosts
        for config in configs
    }
    again = ansible_playbook(
        "playbooks/campaign.yml", "-e", f"campaign={CAMPAIGN}", "-e", f"run_id={campaign_run.run_id}",
        "-e", f"bench_results_root={campaign_run.results_root}",
    )  # fmt: skip
    after = {key: (campaign_run.config_dir(*key) / "points.jsonl").read_bytes() for key in before}
    assert after == before
    # Nothing was left to measure but for the server that never started: no other server was started (the
    # job's result is changed when it started its server).
    for host in campaign_run.hosts:
        for config in configs:
            follow = again.output.split(f"TASK [fairbench.fairbench.bench : Follow {config}@{host}]")
            assert len(follow) == 2, f"{host}/{config}: not followed once"
            result = follow[1].split("TASK [")[0]
            assert f"changed: [{host}]" not in result and f"[{host}]" in result, f"{host}/{config}: {result}"
    for host in campaign_run.hosts:
        assert (
            json.loads((campaign_run.config_dir(host, "tp8") / "status.json").read_text())["status"] == "ok"
        )
        crashed = json.loads((campaign_run.config_dir(host, CRASHING_CONFIG) / "status.json").read_text())
        assert crashed["status"] == "failed"
        assert "crash-after=36: crashing" in "\n".join(crashed["journal_tail"])
    # The crashed config is still failed, so campaign.yml still fails.
    assert again.returncode != 0


def test_check_mode_plans_a_new_run_without_running_it(campaign_run: CampaignRun, tmp_path: Path) -> None:
    run_id = f"{campaign_run.run_id}-check"
    check = ansible_playbook(
        "playbooks/campaign.yml", "--check", "--diff", "-e", f"campaign={CAMPAIGN}", "-e", f"run_id={run_id}",
        "-e", f"bench_results_root={campaign_run.results_root}",
    )  # fmt: skip
    assert check.returncode == 0, check.output[-3000:]
    assert "+c16-r0" in check.output  # --diff shows the points a new run would measure
    assert not (campaign_run.results_root / "labtest" / run_id).exists()
    for host in campaign_run.hosts:
        listing = ansible_command(host, f"ls /var/lib/fairbench/results/labtest/{run_id}", tmp_path)
        assert listing["rc"] != 0, f"{host}: check mode wrote results"


def test_a_failed_deploy_fails_every_config_of_the_host_at_deploy_and_the_report_says_so(
    campaign_run: CampaignRun,
) -> None:
    run_id = f"{campaign_run.run_id}-no-deploy"
    # No sources to build fairbench's wheel from: the deploy fails on the control node, for every host.
    argv = [tool("fairbench"), "run", CAMPAIGN, "-i", str(INVENTORY), "--run-id", run_id]
    argv += [
        "-e",
        f"bench_results_root={campaign_run.results_root}",
        "-e",
        "bench_source_dir=/nonexistent/src",
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, timeout=PLAYBOOK_TIMEOUT_S, check=False
    )
    assert done.returncode != 0, done.stdout[-3000:]
    run_dir = campaign_run.results_root / "labtest" / run_id
    campaign = load_campaign(REPO / CAMPAIGN)
    report = (run_dir / "report.md").read_text()
    for host in campaign_run.hosts:
        for config in campaign.configs.values():
            status = json.loads((run_dir / host / config.name / "status.json").read_text())
            assert (status["status"], status["stage"], status["unit"]) == ("failed", "deploy", config.unit)
            # The task that failed and the command's own words, not just "non-zero return code"; the build
            # runs once, on the first host, for every host.
            ran_it = campaign_run.hosts[0]
            assert status["reason"] == ("" if host == ran_it else f"{ran_it}, for every host: ") + (
                "Build the fairbench wheel on the control node, once per run: non-zero return code: "
                "ERROR Source /nonexistent/src is not a directory"
            ), status
            assert not (run_dir / host / config.name / "points.jsonl").exists()
            assert f"**{config.name}@{host}**: failed at stage `deploy`: {status['reason']}" in report


def test_host_json_records_how_exposed_each_configs_unit_is(campaign_run: CampaignRun) -> None:
    for host in campaign_run.hosts:
        for config in GOOD_CONFIGS:
            config_dir = campaign_run.config_dir(host, config)
            security = json.loads((config_dir / "host.json").read_text())["unit_security"]
            assert security["rating"], security
            assert 0.0 <= security["exposure"] <= UNIT_EXPOSURE, f"{host}/{config}: {security}"
