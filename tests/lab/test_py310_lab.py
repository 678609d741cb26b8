"""fairbench's venv made from a Python 3.10 (Ubuntu 22.04's) with ``bench_python``, and a campaign on it.

The lab hosts run Debian bookworm's Python 3.11. One of them gets this machine's Python 3.10 (pyenv's
build, ``FAIRBENCH_LAB_PY310``, by default /root/.pyenv/versions/3.10.13, built on bookworm like the hosts),
copied to /opt, where the server units can see it (their ProtectHome=yes hides /root), with its lib/ in the
dynamic linker's path for its libpython. The campaign's deploy makes fairbench's venv from it, and one config
of the lab tests' campaign runs there: the host-side modules, ``fairbench sim`` in its unit and the sweep all
run on 3.10. The host is left as it was found: without that Python and without the venv made from it, so that
the next deploy makes the venv from the host's python3 again.

A Python the units cannot see (under /root) is refused before anything is deployed, naming the setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.lab_hosts import INVENTORY, ansible_env, answering_lab_hosts, tool

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
PY310 = Path(os.environ.get("FAIRBENCH_LAB_PY310", "/root/.pyenv/versions/3.10.13"))
HOST_PY310 = Path("/opt") / PY310.name
"""Where the host gets that Python: outside the directories the server units' ProtectHome=yes hides."""
HOST_PY310_BIN = HOST_PY310 / "bin" / "python3.10"
LD_CONF = Path("/etc/ld.so.conf.d/fairbench-lab-py310.conf")
CONFIG = "tp8"
"""One config of the lab tests' campaign: the point is the Python it runs on, not the campaign."""
CAMPAIGN = yaml.safe_load((REPO / "tests/lab/campaign-short.yml").read_text())
CAMPAIGN["configs"] = {CONFIG: CAMPAIGN["configs"][CONFIG]}
VENV = yaml.safe_load((REPO / "roles/fairbench/defaults/main.yml").read_text())["fairbench_venv_dir"]
TIMEOUT_S = 600


def ansible(host: str, module: str, args: str, tmp_path: Path) -> dict[str, Any]:
    """One module run on one lab host through Ansible; its result."""
    tree = tmp_path / f"tree-{time.monotonic_ns()}"
    argv = [tool("ansible"), "-i", str(INVENTORY), host, "-m", module, "-a", args, "--tree", str(tree)]
    subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, env=ansible_env(), timeout=TIMEOUT_S, check=False
    )
    result: dict[str, Any] = json.loads((tree / host).read_text())
    return result


def shell(host: str, command: str, tmp_path: Path) -> dict[str, Any]:
    return ansible(host, "ansible.builtin.shell", command, tmp_path)


def _without_tests(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Python's own test suite (70 MB) is not needed to make a venv or run fairbench."""
    return None if "/lib/python3.10/test/" in f"/{member.name}/" else member


@pytest.fixture
def py310_host(tmp_path: Path) -> Iterator[str]:
    """A lab host with the Python 3.10 at PY310 and no fairbench venv yet; both removed afterwards."""
    host = answering_lab_hosts()[0]
    if not (PY310 / "bin" / "python3.10").is_file():
        pytest.skip(f"no Python 3.10 in {PY310} (set FAIRBENCH_LAB_PY310 to a bookworm-built 3.10 tree)")
    archive = tmp_path / "python3.10.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(PY310, arcname=str(HOST_PY310.relative_to("/")), filter=_without_tests)
    try:
        copied = ansible(host, "ansible.builtin.unarchive", f"src={archive} dest=/", tmp_path)
        assert not copied.get("failed"), copied
        # The build's rpath names its place on this machine; on the host the linker's cache finds its
        # libpython.
        linked = shell(host, f"echo {HOST_PY310}/lib > {LD_CONF} && ldconfig && rm -rf {VENV}", tmp_path)
        assert linked["rc"] == 0, linked
        runs = shell(host, f"{HOST_PY310_BIN} -c 'import ssl, venv, sys; print(sys.version)'", tmp_path)
        assert runs["rc"] == 0 and runs["stdout"].startswith("3.10."), runs
        yield host
    finally:
        shell(host, f"rm -rf {VENV} {HOST_PY310} {LD_CONF} && ldconfig", tmp_path)


def run_campaign(host: str, python: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The lab tests' campaign, one config, on one host with fairbench's venv made by ``python``; the run
    and the config's results directory."""
    campaign_file = tmp_path / "py310.yml"
    campaign_file.write_text(yaml.safe_dump(CAMPAIGN))
    results_root = tmp_path / "results"
    run_id = time.strftime("py310-%Y%m%dT%H%M%S", time.gmtime())
    argv = [tool("ansible-playbook"), "-i", str(INVENTORY), "playbooks/campaign.yml"]
    # The campaign is loaded on the control node, which a limit must keep.
    argv += ["--limit", f"{host},localhost", "-e", f"bench_python={python}"]
    argv += ["-e", f"campaign={campaign_file}", "-e", f"run_id={run_id}"]
    argv += ["-e", f"bench_results_root={results_root}", "-e", "bench_sweep_poll_s=1"]
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, env=ansible_env(), timeout=TIMEOUT_S, check=False
    )
    return done, results_root / CAMPAIGN["name"] / run_id / host / CONFIG


def test_a_campaign_runs_in_a_venv_made_from_python_3_10(py310_host: str, tmp_path: Path) -> None:
    done, config_dir = run_campaign(py310_host, str(HOST_PY310_BIN), tmp_path)
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"

    version = shell(py310_host, f"{VENV}/bin/python -c 'import sys; print(sys.version)'", tmp_path)
    assert version["rc"] == 0 and version["stdout"].startswith("3.10."), version
    assert json.loads((config_dir / "status.json").read_text())["status"] == "ok"
    # The modules that ran the job ran on 3.10, in fairbench's venv.
    host_facts = json.loads((config_dir / "host.json").read_text())
    assert host_facts["python"].startswith("3.10."), host_facts
    assert host_facts["python_executable"] == f"{VENV}/bin/python", host_facts
    points = [json.loads(line) for line in (config_dir / "points.jsonl").read_text().splitlines()]
    assert [point["max_concurrency"] for point in points] == CAMPAIGN["workload"]["concurrency"]
    for point in points:
        assert point["completed"] == point["num_prompts"] > 0, point["point_id"]


def test_a_python_the_server_units_cannot_see_is_refused_before_the_deploy(tmp_path: Path) -> None:
    host = answering_lab_hosts()[0]
    hidden = "/root/fairbench-lab-python3"
    # A copy, not a link: the check follows links to the interpreter itself.
    copied = shell(host, f"cp /usr/bin/python3 {hidden}", tmp_path)
    assert copied["rc"] == 0, copied
    try:
        done, config_dir = run_campaign(host, hidden, tmp_path)
    finally:
        shell(host, f"rm -f {hidden}", tmp_path)
    assert done.returncode != 0
    status = json.loads((config_dir / "status.json").read_text())
    assert (status["status"], status["stage"]) == ("failed", "deploy"), status
    assert f"bench_python {hidden} on {host} is Python 3." in status["reason"], status
    hidden_dirs = "outside /home, /root and /run/user (the server units' ProtectHome=yes hides them)"
    assert hidden_dirs in status["reason"], status
    assert not (config_dir / "points.jsonl").exists()
