"""The report's verdict (fairbench.report.verdict): per regime the best config, its margin over the next with
the Welch interval, and whether that is significant after Holm's correction over every comparison the
verdict makes. Trees are written here from point lines with chosen throughputs (the contract's fields:
``slo_met``, ``level_source``, ``repeats_stopped``, and an open loop's ``request_rate`` and
``achieved_request_rate``); expected p-values come from stats.welch_p_value, whose t distribution
tests/unit/test_stats.py checks against numerical integration.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.support.report_files import markdown, point, section, table, write_run

from fairbench.measure.results_format import point_id
from fairbench.measure.stats import holm, welch_p_value
from fairbench.report import plots
from fairbench.report.build import headlines, write_report
from fairbench.report.load import Run, load_run
from fairbench.report.plots import Line
from fairbench.report.verdict import LOWEST, PEAK, UNDER_SLO, Verdict, verdict

Levels = Mapping[int, Sequence[float]]
"""Concurrency -> each repeat's output throughput."""


def spread(center: float, relative_std: float, count: int) -> list[float]:
    """``count`` evenly spaced values with mean ``center`` and sample standard deviation
    ``relative_std * center`` (one value: ``center``)."""
    if count == 1:
        return [center]
    offsets = [k - (count - 1) / 2 for k in range(count)]
    scale = relative_std * center / math.sqrt(count * (count + 1) / 12)
    return [center + scale * offset for offset in offsets]


def level_points(levels: Levels, **extra: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A point per level and repeat with its throughput; ``extra``: per level, keys every repeat gets."""
    found = []
    for concurrency, values in levels.items():
        for repeat, value in enumerate(values):
            fields = dict(extra.get("fields", {}).get(concurrency, {}))
            found.append(point(concurrency, repeat, output_throughput=value, **fields))
    return found


def verdict_of(run: Run) -> Verdict:
    return verdict(run, headlines([run])[0])


def bullet(report: str, regime: str) -> str:
    """The Verdict's bullet of one regime."""
    return next(
        line
        for line in section(report, "## Verdict").splitlines()
        if line.startswith(f"- **{regime[0].upper()}{regime[1:]}**")
    )


def order(text: str) -> str:
    return text.split("Order: ", 1)[1].split(".", 1)[0]


# --- Holm's decision ---------------------------------------------------------------------------------------


def test_a_clear_difference_over_five_steady_repeats_is_significant(tmp_path: Path) -> None:
    ep4 = {1: spread(110.0, 0.01, 5), 4: spread(440.0, 0.01, 5), 16: spread(1100.0, 0.01, 5)}
    tp8 = {1: spread(100.0, 0.01, 5), 4: spread(400.0, 0.01, 5), 16: spread(1000.0, 0.01, 5)}
    run = load_run(write_run(tmp_path, {"tp8": level_points(tp8), "ep4": level_points(ep4)}))
    report = markdown(run)
    lowest, peak = bullet(report, LOWEST), bullet(report, PEAK)
    assert lowest.startswith(
        "- **Lowest load** (C=1, output tok/s): **ep4**: 110.0 ± 1.4, +10.0 % over **tp8**"
    )
    assert lowest.endswith(": significant (p < 0.001 after Holm). Order: ep4 > tp8.")
    assert "**ep4** at C=16: 1,100.0 ± 13.7, +10.0 % over **tp8** at C=16" in peak
    # The pair's own Welch interval, in % of tp8's mean: (110 - 100 -+ t(0.975, df) se) / 100.
    low, high = (float(value) for value in re.findall(r"CI ([-+][0-9.]+) % to ([-+][0-9.]+) %", lowest)[0])
    assert 7.0 < low < 10.0 < high < 13.0 and low + high == pytest.approx(20.0, abs=0.11)
    found = verdict_of(run)
    assert (found.tested, found.compared) == (2, 2)
    assert "Holm-corrected over the 2 comparison(s)" in section(report, "## Verdict")


def test_one_percent_apart_with_three_percent_spread_is_within_noise(tmp_path: Path) -> None:
    levels = {1: 100.0, 4: 400.0, 16: 1000.0}
    ep4 = {level: spread(value * 1.01, 0.03, 3) for level, value in levels.items()}
    tp8 = {level: spread(value, 0.03, 3) for level, value in levels.items()}
    # One server's repeats (every-host): spread's values rise alike in both, which rounds would pair.
    run = load_run(
        write_run(tmp_path, {"tp8": level_points(tp8), "ep4": level_points(ep4)}, placement="every-host")
    )
    report = markdown(run)
    # The same relative spread at every level: both tests have one p, which Holm doubles (m = 2).
    p_value = welch_p_value(ep4[1], tp8[1])
    assert p_value is not None
    for regime in (LOWEST, PEAK):
        text = bullet(report, regime)
        assert "+1.0 % over **tp8**" in text and text.endswith(
            f": within noise (p = {min(1.0, 2 * p_value):.3f} after Holm). No clear best: ep4 is within "
            "noise of tp8. Order: ep4 ≈ tp8."
        )


def test_with_one_repeat_the_verdict_cannot_tell_and_orders_by_mean_untested(tmp_path: Path) -> None:
    ep4 = {1: [110.0], 4: [440.0], 16: [1100.0]}
    tp8 = {1: [100.0], 4: [400.0], 16: [1000.0]}
    ep8 = {1: [90.0], 4: [450.0], 16: [900.0]}
    run = load_run(
        write_run(tmp_path, {"tp8": level_points(tp8), "ep4": level_points(ep4), "ep8": level_points(ep8)})
    )
    report = markdown(run)
    lowest = bullet(report, LOWEST)
    assert "**ep4**: 110.0, +10.0 % over **tp8**: one repeat: cannot tell." in lowest
    assert order(lowest) == "by mean (untested): ep4, tp8, ep8"
    # ep8's peak is C=4, where it leads; the others' is C=16.
    assert order(bullet(report, PEAK)) == "by mean (untested): ep4, tp8, ep8"
    assert "No pair could be tested (one repeat)" in section(report, "## Verdict")
    assert verdict_of(run).tested == 0


def test_holm_keeps_a_difference_each_test_alone_calls_significant_within_noise(tmp_path: Path) -> None:
    # ep4 vs tp8 is p ~ 0.03 in both regimes: significant alone (< 0.05), but 5th and 6th of the verdict's
    # 6 tests, where Holm asks p <= 0.05 / 2. Both are far ahead of ep8 (p ~ 0).
    ep4_values, tp8_values = spread(102.0, 0.01, 4), spread(100.0, 0.01, 4)
    p_value = welch_p_value(ep4_values, tp8_values)
    assert p_value is not None and 0.025 < p_value < 0.05
    factors = {1: 1.0, 4: 4.0, 16: 10.0}
    ep4 = {level: [value * factor for value in ep4_values] for level, factor in factors.items()}
    tp8 = {level: [value * factor for value in tp8_values] for level, factor in factors.items()}
    ep8 = {level: spread(50.0 * factor, 0.01, 4) for level, factor in factors.items()}
    configs = {"tp8": level_points(tp8), "ep4": level_points(ep4), "ep8": level_points(ep8)}
    run = load_run(write_run(tmp_path, configs, placement="every-host"))  # unpaired: as above
    report = markdown(run)
    for regime in (LOWEST, PEAK):
        assert order(bullet(report, regime)) == "ep4 ≈ tp8 > ep8"
        assert "No clear best: ep4 is within noise of tp8." in bullet(report, regime)
        # Holm's adjusted p of the 5th of 6 (its twin the 6th): (6 - 5 + 1) x p, above 0.05.
        assert f"within noise (p = {2 * p_value:.3f} after Holm)" in bullet(report, regime)
    assert verdict_of(run).tested == 6
    # The Comparisons list's own, uncorrected tests call it significant.
    comparisons = section(report, "### Comparisons")
    assert "**tp8** vs **ep4**: output tok/s C=1: -2.0 % (significant)" in comparisons


def test_holm_rejects_in_order_while_each_p_is_within_its_share_of_alpha() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm([0.01, 0.02, 0.03, 0.04], alpha=0.1) == [True, True, True, True]


# --- the regimes -------------------------------------------------------------------------------------------

SLO = {"ttft_p99_ms": 2000.0, "tpot_p50_ms": 50.0}


def slo_points(
    levels: Levels, met: Mapping[int, Sequence[bool]], source: Mapping[int, str]
) -> list[dict[str, Any]]:
    found = []
    for concurrency, values in levels.items():
        for repeat, value in enumerate(values):
            fields: dict[str, Any] = {
                "slo_met": met[concurrency][repeat],
                "slo_attainment": 1.0 if met[concurrency][repeat] else 0.5,
                "goodput_output_throughput": value if met[concurrency][repeat] else value / 2,
                "goodput_request_throughput": 1.0,
                "level_source": source.get(concurrency, "listed"),
            }
            found.append(point(concurrency, repeat, output_throughput=value, **fields))
    return found


def test_the_slo_regime_is_capped_by_the_first_level_that_missed_and_says_when_no_limit_was_found(
    tmp_path: Path,
) -> None:
    repeats = 3
    levels = {1: 100.0, 4: 400.0, 16: 1000.0}
    met_all = {level: [True] * repeats for level in levels}
    configs = {
        # Meets it at C=1 and C=16 but a repeat at C=4 missed: capped at C=1.
        "tp8": slo_points(
            {level: spread(value, 0.01, repeats) for level, value in levels.items()},
            {**met_all, 4: [True, False, True]},
            {},
        ),
        # Meets it everywhere: at least C=16, the sweep found no limit.
        "ep4": slo_points(
            {level: spread(value * 0.9, 0.01, repeats) for level, value in levels.items()}, met_all, {}
        ),
        # Misses it at the lowest level.
        "ep8": slo_points(
            {level: spread(value, 0.01, repeats) for level, value in levels.items()},
            {**met_all, 1: [False] * repeats},
            {},
        ),
    }
    run = load_run(write_run(tmp_path, configs, slo=SLO))
    report = markdown(run)
    text = bullet(report, UNDER_SLO)
    assert text.startswith(
        "- **Highest load under the SLO** (`ttft_p99_ms` ≤ 2,000 ms, `tpot_p50_ms` ≤ 50 ms; output tok/s at"
    )
    assert "**ep4** at C=16 (at least: the sweep found no limit): 900.0 ± " in text
    assert "over **tp8** at C=1 (95 % CI" in text
    assert order(text) == "ep4 > tp8"
    assert text.endswith("Not ranked, meets it at no level: ep8.")
    headline = table(section(report, "## Headline"))
    assert {name: row["highest load under SLO"].split(": ")[0] for name, row in headline.items()} == {
        "tp8": "C=1",
        "ep4": "at least C=16",
        "ep8": "no level",
    }
    # With the throughput there, per GPU too (the points' own figure, the GPUs' from the sweep).
    assert (
        headline["ep4"]["highest load under SLO"] == "at least C=16: 900.0 ± 22.4 tok/s (112.5 ± 2.8 per GPU)"
    )
    levels_table = table(section(report, "### tp8"))
    assert levels_table["4"]["SLO met"] == "2 of 3"
    assert levels_table["1"]["SLO met"] == "yes"
    assert levels_table["4"]["requests within SLO %"].startswith("83.3 ± ")
    assert "SLO: `ttft_p99_ms` ≤ 2,000 ms, `tpot_p50_ms` ≤ 50 ms." in report.split("## Verdict")[0]
    found = verdict_of(run)
    # 3 regimes: 3 pairs in each of lowest and peak, 1 in the SLO regime (ep8 is not ranked there).
    assert [regime.name for regime in found.regimes] == [LOWEST, PEAK, UNDER_SLO]
    assert (found.tested, found.compared) == (7, 7)


def test_searched_levels_count_for_the_slo_regime_only(tmp_path: Path) -> None:
    repeats = 2
    # tp8's search probed C=8 (met) and C=12 (missed) between its listed C=4 (met) and C=16 (missed);
    # C=8 has its highest throughput, which is not its listed peak (C=16 is).
    tp8_levels = {1: 100.0, 4: 400.0, 8: 2000.0, 12: 1200.0, 16: 1000.0}
    tp8 = slo_points(
        {level: spread(value, 0.01, repeats) for level, value in tp8_levels.items()},
        {1: [True] * 2, 4: [True] * 2, 8: [True] * 2, 12: [False] * 2, 16: [False] * 2},
        {8: "bisect", 12: "bisect"},
    )
    ep4_levels = {1: 90.0, 4: 380.0, 16: 1100.0}
    ep4 = slo_points(
        {level: spread(value, 0.01, repeats) for level, value in ep4_levels.items()},
        {1: [True] * 2, 4: [True] * 2, 16: [False] * 2},
        {},
    )
    run = load_run(write_run(tmp_path, {"tp8": tp8, "ep4": ep4}, slo=SLO, workload={"search_resolution": 4}))
    report = markdown(run)
    assert "**ep4** at C=16: 1,100.0" in bullet(report, PEAK)
    assert "over **tp8** at C=16" in bullet(report, PEAK)
    assert "**tp8** at C=8: 2,000.0" in bullet(report, UNDER_SLO)
    assert "over **ep4** at C=4" in bullet(report, UNDER_SLO)
    assert "the SLO search probes each config at its own levels" in section(report, "## Verdict")
    headline = table(section(report, "## Headline"))
    assert (headline["tp8"]["peak at C"], headline["tp8"]["highest load under SLO"].split(": ")[0]) == (
        "16",
        "C=8",
    )
    assert set(table(section(report, "### tp8"))) == {"1", "4", "8 (search)", "12 (search)", "16"}


def test_throughput_is_compared_per_gpu_where_the_configs_gpu_counts_differ(tmp_path: Path) -> None:
    tp8 = {1: spread(100.0, 0.01, 3), 4: spread(400.0, 0.01, 3), 16: spread(1000.0, 0.01, 3)}
    ep4 = {1: spread(90.0, 0.01, 3), 4: spread(350.0, 0.01, 3), 16: spread(800.0, 0.01, 3)}
    configs = {"tp8": level_points(tp8), "ep4": level_points(ep4)}
    run = load_run(write_run(tmp_path, configs, gpus={"tp8": 8, "ep4": 4}))
    report = markdown(run)
    peak = bullet(report, PEAK)
    assert "output tok/s per GPU (the configs use 4, 8 GPUs)" in peak
    assert "**ep4** at C=16: 200.0 ± " in peak and "+60.0 % over **tp8** at C=16" in peak
    # At the lowest load, each request's own speed: aggregate.
    assert "**tp8**: 100.0 ± " in bullet(report, LOWEST)


def test_a_failed_config_is_left_out_of_the_verdict_with_a_note(tmp_path: Path) -> None:
    ep4 = {1: spread(110.0, 0.01, 2), 4: spread(440.0, 0.01, 2)}
    tp8 = {1: spread(100.0, 0.01, 2), 4: spread(400.0, 0.01, 2), 16: spread(1000.0, 0.01, 2)}
    run = load_run(write_run(tmp_path, {"tp8": level_points(tp8), "ep4": level_points(ep4)}, failed=("ep4",)))
    report = markdown(run)
    assert "**tp8**: 100.0 ± " in bullet(report, LOWEST)
    assert "(no other config to compare)" in bullet(report, LOWEST)
    assert "stops where it failed, so its figures are not its own): ep4 (failed)." in section(
        report, "## Verdict"
    )


def test_every_host_gives_the_verdict_per_host_and_corrects_over_all_of_them(tmp_path: Path) -> None:
    tp8 = {1: spread(100.0, 0.01, 3), 4: spread(400.0, 0.01, 3), 16: spread(1000.0, 0.01, 3)}
    ep4 = {1: spread(120.0, 0.01, 3), 4: spread(480.0, 0.01, 3), 16: spread(1200.0, 0.01, 3)}
    configs = {"tp8": level_points(tp8), "ep4": level_points(ep4)}
    run = load_run(write_run(tmp_path, configs, hosts=("lab1", "lab2"), placement="every-host"))
    report = markdown(run)
    verdict_text = section(report, "## Verdict")
    assert verdict_text.count("**ep4**: 120.0 ± ") == 2 and "@lab" not in verdict_text.split("> [!")[0]
    assert verdict_text.index("On **lab1**:") < verdict_text.index("On **lab2**:")
    found = verdict_of(run)
    assert found.hosts == ["lab1", "lab2"]
    assert (found.tested, found.compared) == (4, 4)
    assert "on each of 2 hosts" in verdict_text


# --- the rest of the report --------------------------------------------------------------------------------


def test_automatic_repeats_say_what_each_level_got_and_why_its_repeats_stopped(tmp_path: Path) -> None:
    stopped = {
        1: "interval ±0.40 % within ±2 % after 3 repeats",
        4: "maximum of 5 repeats reached with interval ±2.60 % (target ±2 %)",
    }
    counts = {1: 3, 4: 5}
    configs = {
        name: [
            point(
                level,
                repeat,
                output_throughput=value,
                **({"repeats_stopped": stopped[level]} if repeat == counts[level] - 1 else {}),
            )
            for level in counts
            for repeat, value in enumerate(spread(100.0 * level * factor, 0.01, counts[level]))
        ]
        for name, factor in (("tp8", 1.0), ("ep4", 1.2))
    }
    automatic = {"min": 3, "max": 5, "half_width_pct": 2.0}
    run = load_run(write_run(tmp_path, configs, workload={"concurrency": [1, 4], "repeats": automatic}))
    report = markdown(run)
    assert "automatic repeats (3 to 5, until ±2 %)." in report.split("## Verdict")[0]
    assert (
        "Automatic repeats: each level measured 3 to 5 times, until its output throughput's 95 % interval "
        "was within ±2 % of its mean; the 4 level(s) measured got 3 to 5 repeats each, 2 of them the maximum"
    ) in report
    rows = table(section(report, "### tp8"))
    assert rows["1"]["repeats, why stopped"] == f"3: {stopped[1]}"
    assert rows["4"]["repeats, why stopped"] == f"5: {stopped[4]}"


def test_a_run_from_before_slos_and_searches_still_reports_with_a_verdict_first(tmp_path: Path) -> None:
    tp8 = {1: spread(100.0, 0.01, 2), 4: spread(400.0, 0.01, 2), 16: spread(1000.0, 0.01, 2)}
    ep4 = {1: spread(90.0, 0.01, 2), 4: spread(420.0, 0.01, 2), 16: spread(1100.0, 0.01, 2)}
    path = write_run(tmp_path, {"tp8": level_points(tp8), "ep4": level_points(ep4)}, workload={"repeats": 2})
    campaign = json.loads((path / "campaign.json").read_text())
    del campaign["slo"]
    (path / "campaign.json").write_text(json.dumps(campaign))
    written = write_report([load_run(path)], path)
    assert sorted(item.name for item in written) == [
        "latency.png",
        "pareto.png",
        "report.html",
        "report.md",
        "throughput.png",
    ]
    report = (path / "report.md").read_text()
    assert report.index("## Verdict") < report.index("![Per-user decode speed") < report.index("## Headline")
    assert "**tp8**: 100.0 ± " in bullet(report, LOWEST)
    assert "**ep4** at C=16: 1,100.0 ± " in bullet(report, PEAK)
    assert "Highest load under the SLO" not in report and "highest load under SLO" not in report
    assert "2 repeats: figures are mean ± 95 % confidence interval" in report
    assert "SLO met" not in report and "why stopped" not in report


def test_two_runs_say_per_config_whether_it_changed_after_holm_and_show_each_slo_reach(
    tmp_path: Path,
) -> None:
    met = {1: [True] * 3, 4: [True] * 3, 16: [False] * 3}
    before = {
        "tp8": slo_points(
            {1: spread(100.0, 0.01, 3), 4: spread(400.0, 0.01, 3), 16: spread(1000.0, 0.01, 3)}, met, {}
        ),
        "ep4": slo_points(
            {1: spread(90.0, 0.03, 3), 4: spread(380.0, 0.03, 3), 16: spread(1100.0, 0.03, 3)}, met, {}
        ),
    }
    after = {
        # tp8 got 20 % faster everywhere and meets the SLO at C=16 too.
        "tp8": slo_points(
            {1: spread(120.0, 0.01, 3), 4: spread(480.0, 0.01, 3), 16: spread(1200.0, 0.01, 3)},
            {**met, 16: [True] * 3},
            {},
        ),
        # ep4 moved by 1 % within a 3 % spread.
        "ep4": slo_points(
            {1: spread(90.9, 0.03, 3), 4: spread(383.8, 0.03, 3), 16: spread(1111.0, 0.03, 3)}, met, {}
        ),
    }
    run_a = load_run(write_run(tmp_path, before, slo=SLO, run_id="a"))
    run_b = load_run(write_run(tmp_path, after, slo=SLO, run_id="b"))
    report = markdown(run_a, run_b)
    side = section(report, "## Side by side")
    assert "Holm-corrected over the 4 change(s) tested" in side
    rows = table(side)
    assert rows["tp8"]["B vs A, lowest C"] == "+20.0 % (significant)"
    assert rows["tp8"]["B vs A, peak"] == "+20.0 % (significant)"
    assert rows["ep4"]["B vs A, lowest C"] == "+1.0 % (within noise)"
    assert tuple(rows["tp8"][f"highest load under SLO, {run}"].split(": ")[0] for run in "ab") == (
        "C=4",
        "at least C=16",
    )


# --- an open loop ------------------------------------------------------------------------------------------

RATES = (2.5, 10.0)
IN_FLIGHT = 8


def open_points(
    throughputs: Mapping[float, Sequence[float]], achieved: Mapping[float, Sequence[float]]
) -> list[dict[str, Any]]:
    """An open loop's point per rate and repeat (at most ``IN_FLIGHT`` requests in flight at every rate),
    with its throughput and the rate its requests went out at."""
    return [
        point(
            IN_FLIGHT,
            repeat,
            point_id=point_id(rate, repeat, open_loop=True),
            request_rate=rate,
            achieved_request_rate=achieved[rate][repeat],
            median_send_delay_ms=0.5 + repeat,
            p99_send_delay_ms=2.0 + repeat,
            max_send_delay_ms=3.0 + repeat,
            arrival="poisson",
            burstiness=1.0,
            output_throughput=value,
        )
        for rate, values in throughputs.items()
        for repeat, value in enumerate(values)
    ]


def open_loop_run(root: Path, configs: Mapping[str, Sequence[dict[str, Any]]], **options: Any) -> Path:
    """``write_run`` of an open loop: campaign.json's workload has request rates instead of concurrency."""
    path = write_run(root, configs, **options)
    campaign = json.loads((path / "campaign.json").read_text())
    workload = {key: value for key, value in campaign["workload"].items() if key != "concurrency"}
    open_loop = {"request_rate": list(RATES), "arrival": "poisson", "burstiness": 1.0}
    campaign["workload"] = workload | open_loop | {"max_concurrency": IN_FLIGHT}
    (path / "campaign.json").write_text(json.dumps(campaign))
    return path


ON_TIME = {2.5: [2.45, 2.55], 10.0: [9.7, 10.2]}
"""Achieved rates within 5 % of the target on every repeat."""


def test_an_open_loop_names_each_level_by_its_rate_and_marks_an_achieved_rate_behind_the_target(
    tmp_path: Path,
) -> None:
    # tp8 at 2.5 req/s: one repeat sent at 2.3 (< 0.95 x 2.5 = 2.375); at 10 req/s both at 9.0 and 9.4.
    tp8 = open_points({2.5: [50.0, 51.0], 10.0: [200.0, 204.0]}, {2.5: [2.3, 2.5], 10.0: [9.0, 9.4]})
    ep4 = open_points({2.5: [48.0, 49.0], 10.0: [190.0, 192.0]}, ON_TIME)
    run = load_run(open_loop_run(tmp_path, {"tp8": tp8, "ep4": ep4}))
    assert [(level.label, len(level.points)) for level in headlines([run])[0][0].levels] == [
        ("2.5 req/s", 2),
        ("10 req/s", 2),
    ]
    report = markdown(run)
    assert "request rate 2.5, 10 req/s (poisson, at most 8 in flight)" in report.split("## Verdict")[0]
    assert bullet(report, LOWEST).startswith("- **Lowest load** (2.5 req/s, output tok/s): **tp8**: 50.5 ± ")
    assert "**tp8** at 10 req/s: 202.0 ± " in bullet(report, PEAK)
    assert "C=" not in section(report, "## Verdict")
    headline = table(section(report, "## Headline"))
    assert headline["tp8"]["out tok/s at lowest req/s"].startswith("2.5 req/s: 50.5 ± ")
    assert headline["tp8"]["peak at req/s"] == "10"
    assert "**tp8** vs **ep4**: output tok/s 2.5 req/s: " in section(report, "### Comparisons")
    levels = section(report, "## Every request rate level")
    assert "`(behind)`: the requests went out at less than 95 % of the target rate" in levels
    tp8_rows, ep4_rows = table(section(levels, "### tp8")), table(section(levels, "### ep4"))
    assert list(tp8_rows) == ["2.5", "10"]
    assert tp8_rows["2.5"]["achieved req/s"] == "2.40 ± 1.27 (behind on 1 of 2)"
    assert tp8_rows["10"]["achieved req/s"] == "9.20 ± 2.54 (behind)"
    assert ep4_rows["10"]["achieved req/s"] == "9.95 ± 3.18"
    # Send delays: 0.5 and 1.5 ms at p50, 2 and 3 ms at p99 (open_points).
    assert (tp8_rows["2.5"]["send delay p50 ms"], tp8_rows["2.5"]["send delay p99 ms"]) == (
        "1.00 ± 6.35",
        "2.50 ± 6.35",
    )


def test_an_open_loops_slo_regime_is_the_highest_request_rate_meeting_it(tmp_path: Path) -> None:
    met = {2.5: [True, True], 10.0: [True, False]}
    configs = {
        name: [
            found | {"slo_met": met[found["request_rate"]][found["repeat"]]}
            for found in open_points({2.5: [value, value + 1], 10.0: [4 * value, 4 * value + 2]}, ON_TIME)
        ]
        for name, value in (("tp8", 50.0), ("ep4", 40.0))
    }
    report = markdown(load_run(open_loop_run(tmp_path, configs, slo=SLO)))
    text = bullet(report, "highest request rate meeting the SLO")
    assert "output tok/s at each config's highest request rate meeting it, every request rate below" in text
    assert "**tp8** at 2.5 req/s: 50.5 ± " in text and "over **ep4** at 2.5 req/s" in text
    headline = table(section(report, "## Headline"))
    assert headline["tp8"]["highest request rate meeting SLO"].split(": ")[0] == "2.5 req/s"
    assert table(section(report, "### tp8"))["10"]["SLO met"] == "1 of 2"


def test_two_open_loop_runs_and_two_hosts_compare_rate_with_rate(tmp_path: Path) -> None:
    tp8 = open_points({2.5: [50.0, 51.0], 10.0: [200.0, 204.0]}, ON_TIME)
    ep4 = open_points({2.5: [48.0, 49.0], 10.0: [190.0, 192.0]}, ON_TIME)
    configs = {"tp8": tp8, "ep4": ep4}
    run_a = load_run(open_loop_run(tmp_path, configs, run_id="a"))
    run_b = load_run(open_loop_run(tmp_path, configs, run_id="b"))
    side = table(section(markdown(run_a, run_b), "## Side by side"))
    assert side["tp8"]["out tok/s lowest req/s, a"].endswith(" (2.5 req/s)")
    assert side["tp8"]["out tok/s peak, b"].endswith(" (10 req/s)")
    assert side["tp8"]["B vs A, lowest req/s"] == "+0.0 % (within noise)"
    hosts = load_run(
        open_loop_run(tmp_path, configs, run_id="hosts", hosts=("lab1", "lab2"), placement="every-host")
    )
    hardware = table(section(markdown(hosts), "### tp8"))
    assert list(hardware) == ["2.5", "10"]
    assert hardware["10"]["lab1 vs lab2"] == "+0.0 % (within noise)"


def test_the_plots_x_axis_is_the_request_rate_in_an_open_loop(tmp_path: Path) -> None:
    configs = {"tp8": open_points({2.5: [50.0, 51.0], 10.0: [200.0, 204.0]}, ON_TIME)}
    run = load_run(open_loop_run(tmp_path, configs))
    lines = [Line("tp8", "#1f77b4", "-", headlines([run])[0][0].levels)]
    _, (axes,) = plots._figure(8, 5)
    plots._load_axis(axes, lines)
    assert axes.get_xlabel() == "request rate (req/s, log2 scale)"
    assert [label.get_text() for label in axes.get_xticklabels()] == ["2.5", "10"]
    closed = load_run(write_run(tmp_path / "closed", {"tp8": level_points({1: [1.0], 4: [4.0]})}))
    _, (axes,) = plots._figure(8, 5)
    plots._load_axis(axes, [Line("tp8", "#1f77b4", "-", headlines([closed])[0][0].levels)])
    assert axes.get_xlabel() == "concurrency (requests in flight, log2 scale)"
