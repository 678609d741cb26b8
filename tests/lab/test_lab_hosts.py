"""The lab hosts are real systemd hosts that Ansible reaches over SSH (tests/lab/lab.sh up).

Every test here talks to the hosts in inventory/lab.yml through real SSH, `ansible` and `ansible-playbook`.
They skip when the lab is not up. Before anything that starts or stops units, the hosts are checked to carry
the lab marker /etc/fairbench-lab, so a wrong inventory can never point these tests at a real machine.
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from tests.support.lab_hosts import INVENTORY, REPO, ansible_env, tool

pytestmark = pytest.mark.lab

GROUP = "gpu_hosts"
TIMEOUT = 300  # seconds for one ansible run; the hosts answer in about one


@dataclass(frozen=True)
class LabHost:
    name: str
    ssh_port: int
    serving_port: int


@dataclass(frozen=True)
class Lab:
    hosts: list[LabHost]
    key: Path
    known_hosts: Path

    def ssh(self, host: LabHost, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs a shell command on a host as root over plain SSH (not Ansible)."""
        argv = [
            "ssh", "-F", "/dev/null", "-i", str(self.key), "-p", str(host.ssh_port),
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5",
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "root@127.0.0.1", command,
        ]  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        if check and result.returncode != 0:
            pytest.fail(f"{host.name}: `{command}` exited {result.returncode}: {result.stderr.strip()}")
        return result


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _ssh_common_arg(args: str, option: str) -> str | None:
    match = re.search(rf"-o\s*{option}=(\S+)", args)
    return match.group(1) if match else None


@pytest.fixture(scope="module")
def lab() -> Lab:
    """The running lab, or a skip that says why it cannot be used."""
    if not INVENTORY.exists():
        pytest.skip(f"lab not up: {INVENTORY} missing (run tests/lab/lab.sh up)")
    tool("ansible"), tool("ansible-playbook")
    group = (yaml.safe_load(INVENTORY.read_text()) or {}).get("all", {}).get("children", {}).get(GROUP) or {}
    group_vars = group.get("vars", {})
    hosts = [
        LabHost(name, int(hostvars["ansible_port"]), int(hostvars["serving_port"]))
        for name, hostvars in (group.get("hosts") or {}).items()
    ]
    if not hosts:
        pytest.skip(f"lab not up: no hosts in group {GROUP} of {INVENTORY}")
    key = Path(group_vars.get("ansible_ssh_private_key_file", ""))
    known_hosts = _ssh_common_arg(group_vars.get("ansible_ssh_common_args", ""), "UserKnownHostsFile")
    if not key.is_file() or known_hosts is None or not Path(known_hosts).is_file():
        pytest.skip(f"lab not up: no lab SSH key at {key} (run tests/lab/lab.sh up)")
    if not os.access(key, os.R_OK):
        pytest.skip(f"lab SSH key {key} is not readable by this user (the lab runs as root)")
    down = [h.name for h in hosts if not _port_open(h.ssh_port)]
    if down:
        pytest.skip(f"lab not up: no SSH on {', '.join(down)} (run tests/lab/lab.sh up)")
    running = Lab(hosts, key, Path(known_hosts))
    for host in hosts:
        marker = running.ssh(host, "cat /etc/fairbench-lab", check=False)
        if f"host={host.name}\n" not in marker.stdout:
            pytest.fail(f"{host.name} (127.0.0.1:{host.ssh_port}) has no lab marker: refusing to test it")
    return running


@pytest.fixture(scope="module")
def two_hosts(lab: Lab) -> tuple[LabHost, LabHost]:
    if len(lab.hosts) < 2:
        pytest.skip("needs a lab of at least two hosts (tests/lab/lab.sh up 2)")
    return lab.hosts[0], lab.hosts[1]


def ansible_adhoc(pattern: str, module: str, args: str, tree: Path) -> dict[str, dict[str, object]]:
    """Runs an ad-hoc module; returns each host's result (ansible's --tree writes one JSON file per host)."""
    ansible = tool("ansible")
    argv = [ansible, "-i", str(INVENTORY), pattern, "-m", module, "-a", args, "--tree", str(tree)]
    result = subprocess.run(
        argv, capture_output=True, text=True, env=ansible_env(), cwd=REPO, timeout=TIMEOUT, check=False
    )
    assert result.returncode == 0, f"ansible {module} failed:\n{result.stdout}\n{result.stderr}"
    return {path.name: json.loads(path.read_text()) for path in tree.iterdir()}


def ansible_playbook(playbook: str, tmp_path: Path, *extra: str) -> str:
    """Runs an inline playbook (YAML text) against the lab inventory; fails the test with its output."""
    path = tmp_path / "playbook.yml"
    path.write_text(textwrap.dedent(playbook))
    argv = [tool("ansible-playbook"), "-i", str(INVENTORY), str(path), *extra]
    result = subprocess.run(
        argv, capture_output=True, text=True, env=ansible_env(), cwd=REPO, timeout=TIMEOUT, check=False
    )
    assert result.returncode == 0, f"ansible-playbook failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_every_host_runs_systemd_as_pid1_and_finished_booting(lab: Lab, tmp_path: Path) -> None:
    facts = ansible_adhoc(GROUP, "ansible.builtin.setup", "gather_subset=!all,!min,service_mgr", tmp_path)
    assert sorted(facts) == sorted(h.name for h in lab.hosts)
    for name, result in facts.items():
        assert result["ansible_facts"]["ansible_service_mgr"] == "systemd", name  # type: ignore[index]
    for host in lab.hosts:
        assert lab.ssh(host, "cat /proc/1/comm").stdout.strip() == "systemd"
        # is-system-running exits non-zero when degraded, which a lab host may be; the state is what counts.
        state = lab.ssh(host, "systemctl is-system-running --wait", check=False).stdout.strip()
        assert state in {"running", "degraded"}, f"{host.name}: systemd is {state!r}"


def test_hosts_have_their_own_identity(lab: Lab) -> None:
    machine_ids: dict[str, str] = {}
    host_keys: dict[str, str] = {}
    for host in lab.hosts:
        machine_id = lab.ssh(host, "cat /etc/machine-id").stdout.strip()
        assert re.fullmatch(r"[0-9a-f]{32}", machine_id), f"{host.name}: machine-id {machine_id!r}"
        machine_ids[host.name] = machine_id
        public = lab.ssh(host, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
        # The key sshd presents on this host's port is the one in its own /etc/ssh.
        scan = subprocess.run(
            ["ssh-keyscan", "-T", "5", "-t", "ed25519", "-p", str(host.ssh_port), "127.0.0.1"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert public in scan.stdout, f"{host.name}: sshd on port {host.ssh_port} presents another key"
        assert lab.ssh(host, "ls /etc/ssh/ssh_host_*_key").stdout.split() == ["/etc/ssh/ssh_host_ed25519_key"]
        host_keys[host.name] = public
    assert len(set(machine_ids.values())) == len(lab.hosts), f"machine-ids shared: {machine_ids}"
    assert len(set(host_keys.values())) == len(lab.hosts), f"SSH host keys shared: {host_keys}"
    control = Path("/etc/machine-id")
    if control.exists():
        assert control.read_text().strip() not in machine_ids.values(), "a host has this machine's machine-id"


@pytest.fixture
def cleanup_units(lab: Lab) -> Iterator[list[str]]:
    """Transient units a test starts; stopped on every host afterwards, whatever the outcome."""
    units: list[str] = []
    yield units
    for host in lab.hosts:
        for unit in units:
            lab.ssh(host, f"systemctl stop {unit}; systemctl reset-failed {unit}; true", check=False)


def _cgroups_of_unit(unit: str) -> dict[Path, list[str]]:
    """Every cgroup directory of this machine named after a unit, with the processes in it."""
    found: dict[Path, list[str]] = {}
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        for path in hierarchy.rglob(unit):
            found[path] = (path / "cgroup.procs").read_text().split()
    return found


def test_stopping_a_unit_in_one_host_leaves_the_same_unit_in_another_running(
    lab: Lab, two_hosts: tuple[LabHost, LabHost], tmp_path: Path, cleanup_units: list[str]
) -> None:
    # The nspawn cgroup pitfall: without a cgroup of its own per host, both hosts' systemd put
    # fairbench-lab-pitfall.service at the same cgroup path: `systemctl stop` in one host can then kill the
    # other's process, and each host's accounting (tasks, memory) counts the other's processes.
    first, second = two_hosts
    unit = "fairbench-lab-pitfall.service"
    cleanup_units.append(unit)
    start = f"""
        - name: The same transient unit in both hosts
          hosts: {first.name},{second.name}
          gather_facts: false
          tasks:
            - name: Start it
              ansible.builtin.command: systemd-run --unit={unit} --service-type=exec sleep infinity
              changed_when: true
        """
    ansible_playbook(start, tmp_path)
    # Seen from this machine (the lab runs here): one cgroup per host and hierarchy, one process in each.
    shared = {str(path): procs for path, procs in _cgroups_of_unit(unit).items() if len(procs) != 1}
    assert not shared, f"hosts share a cgroup: {shared}"
    stop_and_check = f"""
        - name: Stop it in {second.name} only
          hosts: {second.name}
          gather_facts: false
          tasks:
            - name: Stop
              ansible.builtin.command: systemctl stop {unit}
              changed_when: true
        - name: It still runs in {first.name}
          hosts: {first.name}
          gather_facts: false
          tasks:
            - name: Read its state and main process
              ansible.builtin.command: systemctl show {unit} --property=ActiveState --property=MainPID
              register: shown
              changed_when: false
            - name: Active, with its process alive
              ansible.builtin.assert:
                that:
                  - "'ActiveState=active' in shown.stdout_lines"
                  - "'MainPID=0' not in shown.stdout_lines"
                fail_msg: "{unit} in {first.name} died, stopped in {second.name}: {{{{ shown.stdout }}}}"
        """
    ansible_playbook(stop_and_check, tmp_path)
    main_pid = lab.ssh(first, f"systemctl show {unit} --property=MainPID --value").stdout.strip()
    assert lab.ssh(first, f"kill -0 {main_pid}", check=False).returncode == 0
    assert lab.ssh(second, f"systemctl is-active {unit}", check=False).stdout.strip() == "inactive"


def test_a_service_port_on_loopback_is_reachable_from_the_control_node(
    lab: Lab, tmp_path: Path, cleanup_units: list[str]
) -> None:
    unit = "fairbench-lab-port.service"
    cleanup_units.append(unit)
    # Each host serves its /etc on its own serving_port; the marker file says which host answered.
    ansible_playbook(
        f"""
        - name: A server on each host's serving_port
          hosts: {GROUP}
          gather_facts: false
          tasks:
            - name: Start it
              ansible.builtin.command: >-
                systemd-run --unit={unit} --service-type=exec
                /usr/bin/python3 -m http.server {{{{ serving_port }}}} --bind 127.0.0.1 --directory /etc
              changed_when: true
            - name: Wait until it listens
              ansible.builtin.wait_for:
                host: 127.0.0.1
                port: "{{{{ serving_port }}}}"
                timeout: 30
        """,
        tmp_path,
    )
    for host in lab.hosts:
        url = f"http://127.0.0.1:{host.serving_port}/fairbench-lab"
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    body = response.read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert f"host={host.name}\n" in body, f"port {host.serving_port} answered for another host: {body!r}"


def test_systemd_analyze_verify_checks_units_inside_a_host(lab: Lab) -> None:
    # The serving role's units are verified offline with systemd-analyze on a lab host. It exits 0 on an
    # unknown key and only says so on stderr, hence stderr counts as failure.
    host = lab.hosts[0]
    good = "[Unit]\nDescription=good\n[Service]\nType=exec\nExecStart=/bin/true\nLimitNOFILE=65536\n"
    bad = good + "NoSuchKey=1\n"
    for name, text in (("good", good), ("bad", bad)):
        lab.ssh(host, f"mkdir -p /tmp/verify && printf '%s' '{text}' > /tmp/verify/fairbench-{name}.service")
    ok = lab.ssh(host, "systemd-analyze verify /tmp/verify/fairbench-good.service", check=False)
    assert (ok.returncode, ok.stderr) == (0, ""), ok.stderr
    flagged = lab.ssh(host, "systemd-analyze verify /tmp/verify/fairbench-bad.service", check=False)
    assert "Unknown key 'NoSuchKey'" in flagged.stderr
    lab.ssh(host, "rm -rf /tmp/verify")


def test_a_hardened_unit_runs_with_its_own_limits(lab: Lab) -> None:
    # The serving units use systemd sandboxing and a high LimitNOFILE; both must work inside a lab host
    # (the sandboxing needs namespaces inside the container, the limit a high enough hard limit from nspawn).
    host = lab.hosts[0]
    result = lab.ssh(
        host,
        "systemd-run --wait --pipe --quiet -p DynamicUser=yes -p ProtectSystem=strict -p ProtectHome=yes"
        " -p PrivateTmp=yes -p PrivateDevices=yes -p NoNewPrivileges=yes -p ProtectKernelTunables=yes"
        " -p ProtectControlGroups=yes -p LimitNOFILE=65536 sh -c 'id -u; ulimit -n'",
    )
    uid, nofile = result.stdout.split()
    assert int(uid) != 0
    # No higher than the hard limit the lab was started with: a machine whose root lacks CAP_SYS_RESOURCE
    # (like some CI sandboxes) cannot give the hosts more than its own.
    assert int(nofile) == min(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[1])


def test_a_host_installs_from_the_package_index(lab: Lab) -> None:
    # The bench role installs fairbench's dependencies into a venv on each host, through this machine's
    # network: the hosts need its CA certificates and pip settings (or a TLS-inspecting proxy breaks pip).
    host = lab.hosts[0]
    result = lab.ssh(
        host,
        "set -e; d=$(mktemp -d); python3 -m venv $d/venv;"
        " $d/venv/bin/pip download --quiet --no-deps --dest $d/wheels PyYAML; ls $d/wheels; rm -rf $d",
    )
    assert "pyyaml" in result.stdout.lower()
