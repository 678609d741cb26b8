"""The By turn section of a multi-turn workload's report: each config's levels with their figures by turn,
over their repeats; no section for a workload that is not multi-turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.report_files import markdown, point, section, table, write_run

from fairbench.report.load import load_run
from fairbench.report.summary import Level
from fairbench.report.turns import turn_means


def _turns(concurrency: int, repeat: int, ttft: list[Any], cached: list[Any]) -> dict[str, Any]:
    """A three-turn point: a 3,000-token first turn, each later one 200 tokens longer."""
    return point(
        concurrency,
        repeat,
        turns=3,
        median_ttft_ms_by_turn=ttft,
        mean_input_tokens_by_turn=[3000.0, 3200.0, 3400.0],
        mean_cached_tokens_by_turn=cached,
    )


def test_each_turn_is_the_mean_of_its_repeats_and_a_turn_without_a_number_is_left_out() -> None:
    level = Level(
        4,
        (
            _turns(4, 0, [400.0, 90.0, None], [0, 3000, 3200]),
            _turns(4, 1, [420.0, 110.0, float("nan")], [0, 3010, None]),
            point(4, 2, median_ttft_ms_by_turn="damaged"),
        ),
    )
    assert turn_means(level, "median_ttft_ms_by_turn") == [410.0, 100.0, None]
    assert turn_means(level, "mean_cached_tokens_by_turn") == [0.0, 3005.0, 3200.0]
    assert turn_means(Level(1, (point(1),)), "median_ttft_ms_by_turn") == []


def test_the_report_of_a_multi_turn_workload_shows_each_config_by_turn(tmp_path: Path) -> None:
    run = write_run(
        tmp_path,
        {
            # tp8's cache serves the later turns; ep4's does not: its turns grow slower and cache nothing.
            "tp8": [_turns(c, r, [398 + 4 * r, 90, 95], [0, 3023, 3247]) for c in (1, 4) for r in (0, 1)],
            "ep4": [_turns(c, r, [400.0, 430.0, 460.0], [0, 0, 0]) for c in (1, 4) for r in (0, 1)],
        },
        workload={"concurrency": [1, 4]},
    )
    report = markdown(load_run(run))
    turns = section(report, "## By turn")
    tp8 = table(section(turns, "### tp8"))
    assert tp8["4"] == {
        "C": "4",
        "repeats": "2",
        "TTFT p50 ms, by turn": "400 / 90 / 95",
        "input tokens, by turn": "3,000 / 3,200 / 3,400",
        "cached tokens, by turn": "0 / 3,023 / 3,247",
    }
    assert table(section(turns, "### ep4"))["1"]["TTFT p50 ms, by turn"] == "400 / 430 / 460"


def test_a_workload_that_is_not_multi_turn_has_no_by_turn_section(tmp_path: Path) -> None:
    run = write_run(tmp_path, {"tp8": [point(1), point(4)], "ep4": [point(1), point(4)]})
    assert "## By turn" not in markdown(load_run(run))
