"""A valid campaign document and its edits, read as ``fairbench validate`` reads a file: the campaign
tests' shared ground."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import Campaign
from fairbench.campaign.schema import campaign_schema

SOURCE = "campaigns/x.yml"
VALIDATOR = jsonschema.Draft202012Validator(campaign_schema())
DELETE = object()

VALID: dict[str, Any] = {
    "name": "k26",
    "engine": "sglang",
    "model": "moonshotai/Kimi-K2.6",
    "common": {"args": {"max-running-requests": 256}},
    "configs": {"tp8": {"args": {"tp-size": 8}}, "tp8-ll": {"extends": "tp8", "env": {"NCCL_PROTO": "LL"}}},
    "workload": {
        "api": "completions",
        "dataset": "random-ids",
        "input_len": 1024,
        "output_len": 512,
        "concurrency": [1, 2, 4],
        "prompts_per_level": "10x",
        "warmup": "2x",
    },
}


def changed(workload: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """VALID with top-level keys set and workload keys set (``DELETE`` removes one)."""
    document = copy.deepcopy(VALID)
    document.update(top)
    for key, value in (workload or {}).items():
        if value is DELETE:
            document["workload"].pop(key, None)
        else:
            document["workload"][key] = value
    return document


def parse(document: object) -> Campaign:
    return parse_campaign(yaml.safe_dump(document, sort_keys=False), SOURCE, Path())


def errors_of(document: object) -> list[str]:
    with pytest.raises(CampaignError) as caught:
        parse(document)
    return [message.removeprefix(f"{SOURCE}: ") for message in caught.value.messages]


def warnings_of(document: object) -> list[str]:
    return [message.removeprefix(f"{SOURCE}: ") for message in parse(document).warnings]
