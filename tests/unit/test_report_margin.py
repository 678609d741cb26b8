"""The verdict against the campaign's margin (``decide: {margin_pct}``): each comparison ahead, equivalent,
different by less than the margin, or undecided with the repeats that would decide it, the order's marks
saying the same, and the note saying which test gave which word."""

from __future__ import annotations

from pathlib import Path

from tests.support.report_files import markdown, section, write_run
from tests.unit.test_report_verdict import bullet, level_points, order, spread, verdict_of

from fairbench.measure.decision import AHEAD, BELOW_MARGIN, EQUIVALENT, UNDECIDED
from fairbench.measure.stats import welch_p_value
from fairbench.report.load import Run, load_run
from fairbench.report.verdict import LOWEST, PEAK

Shape = tuple[float, float, int]
"""A config's throughput at C=1 (4x it at C=4), its repeats' relative noise, and their count."""


def _run(tmp_path: Path, configs: dict[str, Shape], margin_pct: float | None = 1.0) -> Run:
    """Each config's repeats on one host, one server (every-host): ``spread``'s values rise with the repeat
    in every config alike, which rounds would pair as a drift of the machine (tests/unit/test_stopping.py)."""
    points = {
        name: level_points({1: spread(center, noise, count), 4: spread(4 * center, noise, count)})
        for name, (center, noise, count) in configs.items()
    }
    return load_run(
        write_run(
            tmp_path, points, workload={"concurrency": [1, 4]}, margin_pct=margin_pct, placement="every-host"
        )
    )


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


def _rounds_run(tmp_path: Path, factors: list[float]) -> Run:
    """tp8 and ep4 under spread, one repeat per round, each round's machines ``factors`` of their speed; ep4
    is 2 % ahead in every round, give or take 0.1 %."""
    jitter = [0.001, -0.001, 0.0005, -0.0005, 0.0]
    tp8 = [100.0 * factor for factor in factors]
    ep4 = [102.0 * factor * (1 + jitter[index]) for index, factor in enumerate(factors)]
    points = {
        name: level_points({1: values, 4: [4 * value for value in values]})
        for name, values in (("tp8", tp8), ("ep4", ep4))
    }
    return load_run(write_run(tmp_path, points, workload={"concurrency": [1, 4]}, margin_pct=1.0))


def test_rounds_pair_the_comparison_so_a_drift_of_the_machines_between_rounds_cancels(tmp_path: Path) -> None:
    # The machines 6 % faster in one round and 4 % slower in another, back where they began by the last.
    found = verdict_of(_rounds_run(tmp_path, [1.0, 1.06, 0.96, 1.0]))
    lowest = next(regime for regime in found.regimes if regime.name == LOWEST)
    [step] = lowest.steps
    assert step.decision is not None and step.decision.word == AHEAD
    # Unpaired, the drift would have swamped the 2 %: the same values as lists are undecided.
    assert step.above.rounds == (0, 1, 2, 3)
    unpaired = welch_p_value(list(step.above.values), list(step.below.values))
    assert unpaired is not None and unpaired > 0.2


def test_a_baseline_that_drifted_more_than_a_difference_keeps_it_from_being_ahead(tmp_path: Path) -> None:
    # The last round's machines 3 % faster: the baseline (tp8, the first config) drifted 3 %, more than
    # ep4's 2 % lead, which is then not called ahead, and the first screen says why.
    run = _rounds_run(tmp_path, [1.0, 1.0, 1.0, 1.03])
    lowest = next(regime for regime in verdict_of(run).regimes if regime.name == LOWEST)
    [step] = lowest.steps
    assert step.decision is not None and step.decision.word != AHEAD
    report = markdown(run)
    assert "drift" in report.split("## ")[0] + section(report, "## Verdict")


def test_automatic_repeats_under_a_margin_say_they_ran_in_rounds_until_the_verdict_was_decided(
    tmp_path: Path,
) -> None:
    points = {
        name: level_points({1: spread(center, 0.01, 3)}) for name, center in (("tp8", 100.0), ("ep4", 90.0))
    }
    automatic = {"min": 3, "max": 6, "half_width_pct": 2.0}
    workload = {"concurrency": [1], "repeats": automatic}
    report = markdown(load_run(write_run(tmp_path, points, workload=workload, margin_pct=1.0)))
    assert (
        "Automatic repeats: each level measured 3 to 6 times, in rounds, until the verdict's comparisons "
        "were decided against the ±1 % margin; the 2 level(s) measured got 3 repeats each"
    ) in report
