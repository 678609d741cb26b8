"""A campaign of several workloads (``workloads:``, by name): what is taken, what is refused with its exact
message, campaign.json's form and the way back, and the schema's agreement with the loader."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from tests.support.campaign_documents import VALID, VALIDATOR, errors_of, parse

from fairbench.campaign.model import (
    SINGLE_WORKLOAD,
    repeats_json,
    workload_dir,
    workloads_json,
)

AGENTIC = {
    "api": "generate",
    "dataset": "multi-turn",
    "output_len": 64,
    "concurrency": [1, 2],
    "prompts_per_level": "4x",
    "warmup": 0,
    "multi_turn": {"turns": 3, "system_prompt_len": 2000, "user_len": 64},
}


def several(**workloads: Any) -> dict[str, Any]:
    """VALID with its workload named ``random`` beside the given ones (None drops a name)."""
    document = copy.deepcopy(VALID)
    named = {"random": document.pop("workload"), "agentic": AGENTIC} | workloads
    document["workloads"] = {name: entry for name, entry in named.items() if entry is not None}
    return document


def test_each_named_workload_is_checked_and_kept_in_the_files_order() -> None:
    campaign = parse(several())
    assert list(campaign.workloads) == ["random", "agentic"]
    assert campaign.workloads["agentic"].multi_turn is not None
    assert campaign.workloads["random"].input_len == VALID["workload"]["input_len"]
    assert not list(VALIDATOR.iter_errors(several()))


def test_several_workloads_may_share_automatic_repeats() -> None:
    auto = {"min": 2, "max": 4}
    campaign = parse(
        several(random={**VALID["workload"], "repeats": auto}, agentic={**AGENTIC, "repeats": auto})
    )
    assert repeats_json(campaign.to_json()) == {"min": 2, "max": 4, "half_width_pct": 2.0}


def test_campaign_json_keeps_workload_for_one_and_workloads_for_several() -> None:
    one = parse(VALID).to_json()
    assert "workload" in one and "workloads" not in one
    assert list(workloads_json(one)) == [SINGLE_WORKLOAD]
    named = parse(several()).to_json()
    assert "workload" not in named and list(named["workloads"]) == ["random", "agentic"]
    assert list(workloads_json(named)) == ["random", "agentic"]
    assert repeats_json(named) == repeats_json(one) == 1


def test_a_named_workloads_sweep_writes_below_its_config_and_the_one_workloads_in_it() -> None:
    config_dir = Path("/results/demo/run1/lab1/tp8")
    assert workload_dir(config_dir, SINGLE_WORKLOAD) == config_dir
    assert workload_dir(config_dir, "agentic") == config_dir / "agentic"


def test_an_error_inside_a_named_workload_names_its_path() -> None:
    broken = {**AGENTIC, "output_len": -1}
    assert any(
        error.startswith("workloads.agentic.output_len: ") for error in errors_of(several(agentic=broken))
    )


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {**copy.deepcopy(VALID), "workloads": {"other": VALID["workload"]}},
            "workloads: and workload both given: give the one workload, or the named ones",
        ),
        (
            {key: value for key, value in VALID.items() if key != "workload"},
            "workload: required key is missing",
        ),
        (
            {**{key: value for key, value in VALID.items() if key != "workload"}, "workloads": {}},
            "workloads: must name at least one workload",
        ),
        (
            several(ranks=AGENTIC),
            "workloads.ranks: 'ranks' is not a workload name: letters, digits, '-' and '_', starting with a "
            "letter, at most 64, not ranks (a config's directory has it)",
        ),
        (
            several(**{"1st": AGENTIC}),
            "workloads.1st: '1st' is not a workload name: letters, digits, '-' and '_', starting with a "
            "letter, at most 64, not ranks (a config's directory has it)",
        ),
        (
            several(agentic={**AGENTIC, "repeats": 2}),
            "workloads.agentic.repeats: 2 differs from random's 1: a job sweeps every workload on its "
            "server, so they share their repeats",
        ),
        (
            several(agentic={**AGENTIC, "repeats": {"min": 2, "max": 4}}),
            'workloads.agentic.repeats: {"min": 2, "max": 4, "half_width_pct": 2.0} differs from '
            "random's 1: a job sweeps every workload on its server, so they share their repeats",
        ),
    ],
    ids=["both", "neither", "empty", "reserved-name", "bad-name", "repeats-differ", "auto-against-count"],
)
def test_each_rule_of_several_workloads_has_its_exact_message(document: dict[str, Any], message: str) -> None:
    assert message in errors_of(document)
    if ".repeats: " not in message:  # the schema does not compare one workload's repeats with another's
        assert list(VALIDATOR.iter_errors(document)), f"the schema takes what the loader refuses: {message}"


def test_two_workloads_reading_files_of_one_name_are_refused(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "chat.json").write_text("[]", encoding="utf-8")
    sharegpt = {**VALID["workload"], "dataset": "sharegpt"}
    document = several(
        random={**sharegpt, "dataset": str(tmp_path / "a" / "chat.json")},
        agentic={**sharegpt, "dataset": str(tmp_path / "b" / "chat.json")},
    )
    assert any(
        error.startswith("workloads.agentic: reads ") and "each host keeps one copy of a name" in error
        for error in errors_of(document)
    )
