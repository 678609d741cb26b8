#!/usr/bin/python
"""Ansible module fairbench_clean_state: wait until a GPU host is clean for a config's server, or record the
GPUs' idle memory that later checks compare against."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_clean_state
short_description: Wait until a GPU host runs nothing a config's server could be measured beside
description:
  - Runs on the GPU host with fairbench's venv as its Python (C(ansible_python_interpreter)), as root (it
    reads every process's sockets and stops units).
  - A host is clean when no fairbench server unit is active, activating or deactivating, nothing listens on
    C(port), the serving user runs no process, nvidia-smi lists no GPU compute process, and no GPU's
    memory.used is above its C(baseline) plus C(tolerance_mib) (fairbench.hosts.clean_state).
  - With C(stop_units), first stops every fairbench server unit found running (servers left from an earlier
    config), then checks every 0.2 s until the host is clean or C(timeout_s) passed. An already clean host
    costs one check.
  - Fails, listing every finding one per line, when the host is not clean at the deadline.
  - With C(record_baseline), only returns each GPU's memory.used (the idle baseline); fails when a
    fairbench server or any GPU compute process runs, since its memory would then count as idle.
  - In check mode, checks once, stops nothing and waits for nothing; the units it would stop are in
    C(stopped), and what they account for (their processes, their port, any GPU memory) is in C(excused)
    instead of failing the task.
options:
  port:
    description: The TCP port the config's server listens on; required unless C(record_baseline).
    type: int
  user:
    description: The user the servers run as (the serving role's C(serving_user)); required unless
      C(record_baseline).
    type: str
  unit_pattern:
    description: The systemctl pattern of fairbench's server units
      (fairbench.hosts.clean_state.SERVER_UNIT_GLOB).
    type: str
    default: fairbench-*.service
  baseline:
    description:
      - Each GPU's idle memory.used in MiB, by GPU index as a string (what C(record_baseline) returns).
      - Null compares no GPU memory; a GPU it does not name is not compared.
    type: dict
  tolerance_mib:
    description: MiB a GPU may use above its baseline (fairbench.hosts.clean_state.DEFAULT_TOLERANCE_MIB
      says why this much).
    type: int
    default: 1024
  timeout_s:
    description: Seconds the host may take to become clean.
    type: float
    default: 60
  stop_units:
    description: Stop the fairbench server units found running before waiting.
    type: bool
    default: true
  mode:
    description: When the check runs, for the failure message only; before a config's server starts
      ("not clean before starting") or after it was stopped ("did not become clean after stopping").
    type: str
    choices: [before, after]
    default: before
  record_baseline:
    description: Only return C(baseline), each GPU's memory.used now; checks and stops nothing else.
    type: bool
    default: false
  nvidia_smi:
    description: The nvidia-smi to run, a name looked up on PATH or a path; none found means no GPUs.
    type: path
    default: nvidia-smi
"""

EXAMPLES = r"""
- name: Record the GPUs' idle memory
  fairbench.fairbench.fairbench_clean_state:
    record_baseline: true
  register: idle

- name: Wait until the host is clean before the next config's server starts
  fairbench.fairbench.fairbench_clean_state:
    port: 30000
    user: fairbench
    baseline: "{{ idle.baseline }}"
    timeout_s: 120
    mode: before
"""

RETURN = r"""
clean:
  description: Whether the host was clean at the end (in check mode, once the units in C(stopped) were).
  returned: unless record_baseline
  type: bool
found:
  description: One sentence per finding that is not clean, e.g. C(port 30001 on 127.0.0.1 is held by pid
    4242 (python3 -m http.server 30001), unit none).
  returned: unless record_baseline
  type: list
  elements: str
stopped:
  description: The fairbench units it stopped; in check mode, those it would stop.
  returned: unless record_baseline
  type: list
  elements: str
excused:
  description: In check mode, the findings of the units it would stop; empty otherwise.
  returned: unless record_baseline
  type: list
  elements: str
details:
  description: What the last check read, with C(units), C(listeners), C(processes), C(gpus) (each with its
    baseline and limit; null without nvidia-smi), C(gpu_processes) and the check's arguments.
  returned: unless record_baseline
  type: dict
waited_s:
  description: Seconds from the first check to the last.
  returned: unless record_baseline
  type: float
baseline:
  description: Each GPU's memory.used in MiB by index (as a string); null on a host without nvidia-smi.
  returned: record_baseline
  type: dict
"""

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_gpu_host() as FAIRBENCH_IMPORT:
    from fairbench.hosts.clean_state import (
        SERVER_UNIT_GLOB,
        CleanStateError,
        baseline_to_json,
        failure_message,
        idle_baseline,
        wait_clean,
    )
    from fairbench.hosts.gpu import GpuFactsError


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(
        argument_spec={
            "port": {"type": "int"},
            "user": {"type": "str"},
            # The defaults DOCUMENTATION states, and mode's choices, are fairbench's own constants
            # (tests/unit/test_clean_state.py checks that they agree); these two are applied below, once the
            # import guard has let fairbench in.
            "unit_pattern": {"type": "str"},
            "baseline": {"type": "dict"},
            "tolerance_mib": {"type": "int"},
            "timeout_s": {"type": "float", "default": 60.0},
            "stop_units": {"type": "bool", "default": True},
            "mode": {"type": "str", "choices": ["before", "after"], "default": "before"},
            "record_baseline": {"type": "bool", "default": False},
            "nvidia_smi": {"type": "path", "default": "nvidia-smi"},
        },
        required_if=[("record_baseline", False, ("port", "user"))],
    )
    params = module.params
    unit_pattern = params["unit_pattern"] or SERVER_UNIT_GLOB
    try:
        if params["record_baseline"]:
            baseline = idle_baseline(unit_pattern=unit_pattern, nvidia_smi=params["nvidia_smi"])
            module.exit_json(changed=False, baseline=baseline_to_json(baseline))
        state = wait_clean(
            port=params["port"],
            user=params["user"],
            unit_pattern=unit_pattern,
            baseline=params["baseline"],
            tolerance_mib=params["tolerance_mib"],
            timeout_s=params["timeout_s"],
            stop_units=params["stop_units"],
            dry_run=module.check_mode,
            nvidia_smi=params["nvidia_smi"],
        )
    except (CleanStateError, GpuFactsError) as exc:
        module.fail_json(msg=str(exc))
    result = {"changed": bool(state.stopped), **state.to_json()}
    if not state.clean:
        module.fail_json(msg=failure_message(state, params["mode"], params["timeout_s"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
