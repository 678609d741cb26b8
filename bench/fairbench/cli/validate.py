"""``fairbench validate``: check campaign files and show each config's command line."""

from __future__ import annotations

import argparse
import shlex
import sys

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import load_campaign
from fairbench.campaign.model import DEFAULT_NODES, SINGLE_WORKLOAD, Campaign, ServingConfig
from fairbench.campaign.sglang_parser import SGLangParserError, check_campaign
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

Every key of a campaign file is described in docs/campaign.md.
"""


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


def run(args: argparse.Namespace) -> int:
    """Every file is checked; the exit status is 1 when any of them has an error."""
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
    return 1 if failed else 0


def sglang_parser_ok(venv: str, campaign: Campaign) -> bool:
    """Prints SGLang's verdict on each config; False when it rejects any (or cannot run)."""
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
    (as the report's campaign line says it), the warnings."""
    lines = [
        f"{campaign.source}: campaign {campaign.name}, engine {campaign.engine}, "
        f"{len(campaign.configs)} configs, placement {campaign.placement}"
    ]
    width = max((len(name) for name in campaign.configs), default=0)
    for config in campaign.configs.values():
        environment = [f"{key}={value}" for key, value in config.env.items()]
        command = shlex.join([*environment, *config.argv])
        placed = placement_note(config)
        lines.append(f"  {config.name:<{width}}  {command}" + (f"  # {placed}" if placed else ""))
    for name, workload in campaign.workloads.items():
        title = "workload" if name == SINGLE_WORKLOAD else f"workload {name}"
        lines.append(f"  {title}: {workload_text(workload.to_json())}")
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
