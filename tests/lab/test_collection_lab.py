"""The collection as a user installs it: built by ansible-galaxy, installed into an empty directory, and
its campaign playbook run by FQCN on a lab host from outside the checkout, with no ansible.cfg of ours.

The run proves the tarball holds all a campaign needs: the roles, the modules and their module_utils, the
playbooks and the Python package the bench role builds the hosts' wheel from.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from tests.support.lab_hosts import INVENTORY, answering_lab_hosts, tool

import fairbench

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
CONFIG = "tp8"
"""One config of the lab tests' campaign: the point is the collection, not the campaign."""


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    return done


def test_the_built_collection_installs_and_runs_a_campaign(tmp_path: Path) -> None:
    host = answering_lab_hosts()[0]
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    # Nothing of the checkout's Ansible settings: an ansible.cfg that only names where collections live.
    collections = tmp_path / "collections"
    config = user_dir / "ansible.cfg"
    config.write_text(f"[defaults]\ncollections_path = {collections}\n")
    env = {
        "PATH": str(Path(tool("ansible-playbook")).parent) + ":/usr/bin:/bin",
        "ANSIBLE_CONFIG": str(config),
    }
    env["ANSIBLE_NOCOLOR"] = "1"
    env["HOME"] = str(tmp_path / "home")

    _run(
        [tool("ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), str(REPO)],
        REPO,
        env,
        120,
    )
    (tarball,) = tmp_path.glob("fairbench-fairbench-*.tar.gz")
    _run(
        [tool("ansible-galaxy"), "collection", "install", str(tarball), "-p", str(collections)],
        user_dir,
        env,
        120,
    )
    installed = collections / "ansible_collections" / "fairbench" / "fairbench"
    assert (installed / "playbooks" / "campaign.yml").is_file() and not (installed / "tests").exists()

    campaign = yaml.safe_load((REPO / "tests/lab/campaign-short.yml").read_text())
    campaign["configs"] = {CONFIG: campaign["configs"][CONFIG]}
    campaign_file = user_dir / "one-config.yml"
    campaign_file.write_text(yaml.safe_dump(campaign))
    results_root = tmp_path / "results"
    run_id = time.strftime("collection-%Y%m%dT%H%M%S", time.gmtime())
    argv = [tool("ansible-playbook"), "fairbench.fairbench.campaign", "-i", str(INVENTORY)]
    # The campaign is loaded on the control node, which a limit must keep.
    argv += ["--limit", f"{host},localhost"]
    argv += ["-e", f"campaign={campaign_file}", "-e", f"run_id={run_id}"]
    argv += ["-e", f"bench_results_root={results_root}", "-e", "bench_sweep_poll_s=1"]
    _run(argv, user_dir, env, 600)

    config_dir = results_root / campaign["name"] / run_id / host / CONFIG
    assert json.loads((config_dir / "status.json").read_text())["status"] == "ok"
    points = [json.loads(line) for line in (config_dir / "points.jsonl").read_text().splitlines()]
    assert [point["max_concurrency"] for point in points] == campaign["workload"]["concurrency"]
    # The host runs the fairbench of the collection's own copy of the package.
    assert json.loads((config_dir / "host.json").read_text())["fairbench"] == fairbench.__version__
