#!/usr/bin/python
"""Ansible module fairbench_campaign: load, check and expand a campaign file on the control node."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule

try:
    from fairbench.campaign.load import CampaignError, load_campaign
except ImportError as exc:
    FAIRBENCH_IMPORT_ERROR = (
        f"fairbench is not importable: use the Python of the venv running ansible-playbook: {exc}"
    )
else:
    FAIRBENCH_IMPORT_ERROR = ""

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
"""

EXAMPLES = r"""
- name: Load the campaign
  fairbench_campaign:
    path: "{{ campaign }}"
    base_dir: "{{ '.' | ansible.builtin.realpath }}"
"""

RETURN = r"""
ansible_facts:
  description: C(fairbench_campaign), the expanded campaign (configs with unit, argv, env; workload).
  returned: success
  type: dict
errors:
  description: Every broken rule, one per item.
  returned: failure
  type: list
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={"path": {"type": "str", "required": True}, "base_dir": {"type": "path"}},
        supports_check_mode=True,
    )
    if FAIRBENCH_IMPORT_ERROR:
        module.fail_json(msg=FAIRBENCH_IMPORT_ERROR)
    if module.params["base_dir"]:
        # A module does not run where ansible-playbook was started; relative names are the user's.
        os.chdir(module.params["base_dir"])
    try:
        campaign = load_campaign(module.params["path"])
    except CampaignError as exc:
        module.fail_json(msg="\n".join(exc.messages), errors=exc.messages)
    for warning in campaign.warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"fairbench_campaign": campaign.to_json()})


if __name__ == "__main__":
    main()
