#!/usr/bin/python
"""Ansible module fairbench_sweep: run a campaign's workload against one server on a GPU host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_sweep
short_description: Run a fairbench concurrency sweep against one server
description:
  - Runs on the GPU host with fairbench's venv as its Python (C(ansible_python_interpreter)).
  - Measures every point of the workload that C(out) does not hold yet (resume semantics), writing
    points.jsonl, requests/ and sweep.json there as they complete.
  - One sweep writes to a directory at a time, whoever started it (this module or C(fairbench sweep)); a
    second one fails at once, naming the directory.
  - Stops, failing, once every request of a point failed to connect (the server is gone); the points
    written until then stay.
  - C(changed) only when new points were written. In check mode it returns the plan and runs nothing.
  - Fails when any point of C(out) has failed requests, so a crashed server is never reported as done.
options:
  url:
    description: The server's base URL.
    type: str
    required: true
  workload:
    description: The campaign's workload, as fairbench_campaign returns it.
    type: dict
    required: true
  out:
    description: The results directory of this config.
    type: path
    required: true
  model:
    description: Model name for the OpenAI APIs (default the server's, from /v1/models).
    type: str
  gpus:
    description: GPUs behind the server, for per-GPU throughput.
    type: int
  energy_gpus:
    description:
      - The GPUs whose energy counts in each point, by NVML index (as nvidia-smi numbers them); a list, or
        a comma-separated string such as a config's C(CUDA_VISIBLE_DEVICES). CUDA numbers GPUs the same
        way when they are all of one model, or with C(CUDA_DEVICE_ORDER=PCI_BUS_ID).
      - Default every GPU the host's NVML sees. Without NVML (no nvidia-ml-py, no driver, no GPU) points
        carry no energy fields; an index NVML does not see fails the task.
    type: list
    elements: int
  identity:
    description:
      - What each point line names as its sweep, beside its figures (C(fairbench sweep)'s C(--campaign),
        C(--run-id), C(--host), C(--config)), so that lines of several runs concatenated still say where
        each came from.
      - A field left out is taken from the points already in C(out), the host else the machine's name. A
        field given another value than those points' fails the task, naming it; nothing is measured.
    type: dict
    suboptions:
      campaign:
        description: The campaign's name.
        type: str
      run_id:
        description: The campaign run's id.
        type: str
      host:
        description: The host measured, as the inventory names it (C(inventory_hostname)).
        type: str
      config:
        description: The serving config's name.
        type: str
  remeasure_failed:
    description:
      - Measure again the points of C(out) that completed no request (C(fairbench sweep --resume
        --remeasure-failed)). The new point supersedes the failed one, whose line stays in points.jsonl
        and whose request records are kept beside the new ones.
      - Without it, such a point counts as measured and fails the task again.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Sweep
  fairbench.fairbench.fairbench_sweep:
    url: http://127.0.0.1:30000
    workload: "{{ fairbench_campaign.workload }}"
    out: /var/lib/fairbench/results/demo/run1/tp8
  vars:
    ansible_python_interpreter: /opt/fairbench/venv/bin/python
"""

RETURN = r"""
planned:
  description: Point ids missing when the task began (measured, or in check mode to be measured).
  type: list
written:
  description: Point ids written by this task.
  type: list
levels:
  description: Every point of the directory, with its throughput and latency medians.
  type: list
problems:
  description: Points with failed requests.
  type: list
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import (
    ON_GPU_HOST,
    FairbenchImport,
)

with FairbenchImport(ON_GPU_HOST) as FAIRBENCH_IMPORT:
    from fairbench.campaign.model import CampaignError, Workload
    from fairbench.hosts.ansible_support import sweep, sweep_spec
    from fairbench.measure.client import ServerUnreachable
    from fairbench.measure.energy import GpuSelectionError
    from fairbench.measure.results import ResultsError, RunIdentity
    from fairbench.measure.vocabulary import VocabularyError
    from fairbench.measure.workload import WorkloadError


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "workload": {"type": "dict", "required": True},
            "out": {"type": "path", "required": True},
            "model": {"type": "str"},
            "gpus": {"type": "int"},
            "energy_gpus": {"type": "list", "elements": "int"},
            "remeasure_failed": {"type": "bool", "default": False},
            "identity": {
                "type": "dict",
                "options": {name: {"type": "str"} for name in ("campaign", "run_id", "host", "config")},
            },
        },
        supports_check_mode=True,
    )
    FAIRBENCH_IMPORT.check(module)
    params = module.params
    try:
        workload = Workload.from_json(params["workload"], "workload argument")
    except CampaignError as exc:
        module.fail_json(msg="\n".join(exc.messages), errors=exc.messages)
    spec = sweep_spec(
        workload,
        params["url"],
        model=params["model"],
        gpus=params["gpus"],
        energy_gpus=params["energy_gpus"],
        identity=RunIdentity(**(params["identity"] or {})),
    )
    try:
        outcome = sweep(
            spec, Path(params["out"]), check=module.check_mode, remeasure_failed=params["remeasure_failed"]
        )
    except (ResultsError, ServerUnreachable, VocabularyError, WorkloadError) as exc:
        module.fail_json(msg=str(exc))
    except GpuSelectionError as exc:
        module.fail_json(msg=f"energy_gpus: {exc}")
    result = outcome.to_json()
    changed = bool(outcome.planned if module.check_mode else outcome.written)
    # --diff shows the points as lines of points.jsonl: those there before, and those measured (or planned),
    # appended after them (a point measured again has both lines).
    before = outcome.existing
    after = before + (outcome.planned if module.check_mode else outcome.written)
    result["diff"] = {
        "before": "".join(f"{point}\n" for point in before),
        "after": "".join(f"{point}\n" for point in after),
        "before_header": f"{params['out']}/points.jsonl",
        "after_header": f"{params['out']}/points.jsonl",
    }
    if outcome.problems:
        module.fail_json(
            msg="points with failed requests: " + "; ".join(outcome.problems), changed=changed, **result
        )
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
