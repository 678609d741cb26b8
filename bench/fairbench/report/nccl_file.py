"""A host's nccl.json (``fairbench nccl``, fairbench/nccl/runner.py's ``assemble``) as the report reads it:
what is well-formed of it, and the problems naming the file and the key path of the rest."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fairbench.measure.json_rules import (
    FileReader,
    Rule,
    element,
    is_byte_count,
    is_list,
    is_positive,
    is_text,
    list_of,
    object_of,
    or_null,
    rule_errors,
    whole,
)
from fairbench.nccl.runner import DECODE, PREFILL
from fairbench.nccl.runner import RESULT_FILE as NCCL_FILE
from fairbench.report.figures import non_finite_text

NCCL_RULES: tuple[Rule, ...] = (Rule("variants", "a list", is_list, True),)
NCCL_FACT_RULES: tuple[Rule, ...] = (
    *(Rule(key, "a whole number of at least 1", whole(1), False) for key in ("gpus", "hidden_size", "iters")),
    Rule("graph_ops", "null or a whole number of at least 1", or_null(whole(1)), False),
    *(Rule(key, "null or a string", or_null(is_text), False) for key in ("device", "torch", "nccl")),
)
"""What the section's heading paragraph says of the measurement; a key that breaks its rule is left out."""
NCCL_VARIANT_RULES: tuple[Rule, ...] = (
    Rule("name", "a string", is_text, True),
    Rule("env", "an object of strings", object_of(is_text), True),
    Rule("configs", "a list of strings", list_of(is_text), True),
    Rule("error", "null or a string", or_null(is_text), False),
    Rule("sizes", "a list", is_list, True),
)
NCCL_SIZE_RULES: tuple[Rule, ...] = (
    Rule("bytes", "a whole number of at least 1", is_byte_count, True),
    Rule("scale", f"{DECODE} or {PREFILL}", lambda value: value in (DECODE, PREFILL), True),
    Rule("tokens", "null or a whole number of at least 1", or_null(whole(1)), True),
)
NCCL_MODES = ("eager", "graph")
"""The launch modes of a size: each an object of figures, or null where not measured so."""
NCCL_TIMING_KEYS = ("median_us", "p10_us", "p90_us", "busbw_gbps")
NCCL_TIMING_RULES: tuple[Rule, ...] = tuple(
    Rule(key, "a positive number", is_positive, True) for key in NCCL_TIMING_KEYS
)


def _nccl_timing(value: object, where: str, problems: list[str]) -> dict[str, Any] | None:
    """One launch mode's figures of one size; None where unmeasured (null) or unusable (named)."""
    if value is None:
        return None
    timing = element(value, NCCL_TIMING_RULES, where, "measurement", problems)
    if timing is not None:
        problems += [
            f"{where}.{key} is {non_finite_text(timing[key])}, shown as such"
            for key in NCCL_TIMING_KEYS
            if not math.isfinite(timing[key])
        ]
    return timing


def _nccl_size(value: object, where: str, problems: list[str]) -> dict[str, Any] | None:
    size = element(value, NCCL_SIZE_RULES, where, "size", problems)
    if size is None:
        return None
    timings = {mode: _nccl_timing(size.get(mode), f"{where}.{mode}", problems) for mode in NCCL_MODES}
    return {**size, **timings}


def _nccl_variant(value: object, where: str, problems: list[str]) -> dict[str, Any] | None:
    variant = element(value, NCCL_VARIANT_RULES, where, "variant", problems)
    if variant is None:
        return None
    sizes = [
        _nccl_size(size, f"{where}.sizes[{index}]", problems) for index, size in enumerate(variant["sizes"])
    ]
    return {**variant, "sizes": [size for size in sizes if size is not None]}


def _nccl_facts(document: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """``document`` without the facts that break their rule, each named."""
    kept = dict(document)
    for rule in NCCL_FACT_RULES:
        errors = rule_errors(document, [rule])
        if errors:
            problems += [f"{error}; not shown" for error in errors]
            del kept[rule.key]
    return kept


def load_nccl(host_dir: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """A host's nccl.json holding only its well-formed facts, variants, sizes and measurements (None when
    the file cannot be used at all), and the problems naming the file and the key path of the rest."""
    files = FileReader(host_dir)
    document = files.json_object(NCCL_FILE, NCCL_RULES)
    if document is None:
        return None, files.problems
    problems: list[str] = []
    checked = _nccl_facts(document, problems)
    variants = [
        _nccl_variant(value, f"variants[{index}]", problems)
        for index, value in enumerate(document["variants"])
    ]
    checked["variants"] = [variant for variant in variants if variant is not None]
    return checked, [f"{host_dir / NCCL_FILE}: {problem}" for problem in problems]


def run_nccl(run_dir: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every host's usable nccl.json, by host, and the problems of them all."""
    found: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for path in sorted(run_dir.glob(f"*/{NCCL_FILE}")):
        document, named = load_nccl(path.parent)
        problems += named
        if document is not None:
            found[path.parent.name] = document
    return found, problems
