"""``fairbench validate``: check campaign files and show each config's command line."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import load_campaign
from fairbench.campaign.model import DEFAULT_NODES, SINGLE_WORKLOAD, Campaign, ServingConfig, render_flags
from fairbench.campaign.sglang_parser import SGLangParserError, check_campaign
from fairbench.cli.campaign_plan import campaign_forecast, history_dir, plan_lines
from fairbench.cli.inventory_hosts import InventoryError, InventoryHosts, read_inventory
from fairbench.cli.usage import UsageError
from fairbench.fleet.estimate import EstimateError
from fairbench.fleet.plan import PlanError
from fairbench.fleet.stopping import stopping_margin
from fairbench.report.workload_text import workload_text

DESCRIPTION = (
    "Check campaign files before anything is deployed: every key, its type and range, the rules across keys, "
    "and every SGLang flag against SGLang's own flag table. For each file it prints the campaign's placement "
    "and each config's environment and launch flags, as its server will be started, and each workload, or "
    "the file's errors, each naming its key. The exit status is 1 when any file has an error."
)
EPILOG = """\
examples:
  fairbench validate campaigns/demo.yml
  fairbench validate campaigns/*.yml --sglang-parser /opt/sglang/venv
  fairbench validate campaigns/kimi-k2.6-pcie.yml --plan -i inventory/my-hosts.yml

--plan adds what the campaign will cost, at the least and at the most (automatic repeats stopping at their
min or running to their max, every SLO search probe): its jobs, each a server start, its points and
requests, its GPU-hours and its wall time on the inventory's gpu_hosts (-i, as Ansible reads it, within
-l/--limit; without one, each pool as the fewest hosts its configs need). Times come from the newest earlier
run of the campaign under results/CAMPAIGN/ (or --from RUN_DIR; --fresh: none), else from expected_start_s
and, with engine sim, the simulator's model; an engine without a model of its speed gets its counts and its
start times alone.

Every key of a campaign file is described in docs/campaign.md; the plan's formulas in docs/metrics.md.
"""
RESULTS_ROOT = Path("results")
"""Where --plan looks for the campaign's earlier runs, from the current directory: the bench role's default
results root (its bench_results_root) in a checkout."""
PLAN_OPTIONS = {"-i": "inventory", "-l": "limit", "--from": "earlier_run", "--fresh": "fresh"}
"""The options of the plan, and their destinations: each only with --plan."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.add_argument("files", nargs="+", metavar="FILE", help="a campaign file (YAML)")
    parser.add_argument(
        "--sglang-parser",
        metavar="VENV",
        help="also check every config's launch flags with SGLang's own parser, run from this venv (one "
        "with SGLang installed; no GPU needed)",
    )
    plan = parser.add_argument_group("the plan (--plan)")
    plan.add_argument(
        "--plan",
        action="store_true",
        help="also print what each campaign will cost: jobs, levels, repeats, points and requests at the "
        "least and at the most, GPU-hours and wall time",
    )
    plan.add_argument(
        "-i",
        "--inventory",
        action="append",
        help="the GPU hosts' inventory the plan places the jobs on (repeatable, as for ansible-playbook)",
    )
    plan.add_argument("-l", "--limit", help="only these hosts of the inventory (Ansible's --limit pattern)")
    plan.add_argument(
        "--from",
        dest="earlier_run",
        type=Path,
        metavar="RUN_DIR",
        help="learn the servers' start and the points' times from this run of the campaign (default: the "
        "newest under results/CAMPAIGN/)",
    )
    plan.add_argument(
        "--fresh", action="store_true", help="learn from no earlier run: declared and modelled times only"
    )


def run(args: argparse.Namespace) -> int:
    """Every file is checked; the exit status is 1 when any of them has an error."""
    inventory = _plan_inventory(args)
    failed = False
    for file in args.files:
        try:
            campaign = load_campaign(file)
        except CampaignError as exc:
            print("\n".join(exc.messages), file=sys.stderr)
            failed = True
        else:
            print("\n".join(summary_lines(campaign)))
            if args.sglang_parser and not sglang_parser_ok(args.sglang_parser, campaign):
                failed = True
            if args.plan and not plan_ok(campaign, inventory, args):
                failed = True
    return 1 if failed else 0


def _plan_inventory(args: argparse.Namespace) -> InventoryHosts | None:
    """The inventory's hosts for --plan (None without -i); UsageError for a plan option without --plan, or
    an inventory Ansible cannot read."""
    given = [option for option, value in PLAN_OPTIONS.items() if getattr(args, value)]
    if given and not args.plan:
        raise UsageError(f"{given[0]}: only with --plan")
    if args.fresh and args.earlier_run is not None:
        raise UsageError("--fresh: learns from no earlier run, and --from names one")
    if not args.inventory:
        if args.limit:
            raise UsageError("-l/--limit: limits an inventory: give it with -i")
        return None
    try:
        return read_inventory(args.inventory, args.limit)
    except InventoryError as exc:
        raise UsageError(f"-i: {exc}") from None


def plan_ok(campaign: Campaign, inventory: InventoryHosts | None, args: argparse.Namespace) -> bool:
    """Prints the campaign's plan; False, with the error, when its jobs cannot be placed on the hosts."""
    earlier = history_dir(campaign, args.earlier_run, results=RESULTS_ROOT / campaign.name, fresh=args.fresh)
    try:
        plan = campaign_forecast(
            campaign, inventory, inventory_name=", ".join(args.inventory or ()), history_dir=earlier
        )
    except (PlanError, EstimateError) as exc:
        print(f"error: {campaign.source}: plan: {exc}", file=sys.stderr)
        return False
    print("\n".join(plan_lines(plan)))
    return True


def sglang_parser_ok(venv: str, campaign: Campaign) -> bool:
    """Prints SGLang's verdict on each config's servers; False when it rejects any (or cannot run)."""
    try:
        results = check_campaign(venv, campaign)
    except SGLangParserError as exc:
        print(f"error: {campaign.source}: {exc}", file=sys.stderr)
        return False
    for name, error in results.items():
        if error is None:
            print(f"  sglang parser: {name}: ok")
        else:
            print(f"error: {campaign.source}: configs.{name}: SGLang's parser: {error}", file=sys.stderr)
    return all(error is None for error in results.values())


def summary_lines(campaign: Campaign) -> list[str]:
    """A header (with the placement), one line per config (its environment and argv, as a shell would run
    them, then where its server runs when that is not one host of the campaign's pool), one per workload
    (as the report's campaign line says it), what each server answers before its sweep, the warnings."""
    lines = [
        f"{campaign.source}: campaign {campaign.name}, engine {campaign.engine}, "
        f"{len(campaign.configs)} configs, placement {campaign.placement}"
    ]
    width = max((len(name) for name in campaign.configs), default=0)
    for config in campaign.configs.values():
        environment = [f"{key}={value}" for key, value in config.env.items()]
        placed = placement_note(config)
        if config.disaggregation is None:
            command = shlex.join([*environment, *config.argv])
            lines.append(f"  {config.name:<{width}}  {command}" + (f"  # {placed}" if placed else ""))
            continue
        # Each server's own line, then the router's flags: the ports are the host's, rendered at deploy.
        lines.append(f"  {config.name:<{width}}  # {config.gpus_formula}" + (f", {placed}" if placed else ""))
        for server in config.disaggregation.servers:
            lines.append(f"    {server.name}: {shlex.join([*environment, *server.argv])}")
        router = shlex.join(render_flags(config.disaggregation.router_args))
        lines.append(f"    router: --pd-disaggregation {router}".rstrip())
    decided_on = stopping_margin(campaign.to_json())
    for name, workload in campaign.workloads.items():
        title = "workload" if name == SINGLE_WORKLOAD else f"workload {name}"
        lines.append(f"  {title}: {workload_text(workload.to_json(), decided_on)}")
    if campaign.answers is not None:
        lines.append(f"  answers: {campaign.answers.text()}")
    lines.extend(f"warning: {warning}" for warning in campaign.warnings)
    return lines


def placement_note(config: ServingConfig) -> str:
    """Where a config's server runs, as the campaign keys say it: ``nodes: 2 (4 GPUs per host)`` for a
    server over several hosts, ``hosts: h200`` for one pinned to an inventory group; "" for neither. A shell
    comment after the command, so the line still runs as it is."""
    notes = []
    if config.nodes > DEFAULT_NODES:
        notes.append(f"nodes: {config.nodes} ({config.gpus_per_node} GPUs per host)")
    if config.hosts is not None:
        notes.append(f"hosts: {config.hosts}")
    return ", ".join(notes)
