"""``fairbench report`` on results trees built from real sweeps against ``fairbench sim``.

Three runs of the demo campaign's configs, with a short workload and time scaling (tests/support/
results_tree.py): ``fair`` (tp8, tp8-nccl, ep4, ep8; two repeats), ``unfair`` (one repeat; tp8's server
ran with decode CUDA graphs disabled, which campaign.json does not declare, and ep8's server crashes
mid-sweep) and ``rerun`` (the unfair campaign again: tp8 now with CUDA graphs, ep4 with an extra NCCL
variable in its unit, ep8 never run); and ``open_loop``, tp8 and ep4 driven at request rates instead of
concurrency levels. Expected figures are computed here from points.jsonl.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from statistics import mean, stdev

import pytest
import yaml
from tests.support.report_files import MARKS, unmarked
from tests.support.results_tree import (
    REPO,
    Deviation,
    build_run,
    campaign_from,
    fairbench_report,
    one_workload,
)

from fairbench.campaign.load import parse_campaign
from fairbench.measure.stats import compare

# The tests share runs built once per module: on one pytest worker, not built again on each.
pytestmark = pytest.mark.xdist_group("report_sim")

DEMO = REPO / "campaigns" / "demo.yml"
# Short enough for seconds per config; 32 tokens in keeps prefill small next to decode, where the
# layouts differ; at C=64 the K2.6 profile predicts EP4 > EP8 > TP8, at C=1 TP8 fastest.
WORKLOAD = {"input_len": 32, "output_len": 64, "prompts_per_level": "1x", "warmup": "1x"}
T_975_DF1 = 12.706


def _report(*args: Path) -> str:
    result = fairbench_report(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("results")
    fair = campaign_from(
        DEMO,
        configs=["tp8", "tp8-nccl", "ep4", "ep8"],
        workload={**WORKLOAD, "concurrency": [1, 8, 64], "repeats": 2},
        sim={"sim-time-scale": 0.1},
    )
    unfair = campaign_from(
        DEMO,
        configs=["tp8", "ep4", "ep8"],
        workload={**WORKLOAD, "concurrency": [1, 8], "repeats": 1},
        sim={"sim-time-scale": 0.05},
    )
    no_cuda_graphs = Deviation(flags=("--cuda-graph-backend-decode", "disabled"))
    built = {
        "fair": build_run(root, fair, "fair"),
        "unfair": build_run(
            root,
            unfair,
            "unfair",
            deviations={"tp8": no_cuda_graphs, "ep8": Deviation(fault="crash-after=20")},
        ),
        "rerun": build_run(
            root, unfair, "rerun", deviations={"ep4": Deviation(env={"NCCL_ALGO": "Ring"})}, skip=("ep8",)
        ),
    }
    for name in ("fair", "unfair"):
        _report(built[name])
    _report(built["unfair"], built["rerun"])
    return built


def _marked_section(markdown: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", maxsplit=1)[0]
    start = markdown.index(heading + "\n")
    rest = markdown[start + len(heading) + 1 :]
    ends = [rest.find(f"\n{'#' * size} ") for size in range(1, len(level) + 1)]
    return rest[: min([end for end in ends if end >= 0], default=len(rest))]


def _section(markdown: str, heading: str) -> str:
    """``_marked_section`` without the marks of the measurement checks (``unmarked``)."""
    return unmarked(_marked_section(markdown, heading))


def _table(section: str) -> dict[str, dict[str, str]]:
    """A Markdown table's rows by their first cell, each as {header: cell}."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


def _points(run: Path, config: str) -> list[dict[str, float]]:
    lines = (run / "lab1" / config / "points.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _by_level(points: list[dict[str, float]], key: str) -> dict[int, list[float]]:
    levels: dict[int, list[float]] = {}
    for point in points:
        levels.setdefault(int(point["max_concurrency"]), []).append(point[key])
    return levels


def _mean_ci(values: list[float], digits: int = 1) -> str:
    """Two repeats: mean ± t(0.975, 1) * s / sqrt(2)."""
    assert len(values) == 2
    half = T_975_DF1 * stdev(values) / math.sqrt(2)
    return f"{mean(values):,.{digits}f} ± {half:,.{digits}f}"


def _value(cell: str) -> float:
    return float(cell.split(" ± ", maxsplit=1)[0].rsplit(": ", maxsplit=1)[-1].replace(",", ""))


def test_the_headline_shows_each_configs_figures_computed_from_its_points(runs: dict[str, Path]) -> None:
    report = (runs["fair"] / "report.md").read_text()
    table = _table(_section(report, "## Headline"))
    for config in ("tp8", "tp8-nccl", "ep4", "ep8"):
        points = _points(runs["fair"], config)
        throughput = _by_level(points, "output_throughput")
        peak = max(throughput, key=lambda level: mean(throughput[level]))
        row = table[config]
        assert row["status"] == "ok"
        assert row["out tok/s at lowest C"] == _mean_ci(throughput[1])
        assert row["peak out tok/s"] == _mean_ci(throughput[peak])
        assert row["peak at C"] == str(peak)
        # No --gpus in the sweep: per GPU is the throughput over /server_info's tp_size (8).
        assert row["peak tok/s per GPU"] == _mean_ci([value / 8 for value in throughput[peak]])
        ttft = _by_level(points, "median_ttft_ms")
        ttft_p99 = _by_level(points, "p99_ttft_ms")
        assert row["TTFT p50 / p99 ms, peak"] == f"{_mean_ci(ttft[peak])} / {_mean_ci(ttft_p99[peak])}"
        assert row["TPOT p50 ms, lowest C"] == _mean_ci(_by_level(points, "median_tpot_ms")[1], 2)
        assert row["failed requests"] == str(sum(int(point["failed"]) for point in points))
    levels = _table(_section(report, "### ep4"))
    assert levels["64"]["out tok/s"] == _mean_ci(
        _by_level(_points(runs["fair"], "ep4"), "output_throughput")[64]
    )


def test_the_demo_configs_keep_the_k26_profiles_ordering(runs: dict[str, Path]) -> None:
    table = _table(_section((runs["fair"] / "report.md").read_text(), "## Headline"))
    at_c1 = {config: _value(table[config]["out tok/s at lowest C"]) for config in table}
    peak = {config: _value(table[config]["peak out tok/s"]) for config in table}
    # C=1: TP8's low per-step cost wins by ~40 % in the profile.
    assert at_c1["tp8"] > at_c1["ep4"] > at_c1["ep8"]
    # Peak: EP's small per-request cost wins by ~20 %. EP4's few per cent over EP8 is for the demo's verdict
    # test, run alone: beside another worker on two cores the peak moved by more (EP8 ahead by 4 % in CI).
    assert peak["ep4"] > peak["tp8"] and peak["ep8"] > peak["tp8"]


def _change(values_a: list[float], values_b: list[float]) -> str:
    """How the report words A against B: the relative change of the means and Welch's verdict
    (``stats.compare``, checked against exact t quantiles in tests/unit/test_report_stats.py), which
    needs two repeats on each side."""
    relative = (mean(values_a) - mean(values_b)) / mean(values_b) * 100
    significant = compare(values_a, values_b).significant
    verdict = {True: "significant", False: "within noise", None: "one repeat: not tested"}[significant]
    return f"{relative:+.1f} % ({verdict})"


def _comparison_line(run: Path, config_a: str, config_b: str) -> str:
    """The Comparisons line of two configs: output throughput at each one's lowest level, then at each
    one's peak (the level of the highest mean throughput), A against B."""
    throughput_a, throughput_b = (
        _by_level(_points(run, config), "output_throughput") for config in (config_a, config_b)
    )
    lowest_a, lowest_b = min(throughput_a), min(throughput_b)
    peak_a, peak_b = (
        max(levels, key=lambda level: mean(levels[level])) for levels in (throughput_a, throughput_b)
    )
    first = f"C={lowest_a}: {_change(throughput_a[lowest_a], throughput_b[lowest_b])}"
    peak = f"peak (C={peak_a} vs C={peak_b}): {_change(throughput_a[peak_a], throughput_b[peak_b])}"
    return f"- **{config_a}** vs **{config_b}**: output tok/s {first}; {peak}"


def test_with_repeats_figures_carry_intervals_and_comparisons_say_whether_they_are_noise(
    runs: dict[str, Path],
) -> None:
    report = (runs["fair"] / "report.md").read_text()
    assert "2 repeats: figures are mean ± 95 % confidence interval" in report
    comparisons = _section(report, "### Comparisons")
    lines = [line for line in comparisons.splitlines() if line.startswith("- ")]
    configs = ("tp8", "tp8-nccl", "ep4", "ep8")
    assert lines == [_comparison_line(runs["fair"], a, b) for a, b in itertools.combinations(configs, 2)]
    # The profile's ~40 % lead of TP at C=1 is far beyond two repeats' noise, unless a busy machine starved
    # the client during one of them (one 60 ms stall moves a repeat by 10 %): the report then flags it.
    marked = _marked_section(report, "### Comparisons").splitlines()
    tp_vs_ep = [line for line in marked if re.match(r"- \*\*tp8(-nccl)?\*\* vs \*\*ep[48]\*\*", line)]
    assert len(tp_vs_ep) == 4
    for line in tp_vs_ep:
        at_c1 = line.split("; ")[0]
        assert "C=1: +" in at_c1
        assert at_c1.endswith("(significant)") or MARKS.search(at_c1), line


def test_declared_differences_are_intended_and_nothing_is_flagged_in_a_fair_run(
    runs: dict[str, Path],
) -> None:
    report = (runs["fair"] / "report.md").read_text()
    assert "No undeclared differences" in report
    assert "| THREAT |" not in _section(report, "## What differed")
    assert "| intended | environment | `NCCL_PROTO` | (absent) | LL |" in _section(
        report, "### tp8 vs tp8-nccl"
    )
    assert "| intended | server | `ep_size` | 1 | 4 |" in report


def test_an_undeclared_cuda_graph_difference_is_flagged_on_the_first_screen(runs: dict[str, Path]) -> None:
    report = (runs["unfair"] / "report.md").read_text()
    first_screen = report[: report.index("## Headline")]
    assert len([line for line in first_screen.splitlines() if line]) < 25
    # The verdict comes first and points at the threats, which follow it on the first screen.
    assert (
        "**Caution**: 2 undeclared setting difference(s)" in _section(report, "## Verdict").split("\n- ")[0]
    )
    assert "[!CAUTION]" in first_screen and "Not a fair comparison" in first_screen
    assert "server `cuda_graph_backend_decode`: tp8: `disabled`; ep4, ep8: `none`" in first_screen
    assert "| THREAT | server | `cuda_graph_backend_decode` | disabled | none |" in report
    assert "One repeat: the run-to-run spread was not measured" in first_screen
    # ep8 failed mid-sweep, so its peak is not its peak: it is compared with nothing.
    comparisons = _section(report, "### Comparisons")
    lines = [line for line in comparisons.splitlines() if line.startswith("- ")]
    assert lines == [_comparison_line(runs["unfair"], "tp8", "ep4")]
    assert lines[0].count("(one repeat: not tested)") == 2


def test_a_failed_config_shows_its_stage_and_journal(runs: dict[str, Path]) -> None:
    report = (runs["unfair"] / "report.md").read_text()
    first_screen = report[: report.index("## Headline")]
    assert "**ep8**: failed at stage `sweep`" in first_screen
    failed = _section(report, "## Failed configs")
    assert "### ep8: failed" in failed and "stage: `sweep`" in failed
    assert "fault crash-after=20: crashing" in failed
    assert _table(_section(report, "## Headline"))["ep8"]["status"] == "failed"


def test_two_runs_are_compared_side_by_side_with_what_differed_between_them(runs: dict[str, Path]) -> None:
    out = runs["rerun"] / "against-unfair"
    report = (out / "report.md").read_text()
    first_screen = report[: report.index("## Side by side")]
    assert "server `cuda_graph_backend_decode`: tp8 (unfair): `disabled`; tp8 (rerun): `none`" in first_screen
    assert "environment `NCCL_ALGO`: ep4 (unfair): `(absent)`; ep4 (rerun): `Ring`" in first_screen
    side = _table(_section(report, "## Side by side"))
    assert side["ep8"]["status A / B"] == "failed / missing"
    unfair_c1 = _by_level(_points(runs["unfair"], "tp8"), "output_throughput")[1][0]
    rerun_c1 = _by_level(_points(runs["rerun"], "tp8"), "output_throughput")[1][0]
    assert side["tp8"]["out tok/s lowest C, unfair"] == f"{unfair_c1:,.1f} (C=1)"
    assert side["tp8"]["B vs A, lowest C"].startswith(f"{(rerun_c1 - unfair_c1) / unfair_c1 * 100:+.1f} %")
    assert sorted(path.name for path in (out / "plots").iterdir()) == [
        "latency.png",
        "pareto.png",
        "throughput.png",
    ]


def test_the_html_report_is_self_contained_and_opens_in_headless_chromium(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    page = runs["unfair"] / "report.html"
    html = page.read_text()
    assert html.count('src="data:image/png;base64,') == 3
    assert 'src="http' not in html and "<script" not in html
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("no chromium on this machine (apt-get install -y chromium)")
    screenshot = tmp_path / "report.png"
    result = subprocess.run(
        [
            chromium,
            *("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"),
            *("--disable-background-networking", "--disable-component-update", "--disable-sync"),
            *("--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"),
            "--window-size=1400,2000",
            f"--screenshot={screenshot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "CONSOLE" not in result.stderr, result.stderr
    assert screenshot.stat().st_size > 20_000  # a rendered page, not a blank one


# --- an open loop ------------------------------------------------------------------------------------------

RATES = (10, 40)
"""Requests per second: at the simulator's time scale neither is near its limit."""


@pytest.fixture(scope="module")
def open_loop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tp8 and ep4 at each of ``RATES`` (Poisson arrivals, at most 8 in flight), two repeats, against an
    objective every level meets."""
    data = one_workload(yaml.safe_load(DEMO.read_text(encoding="utf-8")))
    data["configs"] = {name: data["configs"][name] for name in ("tp8", "ep4")}
    # An open loop has no concurrency list (campaign_from merges a workload, so cannot drop it).
    del data["workload"]["concurrency"]
    data["workload"] |= {
        **{"input_len": 32, "output_len": 16, "prompts_per_level": "1x", "warmup": 0, "repeats": 2},
        **{"request_rate": list(RATES), "max_concurrency": 8},
    }
    data["slo"] = {"tpot_p50_ms": 10_000.0}
    data["common"]["sim"] = data["common"].get("sim", {}) | {"sim-time-scale": 0.02}
    campaign = parse_campaign(yaml.safe_dump(data, sort_keys=False), str(DEMO), DEMO.parent)
    run = build_run(tmp_path_factory.mktemp("results"), campaign, "open")
    _report(run)
    return run


def _by_rate(points: list[dict[str, float]], key: str) -> dict[float, list[float]]:
    levels: dict[float, list[float]] = {}
    for point in points:
        levels.setdefault(point["request_rate"], []).append(point[key])
    return levels


def test_an_open_loops_levels_are_its_request_rates_and_its_verdict_starts_at_the_lowest(
    open_loop: Path,
) -> None:
    report = (open_loop / "report.md").read_text()
    assert "request rate 10, 40 req/s (poisson, at most 8 in flight)" in report.split("## Verdict")[0]
    verdict = _section(report, "## Verdict")
    assert "- **Lowest load** (10 req/s, output tok/s): **" in verdict
    assert "- **Highest request rate meeting the SLO** (`tpot_p50_ms` ≤ 10,000 ms;" in verdict
    assert "C=" not in verdict
    headline = _table(_section(report, "## Headline"))
    levels = _section(report, "## Every request rate level")
    for config in ("tp8", "ep4"):
        points = _points(open_loop, config)
        assert sorted(point["point_id"] for point in points) == [
            f"rps{rate}-r{repeat}" for rate in RATES for repeat in (0, 1)
        ]
        assert {point["max_concurrency"] for point in points} == {8}
        throughput = _by_rate(points, "output_throughput")
        peak = max(throughput, key=lambda rate: mean(throughput[rate]))
        row = headline[config]
        assert row["out tok/s at lowest req/s"] == f"10 req/s: {_mean_ci(throughput[10])}"
        assert row["peak at req/s"] == f"{peak:g}"
        assert row["highest request rate meeting SLO"].startswith("at least 40 req/s: ")
        rows = _table(_section(levels, f"### {config}"))
        assert list(rows) == [str(rate) for rate in RATES]
        achieved = _by_rate(points, "achieved_request_rate")
        for rate in RATES:
            behind = sum(value < 0.95 * rate for value in achieved[rate])
            mark = ["", " (behind on 1 of 2)", " (behind)"][behind]
            assert rows[str(rate)]["achieved req/s"] == _mean_ci(achieved[rate], 2) + mark
            for key, column in (("median_send_delay_ms", "p50"), ("p99_send_delay_ms", "p99")):
                delays = _by_rate(points, key)[rate]
                assert rows[str(rate)][f"send delay {column} ms"] == _mean_ci(delays, 2)
            assert rows[str(rate)]["out tok/s"] == _mean_ci(throughput[rate])
    comparisons = _section(report, "### Comparisons")
    assert "- **tp8** vs **ep4**: output tok/s 10 req/s: " in comparisons
    assert "Aggregate output throughput against request rate" in report
