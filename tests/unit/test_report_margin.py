"""The verdict against the campaign's margin (``decide: {margin_pct}``): each comparison ahead, equivalent,
different by less than the margin, or undecided with the repeats that would decide it, the order's marks
saying the same, and the note saying which test gave which word."""

from __future__ import annotations

from pathlib import Path

from tests.support.report_files import markdown, section, write_run
from tests.unit.test_report_verdict import bullet, level_points, order, spread, verdict_of

from fairbench.measure.decision import AHEAD, BELOW_MARGIN, EQUIVALENT, UNDECIDED
from fairbench.report.load import Run, load_run
from fairbench.report.verdict import LOWEST, PEAK

Shape = tuple[float, float, int]
"""A config's throughput at C=1 (4x it at C=4), its repeats' relative noise, and their count."""


def _run(tmp_path: Path, configs: dict[str, Shape], margin_pct: float | None = 1.0) -> Run:
    points = {
        name: level_points({1: spread(center, noise, count), 4: spread(4 * center, noise, count)})
        for name, (center, noise, count) in configs.items()
    }
    return load_run(write_run(tmp_path, points, workload={"concurrency": [1, 4]}, margin_pct=margin_pct))


def test_a_clear_lead_is_ahead_and_a_tiny_one_equivalent_each_with_the_test_that_said_it(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path, {"ep4": (105.0, 0.005, 4), "ep8": (100.2, 0.002, 4), "tp8": (100.0, 0.002, 4)})
    found = verdict_of(run)
    lowest = next(regime for regime in found.regimes if regime.name == LOWEST)
    words = [step.decision.word if step.decision else None for step in lowest.steps]
    assert words == [AHEAD, EQUIVALENT]
    report = markdown(run)
    text = bullet(report, LOWEST)
    assert (
        "+4.8 % over **ep8**" in text
        and ": ahead by more than the ±1 % margin (p < 0.001 after Holm)" in text
    )
    assert order(text) == "ep4 > ep8 ≈ tp8"
    notes = section(report, "## Verdict")
    assert (
        "**equivalent**: two one-sided tests (TOST)" in notes
        and "against the campaign's margin of ±1 %" in notes
    )
    assert "`≈` equivalent" in notes


def test_configs_within_the_margin_of_the_best_leave_no_clear_best_and_say_so(tmp_path: Path) -> None:
    run = _run(tmp_path, {"ep4": (100.5, 0.001, 5), "ep8": (100.0, 0.001, 5), "tp8": (90.0, 0.001, 5)})
    text = bullet(markdown(run), PEAK)
    assert ": different, but by less than the ±1 % margin (p < 0.001 after Holm)." in text
    assert "No clear best: ep8 is within the ±1 % margin of ep4: pick on other grounds." in text
    assert order(text) == "ep4 ≳ ep8 > tp8"
    regime = next(regime for regime in verdict_of(run).regimes if regime.name == PEAK)
    assert regime.steps[0].decision is not None and regime.steps[0].decision.word == BELOW_MARGIN


def test_an_undecided_pair_says_how_many_repeats_would_decide_it(tmp_path: Path) -> None:
    run = _run(tmp_path, {"ep4": (103.0, 0.02, 3), "ep8": (100.0, 0.02, 3)})
    regime = next(regime for regime in verdict_of(run).regimes if regime.name == LOWEST)
    step = regime.steps[0]
    assert step.decision is not None and step.decision.word == UNDECIDED
    assert step.repeats_to_decide is not None and step.repeats_to_decide > 3
    text = bullet(markdown(run), LOWEST)
    closest = f"closest test p = {step.decision.adjusted_p:.3f} after Holm"
    assert (
        f"undecided against the ±1 % margin ({closest}): about {step.repeats_to_decide} repeats of each "
        "would decide it at this difference and spread." in text
    )
    assert "No clear best yet: ep4 against ep8 is undecided." in text and order(text) == "ep4 ? ep8"


def test_without_a_margin_the_verdict_is_significance_alone(tmp_path: Path) -> None:
    run = _run(tmp_path, {"ep4": (105.0, 0.005, 4), "ep8": (100.2, 0.002, 4)}, margin_pct=None)
    assert all(step.decision is None for regime in verdict_of(run).regimes for step in regime.steps)
    text = bullet(markdown(run), LOWEST)
    assert ": significant (p < 0.001 after Holm)." in text and "margin" not in text
