"""The plan of a campaign run, before it starts: its jobs, points and requests at the least and at the most,
and its expected GPU-hours and wall time on the hosts of its pools (``PLAN_FILE`` in the run's directory).

At the least every config's automatic repeats stop at their ``min`` and no SLO search adds a point; at the
most they run to ``max`` and every search takes its most probes (``fleet.estimate.search_probes``). A fixed
count of repeats is both. Each job is one server's life (``fleet.plan``):

    job_s = start_s + repeats_in_job x repeat_s + between_jobs_s
    repeat_s = sum over the campaign's workloads and levels of point_s (and, at the most, the probes')
    GPU-hours = sum over the run's jobs of job_s x gpus / 3600
    wall_s = the instant the last job ends when the queue hands them out as a run's does, each taking job_s
             (``fleet.schedule.makespan``)

with ``repeats_in_job`` 1 under ``spread`` (a job per repeat) and every repeat under ``every-host``, and
``gpus`` the GPUs the config's server occupies (the campaign's ``gpus``; over all its hosts). Hosts that
share a machine take turns once a run has read their facts (fleet.json's ``machines``): the plan plays
the turns the earlier run's hosts took (``History.shared``, those of them in the pools); without an
earlier run, each host is a machine of its own. Where they
come from, config by config, the first known of:

- ``start_s``: an earlier run of the campaign (the mean of its servers' ``healthy_at - unit_started_at``,
  ``fleet.history``); the campaign's ``expected_start_s``; with engine ``sim``, the config's
  ``sim-load-seconds``; else unknown;
- ``point_s``: the earlier run's (its points' measured ``duration`` times what its sweeps added to them);
  with engine ``sim``, the simulator's model (``fleet.estimate``); else unknown;
- ``between_jobs_s``: the earlier run's mean campaign overhead between two jobs of a host
  (``fleet.timeline``), else 0.

A figure that needs an unknown is unknown (None); ``start_gpu_hours`` is then what the servers' starts
alone take, where those are known.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fairbench.campaign.model import EVERY_HOST, SPREAD, Campaign, Workload, workloads_json
from fairbench.fleet.estimate import (
    EstimateError,
    PointWork,
    SimPointModel,
    repeat_points,
    search_probes,
    sim_config,
)
from fairbench.fleet.history import History
from fairbench.fleet.plan import Job, plan
from fairbench.fleet.queue import new_state
from fairbench.fleet.schedule import makespan
from fairbench.measure.repeats import most, planned

PLAN_FILE = "plan.json"
"""The plan as ``fairbench run`` made it when the run started (a resume makes it again), in the run's
directory: the report sets the run's actual times against it."""
LEAST = "least"
MOST = "most"
BOUNDS = (LEAST, MOST)

LEARNED = "earlier run"
DECLARED = "expected_start_s"
SIMULATOR = "simulator"
UNKNOWN = "unknown"
"""Where a config's start or points' times come from (module docstring)."""


class ForecastFileError(ValueError):
    """plan.json cannot be used: the message names the file and what is wrong."""


@dataclass(frozen=True)
class ConfigCost:
    """One config's times, in seconds; None where unknown."""

    gpus: int
    start_s: float | None
    start_from: str
    """``LEARNED``, ``DECLARED``, ``SIMULATOR`` (its ``sim-load-seconds``) or ``UNKNOWN``."""
    points_from: str
    """``LEARNED``, ``SIMULATOR``, both joined by `` and `` where the earlier run lacked some points, or
    ``UNKNOWN``."""
    repeat_s: dict[str, float | None]
    """One repeat's points, ``LEAST`` and ``MOST`` (with the search's probes)."""
    job_s: dict[str, float | None]
    """One job, ``LEAST`` and ``MOST``."""


@dataclass(frozen=True)
class Outlook:
    """The run at the least or at the most."""

    jobs: int
    points: int
    requests: int
    """Every request sent: measured, warmup and primers."""
    gpu_hours: float | None
    start_gpu_hours: float | None
    """The servers' starts alone: sum over the jobs of start_s x gpus / 3600."""
    wall_s: float | None


@dataclass(frozen=True)
class Forecast:
    """The plan of one run (module docstring)."""

    campaign: str
    engine: str
    placement: str
    pools: dict[str, list[str]]
    hosts_from: str
    """Where the pools' hosts were read: the inventory, or why none was."""
    history: str | None
    """The earlier run whose times were learned; None: none."""
    between_jobs_s: float
    repeats: dict[str, int]
    """A level's repeats, ``LEAST`` and ``MOST``."""
    levels: dict[str, int]
    """Each workload's listed levels per repeat."""
    probes: dict[str, int]
    """Each workload's most search probes per repeat."""
    configs: dict[str, ConfigCost]
    outlook: dict[str, Outlook]
    """``LEAST`` and ``MOST``."""
    notes: tuple[str, ...] = ()
    made_at: float = field(default_factory=time.time)

    def job_s(self, config: str, bound: str) -> float | None:
        """One job of ``config`` at ``bound``; None where unknown, or for a config it does not plan."""
        cost = self.configs.get(config)
        return None if cost is None else cost.job_s.get(bound)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Forecast:
        """plan.json read back; KeyError, TypeError or ValueError where it is not one."""
        configs = {name: ConfigCost(**cost) for name, cost in data["configs"].items()}
        outlook = {bound: Outlook(**data["outlook"][bound]) for bound in BOUNDS}
        return cls(
            **{key: data[key] for key in ("campaign", "engine", "placement", "hosts_from", "history")},
            pools={name: list(hosts) for name, hosts in data["pools"].items()},
            between_jobs_s=float(data["between_jobs_s"]),
            repeats={bound: int(data["repeats"][bound]) for bound in BOUNDS},
            levels=dict(data["levels"]),
            probes=dict(data["probes"]),
            configs=configs,
            outlook=outlook,
            notes=tuple(data.get("notes", ())),
            made_at=float(data["made_at"]),
        )


def write_forecast(run_dir: Path, forecast: Forecast) -> Path:
    """``PLAN_FILE`` in ``run_dir``, replaced whole (through a temporary file and a rename)."""
    path = run_dir / PLAN_FILE
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(forecast.to_json(), indent=2) + "\n", encoding="utf-8")
    partial.replace(path)
    return path


def read_forecast(run_dir: Path) -> Forecast | None:
    """``run_dir``'s plan; None where the run has none (it was not started by ``fairbench run``);
    ForecastFileError naming the file where it cannot be used."""
    path = run_dir / PLAN_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ForecastFileError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return Forecast.from_json(json.loads(text))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ForecastFileError(f"{path}: not a plan fairbench wrote ({type(exc).__name__}: {exc})") from None


def forecast(
    campaign: Campaign,
    pools: Mapping[str, Sequence[str]],
    *,
    placement: str,
    hosts_from: str,
    history: History | None = None,
) -> Forecast:
    """The plan of ``campaign`` on ``pools`` (``fleet.plan.pools``: name -> hosts) under ``placement``;
    ``history``: an earlier run's times. ``fleet.plan.PlanError`` when the jobs cannot be placed."""
    planner = _Planner(campaign, pools, placement, history)
    costs = {name: planner.config_cost(name) for name in campaign.configs}
    return Forecast(
        campaign=campaign.name,
        engine=campaign.engine,
        placement=placement,
        pools={name: list(hosts) for name, hosts in pools.items()},
        hosts_from=hosts_from,
        history=str(history.run_dir) if history else None,
        between_jobs_s=planner.between_s,
        repeats=planner.repeats,
        levels={name: len(workload.levels) for name, workload in campaign.workloads.items()},
        probes={name: search_probes(name, workload)[0] for name, workload in campaign.workloads.items()},
        configs=costs,
        outlook={bound: planner.outlook(bound, costs) for bound in BOUNDS},
        notes=tuple(planner.notes),
    )


class _Planner:
    """The figures of one forecast (module docstring), and the notes on what could not be timed."""

    def __init__(
        self,
        campaign: Campaign,
        pools: Mapping[str, Sequence[str]],
        placement: str,
        history: History | None,
    ) -> None:
        self.campaign = campaign
        self.pools = pools
        self.placement = placement
        self.history = history
        policy = next(iter(campaign.workloads.values())).repeats
        self.repeats = {LEAST: planned(policy), MOST: most(policy)}
        known = history.between_jobs_s if history else None
        self.between_s = known if known is not None else 0.0
        self.notes: list[str] = []

    def config_cost(self, name: str) -> ConfigCost:
        config = self.campaign.configs[name]
        learned = self.history.configs.get(name) if self.history else None
        model = None
        start_s: float | None = None
        start_from = UNKNOWN
        if self.campaign.engine == "sim":
            try:
                simulated = sim_config(config.argv)
            except EstimateError as exc:
                self.notes.append(f"{name}: the simulator's model cannot time it: {exc}")
            else:
                model = SimPointModel(simulated)
                start_s, start_from = simulated.load_seconds, SIMULATOR
        if self.campaign.expected_start_s is not None:
            start_s, start_from = self.campaign.expected_start_s, DECLARED
        if learned is not None and learned.load_s is not None:
            start_s, start_from = learned.load_s, LEARNED
        sources: set[str] = set()

        def point_s(workload: Workload, point: PointWork) -> float | None:
            found = learned.point_s(point.workload, point.tag) if learned else None
            if found is not None:
                sources.add(LEARNED)
                return found
            if model is None:
                return None
            try:
                seconds = model.point_s(workload, point)
            except EstimateError as exc:
                self.notes.append(f"{name}: {exc}")
                return None
            sources.add(SIMULATOR)
            return seconds

        listed: list[float | None] = []
        probed: list[float | None] = []
        for workload_name, workload in self.campaign.workloads.items():
            listed += [point_s(workload, point) for point in repeat_points(workload_name, workload)]
            count, probe = search_probes(workload_name, workload)
            if probe is not None:
                probed += [point_s(workload, probe)] * count
        least = _total(listed)
        repeat_s = {LEAST: least, MOST: _total([least, *probed])}
        job_s = {}
        for bound in BOUNDS:
            in_job = self.repeats[bound] if self.placement == EVERY_HOST else 1
            part = repeat_s[bound]
            job_s[bound] = (
                None if start_s is None or part is None else start_s + in_job * part + self.between_s
            )
        points_from = " and ".join(source for source in (LEARNED, SIMULATOR) if source in sources) or UNKNOWN
        return ConfigCost(config.gpus, start_s, start_from, points_from, repeat_s, job_s)

    def outlook(self, bound: str, costs: Mapping[str, ConfigCost]) -> Outlook:
        """The run at ``bound``, every level measured that bound's repeats."""
        repeats = self.repeats[bound]
        jobs = plan(_with_repeats(self.campaign.to_json(), repeats), self.pools, placement=self.placement)
        per_repeat_points = 0
        per_repeat_requests = 0
        for name, workload in self.campaign.workloads.items():
            points = repeat_points(name, workload)
            per_repeat_points += len(points)
            per_repeat_requests += sum(point.requests for point in points)
            count, probe = search_probes(name, workload)
            if bound == MOST and probe is not None:
                per_repeat_points += count
                per_repeat_requests += count * probe.requests
        measured_repeats = sum(len(job.repeats) for job in jobs)
        gpu_hours = _gpu_hours(jobs, costs, lambda cost: cost.job_s[bound])
        wall_s = None
        if gpu_hours is not None:
            # A count of repeats: the queue adds none, the bound's are planned already.
            queue = new_state(
                placement=self.placement,
                pools=self.pools,
                jobs=jobs,
                excluded={},
                equivalence=None,
                sticky={},
                repeats=repeats,
                machines=self.machines(),
            )
            hosts = list(dict.fromkeys(host for members in self.pools.values() for host in members))
            wall_s = makespan(queue, hosts, lambda job: costs[str(job["config"])].job_s[bound] or 0.0)
        return Outlook(
            jobs=len(jobs),
            points=measured_repeats * per_repeat_points,
            requests=measured_repeats * per_repeat_requests,
            gpu_hours=gpu_hours,
            start_gpu_hours=_gpu_hours(jobs, costs, lambda cost: cost.start_s),
            wall_s=wall_s,
        )

    def machines(self) -> dict[str, Any] | None:
        """fleet.json's ``machines`` for the queue the plan plays: the earlier run's shared hosts that are in
        the pools, each group of two or more taking turns, unless the campaign declares them isolated."""
        hosts = {host for members in self.pools.values() for host in members}
        groups = [
            [host for host in group if host in hosts]
            for group in (self.history.shared if self.history else [])
        ]
        shared = [{"hosts": group, "evidence": []} for group in groups if len(group) > 1]
        return {"shared": shared, "isolated": self.campaign.isolated_hosts} if shared else None


def _total(parts: Sequence[float | None]) -> float | None:
    return None if any(part is None for part in parts) else sum(part for part in parts if part is not None)


def _with_repeats(document: Mapping[str, Any], repeats: int) -> dict[str, Any]:
    """campaign.json's ``document`` with every workload measuring each level ``repeats`` times."""
    workloads = {
        name: {**workload, "repeats": repeats} for name, workload in workloads_json(document).items()
    }
    if "workloads" in document:
        return {**document, "workloads": workloads}
    return {**document, "workload": next(iter(workloads.values()))}


def _gpu_hours(
    jobs: Sequence[Job], costs: Mapping[str, ConfigCost], seconds: Callable[[ConfigCost], float | None]
) -> float | None:
    """sum over ``jobs`` of seconds(its config) x gpus / 3600; None where one is unknown."""
    total = 0.0
    for job in jobs:
        cost = costs[job.config]
        value = seconds(cost)
        if value is None:
            return None
        total += value * cost.gpus / 3600
    return total


def clock_text(seconds: float | None) -> str:
    """A duration as the plan, the live display and the report write it: ``42 s``, ``3 min 5 s``,
    ``2 h 14 min``; ``unknown`` for none."""
    if seconds is None:
        return UNKNOWN
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def placement_of(campaign: Campaign, inventory_placement: str | None) -> str:
    """The placement a run uses: the inventory's ``bench_placement`` where it sets one, else the
    campaign's (``roles/bench/vars/main.yml``'s ``bench_placement_used``)."""
    return inventory_placement if inventory_placement in (SPREAD, EVERY_HOST) else campaign.placement
