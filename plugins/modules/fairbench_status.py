#!/usr/bin/python
"""Ansible module fairbench_status: write a config's status.json, how it ended in a campaign run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_status
short_description: Write status.json for one config of a fairbench campaign run
description:
  - Runs on the control node with a Python that imports fairbench (the venv running ansible-playbook).
  - Writes C(dir)/status.json (fairbench.measure.status), the one place a config's outcome is recorded;
    the report and C(fairbench run) read it.
  - For a failed config it quotes the lines of C(dir)/journal.log that say why (its last traceback where
    it has one).
  - Changed when the file's content changes; in check mode nothing is written.
options:
  dir:
    description: The config's directory of the run on the control node.
    type: path
    required: true
  host:
    description: The host the config ran on (inventory_hostname).
    type: str
    required: true
  config:
    description: The config's name.
    type: str
    required: true
  unit:
    description: The config's systemd unit.
    type: str
    required: true
  run_id:
    description: The run's id.
    type: str
    required: true
  failure:
    description: Where and why the config failed; absent or null when it did not.
    type: dict
    suboptions:
      stage:
        description: The stage that failed, one of fairbench.measure.status.STAGES (deploy, start, ...).
        type: str
        required: true
      reason:
        description: Why, in a sentence.
        type: str
        required: true
  journal_lines:
    description:
      - At most this many journal lines are quoted; absent, as many as the report quotes from a journal
        itself (fairbench.measure.status.JOURNAL_EXCERPT_LINES).
    type: int
  job:
    description:
      - The campaign job that ran in C(dir); its entry in status.json's C(jobs) joins those of the run's
        other jobs there (a job recorded again replaces its entry), and the config's status is failed when
        any of them failed. For a server over several hosts, each rank's journal is quoted from
        C(dir)/ranks/<host>/journal.log.
    type: dict
    suboptions:
      id:
        description: The job's id (fleet.json).
        type: str
        required: true
      repeats:
        description: The repeats it measured.
        type: list
        elements: int
        required: true
      hosts:
        description: Its hosts, rank 0 first.
        type: list
        elements: str
        required: true
      timeline:
        description: When its unit was started, answered healthy, got its first request, wrote its last point.
        type: dict
        default: {}
"""

EXAMPLES = r"""
- name: Save status.json
  fairbench.fairbench.fairbench_status:
    dir: results/demo/run1/gpu1/tp8
    host: gpu1
    config: tp8
    unit: fairbench-demo-tp8.service
    run_id: run1
    failure: {stage: health, reason: "the unit exited (status 1)"}
  delegate_to: localhost
"""

RETURN = r"""
status:
  description: The content of status.json.
  type: dict
  returned: always
"""

from pathlib import Path

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_control_node() as FAIRBENCH_IMPORT:
    from fairbench.measure.status import JOURNAL_EXCERPT_LINES, Failure, JobRan, record_status


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "host": {"type": "str", "required": True},
            "config": {"type": "str", "required": True},
            "unit": {"type": "str", "required": True},
            "run_id": {"type": "str", "required": True},
            "failure": {
                "type": "dict",
                "options": {
                    "stage": {"type": "str", "required": True},
                    "reason": {"type": "str", "required": True},
                },
            },
            "journal_lines": {"type": "int"},
            "job": {
                "type": "dict",
                "options": {
                    "id": {"type": "str", "required": True},
                    "repeats": {"type": "list", "elements": "int", "required": True},
                    "hosts": {"type": "list", "elements": "str", "required": True},
                    "timeline": {"type": "dict", "default": {}},
                },
            },
        },
    )
    params = module.params
    job = params["job"]
    ran = JobRan(job["id"], tuple(job["repeats"]), tuple(job["hosts"]), job["timeline"]) if job else None
    try:
        changed, status = record_status(
            Path(params["dir"]),
            host=params["host"],
            config=params["config"],
            unit=params["unit"],
            run_id=params["run_id"],
            failure=Failure.from_json(params["failure"]) if params["failure"] else None,
            job=ran,
            journal_lines=params["journal_lines"] or JOURNAL_EXCERPT_LINES,
            check=module.check_mode,
        )
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, status=status)


if __name__ == "__main__":
    main()
