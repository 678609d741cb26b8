"""Results files written by hand for the report's tests: point lines, runs of the demo campaign's configs
from them, the demo campaign's campaign.json and copies of it with one key changed; and the parts of a
report its tests read: its first screen, a section, a table."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.results_tree import REPO, one_workload

from fairbench.campaign.load import load_campaign
from fairbench.measure.point_flags import CLIENT_ON, REUSE_ON, RUNNING_ON, TOKENS_ON
from fairbench.measure.results_format import point_id
from fairbench.report.build import headlines, report_blocks
from fairbench.report.load import Run
from fairbench.report.markdown import render_markdown

CAMPAIGN = one_workload(load_campaign(REPO / "campaigns" / "demo.yml").to_json())
SETTINGS_FILES = {"server_info.json": "{}", "host.json": "{}", "unit.service": ""}


def point(concurrency: int, repeat: int = 0, **figures: Any) -> dict[str, Any]:
    """A point line of 16 completed requests; ``figures`` replace or add metrics."""
    return {
        "point_id": point_id(concurrency, repeat),
        "max_concurrency": concurrency,
        "repeat": repeat,
        "completed": 16,
        "failed": 0,
        "output_throughput": 100.0 * concurrency + repeat,
        "median_ttft_ms": 10.0,
        "p99_ttft_ms": 20.0,
        "median_tpot_ms": 1.0,
        **figures,
    }


FLAG_ON = {
    "client_bound": CLIENT_ON,
    "running_below_concurrency": RUNNING_ON,
    "prefix_reuse": REUSE_ON,
    "server_tokens_differ": TOKENS_ON,
}
"""The keys each flag of measure/point_flags.py casts doubt on."""


def flag(name: str, reason: str | None = None) -> dict[str, Any]:
    """A point's flag as measure/point_flags.py writes it."""
    return {"flag": name, "on": FLAG_ON[name], "reason": reason or f"why {name}"}


def checked_point(
    concurrency: int, repeat: int = 0, *, flags: Sequence[dict[str, Any]] = (), **figures: Any
) -> dict[str, Any]:
    """A point (``point``) with the measurement checks' keys, as a sweep against a server whose
    ``/metrics`` it scraped writes them: the server generated the 2,048 tokens the client received, ran
    C requests, queued none, served 10 % of its prompt tokens from its cache; one client process, 30 %
    running and 2 % waiting, its loop 0.6 ms late; ``flags`` raised; ``figures`` replace or add keys."""
    use = {
        "cpu_s": 0.5,
        "cpu_share": 0.3,
        "runqueue_wait_share": 0.02,
        "requests": 16,
        "event_loop_lag_mean_ms": 0.6,
        "event_loop_lag_p99_ms": 1.2,
        "event_loop_lag_max_ms": 2.5,
    }
    checks = {
        "total_output_tokens": 2048,
        "server_prompt_tokens": 4096,
        "server_generation_tokens": 2048,
        "server_cached_tokens": 410,
        "server_running_mean": float(concurrency),
        "server_running_max": float(concurrency),
        "server_queue_mean": 0.0,
        "server_queue_max": 0.0,
        "server_token_usage_mean": 0.1,
        "server_token_usage_max": 0.2,
        "server_spec_accept_length": None,
        "server_metric_samples": 5,
        "server_metric_failures": 0,
        "server_metric_error": None,
        "client_cpu_s": 0.5,
        "event_loop_lag_mean_ms": 0.6,
        "event_loop_lag_p99_ms": 1.2,
        "event_loop_lag_max_ms": 2.5,
        "client_processes": 1,
        "client_process_use": [use],
        "flags": list(flags),
    }
    return point(concurrency, repeat, **{**checks, **figures})


def lines(*points: dict[str, Any]) -> bytes:
    """points.jsonl holding ``points``."""
    return b"".join(json.dumps(item).encode() + b"\n" for item in points)


def write_run(
    root: Path,
    configs: Mapping[str, Sequence[dict[str, Any]]],
    *,
    workload: Mapping[str, Any] | None = None,
    slo: Mapping[str, float] | None = None,
    failed: Sequence[str] = (),
    gpus: Mapping[str, int] | None = None,
    hosts: Sequence[str] = ("lab1",),
    run_id: str = "run1",
    placement: str = "spread",
    margin_pct: float | None = None,
) -> Path:
    """A run of the demo campaign's ``configs`` (name -> its points), each on every host of ``hosts``
    (every-host) or on the first (spread); ``failed`` configs' status says failed at the sweep; the verdict's
    margin ``margin_pct`` (``decide``), by default none."""
    run = root / "demo" / run_id
    run.mkdir(parents=True)
    campaign = {
        **CAMPAIGN,
        "placement": placement,
        "configs": {name: CAMPAIGN["configs"][name] for name in configs},
        "workload": {**CAMPAIGN["workload"], "concurrency": [1, 4, 16], **(workload or {})},
        "slo": dict(slo or {}),
        "decide": None if margin_pct is None else {"margin_pct": margin_pct},
    }
    (run / "campaign.json").write_text(json.dumps(campaign))
    for host in hosts if placement != "spread" else hosts[:1]:
        for name, found in configs.items():
            directory = run / host / name
            directory.mkdir(parents=True)
            status = {"status": "failed", "stage": "sweep", "reason": "crashed"} if name in failed else {}
            (directory / "status.json").write_text(json.dumps({"status": "ok", **status}))
            (directory / "sweep.json").write_text(json.dumps({"gpus": (gpus or {}).get(name, 8)}))
            for file, content in SETTINGS_FILES.items():
                (directory / file).write_text(content)
            (directory / "points.jsonl").write_bytes(lines(*found))
    return run


def markdown(*runs: Run) -> str:
    _, blocks = report_blocks(list(runs), headlines(list(runs)), [])
    return render_markdown(blocks)


def section(report: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", maxsplit=1)[0]
    rest = report[report.index(heading + "\n") + len(heading) + 1 :]
    ends = [rest.find(f"\n{'#' * size} ") for size in range(1, len(level) + 1)]
    return rest[: min([end for end in ends if end >= 0], default=len(rest))]


def table(text: str) -> dict[str, dict[str, str]]:
    """The first Markdown table of ``text``: its rows by their first cell, each as {header: cell}."""
    found = [line for line in text[text.index("\n|") + 1 :].splitlines()]
    found = found[: next((i for i, line in enumerate(found) if not line.startswith("|")), len(found))]
    header = [cell.strip() for cell in found[0].strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in found[2:]]
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


def _copy_and_holder(data: dict[str, Any], dotted: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    copy = json.loads(json.dumps(data))
    *parents, last = dotted.split(".")
    holder = copy
    for key in parents:
        holder = holder[key]
    return copy, holder, last


def without(data: dict[str, Any], dotted: str) -> dict[str, Any]:
    """A copy of ``data`` without the key at the dotted path."""
    copy, holder, last = _copy_and_holder(data, dotted)
    del holder[last]
    return copy


def replaced(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at the dotted path."""
    copy, holder, last = _copy_and_holder(data, dotted)
    holder[last] = value
    return copy


def first_screen(report: str) -> str:
    """What the report says before its headline table."""
    return report[: report.index("## Headline")]


MARKS = re.compile(r" \[⚑\d+\]\(#flag-\d+\)")
"""The marks of the measurement checks' flags, as the report writes them beside a figure."""


def unmarked(report: str) -> str:
    """``report`` without the marks of the measurement checks' flags: a sweep against the simulator on a
    busy machine may raise one (``client_bound``), so tests of other things read its figures without."""
    return MARKS.sub("", report)
