"""An inventory's groups and hosts as Ansible reads them, for the plan (``fairbench validate --plan``,
``fairbench run``): ``ansible-inventory --list`` with the run's ``-i`` and ``--limit``, so every inventory
source Ansible takes (YAML, INI, a directory, a script, a plugin) counts the same, group_vars included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairbench.fleet.plan import PLAY_POOL

ANSIBLE_INVENTORY = "ansible-inventory"
PLACEMENT_VAR = "bench_placement"
"""The bench role's variable that overrides the campaign's placement (roles/bench/defaults/main.yml)."""
TIMEOUT_S = 120.0


class InventoryError(Exception):
    """The inventory could not be read; the message says why in one line."""


@dataclass(frozen=True)
class InventoryHosts:
    groups: dict[str, list[str]]
    """Each group's hosts, its children's included."""
    play_hosts: list[str]
    """The hosts a campaign runs on: ``gpu_hosts`` (``fleet.plan.PLAY_POOL``), within the limit."""
    placement: str | None
    """The ``bench_placement`` the play hosts set, where they all set the same; else None."""


def read_inventory(sources: Sequence[str], limit: str | None = None) -> InventoryHosts:
    """The groups and hosts of the inventory ``sources`` (``-i`` arguments), within ``limit`` (Ansible's
    pattern); InventoryError when Ansible cannot read them."""
    command = [_executable(), *(arg for source in sources for arg in ("-i", source)), "--list"]
    if limit:
        command += ["--limit", limit]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
            # A source Ansible cannot parse is an error here, not a warning and an empty inventory.
            env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InventoryError(f"{ANSIBLE_INVENTORY} could not run: {exc}") from None
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()]
        # Ansible's first warning names the source it could not parse; its error only says none was.
        found = [line for line in said if line.startswith(("[WARNING]: Unable", "[ERROR]"))]
        why = (found or said or [f"exit status {done.returncode}"])[0].split("]: ", 1)[-1]
        raise InventoryError(f"{ANSIBLE_INVENTORY} could not read {', '.join(sources)}: {why}")
    try:
        listed = json.loads(done.stdout)
    except ValueError:
        raise InventoryError(f"{ANSIBLE_INVENTORY} printed no JSON for {', '.join(sources)}") from None
    return inventory_hosts(listed)


def inventory_hosts(listed: Mapping[str, Any]) -> InventoryHosts:
    """``ansible-inventory --list``'s JSON as groups (each with its children's hosts) and play hosts."""
    groups = {name: _members(listed, name, set()) for name in listed if name != "_meta"}
    play_hosts = groups.get(PLAY_POOL, [])
    hostvars: Mapping[str, Any] = (listed.get("_meta") or {}).get("hostvars") or {}
    chosen = {str(hostvars.get(host, {}).get(PLACEMENT_VAR)) for host in play_hosts}
    placement = chosen.pop() if len(chosen) == 1 else None
    return InventoryHosts(groups, play_hosts, None if placement in (None, "None") else placement)


def _members(listed: Mapping[str, Any], group: str, seen: set[str]) -> list[str]:
    if group in seen:
        return []
    seen.add(group)
    entry = listed.get(group) or {}
    hosts = [str(host) for host in entry.get("hosts", [])]
    for child in entry.get("children", []):
        hosts += _members(listed, str(child), seen)
    return list(dict.fromkeys(hosts))


def _executable() -> str:
    """ansible-inventory beside this Python (fairbench's venv), else on PATH."""
    beside = Path(sys.executable).parent / ANSIBLE_INVENTORY
    if beside.exists():
        return str(beside)
    found = shutil.which(ANSIBLE_INVENTORY)
    if found is None:
        raise InventoryError(f"{ANSIBLE_INVENTORY} is not installed: pip install 'fairbench[control]'")
    return found
