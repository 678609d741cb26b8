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
extends_documentation_fragment:
  - fairbench.fairbench.sweep
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

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport
from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_sweep_options import (
    SWEEP_ARGUMENT_SPEC,
)

with FairbenchImport.on_gpu_host() as FAIRBENCH_IMPORT:
    from fairbench.campaign.findings import CampaignError
    from fairbench.hosts.ansible_support import spec_from_arguments, sweep
    from fairbench.measure.client import ServerUnreachable
    from fairbench.measure.energy import GpuSelectionError
    from fairbench.measure.results import ResultsError
    from fairbench.measure.vocabulary import VocabularyError
    from fairbench.measure.workload import WorkloadError


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(argument_spec=SWEEP_ARGUMENT_SPEC)
    params = module.params
    try:
        spec = spec_from_arguments(params)
    except CampaignError as exc:
        module.fail_json(msg="\n".join(exc.messages), errors=exc.messages)
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
    result["diff"] = outcome.points_diff(params["out"], check=module.check_mode)
    if outcome.problems:
        module.fail_json(
            msg="points with failed requests: " + "; ".join(outcome.problems), changed=changed, **result
        )
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
