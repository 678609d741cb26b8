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
from collections.abc import Sequence
from typing import NoReturn

from fairbench.cli.usage import UsageError

COMMANDS: dict[str, str] = {
    "sweep": "run a concurrency sweep against one server",
    "sim": "an SGLang-compatible simulated server",
    "validate": "check a campaign file and show each config's command line",
    "report": "the fair comparison of a run (or two runs): report.md, .html, plots",
    "export": "every point of a run as one table: CSV, or Parquet with pyarrow",
    "nccl": "all-reduce latency and bus bandwidth per NCCL variant: nccl.json",
    "run": "a campaign on an inventory's hosts through ansible-runner, shown live",
}
"""Each subcommand -> its help; its module is ``fairbench.cli.<subcommand>``."""


class OneLineErrorParser(argparse.ArgumentParser):
    """Reports a bad argument in one line (argparse's own error also prints the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="fairbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints usage or the unknown-command error and exits
        return 2
    name = argv[0]
    try:
        # A command's imports take a noticeable moment (aiohttp, ssl): Ctrl-C may come during them.
        module = importlib.import_module(f"fairbench.cli.{name}")
        command_parser = OneLineErrorParser(prog=f"fairbench {name}", description=COMMANDS[name])
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
