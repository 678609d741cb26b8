#!/usr/bin/python
"""Ansible module fairbench_config_run: one campaign job on its host, from a clean host to a clean host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_config_run
short_description: Run one campaign job on a GPU host - clean, start, wait until healthy, sweep, stop
description:
  - Runs on the GPU host with fairbench's venv as its Python (C(ansible_python_interpreter)); meant to run
    in the background (C(async), C(poll) 0), followed by M(fairbench.fairbench.fairbench_sweep_status).
  - Measures nothing and starts no server when C(out) already holds every point of the job (a resume).
  - Otherwise, in one process (fairbench.hosts.config_run), checks that the host is clean (no fairbench
    server unit running, which it stops, nothing on the server's port, no process of the servers' user,
    the GPUs at their idle baseline), restarts C(unit), waits until it answers /health_generate, saves
    unit.service, server_info.json and host.json into C(out), sweeps the job's repeats (of C(workload), or
    of each of C(workloads) in turn, each into C(out)/<name>), stops the unit, saves its journal as
    journal.log, and waits until the host is clean again.
  - Fails naming the stage (C(clean), C(start), C(health), C(sweep), C(stop)) in C(stage); the server is
    stopped and its journal saved whatever failed.
  - In check mode, returns the points it would measure and starts nothing.
extends_documentation_fragment:
  - fairbench.fairbench.sweep
options:
  workload:
    description:
      - The workload (a campaign's C(workload), as the fairbench_campaign fact holds it); or give
        C(workloads).
    type: dict
  workloads:
    description:
      - Several workloads by name (a campaign's C(workloads)), each swept in turn on the one server start
        into C(out)/<name>.
    type: dict
  unit:
    description: The config's systemd unit (a disaggregated config's router).
    type: str
    required: true
  workers:
    description:
      - A disaggregated config's prefill and decode servers, in start order, each with its C(unit), C(name)
        (its directory under C(out)/servers/) and C(url). They are started first, each waited on until it
        answers /health_generate, then C(unit) (the router) until it answers /readiness; stopped in reverse.
    type: list
    elements: dict
    default: []
    suboptions:
      unit:
        description: The server's systemd unit.
        type: str
        required: true
      name:
        description: The server's name (C(prefill-0), C(decode-0)...).
        type: str
        required: true
      url:
        description: Where the server answers.
        type: str
        required: true
  start_timeout_s:
    description: Seconds the server may take to become healthy.
    type: int
    default: 3600
  journal_lines:
    description: Lines of the unit's journal kept in journal.log.
    type: int
    default: 2000
  gpu_clock_lock:
    description:
      - The GPU clocks the bench role locked for the job (C(bench_gpu_clock_lock)), which host.json records
        as C(gpu_clock_lock); it locks nothing itself. Omitted, or both null, host.json records none.
    type: dict
    suboptions:
      sm_mhz:
        description: The SM clock the GPUs were locked at (C(nvidia-smi -lgc)), MHz; null for none.
        type: int
      mem_mhz:
        description: The memory clock the GPUs were locked at (C(nvidia-smi -lmc)), MHz; null for none.
        type: int
  answers:
    description:
      - What the server answers before its sweep, as campaign.json's C(answers) holds it (its probes, and an
        accuracy task); written to C(out)/answers/start-r<first repeat>.json. A failure there is noted in
        the result's C(answers) and never fails the job. Omitted or null, nothing is asked.
    type: dict
  clean:
    description: What a clean host is; fairbench.hosts.clean_state.check's settings.
    type: dict
    required: true
    suboptions:
      port:
        description: The server's TCP port, which nothing may hold.
        type: int
        required: true
      user:
        description: The servers' user, of which no process may run.
        type: str
        required: true
      unit_pattern:
        description: The fairbench server units, none of which may run (C(fairbench-*.service)).
        type: str
      baseline:
        description: Each GPU's idle memory use in MiB by index, as recorded at preflight; null without GPUs.
        type: dict
      tolerance_mib:
        description: MiB a GPU may use above its baseline; null for the default.
        type: int
      timeout_s:
        description: Seconds to wait for the host to become clean.
        type: float
        default: 60
"""

EXAMPLES = r"""
- name: Run the job in the background
  fairbench.fairbench.fairbench_config_run:
    unit: fairbench-demo-tp8.service
    url: http://127.0.0.1:30000
    workloads: "{{ fairbench_campaign.workloads }}"
    out: /var/lib/fairbench/results/demo/run1/tp8
    repeats: [0]
    clean: {port: 30000, user: fairbench}
  async: 86400
  poll: 0
"""

RETURN = r"""
stage:
  description: The stage it reached (the failed one when it failed).
  type: str
server_started:
  description: Whether the server was started (not C(started), which is the async job's own key).
  type: bool
planned:
  description: The point ids the job measures (or would, in check mode); a named workload's as <name>/<id>.
  type: list
timeline:
  description:
    - Epoch seconds on the host when the unit was started, answered healthy, got its first request and had
      its last point written (null where not reached).
  type: dict
sweep:
  description:
    - What the sweep did (as fairbench_sweep returns it); of several workloads, merged (each level naming
      its C(workload)), with each one's under C(workloads).
  type: dict
stopped_units:
  description: fairbench server units found running before the start, and stopped.
  type: list
answers:
  description: What the server answered before its sweep, in one line; null where nothing was asked.
  type: str
"""

from pathlib import Path

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport
from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_sweep_options import (
    SWEEP_ARGUMENT_SPEC,
)

with FairbenchImport.on_gpu_host() as FAIRBENCH_IMPORT:
    from fairbench.answers.plan import plan_from_json
    from fairbench.campaign.findings import CampaignError
    from fairbench.campaign.model import SINGLE_WORKLOAD
    from fairbench.hosts.ansible_support import spec_from_arguments
    from fairbench.hosts.clean_state import SERVER_UNIT_GLOB
    from fairbench.hosts.config_run import (
        CleanSettings,
        JobRun,
        StageError,
        WorkerUnit,
        plan,
        points_diff,
        run_job,
    )
    from fairbench.measure.results import ResultsError

CLEAN_OPTIONS = {
    "port": {"type": "int", "required": True},
    "user": {"type": "str", "required": True},
    # Default: the pattern fairbench.hosts.clean_state defines, applied by the package.
    "unit_pattern": {"type": "str"},
    "baseline": {"type": "dict"},
    "tolerance_mib": {"type": "int"},
    "timeout_s": {"type": "float", "default": 60},
}
CLOCK_LOCK_OPTIONS = {"sm_mhz": {"type": "int"}, "mem_mhz": {"type": "int"}}
WORKER_OPTIONS = {
    "unit": {"type": "str", "required": True},
    "name": {"type": "str", "required": True},
    "url": {"type": "str", "required": True},
}


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(
        argument_spec={
            **SWEEP_ARGUMENT_SPEC,
            "workload": {"type": "dict"},
            "workloads": {"type": "dict"},
            "unit": {"type": "str", "required": True},
            "workers": {"type": "list", "elements": "dict", "default": [], "options": WORKER_OPTIONS},
            "start_timeout_s": {"type": "int", "default": 3600},
            "journal_lines": {"type": "int", "default": 2000},
            "clean": {"type": "dict", "required": True, "options": CLEAN_OPTIONS},
            "gpu_clock_lock": {"type": "dict", "options": CLOCK_LOCK_OPTIONS},
            "answers": {"type": "dict"},
        },
        mutually_exclusive=[("workload", "workloads")],
        required_one_of=[("workload", "workloads")],
    )
    params = module.params
    workloads = params["workloads"] or {SINGLE_WORKLOAD: params["workload"]}
    try:
        specs = {
            name: spec_from_arguments({**params, "workload": entry}) for name, entry in workloads.items()
        }
    except CampaignError as exc:
        module.fail_json(msg="\n".join(exc.messages), errors=exc.messages)
    clean = params["clean"]
    lock = params["gpu_clock_lock"] or {}
    job = JobRun(
        unit=params["unit"],
        url=params["url"].rstrip("/"),
        out=Path(params["out"]),
        specs=specs,
        clean=CleanSettings(
            port=clean["port"],
            user=clean["user"],
            unit_pattern=clean["unit_pattern"] or SERVER_UNIT_GLOB,
            baseline={str(key): int(value) for key, value in (clean["baseline"] or {}).items()} or None,
            tolerance_mib=clean["tolerance_mib"],
            timeout_s=clean["timeout_s"],
        ),
        start_timeout_s=params["start_timeout_s"],
        journal_lines=params["journal_lines"],
        remeasure_failed=params["remeasure_failed"],
        clock_lock=lock if any(mhz is not None for mhz in lock.values()) else None,
        answers=plan_from_json(params["answers"]),
        workers=[
            WorkerUnit(unit=worker["unit"], name=worker["name"], url=worker["url"].rstrip("/"))
            for worker in params["workers"]
        ],
    )
    try:
        if module.check_mode:
            diff = points_diff(plan(job), job.out, check=True)
            module.exit_json(changed=bool(job.planned), diff=diff, **job.to_json())
        run_job(job)
    except StageError as exc:
        module.fail_json(msg=str(exc), changed=job.started, **{**job.to_json(), "stage": exc.stage})
    except ResultsError as exc:
        module.fail_json(msg=str(exc), **job.to_json())
    module.exit_json(changed=job.started, **job.to_json())


if __name__ == "__main__":
    main()
