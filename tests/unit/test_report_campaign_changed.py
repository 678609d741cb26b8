"""A run whose campaign changed during it (a resume allowed to change it keeps each earlier campaign as
campaign.<n>.json): the report's first screen says so, each change with the key paths that differ."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.report_files import first_screen, markdown, point, replaced, write_run

from fairbench.report.load import load_run

CHANGED = "changed during the run (a resume allowed it)"
POINTS = [point(1), point(4), point(16)]


def test_each_change_of_the_campaign_is_a_threat_on_the_first_screen_with_what_differs(
    tmp_path: Path,
) -> None:
    run_dir = write_run(tmp_path, {"tp8": POINTS, "ep4": POINTS})
    campaign = json.loads((run_dir / "campaign.json").read_text())
    (run_dir / "campaign.1.json").write_text(json.dumps(replaced(campaign, "workload.seed", 7)))
    (run_dir / "campaign.2.json").write_text(json.dumps(replaced(campaign, "configs.ep4.nodes", 2)))
    # Not a campaign: named with the results files' problems, and left out of the changes.
    (run_dir / "campaign.3.json").write_text("[]")
    screen = first_screen(markdown(load_run(run_dir)))
    alert = next(block for block in screen.split("\n\n") if CHANGED in block)
    assert alert.splitlines() == [
        "> [!CAUTION]",
        "> **The campaign of run run1 changed during the run (a resume allowed it): the points measured "
        "before a change were measured under the campaign before it, and this report shows them under "
        "campaign.json's.**",
        "> - `campaign.1.json` -> `campaign.2.json`: configs.ep4.nodes: 1 -> 2; workload.seed: 7 -> 1",
        "> - `campaign.2.json` -> `campaign.json`: configs.ep4.nodes: 2 -> 1",
    ]
    assert f"{run_dir / 'campaign.3.json'}: [] is not a JSON object" in screen


def test_a_run_whose_campaign_never_changed_says_nothing_of_it(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, {"tp8": POINTS})
    # An earlier campaign that differs only in what changes nothing measured is no change.
    campaign = json.loads((run_dir / "campaign.json").read_text())
    (run_dir / "campaign.1.json").write_text(json.dumps(replaced(campaign, "source", "elsewhere/demo.yml")))
    assert CHANGED not in markdown(load_run(run_dir))


def test_a_comparison_says_which_runs_campaign_changed(tmp_path: Path) -> None:
    run_a = write_run(tmp_path, {"tp8": POINTS}, run_id="a")
    run_b = write_run(tmp_path, {"tp8": POINTS}, run_id="b")
    campaign = json.loads((run_b / "campaign.json").read_text())
    (run_b / "campaign.1.json").write_text(json.dumps(replaced(campaign, "workload.seed", 7)))
    report = markdown(load_run(run_a), load_run(run_b))
    assert "The campaign of run b changed" in report and "The campaign of run a changed" not in report
    assert "> - `campaign.1.json` -> `campaign.json`: workload.seed: 7 -> 1" in report
