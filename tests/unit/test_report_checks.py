"""The measurement checks in the report (report/flags.py, report/checks.py): each flag of a point
(measure/point_flags.py) marked beside exactly the figures its ``on`` names (or computes them from) at its
level, linking to a note with the flag, the points and why; the verdict's caveat where a compared figure
is flagged; the Measurement checks section's figures; and points from before the checks, shown as before.
Trees are written here from point lines (tests/support/report_files.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.report_files import checked_point, flag, markdown, point, section, table, write_run

from fairbench.measure.json_rules import shown
from fairbench.report.build import headlines, write_report
from fairbench.report.load import load_run
from fairbench.report.plots import pareto_flagged

CLIENT_REASON = "client process 0 was runnable 95 % of the point (90 % running, 5 % waiting for a core)"
RUNNING_REASON = "the server ran 10.0 requests on average, 62 % of C=16 (below 90 %)"
MARK = re.compile(r" \[⚑(\d+)\]\(#flag-(\d+)\)")


def marks(cell: str) -> list[int]:
    """The note numbers a cell's marks link to (each mark's text and anchor name the same note)."""
    found = MARK.findall(cell)
    assert all(text == anchor for text, anchor in found), cell
    return [int(text) for text, _ in found]


def flagged_run(tmp_path: Path) -> str:
    """ep4 flagged at C=16: ``client_bound`` on repeat 0, ``running_below_concurrency`` on repeat 1;
    tp8 checked and clean. Two repeats of C=1, 4, 16 each."""
    ep4 = [checked_point(level, repeat) for level in (1, 4) for repeat in (0, 1)] + [
        checked_point(16, 0, flags=[flag("client_bound", CLIENT_REASON)], output_throughput=2000.0),
        checked_point(
            16, 1, flags=[flag("running_below_concurrency", RUNNING_REASON)], output_throughput=2010.0
        ),
    ]
    tp8 = [checked_point(level, repeat) for level in (1, 4, 16) for repeat in (0, 1)]
    return markdown(load_run(write_run(tmp_path, {"tp8": tp8, "ep4": ep4})))


def test_a_flag_marks_exactly_the_figures_it_casts_doubt_on_at_its_level(tmp_path: Path) -> None:
    report = flagged_run(tmp_path)
    client, running = 1, 2  # numbered in the order raised: ep4's C=16, repeat 0 first
    headline = table(section(report, "## Headline"))
    assert {title: marks(cell) for title, cell in headline["ep4"].items() if marks(cell)} == {
        "peak out tok/s": [client, running],
        "peak at C": [running],  # running_below_concurrency names max_concurrency: C itself is in doubt
        "peak tok/s per GPU": [client, running],  # output_throughput / GPUs
        "TTFT p50 / p99 ms, peak": [client],  # beside the p50 (``10.0 ± 0.0 [⚑1](#flag-1) / 20.0``)
        "TPOT p50 ms, peak": [client, running],
    }
    assert headline["ep4"]["TTFT p50 / p99 ms, peak"].endswith("/ 20.0 ± 0.0")
    assert not any(marks(cell) for cell in headline["tp8"].values())
    levels = table(section(report, "### ep4"))
    assert list(levels) == ["1", "4", "16 [⚑2](#flag-2)"]
    row = levels["16 [⚑2](#flag-2)"]
    assert {title: marks(cell) for title, cell in row.items() if marks(cell)} == {
        "C": [running],
        "out tok/s": [client, running],
        "TTFT p50 ms": [client],
        "TPOT p50 ms": [client, running],
    }  # tok/s per user and ITL would be too, but these points lack them: no mark beside a `-`
    assert row["tok/s per user"] == row["ITL p50 ms"] == "-"
    assert not any(marks(cell) for level in ("1", "4") for cell in levels[level].values())
    assert not any(marks(cell) for row in table(section(report, "### tp8")).values() for cell in row.values())
    notes = section(report, "### Flags raised")
    assert '- <a id="flag-1"></a>⚑1 **ep4** at C=16: `client_bound` on `output_throughput`, ' in notes
    assert f"; raised on `c16-r0`: {CLIENT_REASON}." in notes
    assert (
        '- <a id="flag-2"></a>⚑2 **ep4** at C=16: `running_below_concurrency` on `max_concurrency`, '
        f"`output_throughput`, `median_tpot_ms`; raised on `c16-r1`: {RUNNING_REASON}." in notes
    )
    assert report.count('<a id="flag-') == 2


def test_the_verdict_says_which_compared_figure_comes_from_flagged_points(tmp_path: Path) -> None:
    verdict = section(flagged_run(tmp_path), "## Verdict")
    peak = next(line for line in verdict.splitlines() if line.startswith("- **Peak throughput**"))
    assert "**ep4** at C=16: 2,005.0 ± 63.5 [⚑1](#flag-1) [⚑2](#flag-2), +" in peak
    lowest = next(line for line in verdict.splitlines() if line.startswith("- **Lowest load**"))
    assert "⚑" not in lowest
    assert (
        "**Flagged**: C=16 of **ep4** is flagged `client_bound` on 1 of 2 repeats [⚑1](#flag-1): its "
        "throughput may be the client's limit, not the server's; C=16 of **ep4** is flagged "
        "`running_below_concurrency` on 1 of 2 repeats [⚑2](#flag-2): the server ran fewer requests than "
        "C: it measured a lower load than named.\n" in verdict
    )


def test_a_flag_on_latency_alone_marks_the_latencies_and_leaves_the_verdict_and_pareto_plot_alone(
    tmp_path: Path,
) -> None:
    tp8 = [checked_point(level, repeat) for level in (1, 4, 16) for repeat in (0, 1)]
    ep4 = [
        checked_point(level, repeat, flags=[flag("prefix_reuse")] if level == 1 else [])
        for level in (1, 4, 16)
        for repeat in (0, 1)
    ]
    run = load_run(write_run(tmp_path, {"tp8": tp8, "ep4": ep4}))
    report = markdown(run)
    headline = table(section(report, "## Headline"))
    assert {title: marks(cell) for title, cell in headline["ep4"].items() if marks(cell)} == {
        "TTFT p50 / p99 ms, lowest C": [1]
    }
    assert "**Flagged**" not in report and "⚑" not in section(report, "## Verdict")
    ep4_levels = next(line for line in headlines([run])[0] if line.result.name == "ep4").levels
    assert [pareto_flagged(level) for level in ep4_levels] == [False, False, False]


def test_the_checks_section_shows_what_the_server_and_the_client_say_of_each_level(tmp_path: Path) -> None:
    use = {
        "cpu_s": 1.0,
        "cpu_share": 0.8,
        "runqueue_wait_share": 0.15,
        "requests": 8,
        "event_loop_lag_mean_ms": 2.0,
        "event_loop_lag_p99_ms": 5.0,
        "event_loop_lag_max_ms": 9.0,
    }
    ep4 = [
        checked_point(4, 0, server_running_mean=3.0, server_queue_mean=1.0, server_send_gap_median_ms=0.25),
        checked_point(4, 1, server_running_mean=4.0, server_queue_mean=0.0, server_send_gap_median_ms=0.75),
        checked_point(
            16,
            0,
            flags=[flag("server_tokens_differ"), flag("client_bound")],
            server_generation_tokens=2100,
            server_cached_tokens=1000,
            client_processes=2,
            client_process_use=[use, {**use, "cpu_share": 0.5}],
            event_loop_lag_mean_ms=2.0,
            event_loop_lag_p99_ms=5.0,
        ),
        checked_point(16, 1, server_cached_tokens=None),
    ]
    report = markdown(load_run(write_run(tmp_path, {"ep4": ep4}, workload={"concurrency": [4, 16]})))
    checks = section(report, "## Measurement checks")
    rows = table(section(checks, "### ep4"))
    assert rows["4"] == {
        "C": "4",
        "tokens client / server": "2,048 / 2,048: agree",
        "running (share of C)": "3.5 (88 %)",
        "queued": "0.5",
        "cache hit %": "10.0",  # 2 x 410 of 2 x 4,096
        "client processes": "1",
        "client runnable": "32 % (30 % CPU, 2 % waiting)",
        "loop lag mean / p99 ms": "0.60 / 1.20",
        "send gap p50 ms": "0.75",  # the worse repeat's
        "flags": "none",
    }
    assert rows["16"] == {
        "C": "16",
        # The client's count is what server_tokens_differ doubts (total_output_tokens).
        "tokens client / server": "2,048 / 2,074: differ on 1 of 2 (server +52, +2.5 %) [⚑1](#flag-1)",
        "running (share of C)": "16.0 (100 %)",
        "queued": "0.0",
        "cache hit %": "24.4",  # repeat 1 has no cached count: repeat 0's 1,000 of 4,096
        "client processes": "1 to 2",
        "client runnable": "95 % (80 % CPU, 15 % waiting)",
        "loop lag mean / p99 ms": "2.00 / 5.00",
        "send gap p50 ms": "-",
        "flags": "[⚑1](#flag-1) [⚑2](#flag-2)",
    }
    assert "not scraped" not in checks


def test_points_from_before_the_checks_show_no_mark_and_say_the_server_was_not_scraped(
    tmp_path: Path,
) -> None:
    old = {
        name: [point(level, repeat) for level in (1, 4, 16) for repeat in (0, 1)] for name in ("tp8", "ep4")
    }
    report = markdown(load_run(write_run(tmp_path, old)))
    assert "⚑" not in report and "**Flagged**" not in report and "Flags raised" not in report
    checks = section(report, "## Measurement checks")
    for name in old:
        assert section(checks, f"### {name}").strip() == (
            "Server metrics not scraped (start SGLang with --enable-metrics); no point records the checks "
            "(measured before fairbench made them)."
        )
    assert "| C | tokens client / server |" not in checks


def test_a_server_not_scraped_is_said_beside_the_clients_checks(tmp_path: Path) -> None:
    server_keys = [key for key in checked_point(1) if key.startswith("server_")]

    def unscraped(level: int, repeat: int) -> dict[str, Any]:
        found = checked_point(level, repeat)
        return {key: value for key, value in found.items() if key not in server_keys}

    failing = [
        checked_point(
            level, repeat, server_metric_failures=1, server_metric_error="http://x/metrics: timed out"
        )
        for level in (1, 4, 16)
        for repeat in (0, 1)
    ]
    unscraped_points = [unscraped(level, repeat) for level in (1, 4, 16) for repeat in (0, 1)]
    report = markdown(load_run(write_run(tmp_path, {"tp8": unscraped_points, "ep4": failing})))
    tp8 = section(section(report, "## Measurement checks"), "### tp8")
    assert tp8.startswith("\nServer metrics not scraped (start SGLang with --enable-metrics).\n")
    assert table(tp8)["1"]["tokens client / server"] == "-"
    assert table(tp8)["1"]["client runnable"] == "32 % (30 % CPU, 2 % waiting)"
    ep4 = section(section(report, "## Measurement checks"), "### ep4")
    assert "6 scrape(s) of the server's `/metrics` failed; the first: http://x/metrics: timed out." in ep4
    assert "No check raised a flag on any point." in report


def test_a_broken_check_is_named_and_counts_as_not_measured(tmp_path: Path) -> None:
    broken = checked_point(16, 0, flags=[{"flag": "client_bound", "on": "output_throughput"}])
    points = [checked_point(level, repeat) for level in (1, 4) for repeat in (0, 1)]
    run_dir = write_run(tmp_path, {"ep4": [*points, broken, checked_point(16, 1, server_running_mean="x")]})
    run = load_run(run_dir)
    (ep4,) = run.results
    path = run_dir / "lab1" / "ep4" / "points.jsonl"
    assert ep4.problems == (
        f"{path}:5: point c16-r0: flags: {shown(broken['flags'])} is not a list of {{flag, on, reason}}; "
        "not used",
        f'{path}:6: point c16-r1: server_running_mean: "x" is not null or a finite number; not used',
    )
    report = markdown(run)
    assert not MARK.search(report)
    assert table(section(section(report, "## Measurement checks"), "### ep4"))["16"]["flags"] == "none"


def test_the_html_links_each_mark_to_its_note(tmp_path: Path) -> None:
    ep4 = [
        checked_point(level, repeat, flags=[flag("client_bound")] if level == 16 else [])
        for level in (1, 4, 16)
        for repeat in (0, 1)
    ]
    run = load_run(write_run(tmp_path / "results", {"ep4": ep4}))
    write_report([run], tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    assert '1,600.5 ± 6.4 <a href="#flag-1">⚑1</a>' in html
    assert html.count('<li id="flag-1">⚑1 <strong>ep4</strong> at C=16: <code>client_bound</code>') == 1
    assert (
        "<code>⚑</code> after a level: a measurement check doubts its throughput" in html
    )  # Pareto's caption


def test_two_runs_number_their_flags_over_both(tmp_path: Path) -> None:
    def run_of(run_id: str) -> Path:
        ep4 = [
            checked_point(level, repeat, flags=[flag("client_bound")] if level == 16 else [])
            for level in (1, 4, 16)
            for repeat in (0, 1)
        ]
        return write_run(tmp_path, {"ep4": ep4}, run_id=run_id)

    run_a, run_b = load_run(run_of("run1")), load_run(run_of("run2"))
    report = markdown(run_a, run_b)
    side = table(section(report, "## Side by side"))
    assert side["ep4"]["out tok/s peak, run1"].endswith(" [⚑1](#flag-1) (C=16)")
    assert side["ep4"]["out tok/s peak, run2"].endswith(" [⚑2](#flag-2) (C=16)")
    assert '<a id="flag-1"></a>⚑1 **ep4** at C=16' in section(report, "### Measurement checks of run run1")
    assert '<a id="flag-2"></a>⚑2 **ep4** at C=16' in section(report, "### Measurement checks of run run2")
    assert report.count('<a id="flag-') == 2 and "flag-3" not in report


def test_running_is_the_servers_own_littles_law_where_it_has_the_histograms(tmp_path: Path) -> None:
    # The gauge reads 5.5 of 8 (SGLang refreshes it at log points); its histograms say 7.5 ran of the 7.9
    # the client had in flight, with 0.2 queued.
    littles_law = {"server_in_flight_mean": 7.7, "server_queued_mean": 0.2, "concurrency": 7.9}
    point = checked_point(8, server_running_mean=5.5) | littles_law
    report = markdown(load_run(write_run(tmp_path, {"ep4": [point]}, workload={"concurrency": [8]})))
    row = table(section(section(report, "## Measurement checks"), "### ep4"))["8"]
    assert (row["running (share of C)"], row["queued"]) == ("7.5 (95 %)", "0.2")


def test_an_observation_of_the_servers_behaviour_is_listed_and_marks_no_figure(tmp_path: Path) -> None:
    queued = {"observation": "queued_at_concurrency", "reason": "8.2 waited in its queue on average"}
    run = write_run(
        tmp_path,
        {
            "tp8": [checked_point(1), checked_point(4, observations=[queued]), checked_point(16)],
            "ep4": [checked_point(1), checked_point(4), checked_point(16)],
        },
    )
    report = markdown(load_run(run))
    assert "(#flag-" not in report and "**Flagged**" not in report and "No check raised a flag" in report
    observed = section(report, "### Observations")
    assert "no figure is marked for it" in observed
    assert (
        "- **tp8** at C=4: `queued_at_concurrency` on 1 of 1 repeats; the first: 8.2 waited in its queue on "
        "average" in observed
    )
    assert "ep4" not in observed


def test_the_machines_state_shows_where_the_points_have_it(tmp_path: Path) -> None:
    gpus = [
        {"index": 0, "sm_clock_mhz_min": 1980, "throttled_share": 0.0, "power_capped_share": 0.0},
        {"index": 1, "sm_clock_mhz_min": 1140, "throttled_share": 0.4, "power_capped_share": 0.99},
    ]
    machine = {"client_cpu_busy_share": 0.62, "client_cpu_steal_share": 0.01}
    shares = {"gpu_throttled_share": 0.4, "gpu_power_capped_share": 0.99}
    run = write_run(
        tmp_path,
        {
            "tp8": [
                checked_point(
                    1, gpu_state=gpus[:1], gpu_throttled_share=0.0, gpu_power_capped_share=0.0, **machine
                ),
                checked_point(4, gpu_state=gpus, **shares, **machine),
            ],
            "ep4": [checked_point(1), checked_point(4)],
        },
        workload={"concurrency": [1, 4]},
    )
    (run / "lab1" / "tp8" / "host.json").write_text(
        json.dumps({"gpu_clock_lock": {"sm_mhz": 1500, "mem_mhz": None}})
    )
    report = markdown(load_run(run))
    checks = section(report, "## Measurement checks")
    column = "GPU SM clock lowest, power-capped / throttled %"
    rows = table(section(checks, "### tp8"))
    assert rows["1"][column] == "1,980 MHz, 0 / 0 %"
    assert rows["4"][column] == "1,140 MHz, 99 / 40 %"
    assert rows["4"]["client machine CPU busy / steal %"] == "62 / 1"
    assert list(rows["4"])[-1] == "flags"
    # A config whose points have no such state has no such columns.
    assert column not in table(section(checks, "### ep4"))["1"]
    # The clock lock its jobs ran under (host.json), said where its table is; a config without one says none,
    # and the pair's What differed has it as a threat.
    assert "GPU clocks locked for its jobs (host.json `gpu_clock_lock`): SM 1,500 MHz." in section(
        checks, "### tp8"
    )
    assert "locked" not in section(checks, "### ep4")
    assert "| THREAT | host | `gpu_clock_lock.sm_mhz` | 1500 | (absent) |" in section(
        report, "## What differed"
    )
