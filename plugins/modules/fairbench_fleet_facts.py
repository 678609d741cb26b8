#!/usr/bin/python
"""Ansible module fairbench_fleet_facts: the facts a GPU host must share with the other hosts of its pool."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_fleet_facts
short_description: Gather the facts that must match between equivalent GPU hosts of a pool
description:
  - Runs on the GPU host with fairbench's venv as its Python (C(ansible_python_interpreter)).
  - Returns the fact C(fleet_facts) (fairbench.hosts.fleet_facts.collect), which the control node compares
    between the hosts of each pool before a campaign deploys any server; a difference stops the campaign
    unless it names the fact in C(accept_host_differences).
  - The facts are the GPUs' model and count, the driver and the newest CUDA it supports (nvidia-smi), the
    installed CUDA toolkit (C($CUDA_HOME) or C(/usr/local/cuda), C(version.json)), NCCL's and SGLang's
    versions in the SGLang venv (read from its package metadata by running C(sglang_python) once; SGLang
    itself is not imported), fairbench's version, the CPU model, the CPU count and the memory in whole GiB.
  - Beside them, C(machine) holds what tells which machine the host runs on (fairbench.hosts.machine), never
    compared for equivalence; the DMI system UUID and board (read as root), the instant the running kernel
    booted, and the GPUs' UUIDs. Hosts that share one are one machine (fairbench.fleet.sharing).
  - A fact that cannot be read is null, with why in C(reasons); that is no failure.
  - Only reads (never changed); runs in check mode too.
options:
  sglang_python:
    description:
      - The SGLang venv's Python (e.g. C(/opt/sglang/venv/bin/python)), for the NCCL and SGLang versions.
      - Left out, or a path that does not exist, the C(nccl) and C(sglang) facts are null.
    type: path
"""

EXAMPLES = r"""
- name: Gather the fleet facts
  fairbench.fairbench.fairbench_fleet_facts:
    sglang_python: "{{ fairbench_sglang_venv_dir }}/bin/python"
  vars:
    ansible_python_interpreter: /opt/fairbench/venv/bin/python

- name: Show the SGLang version
  ansible.builtin.debug:
    msg: "SGLang {{ ansible_facts['fleet_facts'].sglang }} with NCCL {{ ansible_facts['fleet_facts'].nccl }}"
"""

RETURN = r"""
ansible_facts:
  description:
    - C(fleet_facts) with C(gpu_model) (the distinct GPU names, sorted, joined by C(", ")), C(gpu_count),
      C(driver), C(cuda) (the newest CUDA the driver supports), C(cuda_toolkit), C(nccl), C(sglang),
      C(fairbench), C(cpu_model), C(cpus), C(memory_gib) (each a string or an integer, or null),
      C(reasons) (fact to why it is null, for each null fact) and C(machine) (C(product_uuid), C(board),
      C(kernel_boot) in epoch seconds, C(gpu_uuids), and its own C(reasons)).
  returned: success
  type: dict
"""

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_gpu_host() as FAIRBENCH_IMPORT:
    from fairbench.hosts.fleet_facts import collect


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(argument_spec={"sglang_python": {"type": "path"}})
    facts = collect(sglang_python=module.params["sglang_python"])
    module.exit_json(changed=False, ansible_facts={"fleet_facts": facts})


if __name__ == "__main__":
    main()
