"""The demo campaign's verdict, from real sweeps of all its configs against the simulator.

The profile the demo runs (``kimi-k2.6-8xpro6000``) is calibrated to the campaign that motivated fairbench:
TP8 the fastest for one user, EP4 the most throughput at the peak and at the highest load a per-user speed
allows, EP8 with EPLB the slowest everywhere. The demo's report must open with that answer. The campaign
runs five times faster here than in ``make demo`` (its SLO scaled with it), one server per config.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from tests.support.results_tree import REPO, build_run, fairbench_report

from fairbench.campaign.load import parse_campaign

# Timing-sensitive (the configs' order is a few per cent of throughput, which a loaded machine's noise
# reverses): make test runs these alone.
pytestmark = pytest.mark.timing

DEMO = REPO / "campaigns" / "demo.yml"
SPEED_UP = 5


def test_the_demo_verdict_names_tp8_ep4_and_eplb_in_the_order_its_profile_implies(tmp_path: Path) -> None:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["common"]["sim"]["sim-time-scale"] /= SPEED_UP
    data["slo"] = {key: limit / SPEED_UP for key, limit in data["slo"].items()}
    data["workload"]["warmup"] = 0
    campaign = parse_campaign(yaml.safe_dump(data, sort_keys=False), str(DEMO), DEMO.parent)
    run_dir = build_run(tmp_path, campaign, "demo")
    report = fairbench_report(run_dir)
    assert report.returncode == 0, report.stderr
    text = (run_dir / "report.md").read_text()
    verdict = text[text.index("## Verdict") : text.index("## Headline")]
    orders = {
        regime: re.split(r" [>≈?] ", order)
        for regime, order in re.findall(r"^- \*\*([^*]+)\*\*.* Order: (.+)\.$", verdict, re.MULTILINE)
    }
    assert set(orders) == {"Lowest load", "Peak throughput", "Highest load under the SLO"}, verdict
    lowest, peak, under_slo = (
        orders["Lowest load"],
        orders["Peak throughput"],
        orders["Highest load under the SLO"],
    )
    assert set(lowest[:2]) == {"tp8", "tp8-nccl"}, lowest  # the same layout: which leads is noise
    assert peak[0] == "ep4" and under_slo[0] == "ep4", (peak, under_slo)
    assert peak.index("ep8") < peak.index("tp8"), peak
    assert lowest[-1] == peak[-1] == under_slo[-1] == "ep8-eplb"
    assert "**ep4** at C=" in verdict.split("- **Peak throughput**")[1].split("\n")[0]
