"""The report of campaigns run over a fleet (tests/support/results_tree.py, real sweeps against the
simulator): ``spread`` (the demo's five configs over lab1 and lab2, two repeats, each repeat a job placed
by the test; ep8's repeats on both hosts, ep8-eplb one server over both; lab2's driver differs, which the
campaign accepts), ``judged`` (tp8 and ep4 spread with automatic repeats, which the queue judges),
``every-host`` (tp8 and ep4 on each of lab1 and lab2), and a run whose campaign.json and status.json predate
fleets. Expected figures are computed here from the trees' files.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from statistics import mean, stdev
from typing import Any

import pytest
from tests.support.report_files import section, table, unmarked
from tests.support.results_tree import (
    BRIEF_WORKLOAD,
    DEMO,
    brief_campaign,
    build_fleet_run,
    build_run,
    campaign_from,
)

from fairbench.fleet.timeline import Timeline, host_overheads, overhead_s, summary
from fairbench.measure.journal import excerpt
from fairbench.measure.stats import compare
from fairbench.measure.status import JOURNAL_EXCERPT_LINES
from fairbench.report.build import headlines, report_blocks
from fairbench.report.differences import config_differences
from fairbench.report.load import Run, load_run
from fairbench.report.markdown import render_markdown

# The tests share runs built once per module: on one pytest worker, not built again on each.
pytestmark = pytest.mark.xdist_group("report_fleet")

CONFIGS = ["tp8", "tp8-nccl", "ep4", "ep8", "ep8-eplb"]
HOSTS = ("lab1", "lab2")
PLACED = {
    "tp8#r0": ["lab1"],
    "tp8#r1": ["lab1"],
    "tp8-nccl#r0": ["lab1"],
    "tp8-nccl#r1": ["lab1"],
    "ep4#r0": ["lab2"],
    "ep4#r1": ["lab2"],
    "ep8#r0": ["lab1"],
    "ep8#r1": ["lab2"],
    "ep8-eplb#r0": ["lab1", "lab2"],
    "ep8-eplb#r1": ["lab1", "lab2"],
}
"""Where each job of the spread run runs, rank 0 first."""
DRIVERS = {"lab1": "580.95.05", "lab2": "580.159.04"}
T_975_DF1 = 12.706
ACCEPTED = "host difference(s) that the campaign accepted"


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory) -> Path:
    campaign = brief_campaign(
        CONFIGS,
        fleet={"placement": "spread", "accept_host_differences": ["driver"]},
        nodes={"ep8-eplb": 2},
    )
    return build_fleet_run(
        tmp_path_factory.mktemp("results"),
        campaign,
        "spread",
        placed=PLACED,
        facts={"lab2": {"driver": DRIVERS["lab2"]}},
    )


@pytest.fixture(scope="module")
def every_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    campaign = brief_campaign(["tp8", "ep4"], fleet={"placement": "every-host"})
    return build_fleet_run(tmp_path_factory.mktemp("results"), campaign, "every-host")


def markdown(*runs: Run) -> str:
    """The report's Markdown, without the marks of the measurement checks (``unmarked``)."""
    _, blocks = report_blocks(list(runs), headlines(list(runs)), [])
    return unmarked(render_markdown(blocks))


def comparison_pairs(report: str) -> list[tuple[str, str]]:
    """The pairs the Comparisons list compares, by their labels."""
    lines = [line for line in section(report, "### Comparisons").splitlines() if line.startswith("- ")]
    return [(line.split("**")[1], line.split("**")[3]) for line in lines]


def points(run: Path, host: str, config: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / host / config / "points.jsonl").read_text().splitlines()]


def throughputs(found: list[dict[str, Any]], concurrency: int) -> list[float]:
    return [point["output_throughput"] for point in found if point["max_concurrency"] == concurrency]


def mean_ci(values: list[float]) -> str:
    """Two repeats: mean ± t(0.975, 1) * s / sqrt(2)."""
    assert len(values) == 2
    return f"{mean(values):,.1f} ± {T_975_DF1 * stdev(values) / math.sqrt(2):,.1f}"


def hosts_of(config: str) -> set[str]:
    """Every host a config of the spread run ran on, as the test placed its jobs."""
    return {host for job, hosts in PLACED.items() if job.startswith(f"{config}#") for host in hosts}


# --- spread ------------------------------------------------------------------------------------------------


def test_a_spread_run_compares_each_config_once_by_its_name(spread: Path) -> None:
    run = load_run(spread)
    assert run.placement == "spread"
    assert [config.name for config in run.configs] == CONFIGS
    pairs = config_differences(run)
    assert [(pair.a.name, pair.b.name) for pair in pairs] == list(itertools.combinations(CONFIGS, 2))
    assert len(pairs) == 10
    report = markdown(run)
    assert comparison_pairs(report) == list(itertools.combinations(CONFIGS, 2))
    assert "@lab" not in report
    headline = table(section(report, "## Headline"))
    assert list(headline) == CONFIGS
    assert {config: row["hosts"].split(" (")[0] for config, row in headline.items()} == {
        "tp8": "lab1",
        "tp8-nccl": "lab1",
        "ep4": "lab2",
        "ep8": "lab1, lab2",
        "ep8-eplb": "lab1 + lab2",
    }
    assert headline["ep8-eplb"]["hosts"] == "lab1 + lab2 (2 nodes)"


def test_a_config_spread_over_two_hosts_is_estimated_over_the_points_of_both(spread: Path) -> None:
    merged = points(spread, "lab1", "ep8") + points(spread, "lab2", "ep8")
    assert sorted(point["point_id"] for point in merged) == ["c1-r0", "c1-r1", "c4-r0", "c4-r1"]
    levels = table(section(markdown(load_run(spread)), "### ep8"))
    assert levels["1"]["repeats"] == "2"
    assert levels["1"]["out tok/s"] == mean_ci(throughputs(merged, 1))
    assert levels["4"]["out tok/s"] == mean_ci(throughputs(merged, 4))


def test_repeats_on_two_hosts_say_their_interval_includes_host_to_host_variation(spread: Path) -> None:
    report = markdown(load_run(spread))
    note = "repeats on 2 hosts: the interval includes host-to-host variation"
    headline = table(section(report, "## Headline"))
    assert [config for config, row in headline.items() if note in row["hosts"]] == ["ep8"]
    assert section(report, "### ep8").startswith(f"\n{headline['ep8']['hosts'].split(' (')[0]}: {note}.\n")
    assert all(note not in section(report, f"### {config}") for config in CONFIGS if config != "ep8")


def test_a_server_over_two_nodes_keeps_each_ranks_files_and_its_nodes_are_declared(spread: Path) -> None:
    run = load_run(spread)
    config = next(config for config in run.configs if config.name == "ep8-eplb")
    (part,) = config.parts
    assert part.host == "lab1" and config.hosts == ("lab1", "lab2")
    assert [(job.id, job.hosts) for job in config.jobs] == [
        ("ep8-eplb#r0", ("lab1", "lab2")),
        ("ep8-eplb#r1", ("lab1", "lab2")),
    ]
    assert [(rank.rank, rank.host) for job in config.jobs for rank in job.ranks] == [(1, "lab2"), (1, "lab2")]
    (rank,) = part.ranks
    assert rank.host == "lab2" and rank.path == spread / "lab1" / "ep8-eplb" / "ranks" / "lab2"
    assert rank.host_info is not None and rank.environment is not None
    journal = (rank.path / "journal.log").read_text().splitlines()
    assert any("node rank 1 joined rank 0" in line for line in journal)
    assert rank.journal_excerpt == excerpt(journal, JOURNAL_EXCERPT_LINES) != []
    # Rank 0's server reports two nodes: declared by the config's nodes, so no threat.
    report = markdown(run)
    assert "| intended | server | `nnodes` | 1 | 2 |" in section(report, "### ep8 vs ep8-eplb")
    assert "Not a fair comparison" not in report[: report.index("## Headline")]


def test_an_accepted_host_difference_is_a_threat_on_the_pairs_whose_hosts_differ_in_it(spread: Path) -> None:
    report = markdown(load_run(spread))
    touched = [
        (a, b) for a, b in itertools.combinations(CONFIGS, 2) if hosts_of(a) | hosts_of(b) == set(HOSTS)
    ]
    untouched = [pair for pair in itertools.combinations(CONFIGS, 2) if pair not in touched]
    assert untouched == [("tp8", "tp8-nccl")]
    alert = next(block for block in report.split("\n\n") if ACCEPTED in block)
    assert alert.startswith("> [!CAUTION]")
    assert alert.splitlines()[2] == (
        f"> - host fact `driver` (pool `gpu_hosts`): lab1: `{DRIVERS['lab1']}`; lab2: `{DRIVERS['lab2']}`. "
        "Touches " + ", ".join(f"{a} vs {b}" for a, b in touched)
    )
    for a, b in touched:
        # Each side shows its hosts' driver: one value, or each host's where they differ.
        sides = [
            "; ".join(f"{host}: {DRIVERS[host]}" for host in HOSTS if host in hosts_of(config))
            if len(hosts_of(config)) > 1
            else DRIVERS[next(iter(hosts_of(config)))]
            for config in (a, b)
        ]
        row = f"| THREAT | fleet (accepted) | `driver` | {sides[0]} | {sides[1]} |"
        assert row in section(report, f"### {a} vs {b}"), (a, b)
    assert "fleet (accepted)" not in section(report, "### tp8 vs tp8-nccl")
    # Declared, so no undeclared difference: the run is fair but for the accepted one.
    assert "No undeclared differences" in report[: report.index("## Headline")]


def test_a_host_json_differing_between_the_hosts_of_two_configs_is_a_threat(
    spread: Path, tmp_path: Path
) -> None:
    copy = shutil.copytree(spread, tmp_path / "demo" / "kernel")
    host_json = copy / "lab2" / "ep4" / "host.json"
    host_json.write_text(json.dumps(json.loads(host_json.read_text()) | {"kernel": "6.8.0-90-generic"}))
    report = markdown(load_run(copy))
    # ep4 ran on lab2 only: every pair with it compares lab2's host.json with its partner's first host's.
    for a, b in itertools.combinations(CONFIGS, 2):
        threat = "| THREAT | host | `kernel` |" in section(report, f"### {a} vs {b}")
        assert threat == ("ep4" in (a, b)), (a, b)


def test_what_fleet_json_says_went_wrong_is_on_the_first_screen(spread: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(spread, tmp_path / "demo" / "queue")
    fleet = json.loads((copy / "fleet.json").read_text())
    fleet["jobs"][1] |= {"state": "unplaced", "reason": "every host that may take it is gone"}
    refused = {"pool": "gpu_hosts", "fact": "sglang", "values": {"lab1": "0.5.23", "lab2": "0.5.22"}}
    fleet["equivalence"]["refused"] = [refused]
    (copy / "fleet.json").write_text(json.dumps(fleet))
    report = markdown(load_run(copy))
    first_screen = report[: report.index("## Headline")]
    job = fleet["jobs"][1]
    assert (
        "> **1 job(s) of the run never ran to an end (fleet.json): their points are missing.**\n"
        f"> - `{job['id']}` ({job['config']}, repeats 0): unplaced: every host that may take it is gone"
    ) in first_screen
    assert "> - pool `gpu_hosts`, `sglang`: lab1: `0.5.23`; lab2: `0.5.22`" in first_screen


SHARED = {
    "hosts": ["lab1", "lab2"],
    "evidence": [{"fact": "kernel_boot", "hosts": ["lab1", "lab2"], "text": "one kernel, booted at ..."}],
    "text": "lab1, lab2: one kernel, booted at 2026-12-06 02:27:53.175 UTC",
}
"""fleet.json's entry for the lab's hosts (fleet.sharing), as the fleet module writes it."""


def with_machines(run: Path, out: Path, machines: Any) -> Path:
    """A copy of ``run`` whose fleet.json holds ``machines``."""
    copy = shutil.copytree(run, out / run.name)
    fleet = json.loads((copy / "fleet.json").read_text())
    (copy / "fleet.json").write_text(json.dumps(fleet | {"machines": machines}))
    return copy


def test_hosts_that_shared_a_machine_and_took_turns_are_a_note_on_the_first_screen(
    spread: Path, tmp_path: Path
) -> None:
    report = markdown(load_run(with_machines(spread, tmp_path, {"shared": [SHARED], "isolated": False})))
    first_screen = report[: report.index("## Headline")]
    assert (
        "> **Hosts share a machine (fleet.json): the hosts of each took their jobs one at a time, so no job "
        "was measured while another of them ran one (`isolated_hosts: true` in the campaign would run them "
        "at the same time).**\n"
        f"> - {SHARED['text']}"
    ) in first_screen
    assert "machine(s) whose hosts ran jobs at the same time" not in report
    assert "Hosts share a machine" not in markdown(load_run(spread))  # none found: nothing said


def test_hosts_that_shared_a_machine_declared_isolated_are_a_threat_and_a_caution(
    spread: Path, tmp_path: Path
) -> None:
    report = markdown(load_run(with_machines(spread, tmp_path, {"shared": [SHARED], "isolated": True})))
    first_screen = report[: report.index("## Headline")]
    assert (
        "and the campaign declared its hosts isolated (`isolated_hosts: true`): their jobs ran at the same "
        "time, so a figure measured on one may include the load of another's job."
    ) in first_screen
    assert f"> - {SHARED['text']}" in first_screen
    verdict = section(report, "## Verdict")
    assert "**Caution**: " in verdict and "1 machine(s) whose hosts ran jobs at the same time" in verdict


def test_a_broken_machines_entry_is_named_and_left_out(spread: Path, tmp_path: Path) -> None:
    broken = {"shared": [SHARED, {"hosts": "lab1", "text": "x"}], "isolated": "no"}
    copy = with_machines(spread, tmp_path, broken)
    run = load_run(copy)
    assert run.fleet is not None and run.fleet.isolated is False
    assert [machine.hosts for machine in run.fleet.shared_machines] == [("lab1", "lab2")]
    report = markdown(run)
    assert f'{copy / "fleet.json"}: machines.isolated: "no" is not true or false; not used' in report
    assert f'{copy / "fleet.json"}: machines.shared[1].hosts: "lab1" is not a list of strings' in report


# --- automatic repeats judged by the queue ------------------------------------------------------------------

AUTOMATIC = {"min": 2, "max": 3, "half_width_pct": 50}


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    campaign = campaign_from(
        DEMO,
        configs=["tp8", "ep4"],
        workload={**BRIEF_WORKLOAD, "repeats": AUTOMATIC},
        sim={"sim-time-scale": 0.02},
        fleet={"placement": "spread"},
    )
    return build_fleet_run(tmp_path_factory.mktemp("results"), campaign, "judged")


def judged_line(count: int, stopped: str) -> str:
    return (
        f"Automatic repeats, judged by the run's queue over its jobs (fleet.json): {count} repeat(s); "
        f"why no more: {stopped}."
    )


def test_why_the_queue_stopped_a_configs_repeats_is_under_its_levels(judged: Path) -> None:
    fleet = json.loads((judged / "fleet.json").read_text())
    assert set(fleet["judged"]) == {"tp8", "ep4"}
    run = load_run(judged)
    assert run.fleet is not None and set(run.fleet.judged) == {"tp8", "ep4"}
    report = markdown(run)
    for config, entry in fleet["judged"].items():
        jobs = [job for job in fleet["jobs"] if job["config"] == config]
        assert entry["count"] == len(jobs) in (2, 3)
        # The queue judged each listed level over the config's jobs, one repeat each.
        assert [part.split(": ", 1)[0] for part in entry["stopped"].split("; ")] == ["c1", "c4"]
        levels = section(report, f"### {config}")
        assert f"\n{judged_line(entry['count'], entry['stopped'])}\n" in levels
        # A sweep of one repeat judges nothing itself: the table's repeats are the queue's count.
        assert {row["repeats"] for row in table(levels).values()} == {str(entry["count"])}
    assert "each level measured 2 to 3 times" in report[: report.index("## Headline")]


def test_a_broken_judgement_is_named_and_left_out_and_fixed_repeats_have_none(
    judged: Path, spread: Path, tmp_path: Path
) -> None:
    copy = shutil.copytree(judged, tmp_path / "demo" / "broken")
    fleet = json.loads((copy / "fleet.json").read_text())
    fleet["judged"]["ep4"] = {"count": "two", "stopped": fleet["judged"]["ep4"]["stopped"]}
    (copy / "fleet.json").write_text(json.dumps(fleet))
    run = load_run(copy)
    assert run.fleet is not None and list(run.fleet.judged) == ["tp8"]
    report = markdown(run)
    assert (
        f'{copy / "fleet.json"}: judged.ep4.count: "two" is not a whole number of at least 1; judgement not '
        "shown"
    ) in report[: report.index("## Headline")]
    assert "judged by the run's queue" in section(report, "### tp8")
    assert "judged by the run's queue" not in section(report, "### ep4")
    # Fixed repeats: the queue judges nothing, and fleet.json has no `judged`.
    assert "judged" not in json.loads((spread / "fleet.json").read_text())
    assert "judged by the run's queue" not in markdown(load_run(spread))


# --- the campaign's overhead -------------------------------------------------------------------------------


def test_overhead_is_the_gap_between_jobs_less_the_next_servers_load() -> None:
    first = Timeline(
        unit_started_at=100.0, healthy_at=130.0, first_request_at=131.0, last_point_ended_at=200.0
    )
    second = Timeline(
        unit_started_at=205.0, healthy_at=225.0, first_request_at=226.5, last_point_ended_at=300.0
    )
    third = Timeline(unit_started_at=302.0, healthy_at=None, first_request_at=None, last_point_ended_at=None)
    fourth = Timeline(
        unit_started_at=310.0, healthy_at=312.0, first_request_at=313.0, last_point_ended_at=400.0
    )
    assert overhead_s(first, second) == (226.5 - 200.0) - (225.0 - 205.0) == 6.5
    overheads = host_overheads([("c", third), ("a", first), ("d", fourth), ("b", second), ("e", Timeline())])
    assert [(item.job, item.gap_s, item.overhead_s) for item in overheads] == [
        ("a", None, None),
        ("b", 26.5, 6.5),
        ("c", None, None),  # it never became healthy
        ("d", None, None),  # after a job that never measured: no last point to start from
    ]
    found = summary(overheads)
    assert found is not None and (found.mean_s, found.max_s, found.count) == (6.5, 6.5, 1)
    assert summary(overheads[:1]) is None


TIMELINES = {
    "tp8@lab1": (1000.0, 1012.0, 1012.5, 1100.0),
    "ep4@lab1": (1103.0, 1120.0, 1121.0, 1200.0),
    "tp8@lab2": (1000.0, 1010.0, 1010.25, 1090.0),
    "ep4@lab2": (1094.0, 1104.0, 1106.0, 1150.0),
}
"""Known timelines for the every-host run's jobs: unit started, healthy, first request, last point."""


def with_timelines(run: Path, out: Path, timeline: Callable[[str], dict[str, Any] | None]) -> Run:
    """A copy of ``run`` whose jobs have the timelines ``timeline`` gives for each job's id."""
    copy = shutil.copytree(run, out / run.name)
    for status_path in copy.glob("*/*/status.json"):
        status = json.loads(status_path.read_text())
        for job in status["jobs"]:
            job["timeline"] = timeline(job["job"])
        status_path.write_text(json.dumps(status))
    return load_run(copy)


def test_the_campaign_overhead_of_each_host_from_known_timelines(every_host: Path, tmp_path: Path) -> None:
    keys = ("unit_started_at", "healthy_at", "first_request_at", "last_point_ended_at")
    run = with_timelines(every_host, tmp_path, lambda job: dict(zip(keys, TIMELINES[job], strict=True)))
    report = markdown(run)
    overhead = section(report, "## Campaign overhead")
    # ep4 on lab1: (1121 - 1100) - (1120 - 1103) = 4; on lab2: (1106 - 1090) - (1104 - 1094) = 6.
    assert table(overhead) == {
        "lab1": {"host": "lab1", "jobs": "2", "mean overhead s": "4.00", "max overhead s": "4.00"},
        "lab2": {"host": "lab2", "jobs": "2", "mean overhead s": "6.00", "max overhead s": "6.00"},
    }
    assert table(section(report, "### lab1")) == {
        "`tp8@lab1`": {
            "job": "`tp8@lab1`",
            "config": "tp8",
            "hosts": "lab1",
            "server load s": "12.00",
            "gap s": "-",
            "overhead s": "-",
        },
        "`ep4@lab1`": {
            "job": "`ep4@lab1`",
            "config": "ep4",
            "hosts": "lab1",
            "server load s": "17.00",
            "gap s": "21.00",
            "overhead s": "4.00",
        },
    }
    assert [row["overhead s"] for row in table(section(report, "### lab2")).values()] == ["-", "6.00"]


SERIAL_TIMELINES = {
    "tp8@lab1": (1000.0, 1012.0, 1012.5, 1100.0),
    "tp8@lab2": (1102.0, 1110.0, 1110.5, 1190.0),
    "ep4@lab1": (1193.0, 1205.0, 1206.0, 1290.0),
    "ep4@lab2": (1291.0, 1301.0, 1302.0, 1380.0),
}
"""The every-host run's jobs as hosts of one machine taking turns would run them."""


def test_hosts_of_one_machine_that_took_turns_are_timed_as_one(every_host: Path, tmp_path: Path) -> None:
    keys = ("unit_started_at", "healthy_at", "first_request_at", "last_point_ended_at")
    shared = with_machines(every_host, tmp_path / "shared", {"shared": [SHARED], "isolated": False})
    run = with_timelines(shared, tmp_path, lambda job: dict(zip(keys, SERIAL_TIMELINES[job], strict=True)))
    overhead = section(markdown(run), "## Campaign overhead")
    # Each job from the machine's previous one: (1110.5 - 1100) - 8 = 2.5, (1206 - 1190) - 12 = 4,
    # (1302 - 1290) - 10 = 2.
    machine = "lab1, lab2 (one machine)"
    assert table(overhead) == {
        machine: {"host": machine, "jobs": "4", "mean overhead s": "2.83", "max overhead s": "4.00"}
    }
    rows = table(section(overhead, f"### {machine}"))
    assert [(row["job"], row["hosts"], row["overhead s"]) for row in rows.values()] == [
        ("`tp8@lab1`", "lab1", "-"),
        ("`tp8@lab2`", "lab2", "2.50"),
        ("`ep4@lab1`", "lab1", "4.00"),
        ("`ep4@lab2`", "lab2", "2.00"),
    ]
    isolated = with_machines(every_host, tmp_path / "isolated", {"shared": [SHARED], "isolated": True})
    apart = with_timelines(isolated, tmp_path / "t", lambda job: dict(zip(keys, TIMELINES[job], strict=True)))
    assert list(table(section(markdown(apart), "## Campaign overhead"))) == ["lab1", "lab2"]


def test_jobs_without_a_timeline_are_named_and_left_out(every_host: Path, tmp_path: Path) -> None:
    keys = ("unit_started_at", "healthy_at", "first_request_at", "last_point_ended_at")

    def timeline(job: str) -> dict[str, Any] | None:
        return None if job == "ep4@lab2" else dict(zip(keys, TIMELINES[job], strict=True))

    overhead = section(markdown(with_timelines(every_host, tmp_path, timeline)), "## Campaign overhead")
    assert table(overhead)["lab2"]["jobs"] == "1"
    assert "Not timed (status.json records no timeline for them), so left out: `ep4@lab2`." in overhead


def test_the_overhead_of_a_real_run_follows_its_status_files(spread: Path) -> None:
    timelines = {
        job["job"]: (job["hosts"], job["timeline"])
        for status_path in sorted(spread.glob("*/*/status.json"))
        for job in json.loads(status_path.read_text())["jobs"]
    }
    report = markdown(load_run(spread))
    for host in HOSTS:
        ran = sorted(
            (job for job, (hosts, _) in timelines.items() if host in hosts),
            key=lambda job: timelines[job][1]["unit_started_at"],
        )
        expected = ["-"]
        for previous, job in itertools.pairwise(ran):
            before, now = timelines[previous][1], timelines[job][1]
            gap = now["first_request_at"] - before["last_point_ended_at"]
            expected.append(f"{gap - (now['healthy_at'] - now['unit_started_at']):,.2f}")
        rows = table(section(report, f"### {host}"))
        assert [row["job"] for row in rows.values()] == [f"`{job}`" for job in ran]
        assert [row["overhead s"] for row in rows.values()] == expected


# --- every-host --------------------------------------------------------------------------------------------


def test_every_host_compares_the_configs_of_each_host_and_each_config_across_hosts(every_host: Path) -> None:
    run = load_run(every_host)
    assert run.placement == "every-host"
    pairs = [
        (pair.a.name + "@" + pair.a.host, pair.b.name + "@" + pair.b.host) for pair in config_differences(run)
    ]
    assert pairs == [
        ("tp8@lab1", "ep4@lab1"),
        ("tp8@lab2", "ep4@lab2"),
        ("tp8@lab1", "tp8@lab2"),
        ("ep4@lab1", "ep4@lab2"),
    ]
    report = markdown(run)
    assert comparison_pairs(report) == [("tp8@lab1", "ep4@lab1"), ("tp8@lab2", "ep4@lab2")]
    assert "hosts" not in table(section(report, "## Headline"))["tp8@lab1"]
    for config in ("tp8", "ep4"):
        rows = table(section(report, f"### {config}").split("\n#", 1)[0])
        assert list(rows) == ["1", "4"]
        for level in (1, 4):
            lab1, lab2 = (throughputs(points(every_host, host, config), level) for host in HOSTS)
            row = rows[str(level)]
            assert (row["out tok/s, lab1"], row["out tok/s, lab2"]) == (mean_ci(lab1), mean_ci(lab2))
            comparison = compare(lab1, lab2)
            verdict = "significant" if comparison.significant else "within noise"
            assert row["lab1 vs lab2"] == f"{comparison.relative_pct:+.1f} % ({verdict})"
    assert "## Hardware" in report and "## Campaign overhead" in report


# --- two runs ----------------------------------------------------------------------------------------------


def test_two_spread_runs_compare_each_config_merged_over_its_hosts(spread: Path, tmp_path: Path) -> None:
    again = load_run(shutil.copytree(spread, tmp_path / "demo" / "again"))
    report = markdown(load_run(spread), again)
    side = table(section(report, "## Side by side"))
    assert list(side) == CONFIGS
    merged = points(spread, "lab1", "ep8") + points(spread, "lab2", "ep8")
    assert side["ep8"]["out tok/s lowest C, spread"] == f"{mean_ci(throughputs(merged, 1))} (C=1)"
    assert side["ep8"]["B vs A, lowest C"] == "+0.0 % (within noise)"


def test_two_every_host_runs_compare_each_config_on_each_host(every_host: Path, tmp_path: Path) -> None:
    again = load_run(shutil.copytree(every_host, tmp_path / "demo" / "again"))
    side = table(section(markdown(load_run(every_host), again), "## Side by side"))
    assert list(side) == ["tp8@lab1", "ep4@lab1", "tp8@lab2", "ep4@lab2"]


# --- damaged fleet files -----------------------------------------------------------------------------------


def test_a_damaged_job_or_fleet_json_is_named_and_the_rest_shown(spread: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(spread, tmp_path / "demo" / "damaged")
    status_path = copy / "lab2" / "ep4" / "status.json"
    status = json.loads(status_path.read_text())
    status["jobs"][0]["timeline"]["healthy_at"] = "soon"
    status["jobs"][1] = {"job": "ep4#r1"}
    status_path.write_text(json.dumps(status))
    (copy / "fleet.json").write_text("{not json")
    run = load_run(copy)
    report = markdown(run)
    first_screen = report[: report.index("## Headline")]
    assert (
        f'{status_path}: jobs[0].timeline.healthy_at: "soon" is not null or a finite number; not used'
        in first_screen
    )
    assert f"{status_path}: jobs[1].repeats: required key is missing" in first_screen
    assert f"{copy / 'fleet.json'}: not JSON (" in first_screen
    assert run.fleet is None and ACCEPTED not in report
    ep4 = next(config for config in run.configs if config.name == "ep4")
    assert [job.id for job in ep4.jobs] == ["ep4#r0"] and len(ep4.points) == 4
    assert table(section(report, "### lab2"))["`ep4#r0`"]["server load s"] == "-"


def fail_job(status_path: Path, index: int, **changes: Any) -> None:
    """The directory's job ``index`` failed at its sweep, and with it the directory's status."""
    status = json.loads(status_path.read_text())
    failure = {"status": "failed", "stage": "sweep", "reason": "fairbench sweep exited 1: boom"}
    status["jobs"][index] |= failure | changes
    status |= failure | {"journal_tail": status["jobs"][index]["journal_tail"]}
    status_path.write_text(json.dumps(status))


def test_a_failed_job_is_named_with_its_hosts_and_each_ranks_journal(spread: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(spread, tmp_path / "demo" / "failed")
    fail_job(copy / "lab2" / "ep8" / "status.json", 0, journal_tail=["RuntimeError: boom"])
    rank_tail = ["fairbench sim: node rank 1: lost rank 0"]
    status_path = copy / "lab1" / "ep8-eplb" / "status.json"
    status = json.loads(status_path.read_text())
    fail_job(
        status_path, 1, journal_tail=[], ranks=[{**status["jobs"][1]["ranks"][0], "journal_tail": rank_tail}]
    )
    report = markdown(load_run(copy))
    first_screen = report[: report.index("## Headline")]
    assert "> - **ep8**: failed at stage `sweep` (job `ep8#r1` on lab2): fairbench sweep exited 1: boom" in (
        first_screen
    )
    assert "> - **ep8-eplb**: failed at stage `sweep` (job `ep8-eplb#r1` on lab1 + lab2): " in first_screen
    # A config that did not finish is compared with nothing.
    finished = [config for config in CONFIGS if config not in ("ep8", "ep8-eplb")]
    assert comparison_pairs(report) == list(itertools.combinations(finished, 2))
    failed = section(report, "## Failed configs")
    ep8 = section(failed, "### ep8: failed")
    assert "- job: `ep8#r1`, repeats 1, on lab2\n- stage: `sweep`" in ep8
    assert f"- results: `{copy / 'lab2' / 'ep8'}`" in ep8 and "RuntimeError: boom" in ep8
    eplb = section(failed, "### ep8-eplb: failed")
    assert "- job: `ep8-eplb#r1`, repeats 1, on lab1 + lab2" in eplb
    assert "- points: 2" in eplb  # its repeat's two levels, of the directory's four points
    assert f"Journal excerpt of rank 1 (lab2):\n\n```\n{rank_tail[0]}\n```" in eplb


# --- before fleets -----------------------------------------------------------------------------------------


def _observed(run_dir: Path) -> bool:
    """Whether any point of the run records an observation (measure/point_flags.py)."""
    return any(
        json.loads(line).get("observations")
        for path in run_dir.glob("*/*/points.jsonl")
        for line in path.read_text().splitlines()
    )


def test_a_run_from_before_fleets_reports_as_it_did(tmp_path: Path) -> None:
    campaign = campaign_from(
        DEMO, configs=["tp8", "ep4"], workload=BRIEF_WORKLOAD, sim={"sim-time-scale": 0.02}
    )
    run_dir = build_run(tmp_path, campaign, "old", fleet_keys=False)
    assert "placement" not in json.loads((run_dir / "campaign.json").read_text())
    assert "jobs" not in json.loads((run_dir / "lab1" / "tp8" / "status.json").read_text())
    run = load_run(run_dir)
    assert run.placement == "every-host" and run.fleet is None
    assert [
        (job.id, job.hosts, job.repeats, job.recorded) for config in run.configs for job in config.jobs
    ] == [
        ("tp8@lab1", ("lab1",), (0, 1), False),
        ("ep4@lab1", ("lab1",), (0, 1), False),
    ]
    report = markdown(run)
    # A brief sweep on a busy machine may raise a flag (client_bound), whose note has a heading of its own.
    headings = [line for line in report.splitlines() if line.startswith("#") and line != "### Flags raised"]
    assert headings == [
        "# demo: run old",
        "## Verdict",
        "## Headline",
        "### Comparisons",
        "## Plots",
        "## What differed",
        "### tp8 vs ep4",
        "### Not compared, and why",
        "## Every concurrency level",
        "### tp8",
        "### ep4",
        "## Measurement checks",
        "### tp8",
        "### ep4",
        # Where a server queued requests on their way in at a level, the checks' observation says so.
        *(["### Observations"] if _observed(run_dir) else []),
    ]
    header = report[report.index("## Headline") :].splitlines()[2]
    assert header.startswith("| config | status | out tok/s at lowest C |")
    assert comparison_pairs(report) == [("tp8", "ep4")]
    assert "Every effective setting that differs between each pair of configs (and hosts):" in report
