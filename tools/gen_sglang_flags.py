"""Regenerate ``bench/fairbench/sim/sglang_flags.json`` from SGLang's real argument parser.

``fairbench sim`` must accept exactly the flags ``python -m sglang.launch_server`` accepts, so the flag
table is read from SGLang itself rather than written by hand. Run this with a Python that can import
``sglang.srt.server_args`` (SGLang installed with ``--no-deps`` plus the few packages that import needs,
and a CPU torch), never with the project's own venv::

    python3.11 -m venv /tmp/sglang-venv
    /tmp/sglang-venv/bin/pip install torch==2.13.0
    /tmp/sglang-venv/bin/pip install --no-deps sglang==0.5.23   # or the wheel file
    /tmp/sglang-venv/bin/pip install numpy orjson psutil pybase64 requests triton packaging pillow \\
        starlette msgspec pydantic pyzmq tqdm ipython aiohttp
    /tmp/sglang-venv/bin/python tools/gen_sglang_flags.py

The output has two parts: ``options``, one entry per command-line option with what argparse needs to
re-create it (option strings, action kind, nargs, const, default, the *name* of the value converter,
choices, required), and ``fields``, every ``ServerArgs`` field with its declared default, which is what
``/server_info`` lists when a flag is not given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import sglang
from sglang.srt.arg_groups.arg_utils import record_fields
from sglang.srt.server_args import ServerArgs

OUTPUT = Path(__file__).resolve().parent.parent / "bench" / "fairbench" / "sim" / "sglang_flags.json"

# argparse action classes by the kind the simulator re-creates them as. SGLang's deprecated boolean
# flags still store True (they only add a warning), and its LoRA path action stores the list it is given.
ACTION_KINDS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "BooleanOptionalAction": "boolean_optional",
    "DeprecatedStoreTrueAction": "store_true",
    "LoRAPathAction": "store",
}


def json_value(value: Any) -> Any:
    """A default or const as JSON: plain values as they are, anything else as its ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (set, frozenset)):  # e.g. --sampling-backend's choices: sorted, so reruns agree
        return sorted(json_value(item) for item in value)
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_value(item) for key, item in value.items()}
    return str(value)


def describe_action(action: argparse.Action) -> dict[str, Any]:
    class_name = type(action).__name__
    if class_name == "DeprecatedStoreConstAction":
        # ``--monokernel-backend amd``: takes one value from its choices and stores a fixed constant.
        kind = "store_const_value" if action.nargs is None else "store_const"
        const = action.const_value  # type: ignore[attr-defined]
    elif class_name in ACTION_KINDS:
        kind = ACTION_KINDS[class_name]
        const = action.const
    else:
        raise SystemExit(
            f"unknown argparse action {class_name} for {action.option_strings}: teach this script"
        )
    converter = action.type
    return {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "action": kind,
        "nargs": action.nargs if kind in ("store", "store_const_value") else None,
        "const": json_value(const),
        "default": json_value(action.default),
        "type": None if converter is None else getattr(converter, "__name__", str(converter)),
        "choices": None if action.choices is None else json_value(action.choices),
        "required": bool(action.required),
    }


def field_defaults() -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for field in record_fields(ServerArgs):
        if field.default_factory is not msgspec.NODEFAULT:
            defaults[field.name] = json_value(field.default_factory())
        elif field.default is msgspec.NODEFAULT:
            defaults[field.name] = None  # required (model_path): no default to report
        else:
            defaults[field.name] = json_value(field.default)
    return defaults


def main() -> int:
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    options = [describe_action(action) for action in parser._actions if action.dest != "help"]
    fields = field_defaults()
    # One option per line keeps the file reviewable: a regeneration's diff names the flags that changed.
    OUTPUT.write_text(
        "{\n"
        f' "sglang_version": {json.dumps(sglang.__version__)},\n'
        ' "generated_by": "tools/gen_sglang_flags.py from ServerArgs.add_cli_args",\n'
        ' "options": [\n  ' + ",\n  ".join(json.dumps(option) for option in options) + "\n ],\n"
        f' "fields": {json.dumps(fields)}\n'
        "}\n"
    )
    print(f"wrote {len(options)} options and {len(fields)} fields to {OUTPUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
