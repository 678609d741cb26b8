#!/usr/bin/python
"""Ansible module fairbench_fleet_job: take the next job of a campaign run's queue, or say how one ended."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_fleet_job
short_description: Claim the next job of a fairbench run's work queue for a host
description:
  - Runs on the control node (C(delegate_to) localhost) with a Python that imports fairbench; the queue is
    the run's fleet.json (fairbench.fleet.queue), which fairbench_fleet wrote.
  - Records how the host's previous job ended (C(finished)), then answers C(run) (with the next job, its
    hosts rank 0 first), C(wait) (a server over several hosts is being gathered, the host is one of its
    ranks, or a host it shares a machine with runs a job; claim again later) or C(done) (nothing is left
    for the host). Retry it with C(until) while it answers C(wait); a finish given again is recorded once.
  - In check mode the queue is not touched: a claim answers the C(index)th job of C(predicted), then done.
options:
  run_dir:
    description: The run's directory on the control node.
    type: path
    required: true
  host:
    description: The host claiming (C(inventory_hostname)).
    type: str
    required: true
  finished:
    description: How the job the host ran before ended.
    type: dict
    suboptions:
      job:
        description: The job's id.
        type: str
        required: true
      ok:
        description: Whether it ended well.
        type: bool
        required: true
      reason:
        description: Why it failed.
        type: str
      points:
        description:
          - The points of the job's config directory on its host, as the job's follow returned them
            (C(sweep.levels)). Under spread with automatic repeats, the throughputs of the job's own repeat
            decide whether its config gets another.
        type: list
        elements: dict
        default: []
  wait_s:
    description:
      - While the answer would be C(wait), claim again every 0.2 s for up to this many seconds, answering as
        soon as it is not; a long wait then costs one task per C(wait_s).
    type: float
    default: 0
  leaving:
    description:
      - The host takes no job (its deploy failed after the jobs were placed); answers C(done), and leaves
        unplaced the jobs that cannot get their hosts without it, so that no other host waits for it.
    type: bool
    default: false
  predicted:
    description: In check mode, the jobs the host would take (fairbench_fleet's C(predicted)).
    type: list
    elements: dict
    default: []
  index:
    description: In check mode, how many jobs the host has taken before.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Take the next job
  fairbench.fairbench.fairbench_fleet_job:
    run_dir: results/demo/run1
    host: "{{ inventory_hostname }}"
    finished: {job: "tp8#r0", ok: true}
    wait_s: 30
  delegate_to: localhost
  register: claim
  until: claim.answer != 'wait'
  retries: 2800
  delay: 1
"""

RETURN = r"""
answer:
  description: run, wait or done.
  type: str
job:
  description: The job to run, with its hosts (rank 0 first); null unless the answer is run.
  type: dict
why:
  description: Why to wait.
  type: str
"""

from pathlib import Path

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_control_node() as FAIRBENCH_IMPORT:
    from fairbench.fleet.queue import DONE, RUN, Claim, Finished, Queue


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "host": {"type": "str", "required": True},
            "finished": {
                "type": "dict",
                "options": {
                    "job": {"type": "str", "required": True},
                    "ok": {"type": "bool", "required": True},
                    "reason": {"type": "str"},
                    "points": {"type": "list", "elements": "dict", "default": []},
                },
            },
            "wait_s": {"type": "float", "default": 0},
            "leaving": {"type": "bool", "default": False},
            "predicted": {"type": "list", "elements": "dict", "default": []},
            "index": {"type": "int", "default": 0},
        },
    )
    params = module.params
    if module.check_mode:
        predicted = params["predicted"]
        index = params["index"]
        claim = Claim(RUN, job=predicted[index]) if index < len(predicted) else Claim(DONE)
        module.exit_json(changed=False, **claim.to_json())
    given = params["finished"]
    finished = Finished(**{**given, "points": tuple(given["points"])}) if given else None
    try:
        claim = Queue(Path(params["run_dir"])).claim(
            params["host"], finished, leaving=params["leaving"], wait_s=params["wait_s"]
        )
    except (OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=claim.changed, **claim.to_json())


if __name__ == "__main__":
    main()
