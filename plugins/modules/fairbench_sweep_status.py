#!/usr/bin/python
"""Ansible module fairbench_sweep_status: follow a fairbench_sweep started in the background."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_sweep_status
short_description: Follow a fairbench_sweep task started with async and poll 0
description:
  - Like M(ansible.builtin.async_status), plus the sweep's progress while it runs (the point in flight,
    requests done, output tokens/s, and the lines of the points finished), so that a retry loop on it
    shows a long sweep advancing (C(fairbench run) displays it live).
  - Once the sweep ends, returns the sweep's own result (and fails as the sweep failed), then removes its
    job file.
  - Runs on the GPU host with fairbench's venv as its Python (C(ansible_python_interpreter)).
options:
  jid:
    description: The job id (C(ansible_job_id)) of the fairbench_sweep task.
    type: str
    required: true
  out:
    description: The sweep's results directory (the fairbench_sweep task's C(out)).
    type: path
    required: true
  async_dir:
    description: Where Ansible keeps async job files on the host (the shell plugin's C(async_dir)).
    type: path
    default: ~/.ansible_async
  wait_s:
    description:
      - While the job runs, wait up to this many seconds for it to end, returning as soon as it does; 0
        looks once. Retry with C(delay) 0.
    type: float
    default: 0
"""

EXAMPLES = r"""
- name: Sweep in the background
  fairbench.fairbench.fairbench_sweep:
    url: http://127.0.0.1:30000
    workload: "{{ fairbench_campaign.workload }}"
    out: /var/lib/fairbench/results/demo/run1/tp8
  async: 86400
  poll: 0
  register: sweep_job

- name: Follow the sweep
  fairbench.fairbench.fairbench_sweep_status:
    jid: "{{ sweep_job.ansible_job_id }}"
    out: /var/lib/fairbench/results/demo/run1/tp8
  register: sweep_status
  until: sweep_status.finished
  retries: 17280
  delay: 5
"""

RETURN = r"""
finished:
  description: Whether the sweep has ended.
  type: bool
progress:
  description: While it runs, the sweep's progress (fairbench.measure.progress.Progress.state).
  type: dict
out:
  description: The results directory followed.
  type: str
"""

from pathlib import Path

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_gpu_host() as FAIRBENCH_IMPORT:
    from fairbench.hosts.ansible_support import background_sweep


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(
        argument_spec={
            "jid": {"type": "str", "required": True},
            "out": {"type": "path", "required": True},
            "async_dir": {"type": "path", "default": "~/.ansible_async"},
            "wait_s": {"type": "float", "default": 0.0},
        },
    )
    params = module.params
    status = background_sweep(
        Path(params["async_dir"]), params["jid"], Path(params["out"]), wait_s=params["wait_s"]
    )
    status["out"] = params["out"]
    # The job's own bookkeeping keys are not this task's result.
    for key in ("invocation", "started", "ansible_job_id", "results_file"):
        status.pop(key, None)
    changed = bool(status.pop("changed", False))
    if status.pop("failed", False):
        module.fail_json(msg=status.pop("msg", "the sweep failed"), changed=changed, **status)
    module.exit_json(changed=changed, **status)


if __name__ == "__main__":
    main()
