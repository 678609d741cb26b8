"""One job of a campaign on its host (rank 0's, for a server over several hosts), in one process: the host is
made clean, the config's unit started, waited on until healthy, swept, stopped, and the host waited on until
clean again. Its files land in the job's results directory on the host, which the bench role fetches whole.

Run by the ``fairbench_config_run`` module in the background (``async``), so one SSH round trip starts a job
and the next finds it ended: campaign overhead between two configs is then a few round trips, not the
dozens of tasks each stage would cost. Each stage is one of ``measure.status.STAGES``; a failure names it.

A job sweeps each of the campaign's workloads in turn on its one server start, each into its own directory
(``campaign.model.workload_dir``: a campaign of one workload, the results directory itself). Files written
beside the sweeps': ``unit.service`` (the unit as started), ``server_info.json`` (its /server_info),
``host.json`` (``ansible_support.host_facts``, with the GPU clock lock the job ran under), ``answers/``
(what the server answered before its sweep, ``fairbench.answers.check``: never fails the job), ``journal.log``
(the unit's journal since it was started). ``timeline`` (epoch seconds on this host) says when the unit
was started, answered healthy, got its first request, and wrote its last point: the campaign's overhead is
measured from it (``fleet.timeline``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fairbench.answers.check import answers_path, summary, write_answers
from fairbench.answers.plan import AnswersPlan
from fairbench.campaign.model import SINGLE_WORKLOAD, workload_dir
from fairbench.hosts.ansible_support import (
    SWEEP_PROGRESS,
    ServingError,
    SweepOutcome,
    host_facts,
    sweep,
    wait_until_healthy,
)
from fairbench.hosts.clean_state import CleanState, CleanStateError, failure_message, wait_clean
from fairbench.measure.results_format import HOST_FILE, SERVER_INFO_FILE, TIMELINE_KEYS, UNIT_FILE
from fairbench.measure.status import JOURNAL_FILE
from fairbench.measure.sweep import SweepSpec

UNIT_DIR = Path("/etc/systemd/system")
SERVERS_DIR = "servers"
"""Where a disaggregated config's prefill and decode servers' files go: ``servers/<name>/``."""
ROUTER_HEALTH_PATH = "/readiness"
"""sglang-router's readiness: 200 once a prefill and a decode server are healthy behind it (its /health is
200 from its start, workers or not)."""
ROUTER_INFO_PATH = "/get_server_info"


@dataclass(frozen=True)
class WorkerUnit:
    """A disaggregated config's prefill or decode server: started, and healthy, before its router."""

    unit: str
    name: str
    """``prefill-0``, ``decode-1``: its directory under ``servers/``."""
    url: str


@dataclass(frozen=True)
class CleanSettings:
    """What a clean host is (``hosts.clean_state.check``): nothing on the server's port, no process of the
    servers' user, no fairbench unit running, the GPUs back at their idle baseline."""

    port: int
    user: str
    unit_pattern: str
    baseline: dict[str, int] | None
    tolerance_mib: int | None
    timeout_s: float


class StageError(Exception):
    """A stage of the job failed: ``stage`` names it, the message says why."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


@dataclass
class JobRun:
    """The job's inputs, and what happened to it as it ran (``to_json`` is the module's result)."""

    unit: str
    url: str
    out: Path
    specs: dict[str, SweepSpec]
    """Each workload's sweep, by name, in the order they run; a campaign of one workload's is
    ``SINGLE_WORKLOAD``."""
    clean: CleanSettings
    start_timeout_s: float
    journal_lines: int
    remeasure_failed: bool = False
    clock_lock: dict[str, int | None] | None = None
    """The GPU clocks the bench role locked for the job (``sm_mhz``, ``mem_mhz``), which host.json records;
    None where it locked none."""
    answers: AnswersPlan | None = None
    """What the server answers before its sweep (campaign.json's ``answers``); None: nothing."""
    answers_note: str | None = None
    """What it answered, in one line (``answers.check.summary``), or why it could not be asked."""
    workers: list[WorkerUnit] = field(default_factory=list)
    """A disaggregated config's servers, in start order; ``unit`` and ``url`` are then its router's."""
    stage: str = "clean"
    started: bool = False
    timeline: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(TIMELINE_KEYS))
    sweep: dict[str, Any] = field(default_factory=dict)
    stopped_units: list[str] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)
    """The point ids to measure, a named workload's as ``<workload>/<point id>``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "server_started": self.started,
            "planned": self.planned,
            "timeline": self.timeline,
            "sweep": self.sweep,
            "stopped_units": self.stopped_units,
            "answers": self.answers_note,
        }


def run_job(job: JobRun) -> JobRun:
    """Run every stage; raises StageError (with ``job`` telling how far it got) when one fails. The server
    is stopped and its journal saved whenever it was started, whatever failed."""
    job.out.mkdir(parents=True, exist_ok=True)
    planned = plan(job)
    # Points whose requests failed fail a resumed job before any server starts, so a crashed server is never
    # reported as done: unless the job measures them again (which supersedes them). With nothing to measure
    # (the failed points are another job's repeats) they fail it as they stand.
    problems = _named("problems", planned)
    if problems and not (job.remeasure_failed and job.planned):
        job.stage = "sweep"
        raise StageError("sweep", "points with failed requests: " + "; ".join(problems))
    if not job.planned:
        return job  # a resumed job with every point measured: no server is started for nothing
    since: float | None = None
    try:
        job.stopped_units = _clean(job, "before", stop_units=True).stopped
        job.stage = "start"
        since = time.time()
        job.timeline["unit_started_at"] = since
        # Started from here on: even a failed restart leaves a journal worth saving, and a unit to stop.
        job.started = True
        server_info = _start(job, since + job.start_timeout_s)
        job.timeline["healthy_at"] = time.time()
        _write_json(job.out / SERVER_INFO_FILE, server_info)
        _write_json(job.out / HOST_FILE, host_facts(job.unit, job.clock_lock))
        _check_answers(job)
        job.stage = "sweep"
        outcomes: dict[str, SweepOutcome] = {}
        try:
            # A disaggregated config's servers scraped beside the router the sweep drives.
            roles = {worker.name: worker.url for worker in job.workers}
            specs = {name: replace(spec, role_servers=roles) for name, spec in job.specs.items()}
            sweep_workloads(specs, job.out, outcomes, remeasure_failed=job.remeasure_failed)
        finally:
            job.sweep = job_sweep(outcomes)
            job.timeline |= sweep_times(outcomes)
        problems = _named("problems", outcomes)
        if problems:
            raise StageError("sweep", "points with failed requests: " + "; ".join(problems))
    except StageError:
        _stop(job, since, failing=True)
        raise
    except Exception as exc:
        _stop(job, since, failing=True)
        raise StageError(job.stage, f"{type(exc).__name__}: {exc}") from exc
    job.stage = "stop"
    _stop(job, since, failing=False)
    return job


def _start(job: JobRun, deadline: float) -> dict[str, Any]:
    """Start the job's units and wait until each is healthy: a disaggregated config's servers at once, then
    its router once they all are. Returns what server_info.json holds: the one server's /server_info, or a
    disaggregated config's first decode server's (each server's is in ``servers/<name>/``)."""
    for worker in job.workers:
        _systemctl("restart", worker.unit)
        _copy_unit(job.out / SERVERS_DIR / worker.name, worker.unit)
    job.stage = "health"
    infos = {}
    for worker in job.workers:
        infos[worker.name] = _healthy(worker.url, worker.unit, deadline, f"{worker.name}: ")
        _write_json(job.out / SERVERS_DIR / worker.name / SERVER_INFO_FILE, infos[worker.name])
    job.stage = "start"
    _systemctl("restart", job.unit)
    _copy_unit(job.out, job.unit)
    job.stage = "health"
    if not job.workers:
        return _healthy(job.url, job.unit, deadline, "")
    _healthy(job.url, job.unit, deadline, "router: ", ROUTER_HEALTH_PATH, ROUTER_INFO_PATH)
    return next(info for name, info in infos.items() if name.startswith("decode-"))


def _healthy(url: str, unit: str, deadline: float, label: str, *paths: str) -> dict[str, Any]:
    """``wait_until_healthy`` until ``deadline``; a failure is the health stage's, naming the server."""
    try:
        return wait_until_healthy(url, unit, max(deadline - time.time(), 0.0), *paths)
    except ServingError as exc:
        raise StageError("health", label + str(exc)) from None


def _check_answers(job: JobRun) -> None:
    """The server's answers before its sweep, into ``answers/``; whatever goes wrong is a note, never the
    job's failure: the sweep measures what it would have."""
    if job.answers is None or (not job.answers.probes and job.answers.accuracy is None):
        return
    spec = next(iter(job.specs.values()))
    repeat = min(spec.only_repeats or [0])
    try:
        found = write_answers(job.answers, job.url, spec.model, answers_path(job.out, repeat))
        job.answers_note = summary(found)
    except Exception as exc:
        job.answers_note = f"answers not checked: {type(exc).__name__}: {exc}"


def plan(job: JobRun) -> dict[str, SweepOutcome]:
    """What the job would measure (``planned``: the points its workloads' directories lack) and the points
    already there, by workload; ResultsError when those are another sweep's."""
    outcomes = {
        name: sweep(spec, workload_dir(job.out, name), check=True, remeasure_failed=job.remeasure_failed)
        for name, spec in job.specs.items()
    }
    job.planned = _named("planned", outcomes)
    return outcomes


def points_diff(outcomes: Mapping[str, SweepOutcome], out: Path, *, check: bool) -> list[dict[str, str]]:
    """``--diff`` of each workload's points.jsonl (``SweepOutcome.points_diff``)."""
    return [
        outcome.points_diff(str(workload_dir(out, name)), check=check) for name, outcome in outcomes.items()
    ]


def _prefix(workload: str) -> str:
    """What a named workload's point ids and progress labels start with."""
    return "" if workload == SINGLE_WORKLOAD else f"{workload}/"


def _named(key: str, outcomes: Mapping[str, SweepOutcome]) -> list[str]:
    """The outcomes' ``planned`` or ``problems``, each named workload's after its name."""
    return [_prefix(name) + entry for name, outcome in outcomes.items() for entry in getattr(outcome, key)]


def sweep_workloads(
    specs: Mapping[str, SweepSpec],
    out: Path,
    outcomes: dict[str, SweepOutcome],
    *,
    remeasure_failed: bool,
) -> None:
    """Sweep each workload in turn into its directory of ``out``, each outcome into ``outcomes`` as it
    ends (what was measured before a failure is kept there)."""
    for name, spec in specs.items():
        outcomes[name] = sweep(
            spec,
            workload_dir(out, name),
            check=False,
            remeasure_failed=remeasure_failed,
            # One file for the job's progress, which fairbench_sweep_status follows.
            state_path=out / SWEEP_PROGRESS,
            label=_prefix(name),
        )


def job_sweep(outcomes: Mapping[str, SweepOutcome]) -> dict[str, Any]:
    """The module's ``sweep``: a campaign of one workload's as it returns it; several, merged (each point id
    and problem after its workload's name, each level naming its ``workload``), with each one's own under
    ``workloads``."""
    if not outcomes:
        return {}
    if list(outcomes) == [SINGLE_WORKLOAD]:
        return outcomes[SINGLE_WORKLOAD].to_json()
    return {
        "planned": _named("planned", outcomes),
        "written": _named("written", outcomes),
        "levels": [
            {"workload": name, **level} for name, outcome in outcomes.items() for level in outcome.levels
        ],
        "problems": _named("problems", outcomes),
        "workloads": {name: outcome.to_json() for name, outcome in outcomes.items()},
    }


def sweep_times(outcomes: Mapping[str, SweepOutcome]) -> dict[str, float | None]:
    """The timeline's ``first_request_at`` and ``last_point_ended_at``, over every workload's sweep."""
    firsts = [
        outcome.first_request_at for outcome in outcomes.values() if outcome.first_request_at is not None
    ]
    lasts = [
        outcome.last_point_ended_at
        for outcome in outcomes.values()
        if outcome.last_point_ended_at is not None
    ]
    return {"first_request_at": min(firsts, default=None), "last_point_ended_at": max(lasts, default=None)}


def _clean(job: JobRun, mode: str, *, stop_units: bool) -> CleanState:
    """Wait until the host is clean (``mode``: before starting, or after stopping, clean_state.MODES);
    StageError naming what it found when it does not become clean in time."""
    settings = job.clean
    stage = "clean" if mode == "before" else "stop"
    try:
        state = wait_clean(
            port=settings.port,
            user=settings.user,
            unit_pattern=settings.unit_pattern,
            baseline=settings.baseline,
            tolerance_mib=settings.tolerance_mib,
            timeout_s=settings.timeout_s,
            stop_units=stop_units,
        )
    except CleanStateError as exc:
        raise StageError(stage, str(exc)) from None
    if not state.clean:
        raise StageError(stage, failure_message(state, mode, settings.timeout_s))
    return state


def _stop(job: JobRun, since: float | None, *, failing: bool) -> None:
    """Stop the unit, save its journal, and wait until the host is clean again; while failing, a host that
    stays dirty is noted in the journal's place rather than hiding the first failure."""
    if since is None:
        return
    stop_error = None
    # The router first, then its servers in reverse start order.
    for unit in [job.unit, *(worker.unit for worker in reversed(job.workers))]:
        try:
            _systemctl("stop", unit)
        except StageError as exc:
            stop_error = stop_error or exc
    _save_journal(job, since)
    if stop_error is not None and not failing:
        raise stop_error
    try:
        _clean(job, "after", stop_units=False)
    except StageError:
        if not failing:
            raise


def _systemctl(action: str, unit: str) -> None:
    done = subprocess.run(["systemctl", action, unit], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        stage = "start" if action == "restart" else "stop"
        raise StageError(stage, f"systemctl {action} {unit}: {done.stderr.strip() or done.returncode}")


def _copy_unit(directory: Path, unit: str) -> None:
    # A unit kept elsewhere is not copied: the report notes unit.service missing.
    with contextlib.suppress(OSError):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / UNIT_FILE).write_bytes((UNIT_DIR / unit).read_bytes())


def _save_journal(job: JobRun, since: float) -> None:
    """Every unit of the job in one journal, in time order (a disaggregated config's lines each name their
    server: the units' SyslogIdentifier)."""
    units = [job.unit, *(worker.unit for worker in job.workers)]
    shown = subprocess.run(
        [
            "journalctl",
            *(f"--unit={unit}" for unit in units),
            f"--since=@{int(since)}",
            f"--lines={job.journal_lines}",
            "--output=short-iso",
            "--no-pager",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    (job.out / JOURNAL_FILE).write_text(shown.stdout.rstrip("\n") + "\n", encoding="utf-8")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
