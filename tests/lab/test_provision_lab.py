"""playbooks/provision.yml on the lab hosts (tests/lab/lab.sh up 2), against a stub NVIDIA repository.

NVIDIA's CUDA repository is not reachable from CI, so tests/lab/stub_repo/build_repo.py builds a signed apt
repository of stub packages with the real names, served here over HTTP on 127.0.0.1 (the lab hosts share this
machine's network); the roles' repository variables point at it, so the real keyring, deb822 Signed-By and
pinning logic run. SGLang comes from a wheelhouse holding a stub ``sglang`` wheel and uv's real wheel (the
offline path of the sglang role); the venv uses the hosts' Python 3.11 (sglang_python), since uv may not be
able to download a Python here. The lab hosts have no GPU: ``nvidia_driver_require_gpu: false`` installs the
driver anyway, and the GPU checks are skipped - which the tests assert.

The second host is provisioned (twice: the second run must change nothing), the first only sees check mode,
which changes nothing, so that tests/lab/test_sglang_lab.py can provision real SGLang onto it on the same lab.
Both must be fresh: after a run, `lab.sh down && lab.sh up 2` before running these again.
Skipped when no lab is up.
"""

from __future__ import annotations

import functools
import http.server
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from tests.lab.stub_repo import build_repo, build_wheelhouse
from tests.support.lab_hosts import INVENTORY, ansible_env, answering_lab_hosts, tool
from tests.support.real_sglang import SGLANG_VERSION

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = "playbooks/provision.yml"
PLAYBOOK_TIMEOUT_S = 900
UV_VERSION = "0.13.9"
GPU_SKIP = "GPU checks skipped on {host}: no NVIDIA GPU found by lspci (nvidia_driver_require_gpu is false)"


@dataclass(frozen=True)
class PlaybookRun:
    returncode: int
    output: str

    def recap(self, host: str) -> dict[str, int]:
        for line in self.output.split("PLAY RECAP", 1)[-1].splitlines():
            match = re.match(r"(\S+)\s+:\s+(.*)", line)
            if match and match[1] == host:
                return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match[2])}
        raise AssertionError(f"no PLAY RECAP line for {host}:\n{self.output[-3000:]}")


def _on_host(host: str, command: str) -> subprocess.CompletedProcess[str]:
    """Runs a shell command on a lab host (ad-hoc Ansible, the inventory's connection settings)."""
    return subprocess.run(
        [tool("ansible"), "-i", str(INVENTORY), host, "-o", "-m", "ansible.builtin.shell", "-a", command],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _require_fresh_lab_host(host: str) -> None:
    """Refuses anything but a fresh lab host: the lab marker present, nothing provisioned yet."""
    marker = _on_host(host, "cat /etc/fairbench-lab")
    assert marker.returncode == 0 and f"host={host}" in marker.stdout, (
        f"{host} has no /etc/fairbench-lab marker: not a lab host, refusing to provision it"
    )
    if _on_host(host, "test ! -e /etc/apt/sources.list.d/nvidia-cuda.sources -a ! -e /opt/sglang").returncode:
        pytest.skip(f"{host} was provisioned already: `tests/lab/lab.sh down && tests/lab/lab.sh up 2` first")


@pytest.fixture(scope="module")
def hosts() -> list[str]:
    found = answering_lab_hosts()[:2]
    for host in found:
        _require_fresh_lab_host(host)
    return found


@pytest.fixture(scope="module")
def stub_repo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The stub repository, served on 127.0.0.1 for the duration of the module."""
    repo = build_repo.build(tmp_path_factory.mktemp("stub-apt"))
    handler = functools.partial(_QuietHandler, directory=str(repo))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def extra_vars(stub_repo_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheelhouse = build_wheelhouse.build(tmp_path_factory.mktemp("wheelhouse"), SGLANG_VERSION, UV_VERSION)
    settings = {
        "nvidia_driver_repo_url": stub_repo_url,
        "nvidia_driver_repo_key_url": stub_repo_url + build_repo.KEY_FILE,
        "nvidia_driver_branch": build_repo.PINNED_BRANCH,
        "nvidia_driver_require_gpu": False,
        "cuda_version": build_repo.CUDA_VERSION,
        "sglang_version": SGLANG_VERSION,
        "sglang_uv_version": UV_VERSION,
        "sglang_python": "/usr/bin/python3",
        "sglang_uv_python_downloads": "never",
        "sglang_wheelhouse": str(wheelhouse),
        # The stub wheelhouse is copied to the host: the lab inventory's shared, built one is for real SGLang.
        "sglang_wheelhouse_shared": False,
        "sglang_wheelhouse_build": False,
        "sglang_hf_token": "hf_stub_token_for_the_lab",
    }
    path = tmp_path_factory.mktemp("vars") / "provision-lab.yml"
    path.write_text(yaml.safe_dump(settings))
    return path


def _provision(host: str, extra_vars: Path, *args: str) -> PlaybookRun:
    done = subprocess.run(
        [
            tool("ansible-playbook"),
            "-i",
            str(INVENTORY),
            PLAYBOOK,
            "--limit",
            host,
            "-e",
            f"@{extra_vars}",
            *args,
        ],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=PLAYBOOK_TIMEOUT_S,
        check=False,
    )
    return PlaybookRun(done.returncode, done.stdout + done.stderr)


def _flat(output: str) -> str:
    """The output with YAML's line folding undone, so that a message can be searched for whole."""
    return re.sub(r"\s+", " ", output)


def test_check_mode_on_a_fresh_host_is_green_and_changes_nothing(hosts: list[str], extra_vars: Path) -> None:
    host = hosts[0]
    run = _provision(host, extra_vars, "--check", "--diff")
    assert run.returncode == 0, run.output[-4000:]
    assert run.recap(host)["failed"] == 0
    assert GPU_SKIP.format(host=host) in _flat(run.output)
    assert "check mode: the NVIDIA repository is not configured on this host yet" in _flat(run.output)
    # Only package lists were fetched: no repository, package, venv or file of the roles appeared.
    untouched = _on_host(
        host,
        "test ! -e /etc/apt/sources.list.d/nvidia-cuda.sources && test ! -e /opt/sglang"
        " && test ! -e /etc/profile.d/cuda.sh && ! dpkg -s nvidia-open >/dev/null 2>&1",
    )
    assert untouched.returncode == 0, untouched.stdout


def test_a_host_without_a_gpu_is_skipped_by_default(hosts: list[str], extra_vars: Path) -> None:
    host = hosts[0]
    run = _provision(host, extra_vars, "--check", "-e", '{"nvidia_driver_require_gpu": true}')
    assert run.returncode == 0, run.output[-4000:]
    flat = _flat(run.output)
    assert f"nvidia_driver: no NVIDIA GPU found by lspci on {host}: the driver is not installed here" in flat
    assert f"provision: {host} has no NVIDIA GPU: CUDA is not installed here." in flat
    assert f"sglang: {host} has no NVIDIA GPU: SGLang is not installed here (sglang_on_cpu)." in flat
    # The sglang role ends at its GPU check: none of its installing tasks runs.
    assert (
        "TASK [fairbench.fairbench.cuda :" not in run.output
        and "TASK [fairbench.fairbench.sglang : Create the servers' user]" not in run.output
    )


@pytest.fixture(scope="module")
def first_run(hosts: list[str], extra_vars: Path) -> PlaybookRun:
    return _provision(hosts[1], extra_vars)


def test_first_run_is_green(hosts: list[str], first_run: PlaybookRun) -> None:
    assert first_run.returncode == 0, first_run.output[-4000:]
    recap = first_run.recap(hosts[1])
    assert recap["failed"] == 0 and recap["changed"] > 0
    assert GPU_SKIP.format(host=hosts[1]) in _flat(first_run.output)
    assert "Cuda compilation tools, release 13.0" in first_run.output


def test_the_host_is_provisioned(hosts: list[str], first_run: PlaybookRun) -> None:
    assert first_run.returncode == 0
    checks = {
        # The repository is signed by the downloaded key (apt-get update verified InRelease with it).
        "signed_by": "grep -qx 'Signed-By: /etc/apt/keyrings/nvidia-cuda.asc' "
        "/etc/apt/sources.list.d/nvidia-cuda.sources",
        # The pinning package, not apt's preference for the newest version, chose the branch.
        "pinned": f"dpkg-query -W -f '${{Version}}' nvidia-open | grep -q '^{build_repo.PINNED_BRANCH}\\.'",
        "newer_branch_available": "apt-cache policy nvidia-open | grep -q 590.44.01-1",
        "nouveau": "grep -qx 'blacklist nouveau' /etc/modprobe.d/blacklist-nouveau.conf",
        "persistenced": "systemctl is-active --quiet nvidia-persistenced && systemctl is-enabled --quiet "
        "nvidia-persistenced",
        "nccl": "dpkg -s libnccl2 libnccl-dev >/dev/null",
        "profile": "bash -lc 'command -v nvcc' | grep -qx /usr/local/cuda-13.0/bin/nvcc",
        "unit_env": "grep -qx 'CUDA_HOME=/usr/local/cuda-13.0' /etc/fairbench/cuda.env && "
        "grep -qx 'HF_HOME=/var/cache/fairbench-serving/huggingface' /etc/fairbench/sglang.env",
        "sglang": "/opt/sglang/venv/bin/python -m sglang.launch_server --help | grep -q model-path",
        "token": "stat -c '%U %a' /var/cache/fairbench-serving/huggingface/token | grep -qx 'fairbench 600'",
    }
    failed = {name: command for name, command in checks.items() if _on_host(hosts[1], command).returncode}
    assert failed == {}


def test_token_is_not_logged(first_run: PlaybookRun) -> None:
    assert "hf_stub_token_for_the_lab" not in first_run.output


def test_second_run_changes_nothing(hosts: list[str], first_run: PlaybookRun, extra_vars: Path) -> None:
    assert first_run.returncode == 0
    second = _provision(hosts[1], extra_vars)
    assert second.returncode == 0, second.output[-4000:]
    recap = second.recap(hosts[1])
    changed = re.findall(r"^changed: \[.*$|^TASK \[.*$", second.output, re.MULTILINE)
    assert recap["changed"] == 0, "\n".join(changed)
    assert GPU_SKIP.format(host=hosts[1]) in _flat(second.output)
