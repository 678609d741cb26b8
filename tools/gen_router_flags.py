"""Regenerate ``bench/fairbench/campaign/router_flags.json`` from sglang-router's real argument parser.

A campaign may set the router's flags, and fairbench judges each one against this table before anything is
deployed (``fairbench.campaign.router_flags``), so the table is read from the router itself rather than
written by hand. Run this with a Python that has the router at the version ``ROUTER_REQUIREMENT`` pins,
never with the project's own venv::

    python3.11 -m venv /tmp/router-venv
    /tmp/router-venv/bin/pip install sglang-router==0.3.2   # or the wheel file
    /tmp/router-venv/bin/python tools/gen_router_flags.py

The parser is the one ``python -m sglang_router.launch_router`` and ``sglang-router launch`` parse with
(``parse_router_args``: ``RouterArgs.add_cli_args`` without the ``router-`` prefix). Each option is written
as ``tools/gen_sglang_flags.py`` writes SGLang's (option strings, dest, action kind, nargs, const, default,
the *name* of the value converter, choices, required), sorted by option string, with its choices sorted: the
tool-call parsers come from a Rust map whose order changes from run to run, and argparse's verdict does not
depend on the order.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import sglang_router
from sglang_router.router_args import RouterArgs

OUTPUT = Path(__file__).resolve().parent.parent / "bench" / "fairbench" / "campaign" / "router_flags.json"

ACTION_KINDS = {"_StoreAction": "store", "_StoreTrueAction": "store_true", "_AppendAction": "append"}
"""argparse action classes by the kind fairbench's flag check knows them as."""
VALUED_KINDS = ("store", "append")
TYPE_NAMES = {str: "str", int: "int", float: "float"}
"""The router's value converters by the names of ``fairbench.sim.args.CONVERTERS``, which the flag check
converts a value with: one outside it has to be taught to the check (or recorded as ``str``) first."""
NARGS = (None, 1, "?", "+", "*")
"""The value counts fairbench's flag check knows how to judge."""


def describe_action(action: argparse.Action) -> dict[str, Any]:
    """One option as the flag check reads it; a kind, a converter or a count the check does not know stops
    the script, since a table the check misreads would pass or refuse flags wrongly."""
    kind = ACTION_KINDS.get(type(action).__name__)
    if kind is None:
        raise SystemExit(f"unknown argparse action {type(action).__name__} for {action.option_strings}")
    if action.type is not None and action.type not in TYPE_NAMES:
        raise SystemExit(f"unknown value converter {action.type!r} for {action.option_strings}")
    nargs = action.nargs if kind in VALUED_KINDS else None
    if nargs not in NARGS:
        raise SystemExit(f"nargs {nargs!r} of {action.option_strings}: teach fairbench's flag check")
    return {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "action": kind,
        "nargs": nargs,
        "const": action.const,
        "default": action.default,
        "type": None if action.type is None else TYPE_NAMES[action.type],
        "choices": None if action.choices is None else sorted(action.choices),
        "required": bool(action.required),
    }


def router_options() -> list[dict[str, Any]]:
    """The router's options, read with an empty environment: the Oracle, PostgreSQL and Redis flags take
    their defaults from variables (ATP_PASSWORD, REDIS_URL, ...), and this machine's must not end up in the
    table."""
    parser = argparse.ArgumentParser(prog="sglang-router launch")
    with mock.patch.dict(os.environ, clear=True):
        RouterArgs.add_cli_args(parser, use_router_prefix=False)
    options = [describe_action(action) for action in parser._actions if action.dest != "help"]
    return sorted(options, key=lambda option: option["option_strings"])


def main() -> int:
    options = router_options()
    # One option per line keeps the file reviewable: a regeneration's diff names the flags that changed.
    OUTPUT.write_text(
        "{\n"
        f' "sglang_router_version": {json.dumps(sglang_router.__version__)},\n'
        ' "generated_by": "tools/gen_router_flags.py from RouterArgs.add_cli_args",\n'
        ' "options": [\n  ' + ",\n  ".join(json.dumps(option) for option in options) + "\n ]\n"
        "}\n"
    )
    print(f"wrote {len(options)} options to {OUTPUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
