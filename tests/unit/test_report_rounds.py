"""What the rounds of a spread run show (fairbench.report.rounds): each round's effect and each host's,
from hand-built points with a known round drift or host offset, the baseline's drift, the Rounds section
and the drift sentinel on the first screen. Each point's throughput is its config's base x the factor of
its round (or host); each effect expected here is 100 x (factor / the mean factor - 1), which is what every
config deviates by when the factors are the same for all."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.support.report_files import first_screen, lines, markdown, point, section, table, write_run

from fairbench.report.blocks import Paragraph, Table
from fairbench.report.build import headlines
from fairbench.report.load import Run, load_run
from fairbench.report.rounds import ROUNDS_TITLE, baseline_drift_pct_of, drift_alerts, rounds_blocks

BASES = {"tp8": 1000.0, "ep4": 1200.0, "ep8": 900.0}
"""Each config's output tok/s at C=4 (its peak: C=1 runs at a quarter of it) before any factor."""
SLOWER_LAST = (1.0, 1.0, 0.97)
"""Round 2 ran 3 % slower for every config."""


def _points(base: float, factors: Sequence[float]) -> list[dict[str, Any]]:
    return [
        point(concurrency, repeat, output_throughput=base * concurrency / 4 * factor)
        for concurrency in (1, 4)
        for repeat, factor in enumerate(factors)
    ]


def _on_hosts(run_dir: Path, config: str, hosts: Sequence[str]) -> None:
    """``config``'s points of round r moved to the directory of host ``hosts[r]`` (write_run puts them all
    on lab1)."""
    source = run_dir / "lab1" / config
    points = [json.loads(line) for line in (source / "points.jsonl").read_text().splitlines()]
    for host in dict.fromkeys(hosts):
        if host != "lab1":
            shutil.copytree(source, run_dir / host / config)
    for host in {"lab1", *hosts}:
        kept = [item for item in points if hosts[item["repeat"]] == host]
        (run_dir / host / config / "points.jsonl").write_bytes(lines(*kept))


def _run(
    tmp_path: Path,
    factors: Mapping[str, Sequence[float]],
    *,
    hosts: Mapping[str, Sequence[str]] | None = None,
    margin_pct: float | None = 1.0,
    placement: str = "spread",
    rounds: Mapping[str, Any] | None = None,
    baseline: str | None = None,
) -> Run:
    """A run of ``factors``' configs (name -> each round's factor), each round on the host ``hosts`` gives
    it (default lab1); fleet.json's ``rounds`` where given; ``decide.baseline`` where given."""
    run_dir = write_run(
        tmp_path,
        {name: _points(BASES[name], found) for name, found in factors.items()},
        workload={"concurrency": [1, 4]},
        margin_pct=margin_pct,
        placement=placement,
    )
    for config, config_hosts in (hosts or {}).items():
        _on_hosts(run_dir, config, config_hosts)
    if rounds is not None:
        (run_dir / "fleet.json").write_text(json.dumps({"placement": placement, "rounds": rounds}))
    if baseline is not None:
        campaign = json.loads((run_dir / "campaign.json").read_text())
        campaign["decide"]["baseline"] = baseline
        (run_dir / "campaign.json").write_text(json.dumps(campaign))
    return load_run(run_dir)


def _tables(run: Run) -> list[Table]:
    return [block for block in rounds_blocks(run, headlines([run])[0]) if isinstance(block, Table)]


def _effects(found: Table) -> dict[str, float]:
    """A table's effects by its first cell, as numbers (``+1.0 %`` -> 1.0)."""
    return {row[0]: float(row[1].removesuffix(" %")) for row in found.rows}


def _drift(run: Run) -> float | None:
    return baseline_drift_pct_of(run, headlines([run])[0])


def test_a_round_slower_for_every_config_is_its_effect_and_the_baselines_drift(tmp_path: Path) -> None:
    run = _run(tmp_path, dict.fromkeys(BASES, SLOWER_LAST))
    rounds, *others = _tables(run)
    mean = sum(SLOWER_LAST) / 3
    expected = {str(index): 100 * (factor / mean - 1) for index, factor in enumerate(SLOWER_LAST)}
    assert _effects(rounds) == pytest.approx(expected, abs=0.05)
    assert [row[1] for row in rounds.rows] == ["+1.0 %", "+1.0 %", "-2.0 %"]
    assert [row[2] for row in rounds.rows] == ["tp8, ep4, ep8"] * 3
    assert others == []  # one host: no host effect to show
    # The baseline (the first config) between its first round and its last.
    assert _drift(run) == pytest.approx(-3.0)
    said = [block.text for block in rounds_blocks(run, headlines([run])[0]) if isinstance(block, Paragraph)]
    assert "The baseline, tp8, measured 1,000.0 tok/s at C=4 in round 0 and 970.0 in round 2" in said[-1]
    assert said[-1].endswith("drift -3.0 %, more than the ±1 % margin.")


def test_a_faster_host_is_its_effect_and_no_rounds(tmp_path: Path) -> None:
    # Each round measures one config on each host, so no round is faster than another.
    faster = 1.02
    run = _run(
        tmp_path,
        {"tp8": (1.0, faster, 1.0, faster), "ep4": (faster, 1.0, faster, 1.0)},
        hosts={"tp8": ("lab1", "lab2", "lab1", "lab2"), "ep4": ("lab2", "lab1", "lab2", "lab1")},
    )
    rounds, by_host = _tables(run)
    assert all(abs(effect) < 0.05 for effect in _effects(rounds).values())
    mean = (1.0 + faster) / 2
    assert _effects(by_host) == pytest.approx(
        {"lab1": 100 * (1 / mean - 1), "lab2": 100 * (faster / mean - 1)}, abs=0.05
    )
    assert by_host.header == ["host", "effect"] and by_host.rows[1] == ["lab2", "+1.0 %"]
    # The baseline's first round ran on lab1, its last on lab2: its drift holds the hosts' difference.
    assert _drift(run) == pytest.approx(100 * (faster - 1))


@pytest.mark.parametrize(
    ("placement", "factors"),
    [("every-host", SLOWER_LAST), ("spread", (0.97,))],
    ids=["every-host", "one round"],
)
def test_no_rounds_under_every_host_or_with_one_round(
    tmp_path: Path, placement: str, factors: Sequence[float]
) -> None:
    run = _run(tmp_path, dict.fromkeys(BASES, factors), placement=placement)
    found = headlines([run])[0]
    assert rounds_blocks(run, found) == [] and drift_alerts(run, found) == []
    assert baseline_drift_pct_of(run, found) is None
    assert f"## {ROUNDS_TITLE}" not in markdown(run)


@pytest.mark.parametrize(("margin_pct", "warned"), [(1.0, True), (2.9, True), (3.1, False), (None, False)])
def test_the_drift_warns_only_above_the_margin(
    tmp_path: Path, margin_pct: float | None, warned: bool
) -> None:
    run = _run(tmp_path, dict.fromkeys(BASES, SLOWER_LAST), margin_pct=margin_pct)
    alerts = drift_alerts(run, headlines([run])[0])
    assert bool(alerts) is warned
    if warned:
        assert alerts[0].kind == "warning"
        assert alerts[0].title.startswith("The baseline, tp8, drifted -3.0 % between its first and its last")
        assert f"more than the ±{margin_pct:g} % margin" in alerts[0].title


def test_a_round_lists_its_configs_in_the_order_queued_and_the_seed(tmp_path: Path) -> None:
    rounds = {"seed": 7, "orders": [["ep8", "tp8", "ep4"], ["ep4", "ep8", "tp8"]]}
    run = _run(tmp_path, dict.fromkeys(BASES, SLOWER_LAST), rounds=rounds, baseline="ep4")
    found, *_ = _tables(run)
    assert found.header[2] == "configs measured, in the order queued"
    # Round 2 has no recorded order (a fleet.json written before it was queued): by config.
    assert [row[2] for row in found.rows] == ["ep8, tp8, ep4", "ep4, ep8, tp8", "tp8, ep4, ep8"]
    blocks = rounds_blocks(run, headlines([run])[0])
    assert "drawn from seed 7 (fleet.json)" in next(b.text for b in blocks if isinstance(b, Paragraph))
    assert "The baseline, ep4, measured 1,200.0 tok/s" in markdown(run)


def test_broken_recorded_orders_are_named_and_the_configs_listed_by_config(tmp_path: Path) -> None:
    run = _run(tmp_path, dict.fromkeys(BASES, SLOWER_LAST), rounds={"seed": 7, "orders": [["ep8", 4]]})
    found, *_ = _tables(run)
    assert found.header[2] == "configs measured"
    assert [row[2] for row in found.rows] == ["tp8, ep4, ep8"] * 3
    assert any("fleet.json: rounds.orders: " in problem for problem in run.results[0].problems)


def test_a_spread_run_of_three_rounds_shows_its_rounds_and_warns_of_the_drift(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        dict.fromkeys(BASES, SLOWER_LAST),
        hosts={"tp8": ("lab1", "lab2", "lab1"), "ep4": ("lab2", "lab1", "lab2")},
    )
    report = markdown(run)
    assert (
        "The baseline, tp8, drifted -3.0 % between its first and its last round (output tok/s at C=4, "
        "rounds 0 and 2), more than the ±1 % margin" in first_screen(report)
    )
    rounds = section(report, f"## {ROUNDS_TITLE}")
    assert {row["round"]: row["effect"] for row in table(rounds).values()} == {
        "0": "+1.0 %",
        "1": "+1.0 %",
        "2": "-2.0 %",
    }
    assert "| host | effect |" in rounds and "drift -3.0 %" in rounds
    headings = [line for line in report.splitlines() if line.startswith("## ")]
    assert headings.index(f"## {ROUNDS_TITLE}") == headings.index("## Measurement checks") + 1
