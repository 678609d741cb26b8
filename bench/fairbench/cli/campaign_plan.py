"""The plan ``fairbench validate --plan`` and ``fairbench run`` make of a campaign, and how they print it.

The plan itself (its jobs, points, requests, GPU-hours and wall time, at the least and at the most) is
``fleet.forecast``'s; here it is given its hosts (an inventory's, as Ansible reads it, or without one the
fewest each pool needs) and its earlier run (one named, else the newest of the campaign's results
directory, unless a fresh plan is asked for), and written as lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from fairbench.campaign.model import DEFAULT_NODES, Campaign
from fairbench.cli.inventory_hosts import InventoryHosts
from fairbench.cli.usage import UsageError
from fairbench.fleet.forecast import (
    BOUNDS,
    LEAST,
    MOST,
    UNKNOWN,
    Forecast,
    clock_text,
    forecast,
    placement_of,
)
from fairbench.fleet.history import earlier_run, read_history
from fairbench.fleet.plan import PLAY_POOL, pools
from fairbench.measure.results import CAMPAIGN_FILE

NO_INVENTORY = "no inventory given (-i): each pool as the fewest hosts its configs need"


def campaign_forecast(
    campaign: Campaign,
    inventory: InventoryHosts | None,
    *,
    inventory_name: str,
    history_dir: Path | None,
) -> Forecast:
    """The plan of ``campaign`` on ``inventory``'s hosts (None: the fewest each pool needs), learning from
    the run in ``history_dir`` (None: from none). ``fleet.plan.PlanError`` when the jobs cannot be placed."""
    document = campaign.to_json()
    if inventory is None:
        found = _fewest_hosts(campaign)
        placement, hosts_from = campaign.placement, NO_INVENTORY
    else:
        found = pools(document, inventory.groups, inventory.play_hosts)
        placement, hosts_from = placement_of(campaign, inventory.placement), inventory_name
    history = read_history(history_dir, list(campaign.workloads)) if history_dir is not None else None
    return forecast(campaign, found, placement=placement, hosts_from=hosts_from, history=history)


def _fewest_hosts(campaign: Campaign) -> dict[str, list[str]]:
    """Each pool the configs use, as many hosts as its largest server spans (named ``<pool>-<n>``)."""
    needed: dict[str, int] = {PLAY_POOL: DEFAULT_NODES}
    for config in campaign.configs.values():
        pool = config.hosts or PLAY_POOL
        needed[pool] = max(needed.get(pool, DEFAULT_NODES), config.nodes)
    return {pool: [f"{pool}-{index}" for index in range(1, count + 1)] for pool, count in needed.items()}


def history_dir(campaign: Campaign, given: Path | None, *, results: Path, fresh: bool) -> Path | None:
    """The earlier run a plan learns from: ``given`` (UsageError when it is no run of this campaign), else
    the newest under ``results`` (``results/<campaign>/``), none with ``fresh``."""
    if fresh:
        return None
    if given is None:
        return earlier_run(results)
    try:
        recorded = json.loads((given / CAMPAIGN_FILE).read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError, AttributeError):
        raise UsageError(f"--from: {given} is no run's directory (no readable {CAMPAIGN_FILE})") from None
    if recorded != campaign.name:
        raise UsageError(f"--from: {given} is a run of campaign {recorded}, not {campaign.name}")
    return given


def plan_lines(plan: Forecast) -> list[str]:
    """The plan as ``--plan`` prints it: where it runs and what it learned from, the repeats, each
    workload's levels, each config's times, and the run at the least and at the most."""
    hosts = sorted({host for members in plan.pools.values() for host in members})
    pools_text = "; ".join(f"{name}: {', '.join(members) or 'none'}" for name, members in plan.pools.items())
    learned = f"; times of {plan.history}" if plan.history else ""
    lines = [
        f"plan: {len(hosts)} host(s) ({pools_text}; {plan.hosts_from}), placement {plan.placement}{learned}",
        f"  repeats of each level: {_range(plan.repeats[LEAST], plan.repeats[MOST])}; "
        + "; ".join(_workload_text(plan, name) for name in plan.levels),
    ]
    width = max((len(name) for name in plan.configs), default=0)
    lines.append(f"  {'config':<{width}}  GPUs  start       one repeat      job             from")
    for name, cost in plan.configs.items():
        repeat = _span(cost.repeat_s[LEAST], cost.repeat_s[MOST])
        job = _span(cost.job_s[LEAST], cost.job_s[MOST])
        lines.append(
            f"  {name:<{width}}  {cost.gpus:>4}  {clock_text(cost.start_s):<10}  {repeat:<14}  {job:<14}  "
            f"start: {cost.start_from}; points: {cost.points_from}"
        )
    for bound in BOUNDS:
        outlook = plan.outlook[bound]
        gpu_hours = _hours(outlook.gpu_hours)
        if outlook.gpu_hours is None and outlook.start_gpu_hours is not None:
            gpu_hours += f" (the server starts alone: {_hours(outlook.start_gpu_hours)})"
        lines.append(
            f"  at the {bound}: {outlook.jobs} jobs (each a server start), {outlook.points:,} points, "
            f"{outlook.requests:,} requests; {gpu_hours} GPU-hours; wall time {clock_text(outlook.wall_s)}"
        )
    if any(cost.start_from == UNKNOWN for cost in plan.configs.values()):
        lines.append(
            "  the servers' start is unknown: declare the campaign's expected_start_s, or plan from an "
            "earlier run of the campaign (--from RUN_DIR)"
        )
    if any(cost.points_from == UNKNOWN for cost in plan.configs.values()):
        lines.append(
            f"  points of engine {plan.engine} have no model of their speed: plan from an earlier run of "
            "the campaign (--from RUN_DIR) to time them"
        )
    lines += [f"  note: {note}" for note in plan.notes]
    return lines


def summary_line(plan: Forecast) -> str:
    """The plan in one line, as ``fairbench run`` starts with it."""
    least, most = plan.outlook[LEAST], plan.outlook[MOST]
    return (
        f"plan: {_range(least.jobs, most.jobs)} jobs, {_span(least.gpu_hours, most.gpu_hours, _hours)} "
        f"GPU-hours, wall time {_span(least.wall_s, most.wall_s)}"
    )


def _workload_text(plan: Forecast, name: str) -> str:
    title = f"workload {name}" if name else "workload"
    probes = f" and up to {plan.probes[name]} search probes" if plan.probes.get(name) else ""
    return f"{title}: {plan.levels[name]} levels{probes}"


def _range(least: int, most: int) -> str:
    return str(least) if least == most else f"{least} to {most}"


def _hours(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:,.2f}"


def _span(least: float | None, most: float | None, shown: Callable[[float | None], str] = clock_text) -> str:
    low, high = shown(least), shown(most)
    return low if low == high else f"{low} to {high}"
