"""The lab hosts of tests/lab/lab.sh, as the lab tests find them."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LAB_INVENTORY = Path(os.environ.get("FAIRBENCH_LAB_INVENTORY", REPO / "inventory" / "lab.yml"))
"""What ``tests/lab/lab.sh up`` wrote: every host of the lab."""
HOSTS = [name for name in os.environ.get("FAIRBENCH_LAB_HOSTS", "").split(",") if name]
"""``FAIRBENCH_LAB_HOSTS``, comma-separated: the lab's hosts these tests use (CI runs the real-SGLang lab
test on lab1 beside the others on lab2 and lab3); unset, every host."""


def _inventory() -> Path:
    """The inventory the lab tests use: the lab's, or a copy of it holding only ``HOSTS``, written into
    build/ (the lab's model, which an inventory finds beside it, is there)."""
    if not HOSTS or not LAB_INVENTORY.is_file():
        return LAB_INVENTORY
    data = yaml.safe_load(LAB_INVENTORY.read_text())
    group = data["all"]["children"]["gpu_hosts"]
    every = group.get("hosts") or {}
    missing = [name for name in HOSTS if name not in every]
    if missing:
        raise RuntimeError(f"FAIRBENCH_LAB_HOSTS names {', '.join(missing)}, which {LAB_INVENTORY} lacks")
    group["hosts"] = {name: every[name] for name in HOSTS}
    path = REPO / "build" / f"lab-{'-'.join(HOSTS)}.yml"
    path.parent.mkdir(exist_ok=True)
    note = f"# Written by tests/support/lab_hosts.py: {LAB_INVENTORY.name} with {', '.join(HOSTS)} only.\n"
    path.write_text(note + yaml.safe_dump(data, sort_keys=False))
    return path


INVENTORY = _inventory()
"""The inventory the lab tests play against."""


def answering_lab_hosts() -> list[str]:
    """The gpu_hosts of the lab inventory whose sshd answers; skips the caller's tests unless two do."""
    if not INVENTORY.is_file():
        pytest.skip(f"lab not up: no {INVENTORY} (run tests/lab/lab.sh up 2)")
    hosts = yaml.safe_load(INVENTORY.read_text())["all"]["children"]["gpu_hosts"].get("hosts") or {}
    up = []
    for name, hostvars in hosts.items():
        try:
            with socket.create_connection(("127.0.0.1", int(hostvars["ansible_port"])), timeout=1):
                up.append(name)
        except OSError:
            pass
    if len(up) < 2:
        pytest.skip(f"lab not up: {len(up)} of the hosts in {INVENTORY} answer (run tests/lab/lab.sh up 2)")
    return up


def tool(name: str) -> str:
    """An executable of the venv running the tests (ansible, ansible-playbook, fairbench), else the PATH's;
    skips the caller where there is neither (CI makes that a failure)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not installed (make venv)")
    return found


def ansible_env() -> dict[str, str]:
    """The environment Ansible runs in for the lab tests: the repository's ansible.cfg, plain output."""
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
