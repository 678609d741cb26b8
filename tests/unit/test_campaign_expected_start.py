"""The campaign's ``expected_start_s``: its rules and messages, and campaign.json with and without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import Campaign
from fairbench.campaign.schema import campaign_schema

CAMPAIGNS = Path(__file__).resolve().parents[2] / "campaigns"
DEMO: dict[str, Any] = yaml.safe_load((CAMPAIGNS / "demo.yml").read_text())


def demo(**top: Any) -> Campaign:
    return parse_campaign(yaml.safe_dump({**DEMO, **top}), "x.yml", CAMPAIGNS)


def test_a_declared_start_is_kept_and_campaign_json_holds_it_only_then() -> None:
    declared = demo(expected_start_s=90.5)
    assert declared.expected_start_s == 90.5
    assert declared.to_json()["expected_start_s"] == 90.5
    assert demo(expected_start_s=0).expected_start_s == 0.0
    # A campaign without it records what it recorded before the key existed: a resume compares equal.
    assert "expected_start_s" not in demo().to_json()


@pytest.mark.parametrize(
    ("top", "message"),
    [
        ({"expected_start_s": -1}, "expected_start_s: must be a number from 0 to 604800 seconds, got -1"),
        ({"expected_start_s": True}, "expected_start_s: must be a number from 0 to 604800 seconds, got true"),
        ({"expected_start_s": "5"}, "expected_start_s: must be a number from 0 to 604800 seconds, got '5'"),
        (
            {"expected_start_s": 900, "start_timeout_s": 600},
            "expected_start_s: 900 is above start_timeout_s 600: every server would time out first",
        ),
    ],
)
def test_a_start_that_cannot_be_is_refused_naming_file_key_and_rule(
    top: dict[str, Any], message: str
) -> None:
    with pytest.raises(CampaignError) as raised:
        demo(**top)
    assert raised.value.messages == [f"x.yml: {message}"]


def test_a_start_within_the_timeout_is_accepted() -> None:
    assert demo(expected_start_s=600, start_timeout_s=600).expected_start_s == 600.0


def test_the_schema_describes_the_key_with_its_range() -> None:
    described = campaign_schema()["properties"]["expected_start_s"]
    assert (described["type"], described["minimum"], described["maximum"]) == ("number", 0.0, 604800.0)
