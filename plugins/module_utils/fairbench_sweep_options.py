"""The argument spec of the options of a fairbench sweep, shared by the modules that run one; the doc
fragment fairbench.fairbench.sweep documents them."""

from __future__ import annotations

from typing import Any

SWEEP_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "url": {"type": "str", "required": True},
    "workload": {"type": "dict", "required": True},
    "data_dir": {"type": "path"},
    "out": {"type": "path", "required": True},
    "model": {"type": "str"},
    "gpus": {"type": "int"},
    "energy_gpus": {"type": "list", "elements": "int"},
    "remeasure_failed": {"type": "bool", "default": False},
    "identity": {
        "type": "dict",
        "options": {name: {"type": "str"} for name in ("campaign", "run_id", "host", "config")},
    },
    "repeats": {"type": "list", "elements": "int"},
    "extend_repeats": {"type": "bool", "default": True},
    "slo": {"type": "dict", "default": {}},
    "client_processes": {"type": "int"},
}
