#!/usr/bin/python
"""Ansible module fairbench_fleet: place a campaign's jobs on the hosts, after checking the hosts agree."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_fleet
short_description: Plan which host runs which job of a fairbench campaign, and check the hosts are equivalent
description:
  - Runs on the control node with a Python that imports fairbench (the venv running ansible-playbook).
  - With engine sglang, fails naming every host of a config's pool with fewer GPUs than the config's
    server needs per host (C(gpus_per_node)), before anything is deployed.
  - Makes the run's jobs from the campaign's placement (fairbench.fleet.plan) and writes the run's work
    queue, fleet.json, into C(run_dir) (fairbench.fleet.queue); a re-run of the run resumes it, each job
    staying on the host that measured it.
  - Before that, compares the facts of the hosts of each pool (fairbench.fleet.equivalence). Under
    placement spread, a difference the campaign does not accept (C(accept_host_differences)) fails the
    task with every difference named. Under every-host, differences are what is being compared, and are
    only recorded.
  - Finds the hosts that share one machine from their facts' C(machine) (fairbench.fleet.sharing), by one
    DMI system UUID or board, one kernel or a GPU in common; the queue runs their jobs one at a time unless
    the campaign says C(isolated_hosts).
  - Returns the jobs each host would take if every job took as long (C(predicted)); in check mode, or with
    C(queue=false), it writes nothing and returns only that.
options:
  campaign:
    description: The expanded campaign (the fairbench_campaign fact).
    type: dict
    required: true
  run_dir:
    description: The run's directory on the control node.
    type: path
    required: true
  groups:
    description: The inventory's groups (C(groups)), for configs pinned to one.
    type: dict
    required: true
  play_hosts:
    description: The hosts of the play, in order (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  excluded:
    description: Hosts that take no job, with why (their deploy failed).
    type: dict
    default: {}
  facts:
    description: Each host's fleet facts (fairbench_fleet_facts), by host.
    type: dict
    default: {}
  placement:
    description: Overrides the campaign's placement (the inventory's bench_placement).
    type: str
    choices: [spread, every-host]
  queue:
    description: Write the queue (fleet.json); false only checks and plans (a deploy that runs no job).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Place the jobs
  fairbench.fairbench.fairbench_fleet:
    campaign: "{{ fairbench_campaign }}"
    run_dir: results/demo/run1
    groups: "{{ groups }}"
    play_hosts: "{{ ansible_play_hosts_all }}"
    facts: "{{ dict(hosts | zip(hosts | map('extract', hostvars, 'fleet_facts'))) }}"
  vars:
    hosts: "{{ ansible_play_hosts_all }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
placement:
  description: The placement used.
  type: str
jobs:
  description: The jobs, in the order hosts take them.
  type: list
most_jobs:
  description:
    - The most jobs the run may have; more than C(jobs) under spread with automatic repeats, whose further
      repeats the queue adds while a config's intervals are wide.
  type: int
predicted:
  description: Host to the jobs it would take (and lead) if all jobs took as long, with their hosts.
  type: dict
equivalence:
  description: The facts compared, and the differences found (refused and accepted).
  type: dict
machines:
  description:
    - C(shared), the hosts found to share a machine (each group's C(hosts), C(evidence) and C(text)), and
      C(isolated), the campaign's C(isolated_hosts); null without facts. fleet.json's C(machines).
  type: dict
"""

from pathlib import Path

from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import FairbenchImport

with FairbenchImport.on_control_node() as FAIRBENCH_IMPORT:
    from fairbench.campaign.model import DEFAULT_ISOLATED_HOSTS, repeats_json
    from fairbench.fleet.equivalence import check_pools
    from fairbench.fleet.plan import SPREAD, PlanError, check_gpus, most_jobs, plan, pools, rounds_seed
    from fairbench.fleet.queue import Queue, judging_json, new_state, sticky_hosts
    from fairbench.fleet.schedule import predict
    from fairbench.fleet.sharing import machines_json, shared_machines
    from fairbench.measure.repeats import repeats_from_json


def main() -> None:
    module = FAIRBENCH_IMPORT.ansible_module(
        argument_spec={
            "campaign": {"type": "dict", "required": True},
            "run_dir": {"type": "path", "required": True},
            "groups": {"type": "dict", "required": True},
            "play_hosts": {"type": "list", "elements": "str", "required": True},
            "excluded": {"type": "dict", "default": {}},
            "facts": {"type": "dict", "default": {}},
            "placement": {"type": "str", "choices": ["spread", "every-host"]},
            "queue": {"type": "bool", "default": True},
        },
    )
    params = module.params
    campaign = params["campaign"]
    placement = params["placement"] or campaign["placement"]
    excluded = {str(host): str(why) for host, why in params["excluded"].items()}
    try:
        by_name = pools(campaign, params["groups"], params["play_hosts"])
        check_gpus(campaign, by_name, params["facts"])
        jobs = plan(campaign, by_name, placement=placement, excluded=list(excluded))
    except PlanError as exc:
        module.fail_json(msg=str(exc))
    usable = {name: [host for host in hosts if host not in excluded] for name, hosts in by_name.items()}
    equivalence = None
    machines = None
    if params["facts"]:
        hosts = [host for host in params["play_hosts"] if host not in excluded]
        isolated = campaign.get("isolated_hosts", DEFAULT_ISOLATED_HOSTS)
        machines = machines_json(shared_machines(params["facts"], hosts), isolated=isolated)
        checked = check_pools(params["facts"], usable, campaign.get("accept_host_differences", []))
        equivalence = checked.to_json()
        if placement == SPREAD and checked.refused:
            module.fail_json(msg=checked.message(), equivalence=equivalence)
    run_dir = Path(params["run_dir"])
    state = new_state(
        placement=placement,
        pools=by_name,
        jobs=jobs,
        excluded=excluded,
        equivalence=equivalence,
        sticky=sticky_hosts(run_dir, jobs),
        repeats=repeats_from_json(repeats_json(campaign)),
        machines=machines,
        seed=rounds_seed(campaign),
        judging=judging_json(campaign),
    )
    predicted = predict(state, [host for host in params["play_hosts"] if host not in excluded])
    written = params["queue"] and not module.check_mode
    if written:
        Queue(run_dir).create(state)
    module.exit_json(
        changed=written,
        placement=placement,
        jobs=state["jobs"],
        most_jobs=most_jobs(campaign, jobs, placement=placement),
        predicted=predicted,
        equivalence=equivalence,
        machines=machines,
    )


if __name__ == "__main__":
    main()
