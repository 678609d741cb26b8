"""The verdict on results trees from real sweeps against ``fairbench sim``, whose truth is known.

Two configs serve the same model, one slower by a known factor (its ``--sim-time-scale``), and both vary
from point to point by a known amount (``--sim-noise``: one speed factor per point, each config's servers
seeded apart, so their draws are independent). The report must call a difference the noise cannot
explain significant, and one it can explain within noise: whatever the sweep measured, the verdict is
judged against what the simulator was told.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.support.results_tree import REPO, build_run, fairbench_report

from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import Campaign

# Timing-sensitive (significance depends on the measured noise, which other tests' load adds to): make test
# runs these alone.
pytestmark = pytest.mark.timing


def campaign(slower_pct: float, repeats: object) -> Campaign:
    """``fast`` and ``slow``, the latter ``slower_pct`` % slower, both with 3 % noise per point."""
    # The generic profile at its own speed: a point of 2 x C requests of 32 tokens lasts about a second.
    scale = 1.0
    text = yaml.safe_dump(
        {
            "name": "truth",
            # One host sweeping each config's repeats itself, one config after the other: no rounds.
            "placement": "every-host",
            "engine": "sim",
            "model": "sim/test-model",
            "common": {"args": {"max-running-requests": 64}, "sim": {"sim-noise": 3}},
            "configs": {
                "fast": {"sim": {"sim-time-scale": scale, "sim-seed": 1}},
                "slow": {"sim": {"sim-time-scale": scale * (1 + slower_pct / 100), "sim-seed": 2}},
            },
            "workload": {
                "api": "completions",
                "dataset": "random-ids",
                "input_len": 64,
                "output_len": 32,
                "concurrency": [2, 8],
                "prompts_per_level": "2x",
                "warmup": 0,
                "repeats": repeats,
                "vocab_size": 30000,
            },
        },
        sort_keys=False,
    )
    return parse_campaign(text, "truth.yml", REPO)


def verdict_of(run_dir: Path) -> str:
    report = fairbench_report(run_dir)
    assert report.returncode == 0, report.stderr
    text = (run_dir / "report.md").read_text()
    return text[text.index("## Verdict") : text.index("## Headline")]


def test_configs_1_percent_apart_under_3_percent_noise_are_within_noise(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path, campaign(1.0, 3), "close")
    verdict = verdict_of(run_dir)
    lines = [line for line in verdict.splitlines() if line.startswith("- **")]
    assert len(lines) == 2, verdict  # lowest load and peak: no SLO
    assert all("within noise" in line and "significant" not in line for line in lines), verdict


def test_configs_10_percent_apart_are_significant_after_enough_automatic_repeats(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path, campaign(10.0, {"min": 3, "max": 10, "half_width_pct": 2}), "apart")
    verdict = verdict_of(run_dir)
    lines = [line for line in verdict.splitlines() if line.startswith("- **")]
    assert len(lines) == 2, verdict
    for line in lines:
        assert "**fast**" in line.split("over")[0] and ": significant" in line, line
    points = [
        line
        for config in ("fast", "slow")
        for line in (run_dir / "lab1" / config / "points.jsonl").read_text().splitlines()
    ]
    assert len(points) > 2 * 2 * 3, "the noise needed more than the minimum of repeats"
