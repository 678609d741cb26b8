#!/usr/bin/python
"""Ansible module gpu_facts: a host's GPUs, driver, CUDA version and GPU links, from nvidia-smi."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

try:
    from fairbench.hosts.gpu import GpuFactsError, collect
except ImportError as exc:
    FAIRBENCH_IMPORT_ERROR = (
        f"fairbench is not importable: use fairbench's venv Python (ansible_python_interpreter): {exc}"
    )
else:
    FAIRBENCH_IMPORT_ERROR = ""

DOCUMENTATION = r"""
module: gpu_facts
short_description: Gather a host's NVIDIA GPU facts from nvidia-smi
description:
  - Runs on the GPU host with fairbench's venv as its Python (C(ansible_python_interpreter)).
  - Runs C(nvidia-smi) (its header: driver and CUDA versions), C(nvidia-smi --query-gpu=... --format=csv)
    (each GPU) and C(nvidia-smi topo -m) (the link between each GPU pair, CPU and NUMA affinity), and
    returns them as the fact C(gpu_facts) (fairbench.hosts.gpu.GpuFacts.to_json).
  - A host without nvidia-smi is no failure; its facts list no GPUs and say why (C(reason)).
  - Fails, naming the command and the line, when nvidia-smi fails or prints what the parsers do not know.
  - Only reads (never changed); runs in check mode too.
options:
  nvidia_smi:
    description: The nvidia-smi to run, a name looked up on PATH or a path.
    type: path
    default: nvidia-smi
"""

EXAMPLES = r"""
- name: Gather the GPU facts
  gpu_facts:
  vars:
    ansible_python_interpreter: /opt/fairbench/venv/bin/python

- name: Show how many GPUs
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu_facts'].gpus | length }} GPUs, {{ ansible_facts['gpu_facts'].interconnect }}"
"""

RETURN = r"""
ansible_facts:
  description:
    - C(gpu_facts) with C(gpus) (index, name, uuid, pci_bus_id, memory_total_mib, power_limit_w,
      max_sm_clock_mhz, compute_capability, cpu_affinity, numa_affinity of each), C(driver_version),
      C(cuda_version), C(links) (C("0-1": "NV18"), one per GPU pair), C(interconnect) (nvlink, pcie,
      mixed or none), C(reason) (why there are no GPUs; null otherwise) and C(sources) (the commands).
  returned: success
  type: dict
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={"nvidia_smi": {"type": "path", "default": "nvidia-smi"}},
        supports_check_mode=True,
    )
    if FAIRBENCH_IMPORT_ERROR:
        module.fail_json(msg=FAIRBENCH_IMPORT_ERROR)
    try:
        facts = collect(module.params["nvidia_smi"])
    except GpuFactsError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"gpu_facts": facts.to_json()})


if __name__ == "__main__":
    main()
