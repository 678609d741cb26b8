"""``fairbench validate``: check campaign files and show each config's command line."""

from __future__ import annotations

import argparse
import shlex
import sys

from fairbench.campaign import Campaign, CampaignError, load_campaign


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="campaign YAML file")


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
    return 1 if failed else 0


def summary_lines(campaign: Campaign) -> list[str]:
    """A header, one line per config (its environment and argv, as a shell would run them), the warnings."""
    lines = [
        f"{campaign.source}: campaign {campaign.name}, engine {campaign.engine}, "
        f"{len(campaign.configs)} configs"
    ]
    width = max((len(name) for name in campaign.configs), default=0)
    for config in campaign.configs.values():
        environment = [f"{key}={value}" for key, value in config.env.items()]
        lines.append(f"  {config.name:<{width}}  {shlex.join([*environment, *config.argv])}")
    lines.extend(f"warning: {warning}" for warning in campaign.warnings)
    return lines
