#!/usr/bin/python
"""Ansible module fairbench_campaign_record: a run's campaign.json on the control node, and the resume
check against it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_campaign_record
short_description: Check a resumed run's campaign against the one it recorded, and record it
description:
  - Runs on the control node with a Python that imports fairbench (the venv running ansible-playbook).
  - A run whose C(run_dir) holds a campaign.json is a resume. Its campaign must be the recorded one in every
    key that changes what is measured (fairbench.fleet.campaign_record); otherwise the task fails, naming
    the run's directory, the key paths that differ (recorded -> now) and the bench role's
    C(bench_resume_changed), unless C(allow_changed).
  - With C(save), writes C(campaign) as C(run_dir)/campaign.json; a changed campaign allowed keeps the
    recorded one as C(run_dir)/campaign.<n>.json. Changed when campaign.json's content changes; in check
    mode nothing is written.
options:
  run_dir:
    description: The run's directory on the control node (the bench role's C(bench_run_dir)).
    type: path
    required: true
  campaign:
    description: The expanded campaign (the C(fairbench_campaign) fact).
    type: dict
    required: true
  allow_changed:
    description: Resume with a campaign that differs from the recorded one (C(bench_resume_changed)).
    type: bool
    default: false
  save:
    description: Write campaign.json; false only checks (before anything is deployed).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Refuse a resume whose campaign changed
  fairbench.fairbench.fairbench_campaign_record:
    run_dir: "{{ bench_run_dir }}"
    campaign: "{{ bench_campaign }}"
    allow_changed: "{{ bench_resume_changed }}"
    save: false
"""

RETURN = r"""
differences:
  description: >-
    Each key path that differs from the recorded campaign, as C(path: old -> new); empty for a new run or
    the same campaign.
  returned: success
  type: list
  elements: str
kept_as:
  description: Where the recorded campaign was kept (campaign.<n>.json), when it differed; else null.
  returned: success
  type: str
"""

from pathlib import Path

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_control_node() as FAIRBENCH_IMPORT:
    from fairbench.fleet.campaign_record import ResumeRefused, check_resume, listed, record, render
    from fairbench.measure.results import CAMPAIGN_FILE

ALLOWED_BY = "-e bench_resume_changed=true"
"""The bench role's variable that sets C(allow_changed), as a refusal names it."""


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "campaign": {"type": "dict", "required": True},
            "allow_changed": {"type": "bool", "default": False},
            "save": {"type": "bool", "default": True},
        }
    )
    params = module.params
    run_dir = Path(params["run_dir"])
    allow_changed = params["allow_changed"]
    try:
        if not params["save"]:
            found = check_resume(
                run_dir, params["campaign"], allow_changed=allow_changed, allowed_by=ALLOWED_BY
            )
            if found:
                module.warn(
                    "\n".join(
                        [
                            f"{run_dir}: resumed with a changed campaign (allowed); recorded -> now:",
                            *listed(found),
                        ]
                    )
                )
            module.exit_json(changed=False, differences=[str(d) for d in found], kept_as=None)
        done = record(
            run_dir,
            params["campaign"],
            allow_changed=allow_changed,
            allowed_by=ALLOWED_BY,
            dry_run=module.check_mode,
        )
    except ResumeRefused as exc:
        module.fail_json(msg=str(exc))
    diff = {
        "before_header": str(run_dir / CAMPAIGN_FILE),
        "after_header": str(run_dir / CAMPAIGN_FILE),
        "before": done.before or "",
        "after": render(params["campaign"]),
    }
    module.exit_json(
        changed=done.changed,
        differences=[str(d) for d in done.differences],
        kept_as=str(done.kept_as) if done.kept_as else None,
        **({"diff": diff} if module._diff and done.changed else {}),
    )


if __name__ == "__main__":
    main()
