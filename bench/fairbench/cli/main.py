"""The ``fairbench`` command: one subcommand per module, imported only when chosen.

Importing lazily keeps ``fairbench sweep`` fast to its first request: the
simulator, the campaign model and the report each pull in their own imports.
Each command is the module of its name in this package (``fairbench.cli.sim``
for ``fairbench sim``) and exposes ``configure(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import NoReturn

from fairbench import __version__
from fairbench.cli.usage import UsageError

COMMANDS: dict[str, str] = {
    "sweep": "measure one running server at each load level: points.jsonl",
    "sim": "serve a simulated SGLang server (no GPU), or predict a sweep of it",
    "validate": "check campaign files; print each config's server command line",
    "report": "compare the configs of a run (or two runs): report.md, .html, plots",
    "export": "write every point of a run as one table: CSV or Parquet",
    "nccl": "measure all-reduce across this host's GPUs per NCCL setting: nccl.json",
    "trace": "check a request trace (Mooncake, Azure) and say what it holds, or write a sample one",
    "run": "run a campaign on an inventory's hosts with Ansible; ends in its report",
}
"""Each command, and the line ``fairbench --help`` lists it with; its module is ``fairbench.cli.<command>``,
whose ``configure`` writes the command's own help (what it does and ends in, examples)."""

DESCRIPTION = (
    "fairbench deploys LLM serving configurations (SGLang, or its simulator) to GPU hosts with Ansible, each "
    "as its own systemd unit, drives the same load sweep against each, and writes one report that compares "
    "them fairly and says what differed between them."
)
EPILOG = """\
examples, in the usual order (a campaign file names the configs and the workload):
  fairbench validate campaigns/demo.yml
  fairbench run campaigns/demo.yml -i inventory/lab.yml
  fairbench report results/demo/RUN_ID

"fairbench COMMAND --help" describes each command; docs/running.md has the details.
"""


class HelpFormatter(argparse.HelpFormatter):
    """Fills each paragraph of a description or an epilog to the terminal's width, as argparse does, but
    keeps a paragraph with an indented line (an example's command lines) as it is written, and never breaks
    a line at a hyphen (an option's or a command's name)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        filled = []
        for paragraph in text.strip("\n").split("\n\n"):
            lines = paragraph.splitlines()
            if any(line.startswith(" ") for line in lines):
                filled.append("\n".join(indent + line for line in lines))
            else:
                filled.append(
                    textwrap.fill(
                        " ".join(paragraph.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                        break_on_hyphens=False,
                    )
                )
        return "\n\n".join(filled)


class OneLineErrorParser(argparse.ArgumentParser):
    """Reports a bad argument in one line (argparse's own error also prints the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="fairbench", description=DESCRIPTION, epilog=EPILOG, formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND", required=True)
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints usage or the unknown-command error and exits
        return 2
    name = argv[0]
    try:
        # A command's imports take a noticeable moment (aiohttp, ssl): Ctrl-C may come during them.
        module = importlib.import_module(f"fairbench.cli.{name}")
        command_parser = OneLineErrorParser(prog=f"fairbench {name}", formatter_class=HelpFormatter)
        module.configure(command_parser)
        args = command_parser.parse_args(argv[1:])
        code = int(module.run(args))
        sys.stdout.flush()  # here, where a reader gone away is caught, rather than at exit
        return code
    except UsageError as exc:
        print(f"fairbench {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fairbench {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``fairbench validate ... | head``): nothing more can be said to it, and
        # Python's flush at exit would fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
