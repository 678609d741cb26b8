"""Results files written by hand for the report's tests: point lines, the demo campaign's campaign.json and
copies of it with one key changed, and the part of a report its reader sees first."""

from __future__ import annotations

import json
from typing import Any

from tests.support.results_tree import REPO

from fairbench.campaign.load import load_campaign
from fairbench.measure.results import point_id

CAMPAIGN = load_campaign(REPO / "campaigns" / "demo.yml").to_json()


def point(concurrency: int, repeat: int = 0, **figures: Any) -> dict[str, Any]:
    """A point line of 16 completed requests; ``figures`` replace or add metrics."""
    return {
        "point_id": point_id(concurrency, repeat),
        "max_concurrency": concurrency,
        "repeat": repeat,
        "completed": 16,
        "failed": 0,
        "output_throughput": 100.0 * concurrency + repeat,
        "median_ttft_ms": 10.0,
        "p99_ttft_ms": 20.0,
        "median_tpot_ms": 1.0,
        **figures,
    }


def lines(*points: dict[str, Any]) -> bytes:
    """points.jsonl holding ``points``."""
    return b"".join(json.dumps(item).encode() + b"\n" for item in points)


def _copy_and_holder(data: dict[str, Any], dotted: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    copy = json.loads(json.dumps(data))
    *parents, last = dotted.split(".")
    holder = copy
    for key in parents:
        holder = holder[key]
    return copy, holder, last


def without(data: dict[str, Any], dotted: str) -> dict[str, Any]:
    """A copy of ``data`` without the key at the dotted path."""
    copy, holder, last = _copy_and_holder(data, dotted)
    del holder[last]
    return copy


def replaced(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at the dotted path."""
    copy, holder, last = _copy_and_holder(data, dotted)
    holder[last] = value
    return copy


def first_screen(report: str) -> str:
    """What the report says before its headline table."""
    return report[: report.index("## Headline")]
