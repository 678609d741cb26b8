"""The package side of the Ansible modules in ``plugins/modules/``: they parse arguments, call these, return
JSON.

The campaign layer (docs/architecture.md) keeps every decision in the package: how a campaign's workload
becomes a sweep (``campaign.sweep``), when a server counts as healthy or dead, and what a host reports about
itself.
``sweep``, ``wait_until_healthy`` and ``host_facts`` run on a GPU host inside fairbench's own venv.
"""

from __future__ import annotations

import asyncio
import json
import platform
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fairbench import __version__
from fairbench.campaign.findings import CampaignError
from fairbench.campaign.sweep import sweep_spec
from fairbench.campaign.workload import workload_from_json
from fairbench.hosts.gpu import GpuFacts, GpuFactsError, collect
from fairbench.hosts.unit_security import unit_security
from fairbench.measure.progress import Progress
from fairbench.measure.results import ResultsDir, RunIdentity
from fairbench.measure.results_format import CLOCK_LOCK, has_failed_requests, point_id
from fairbench.measure.slo import SloError, parse_slo
from fairbench.measure.sweep import Sweep, SweepSpec

SWEEP_LOG = "sweep.log"
"""Progress lines of every sweep call on a results directory (``tail -f`` it during a long sweep)."""
SWEEP_PROGRESS = "progress.json"
"""The running sweep's progress (``measure.progress.Progress.state``), replaced at most once a second."""
HEALTH_PATH = "/health_generate"
HEALTH_REQUEST_TIMEOUT_S = 30.0
"""One probe: SGLang's /health_generate itself gives up after 20 s (SGLANG_HEALTH_CHECK_TIMEOUT)."""
FOLLOW_POLL_S = 0.1
"""How often a look at a background job (``background_sweep``) reads its job file while it waits."""
HEALTH_POLL_INTERVAL_S = 0.25
"""A probe is cheap; a server found healthy sooner starts its sweep sooner."""

# Point keys shown in a sweep's per-level summary.
SUMMARY_KEYS = (
    "point_id",
    "max_concurrency",
    "repeat",
    "level_source",
    "completed",
    "failed",
    "output_throughput",
    "median_ttft_ms",
    "median_tpot_ms",
    "per_user_tps",
    "stopped_early",
)


class ServingError(Exception):
    """The server did not become healthy: it died, or the start timeout passed. The message says which."""


# --- the sweep ------------------------------------------------------------------------------------


def _files_dir(arguments: dict[str, Any]) -> Path | None:
    given = arguments.get("data_dir")
    return None if given is None else Path(given)


def spec_from_arguments(arguments: dict[str, Any]) -> SweepSpec:
    """The sweep the options of the sweep modules ask for (their doc fragment, fairbench.fairbench.sweep);
    CampaignError when the workload or an objective breaks a rule."""
    try:
        slo = parse_slo(arguments["slo"] or {})
    except SloError as exc:
        raise CampaignError([f"slo argument: {exc}"]) from None
    return sweep_spec(
        workload_from_json(arguments["workload"], "workload argument", _files_dir(arguments)),
        arguments["url"],
        model=arguments["model"],
        gpus=arguments["gpus"],
        energy_gpus=arguments["energy_gpus"],
        identity=RunIdentity(**(arguments["identity"] or {})),
        repeats=arguments["repeats"],
        extend_repeats=arguments["extend_repeats"],
        slo=slo,
        client_processes=arguments["client_processes"],
    )


@dataclass(frozen=True)
class SweepOutcome:
    """What a sweep call did to a results directory, and what the directory now holds."""

    existing: list[str]
    """Point ids in the directory when the call began."""
    planned: list[str]
    """Point ids to measure when the call began (missing, or failed and to be measured again): measured by
    it, or (check mode) to be measured."""
    written: list[str]
    """Point ids this call wrote."""
    levels: list[dict[str, Any]]
    """Every point in the directory, reduced to SUMMARY_KEYS."""
    problems: list[str]
    """Points whose requests failed: a point is only trusted when every request completed."""
    first_request_at: float | None = None
    """Epoch seconds of the call's first request, None when it measured nothing (``Sweep``)."""
    last_point_ended_at: float | None = None
    """Epoch seconds its last point was written, None when it wrote none."""

    def points_diff(self, out: str, *, check: bool) -> dict[str, str]:
        """``--diff`` of the points as lines of points.jsonl: those there before, and those measured (in
        check mode, planned) appended after them (a point measured again has both lines)."""
        before = "".join(f"{point}\n" for point in self.existing)
        added = self.planned if check else self.written
        return {
            "before": before,
            "after": before + "".join(f"{point}\n" for point in added),
            "before_header": f"{out}/points.jsonl",
            "after_header": f"{out}/points.jsonl",
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            "written": self.written,
            "levels": self.levels,
            "problems": self.problems,
            "first_request_at": self.first_request_at,
            "last_point_ended_at": self.last_point_ended_at,
        }


def sweep(
    spec: SweepSpec,
    out: Path,
    *,
    check: bool,
    remeasure_failed: bool = False,
    state_path: Path | None = None,
    label: str = "",
) -> SweepOutcome:
    """Measure the points missing from ``out`` (a resume when some exist), and with ``remeasure_failed``
    those with failed requests; with ``check``, only plan them. Its progress is kept in ``state_path``
    (default ``out``'s SWEEP_PROGRESS), each point's label after ``label``.

    Raises ``ResultsError`` (``out`` holds points of other settings or of another identity, or another
    sweep writes there) and ``ServerUnreachable``.
    """
    results = ResultsDir(out)
    if check:
        runner = Sweep(spec, results, Progress(sys.stderr, live=False))
        return _outcome(results, *_plan(runner, remeasure_failed), [])
    # One sweep per directory: an interrupted campaign leaves its background sweep running, and a re-run
    # must not start a second one beside it. The lock is the sweep's own, held here from before its log.
    with results.writer(), (out / SWEEP_LOG).open("a", encoding="utf-8") as log:
        state_path = state_path or out / SWEEP_PROGRESS
        # A previous call's state would read as this call's until its first point starts.
        state_path.unlink(missing_ok=True)
        runner = Sweep(spec, results, Progress(log, live=False, state_path=state_path, prefix=label))
        existing, planned = _plan(runner, remeasure_failed)
        written = asyncio.run(runner.run(resume=True, remeasure_failed=remeasure_failed))
    return replace(
        _outcome(results, existing, planned, [point["point_id"] for point in written]),
        first_request_at=runner.first_request_at,
        last_point_ended_at=runner.last_point_ended_at,
    )


def _plan(runner: Sweep, remeasure_failed: bool) -> tuple[list[str], list[str]]:
    """The point ids in the directory, and those to measure; ResultsError when its points are another
    sweep's (``Sweep.identity``), found before any server is started for them."""
    runner.identity()
    existing = [point["point_id"] for point in runner.results.points()]
    todo = runner.todo(remeasure_failed=remeasure_failed)
    return existing, [point_id(level, repeat) for level, repeat in todo]


def _outcome(
    results: ResultsDir, existing: list[str], planned: list[str], written: list[str]
) -> SweepOutcome:
    points = results.points()
    problems = [
        f"{point['point_id']}: {point['completed']} of {point.get('num_prompts')} requests completed"
        + (", stopped early at the error-rate limit" if point.get("stopped_early") else "")
        for point in points
        if has_failed_requests(point)
    ]
    levels = [{key: point.get(key) for key in SUMMARY_KEYS} for point in points]
    return SweepOutcome(existing=existing, planned=planned, written=written, levels=levels, problems=problems)


def background_sweep(async_dir: Path, job_id: str, out: Path, wait_s: float = 0.0) -> dict[str, Any]:
    """A sweep started with ``async`` and ``poll: 0``: its job's state, and its progress while it runs;
    while it runs, waits up to ``wait_s`` for it to end (a look that returns as soon as it does costs one
    SSH round trip, where polling every few seconds would cost the wait).

    ``progress`` is the sweep's latest Progress.state (empty before its first point starts). While the job
    runs, ``finished`` is false; once it ends, the sweep module's own result comes with ``finished`` true.
    Ansible's async wrapper writes the job file: ``{"started": true, "finished": false, ...}`` while the
    module runs, then the module's result. An empty or half-written file is a job still starting.
    """
    job_file = async_dir.expanduser() / job_id
    deadline = time.monotonic() + wait_s
    while True:
        try:
            job: dict[str, Any] = json.loads(job_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"finished": True, "failed": True, "msg": f"no sweep job {job_id} in {async_dir}"}
        except json.JSONDecodeError:
            job = {"started": True, "finished": False}
        if not (job.get("started") and not job.get("finished")) or time.monotonic() >= deadline:
            break
        time.sleep(FOLLOW_POLL_S)
    try:
        progress = json.loads((out / SWEEP_PROGRESS).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        progress = {}
    if job.get("started") and not job.get("finished"):
        return {"finished": False, "progress": progress}
    job_file.unlink()
    # With the sweep's last progress: the points it finished since the previous look.
    return {**job, "finished": True, "progress": progress}


# --- the server -----------------------------------------------------------------------------------


def unit_state(unit: str) -> dict[str, str]:
    """systemd's view of a unit: ActiveState, SubState, Result, ExecMainStatus."""
    shown = subprocess.run(
        ["systemctl", "show", unit, "--property=ActiveState,SubState,Result,ExecMainStatus"],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_until_healthy(
    base_url: str,
    unit: str,
    timeout_s: float,
    health_path: str = HEALTH_PATH,
    info_path: str = "/server_info",
) -> dict[str, Any]:
    """Poll ``health_path`` (SGLang's ``/health_generate``) until it answers 200; returns ``info_path``.

    Between probes the unit's state is read, so a server that dies while loading fails at once
    (``ServingError``) instead of after the whole timeout, which is an hour for a large model.
    """
    deadline = time.monotonic() + timeout_s
    last_answer = "no answer yet"
    while True:
        state = unit_state(unit)
        if state.get("ActiveState") not in ("active", "activating", "reloading"):
            raise ServingError(
                f"{unit} is {state.get('ActiveState')} ({state.get('SubState')}, "
                f"result {state.get('Result')}, exit status {state.get('ExecMainStatus')}) "
                f"before {health_path} answered"
            )
        try:
            status, body = _get(base_url + health_path, min(HEALTH_REQUEST_TIMEOUT_S, timeout_s))
        except (OSError, urllib.error.URLError) as exc:
            last_answer = f"{type(exc).__name__}: {exc}"
        else:
            if status == 200:
                break
            last_answer = f"HTTP {status}: {body[:200].decode(errors='replace')}"
        if time.monotonic() >= deadline:
            raise ServingError(
                f"{base_url}{health_path} not healthy after {timeout_s:g} s (last: {last_answer})"
            )
        time.sleep(HEALTH_POLL_INTERVAL_S)
    status, body = _get(base_url + info_path, HEALTH_REQUEST_TIMEOUT_S)
    if status != 200:
        raise ServingError(f"{base_url}{info_path} answered HTTP {status}")
    info: dict[str, Any] = json.loads(body)
    return info


def host_facts(unit: str | None = None, clock_lock: Mapping[str, int | None] | None = None) -> dict[str, Any]:
    """What host.json records about the machine a config ran on; ``gpu``: its GPUs (fairbench.hosts.gpu);
    ``unit_security``: how exposed the config's ``unit`` is (fairbench.hosts.unit_security), null without one;
    ``gpu_clock_lock`` (``CLOCK_LOCK``): the clocks the bench role locked for the job, ``clock_lock``.

    When nvidia-smi fails, ``gpu`` holds no GPUs and the reason: a config's results are not lost over a fact.
    """
    try:
        gpu = collect().to_json()
    except GpuFactsError as exc:
        gpu = GpuFacts.unavailable(str(exc)).to_json()
    try:
        os_name = platform.freedesktop_os_release().get("PRETTY_NAME", platform.system())
    except OSError:
        os_name = platform.system()
    return {
        "hostname": platform.node(),
        "os": os_name,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "fairbench": __version__,
        "gpu": gpu,
        "unit_security": unit_security(unit) if unit else None,
        CLOCK_LOCK: dict(clock_lock) if clock_lock else None,
    }
