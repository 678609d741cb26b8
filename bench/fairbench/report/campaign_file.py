"""A run's campaign.json as the report reads it: every key the report reads checked. The report cannot
be written without it, so a campaign.json it cannot use is a ``ResultsError``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fairbench.campaign.model import PLACEMENTS, workload_path, workloads_json
from fairbench.fleet.campaign_record import earlier
from fairbench.measure.decision import DECIDE_KEYS
from fairbench.measure.json_rules import (
    FileReader,
    Rule,
    is_mapping,
    is_positive,
    is_text,
    is_whole,
    list_of,
    or_null,
    parse_object,
    rule_errors,
    shown,
    whole,
)
from fairbench.measure.results import CAMPAIGN_FILE, ResultsError


def is_repeats(value: object) -> bool:
    """campaign.json's ``workload.repeats``: a whole number of at least 1, or automatic repeats' mapping
    (``measure.repeats.AutoRepeats.to_json``)."""
    if isinstance(value, Mapping):
        keys = ("min", "max", "half_width_pct")
        return (
            set(value) == set(keys)
            and is_whole(value["min"], 2)
            and is_whole(value["max"], 2)
            and is_positive(value["half_width_pct"])
        )
    return is_whole(value, 1)


def is_decide(value: object) -> bool:
    """campaign.json's ``decide``: ``measure.decision.DecideRule.to_json``'s mapping."""
    return (
        isinstance(value, Mapping)
        and "margin_pct" in value
        and set(value) <= set(DECIDE_KEYS)
        and is_positive(value["margin_pct"])
        and isinstance(value.get("baseline", ""), str)
    )


def is_placement(value: object) -> bool:
    return isinstance(value, str) and value in PLACEMENTS


_SECTIONS = ("args", "env", "sim")
CAMPAIGN_RULES: tuple[Rule, ...] = (
    Rule("name", "a string", is_text, True),
    Rule("engine", "a string", is_text, True),
    Rule("model", "a string", is_text, True),
    Rule("configs", "an object", is_mapping, True),
    Rule("workloads", "an object", is_mapping, False),
    Rule("slo", "an object", is_mapping, False),
    Rule("decide", "null or {margin_pct: a positive number, baseline: a config}", or_null(is_decide), False),
    Rule("warnings", "a list of strings", list_of(is_text), False),
    Rule("placement", " or ".join(PLACEMENTS), is_placement, False),
    Rule("accept_host_differences", "a list of strings", list_of(is_text), False),
)
WORKLOAD_RULES: tuple[Rule, ...] = (
    Rule("api", "a string", is_text, True),
    Rule("input_len", "a whole number", whole(0), True),
    Rule("output_len", "a whole number", whole(0), True),
    # A closed loop's levels, or an open loop's rates: the campaign package refuses a workload with neither.
    Rule("concurrency", "a list of whole numbers of at least 1", list_of(whole(1)), False),
    Rule("request_rate", "a list of positive numbers", list_of(is_positive), False),
    Rule("repeats", "a whole number of at least 1, or {min, max, half_width_pct}", is_repeats, False),
)
"""What each workload must hold where it holds it: campaign.json's ``workload``, or each of its
``workloads`` (``campaign.model.workloads_to_json``)."""
CONFIG_RULES: tuple[Rule, ...] = (
    *(Rule(section, "an object", is_mapping, False) for section in _SECTIONS),
    Rule("declared", "an object", is_mapping, False),
    *(Rule(f"declared.{section}", "an object", is_mapping, False) for section in _SECTIONS),
    Rule("unset", "an object", is_mapping, False),
    *(Rule(f"unset.{section}", "a list of strings", list_of(is_text), False) for section in _SECTIONS),
    Rule("nodes", "a whole number of at least 1", whole(1), False),
    Rule("gpus_per_node", "null or a whole number", or_null(whole(0)), False),
    Rule("hosts", "null or a string", or_null(is_text), False),
)
"""What each entry of campaign.json's ``configs`` must hold where it holds it."""


def load_campaign_file(run_dir: Path) -> dict[str, Any]:
    """``run_dir``'s campaign.json, checked (``CAMPAIGN_RULES``, ``CONFIG_RULES``); ``ResultsError`` naming
    the file and each broken rule."""
    path = run_dir / CAMPAIGN_FILE
    try:
        campaign = parse_object(path.read_bytes())
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing: is {run_dir} a run (results/<campaign>/<run_id>)?") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ResultsError(f"{path}: {exc}") from None
    errors = rule_errors(campaign, CAMPAIGN_RULES) + _workload_errors(campaign)
    configs = campaign.get("configs")
    for name, entry in configs.items() if isinstance(configs, dict) else ():
        prefix = f"configs.{name}"
        errors += (
            rule_errors(entry, CONFIG_RULES, prefix + ".")
            if isinstance(entry, dict)
            else [f"{prefix}: {shown(entry)} is not an object"]
        )
    if errors:
        raise ResultsError(f"{path}: {'; '.join(errors)}")
    return campaign


def _workload_errors(campaign: dict[str, Any]) -> list[str]:
    """``workload`` or ``workloads`` (exactly one), each workload by ``WORKLOAD_RULES``."""
    if ("workload" in campaign) == ("workloads" in campaign):
        both = "workload" in campaign
        return ["workloads: and workload both given" if both else "workload: required key is missing"]
    if not isinstance(campaign.get("workloads", {}), dict):
        return []  # CAMPAIGN_RULES says so
    errors = []
    for name, workload in workloads_json(campaign).items():
        where = workload_path(name)
        errors += (
            rule_errors(workload, WORKLOAD_RULES, where + ".")
            if isinstance(workload, dict)
            else [f"{where}: {shown(workload)} is not an object"]
        )
    return errors


def load_earlier_campaigns(run_dir: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The campaigns the run ran under before campaign.json's (``campaign.<n>.json``, kept by a resume
    allowed to change the campaign: fairbench.fleet.campaign_record), oldest first, each as its file's name
    and content; and the problems of those left out, not a JSON object or unreadable, each naming its file.
    The report only compares them, so no rule of campaign.json's is asked of them."""
    files = FileReader(run_dir)
    found = [
        (path.name, campaign)
        for path in earlier(run_dir)
        if (campaign := files.json_object(path.name)) is not None
    ]
    return found, files.problems
