"""The report's Planned against actual: the plan ``fairbench run`` made when the run started (plan.json,
``fleet.forecast``) beside what the run took, from fleet.json's jobs (``report.fleet_file``).

The actual figures, of the jobs fleet.json holds that were claimed and finished (epoch seconds on the
control node):

    jobs      = the jobs claimed (each a server start)
    GPU-hours = sum over those jobs of (finished_at - claimed_at) x gpus / 3600
    wall time = the last finished_at - the first claimed_at
    a config's job time = the mean of its jobs' finished_at - claimed_at

with ``gpus`` the config's server's (campaign.json's). A run without plan.json (played by ansible-playbook
itself, or from before plans) has no such section.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean

from fairbench.fleet.forecast import (
    BOUNDS,
    LEAST,
    MOST,
    UNKNOWN,
    Forecast,
    ForecastFileError,
    clock_text,
    read_forecast,
)
from fairbench.report.blocks import Block, Heading, Paragraph, Table
from fairbench.report.fleet_file import FleetJob
from fairbench.report.load import Run

TITLE = "Planned against actual"


def planned_blocks(run: Run) -> list[Block]:
    """The plan's jobs, GPU-hours and wall time at the least and the most beside the run's (``-``: none of
    its jobs ended, or a config's GPUs are not known), and each config's job time; nothing for a run without
    plan.json, a line naming it for one that is unusable."""
    try:
        plan = read_forecast(run.path)
    except ForecastFileError as exc:
        return [Heading(2, TITLE), Paragraph(f"The plan cannot be read: {exc}.")]
    if plan is None:
        return []
    timed = [job for job in (run.fleet.jobs if run.fleet else ()) if _seconds(job) is not None]
    gpus = {name: _gpus(run, name) for name in plan.configs}
    rows = [
        ["jobs (server starts)", *(str(plan.outlook[bound].jobs) for bound in BOUNDS), str(len(timed))],
        [
            "GPU-hours",
            *(_hours(plan.outlook[bound].gpu_hours, UNKNOWN) for bound in BOUNDS),
            _hours(_actual_gpu_hours(timed, gpus), "-"),
        ],
        [
            "wall time",
            *(clock_text(plan.outlook[bound].wall_s) for bound in BOUNDS),
            clock_text(_wall_s(timed)) if timed else "-",
        ],
    ]
    per_config = []
    for name, cost in plan.configs.items():
        took = [seconds for job in timed if job.config == name and (seconds := _seconds(job)) is not None]
        least, most = clock_text(cost.job_s[LEAST]), clock_text(cost.job_s[MOST])
        per_config.append(
            [
                name,
                least if least == most else f"{least} to {most}",
                clock_text(fmean(took)) if took else "-",
                str(len(took)),
            ]
        )
    return [
        Heading(2, TITLE),
        Paragraph(_intro(plan)),
        Table(
            ["", "planned, at the least", "planned, at the most", "actual"], rows, [False, True, True, True]
        ),
        Table(["config", "planned job", "actual job, mean", "jobs"], per_config, [False, True, True, True]),
    ]


def _intro(plan: Forecast) -> str:
    learned = f"the times of the earlier run {plan.history}" if plan.history else "no earlier run"
    hosts = sorted({host for members in plan.pools.values() for host in members})
    return (
        f"The plan `fairbench run` made when the run started (plan.json), on {len(hosts)} host(s), from "
        f"{learned}: at the least every level's automatic repeats stop at their minimum and no SLO search "
        "adds a point, at the most they run to their maximum and every search takes its most probes. The "
        "actual figures are fleet.json's: the jobs claimed, their GPU-hours (each job from its claim to its "
        "end, times its server's GPUs) and the wall time from the first claim to the last end "
        f"(`fairbench.report.planned`). A resumed run plans every job again, its measured points included. "
        f"`{UNKNOWN}`: the plan had no time for a config (docs/metrics.md)."
    )


def _seconds(job: FleetJob) -> float | None:
    if job.claimed_at is None or job.finished_at is None:
        return None
    return job.finished_at - job.claimed_at


def _gpus(run: Run, config: str) -> int | None:
    found = (run.campaign.get("configs") or {}).get(config, {}).get("gpus")
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _actual_gpu_hours(jobs: Sequence[FleetJob], gpus: dict[str, int | None]) -> float | None:
    total = 0.0
    for job in jobs:
        seconds, count = _seconds(job), gpus.get(job.config)
        if seconds is None or count is None:
            return None
        total += seconds * count / 3600
    return total


def _wall_s(jobs: Sequence[FleetJob]) -> float:
    return max(job.finished_at or 0.0 for job in jobs) - min(job.claimed_at or 0.0 for job in jobs)


def _hours(value: float | None, missing: str) -> str:
    return missing if value is None else f"{value:,.2f}"
