#!/usr/bin/python
"""Ansible module fairbench_campaign: load, check and expand a campaign file on the control node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_campaign
short_description: Load, check and expand a fairbench campaign file
description:
  - Runs on the control node with a Python that imports fairbench (the venv running ansible-playbook).
  - Returns the expanded campaign (C(Campaign.to_json), fairbench.campaign) as the fact C(fairbench_campaign),
    the only place Ansible learns about configs.
  - A campaign that breaks a rule fails the task; every message names the file, the key path and the rule.
options:
  path:
    description: The campaign YAML file, as the user named it (messages and campaign.json keep that name).
    type: str
    required: true
  base_dir:
    description: The directory a relative C(path) is relative to (the user's, where ansible-playbook ran).
    type: path
    default: the module's working directory
  run_id:
    description:
      - The run's id, checked (letters, digits, C(_ . -), starting with a letter or digit); absent, a new run
        named by the start time, UTC. Returned as C(run_id).
    type: str
"""

EXAMPLES = r"""
- name: Load the campaign
  fairbench.fairbench.fairbench_campaign:
    path: "{{ campaign }}"
    base_dir: "{{ '.' | ansible.builtin.realpath }}"
    run_id: "{{ run_id | default(omit) }}"
  register: loaded
"""

RETURN = r"""
ansible_facts:
  description:
    - C(fairbench_campaign), the expanded campaign (configs with unit, argv, env; workload or workloads).
    - C(fairbench_workload_files), the local files the workloads read (ShareGPT-style datasets, traces),
      each once, which every host gets a copy of; empty for generated datasets.
  returned: success
  type: dict
run_id:
  description: The run's id, as given or new.
  returned: success
  type: str
errors:
  description: Every broken rule, one per item.
  returned: failure
  type: list
"""

import os

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_control_node() as FAIRBENCH_IMPORT:
    from fairbench.campaign.findings import CampaignError
    from fairbench.campaign.load import load_campaign
    from fairbench.measure.results import new_run_id, run_id_problem


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(
        argument_spec={
            "path": {"type": "str", "required": True},
            "base_dir": {"type": "path"},
            "run_id": {"type": "str"},
        },
    )
    run_id = module.params["run_id"]
    problem = run_id_problem(run_id) if run_id is not None else None
    if problem:
        module.fail_json(msg=f"run_id: {problem}")
    if module.params["base_dir"]:
        # A module does not run where ansible-playbook was started; relative names are the user's.
        os.chdir(module.params["base_dir"])
    try:
        campaign = load_campaign(module.params["path"])
    except CampaignError as exc:
        module.fail_json(msg="\n".join(exc.messages), errors=exc.messages)
    for warning in campaign.warnings:
        module.warn(warning)
    files = [workload.file for workload in campaign.workloads.values() if workload.file is not None]
    facts = {"fairbench_campaign": campaign.to_json(), "fairbench_workload_files": list(dict.fromkeys(files))}
    module.exit_json(changed=False, run_id=run_id or new_run_id(), ansible_facts=facts)


if __name__ == "__main__":
    main()
