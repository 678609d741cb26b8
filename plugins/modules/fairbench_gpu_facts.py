#!/usr/bin/python
"""Ansible module fairbench_gpu_facts: a host's GPUs, driver, CUDA version and GPU links, from nvidia-smi."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_gpu_facts
short_description: Gather a host's NVIDIA GPU facts from nvidia-smi
description:
  - Runs on the GPU host with fairbench's venv as its Python (C(ansible_python_interpreter)).
  - Runs C(nvidia-smi) (its header, for the driver and CUDA versions),
    C(nvidia-smi --query-gpu=... --format=csv) (each GPU) and C(nvidia-smi topo -m) (the link between each
    GPU pair, CPU and NUMA affinity), and returns them as the fact C(gpu_facts)
    (fairbench.hosts.gpu.GpuFacts.to_json).
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
  fairbench.fairbench.fairbench_gpu_facts:
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
      C(cuda_version), C(links) (one per GPU pair, e.g. C("0-1") to C("NV18")), C(interconnect) (nvlink, pcie,
      mixed or none), C(reason) (why there are no GPUs; null otherwise) and C(sources) (the commands).
  returned: success
  type: dict
"""

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_gpu_host() as FAIRBENCH_IMPORT:
    from fairbench.hosts.gpu import GpuFactsError, collect


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(
        argument_spec={"nvidia_smi": {"type": "path", "default": "nvidia-smi"}}
    )
    try:
        facts = collect(module.params["nvidia_smi"])
    except GpuFactsError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"gpu_facts": facts.to_json()})


if __name__ == "__main__":
    main()
