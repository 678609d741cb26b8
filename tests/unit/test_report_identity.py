"""The report against what point lines name as their sweep: a line naming another config or campaign than
where it lies is named, and shown where it lies; lines naming nothing (older trees), or a by-hand host, pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.report_files import CAMPAIGN, lines, point

from fairbench.report.load import load_run
from fairbench.report.tree import ConfigResult

TREE = {"campaign": CAMPAIGN["name"], "run_id": "run1", "host": "lab1", "config": "tp8"}


def tp8(tmp_path: Path, *points: dict[str, Any]) -> ConfigResult:
    """tp8 on lab1, the run's one config, holding ``points``, as the report loads it."""
    run = tmp_path / CAMPAIGN["name"] / "run1"
    config = run / "lab1" / "tp8"
    config.mkdir(parents=True)
    (run / "campaign.json").write_text(
        json.dumps({**CAMPAIGN, "configs": {"tp8": CAMPAIGN["configs"]["tp8"]}})
    )
    (config / "status.json").write_text('{"status": "ok"}')
    (config / "points.jsonl").write_bytes(lines(*points))
    (result,) = load_run(run).results
    return result


def test_lines_naming_another_config_are_named_once_and_shown_where_they_lie(tmp_path: Path) -> None:
    elsewhere = {**TREE, "config": "ep4"}
    result = tp8(tmp_path, point(1, **TREE), point(2, **elsewhere), point(4, **elsewhere))
    assert [found["point_id"] for found in result.points] == ["c1-r0", "c2-r0", "c4-r0"]
    assert result.problems == (
        f'{result.path / "points.jsonl"}:2: 2 point(s) name config "ep4" where the tree says "tp8"; '
        "shown as the tree says",
    )


def test_a_line_naming_another_campaign_is_named(tmp_path: Path) -> None:
    result = tp8(tmp_path, point(1, **{**TREE, "campaign": "other"}))
    assert result.problems == (
        f'{result.path / "points.jsonl"}:1: 1 point(s) name campaign "other" where the tree says '
        f'"{CAMPAIGN["name"]}"; shown as the tree says',
    )


def test_lines_naming_nothing_or_a_by_hand_host_pass(tmp_path: Path) -> None:
    by_hand = {**TREE, "campaign": None, "run_id": None, "host": "my-laptop", "config": None}
    result = tp8(tmp_path, point(1), point(2, **by_hand), point(4, **TREE))
    assert len(result.points) == 3
    assert result.problems == ()
