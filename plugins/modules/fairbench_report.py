#!/usr/bin/python
"""Ansible module fairbench_report: render a fetched run's report on the control node (fairbench report)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_report
short_description: Render a fetched fairbench run into report.md, report.html and plots
description:
  - Runs on the control node with a Python that imports fairbench (with its report extra).
  - Reads results/<campaign>/<run_id> and writes report.md, report.html and plots/*.png there, as
    C(fairbench report RUN_DIR) does.
  - Always C(changed) outside check mode (the report is rewritten); check mode writes nothing and
    still names the failed configs.
options:
  run_dir:
    description: The run's results directory on the control node.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Render the report
  fairbench.fairbench.fairbench_report:
    run_dir: results/demo/20250101T000000Z
"""

RETURN = r"""
paths:
  description: The files written (empty in check mode).
  type: list
failed_configs:
  description: host/config of every config whose status is not ok.
  type: list
"""

from pathlib import Path

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_control_node() as FAIRBENCH_IMPORT:
    from fairbench.measure.results import ResultsError
    from fairbench.report.build import write_reports
    from fairbench.report.load import load_runs


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(argument_spec={"run_dir": {"type": "path", "required": True}})
    run_dir = Path(module.params["run_dir"])
    try:
        runs = load_runs(run_dir)
    except ResultsError as exc:
        module.fail_json(msg=str(exc))
    # A config's status is its jobs', whichever workload the run is seen as.
    failed = [f"{result.host}/{result.name}" for result in runs[0].results if not result.ok]
    paths = [] if module.check_mode else [str(path) for path in write_reports([runs], run_dir)]
    module.exit_json(changed=not module.check_mode, paths=paths, failed_configs=failed)


if __name__ == "__main__":
    main()
