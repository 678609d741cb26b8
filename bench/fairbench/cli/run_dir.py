"""The run's directory on the control node, as the playbooks will name it, before they start.

The bench role defines it, once: ``bench_run_dir`` (its vars/main.yml) from ``bench_results_root`` (its
defaults), which a user may set anywhere Ansible takes variables (the inventory, group_vars, ``-e``). So
``fairbench run`` asks Ansible rather than computing it: an ad-hoc ``debug`` of the role's ``bench_run_dir``
on localhost, with the run's inventories, extra variables and vault options. Role defaults (the role's and
its dependencies') are the lowest precedence in a play; here they are the first inventory source's ``all``
variables, which every other source, group_vars and ``-e`` override just the same.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

ROLES = Path("roles")
BENCH_ROLE = "bench"
RUN_DIR_VAR = "bench_run_dir"


class RunDirError(Exception):
    """Ansible could not name the run's directory; the message says why in one line."""


def resolve(
    *,
    project: Path,
    playbook: Path,
    campaign_name: str,
    run_id: str,
    inventories: list[str],
    ansible_args: list[str],
    runner_options: dict[str, Any],
) -> Path:
    """The directory ``bench_run_dir`` names for localhost in a play of ``playbook``.

    ``ansible_args`` are the ones reading the variables needs (``-e``, vault); ``runner_options`` are
    ansible_runner.run's for the run itself (private_data_dir, envvars, passwords). KeyboardInterrupt when
    the question was cancelled (ansible-runner turns Ctrl-C into a cancellation).
    """
    import ansible_runner  # type: ignore[import-untyped]  # noqa: PLC0415 - only fairbench run needs it

    defaults = _role_defaults(project, BENCH_ROLE)
    template = _role_file(project, BENCH_ROLE, "vars").get(RUN_DIR_VAR)
    if not isinstance(template, str):
        raise RunDirError(f"{project / ROLES / BENCH_ROLE / 'vars' / 'main.yml'} has no {RUN_DIR_VAR}")
    role_defaults = Path(runner_options["private_data_dir"]) / "bench-role-defaults.json"
    role_defaults.write_text(json.dumps({"all": {"vars": defaults}}), encoding="utf-8")
    answers: list[dict[str, Any]] = []
    said: list[str] = []

    def keep(event: dict[str, Any]) -> bool:
        if event.get("event") in ("runner_on_ok", "runner_on_failed"):
            answers.append(event.get("event_data") or {})
        said.extend(line for line in str(event.get("stdout", "")).splitlines() if line.strip())
        return False

    runner: Any = ansible_runner.run(
        **runner_options,
        project_dir=str(project),
        module="ansible.builtin.debug",
        module_args=json.dumps({"msg": template}),
        host_pattern="localhost",
        inventory=[str(role_defaults), *inventories],
        # The playbook's own values of the two variables the role's template takes besides the root.
        extravars={"bench_campaign": {"name": campaign_name}, "bench_run_id": run_id},
        # playbook_dir: the role's default results root is beside the playbook's directory.
        cmdline=shlex.join([*ansible_args, "--playbook-dir", str(playbook.parent)]),
        quiet=True,
        event_handler=keep,
    )
    if runner.status == "canceled":
        raise KeyboardInterrupt
    result: dict[str, Any] = (answers[-1].get("res") or {}) if answers else {}
    if runner.status != "successful" or not result.get("msg"):
        # Ansible's own error line, where it gave one (its explanation follows it on lines of their own).
        errors = [line.removeprefix("[ERROR]: ") for line in said if line.startswith("[ERROR]: ")]
        why = str(result.get("msg", "")).strip() or (errors or said or [f"ansible rc {runner.rc}"])[-1]
        raise RunDirError(f"Ansible could not name the run's directory ({RUN_DIR_VAR}): {why}")
    # A relative root is relative to where ansible-playbook runs: the project.
    return project / str(result["msg"])


def _role_defaults(project: Path, role: str) -> dict[str, Any]:
    """The role's defaults over its dependencies' (those of this project), as a play merges them."""
    merged: dict[str, Any] = {}
    meta = project / ROLES / role / "meta" / "main.yml"
    dependencies = (_role_file(project, role, "meta").get("dependencies") or []) if meta.exists() else []
    for dependency in dependencies:
        name = (
            str(dependency.get("role") or dependency.get("name"))
            if isinstance(dependency, dict)
            else dependency
        )
        # fairbench.fairbench.NAME (this collection's) or a bare NAME: roles/NAME here.
        local = str(name).rsplit(".", 1)[-1]
        if (project / ROLES / local / "defaults" / "main.yml").exists():
            merged.update(_role_defaults(project, local))
    return {**merged, **_role_file(project, role, "defaults")}


def _role_file(project: Path, role: str, part: str) -> dict[str, Any]:
    path = project / ROLES / role / part / "main.yml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
        raise RunDirError(f"cannot read {path}: {why}") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path} is not a mapping of variables")
    return data
