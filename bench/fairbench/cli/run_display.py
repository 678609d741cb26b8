"""What ``fairbench run`` shows of a campaign while ansible-runner plays it: Ansible events in, lines out.

The bench role leaves its state in its facts (``bench_config_dir`` and ``bench_job`` name the job it
starts, ``bench_unfetched`` the job that ended, ``bench_outcomes`` how each ended, fetched) and the follow
task's retries carry the sweep's progress (``fairbench_sweep_status``), its last the job's result: the
display reads those, not task names, so renaming a task changes nothing. Lasting lines (a job, a finished
point, an outcome, a failure) are printed once; on a terminal, the sweeps in flight share one status line
redrawn below them. Given the run's plan (``cli.run_eta``), it also says when the run is expected to end:
on the status line, and without a terminal after each job's outcome.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from fairbench.cli.run_eta import Eta, RunEta
from fairbench.measure.status import quoted_journal

PLAIN_PROGRESS_EVERY_S = 30.0
"""Without a terminal, a sweep's in-flight line at most this often per host (its finished points always)."""
JOURNAL_LINES_SHOWN = 10
MESSAGE_LINES_SHOWN = 20
"""Of a failure outside a config (deploy, preflight): a preflight lists every refused config on a line."""


@dataclass
class HostState:
    """One GPU host as the display last saw it."""

    config_dir: str = ""
    """The config's results on the control node: <results root>/<campaign>/<run_id>/<host>/<config>."""
    config_open: bool = False
    """While a job runs: its own failures are rescued, and shown with its outcome."""
    in_flight: str = ""
    finished_shown: int = 0
    outcomes_shown: int = 0
    progress_shown_at: float = 0.0

    @property
    def config(self) -> str:
        return Path(self.config_dir).name if self.config_dir else ""


@dataclass
class RunDisplay:
    """Turns ansible-runner events into progress lines on ``stream``."""

    stream: TextIO
    live: bool
    hosts: dict[str, HostState] = field(default_factory=dict)
    run_dir: Path | None = None
    """The run's results on the control node, once a config has named its directory in it."""
    report_paths: list[str] = field(default_factory=list)
    failed_configs: list[str] = field(default_factory=list)
    eta: RunEta | None = None
    """The run's ETA, from its plan; None: none shown."""
    _status_shown: bool = False
    _eta_now: Eta | None = None

    def handle(self, event: dict[str, Any]) -> bool:
        """ansible-runner's event_handler: shows what the event says; False, so runner keeps no event file."""
        kind = event.get("event", "")
        data: dict[str, Any] = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self._line(f"== {data.get('play') or data.get('name', '')}")
        elif kind in ("runner_on_ok", "runner_retry", "runner_on_failed", "runner_on_unreachable"):
            self._task_result(kind, data)
        elif kind == "playbook_on_stats":
            self._recap(data)
        return False

    def _task_result(self, kind: str, data: dict[str, Any]) -> None:
        host_name = str(data.get("host", ""))
        result: dict[str, Any] = data.get("res") or {}
        host = self.hosts.setdefault(host_name, HostState())
        if kind == "runner_on_unreachable":
            self._line(f"{host_name}: unreachable: {_first_line(result.get('msg', ''))}")
            return
        if not host.config_open:
            # A config's own failures are rescued and shown with its outcome, journal excerpt included.
            if kind == "runner_on_failed":
                message = str(result.get("msg", "")).strip().splitlines() or [""]
                self._line(f"{host_name}: FAILED {data.get('task', '')}: {message[0]}")
                for line in message[1:MESSAGE_LINES_SHOWN]:
                    self._line(f"    | {line}")
            elif result.get("changed"):
                self._line(f"{host_name}: changed: {data.get('task', '')}")
        if "progress" in result:
            self._sweep_progress(host_name, host, result["progress"])
            if result.get("finished"):
                host.in_flight = ""
                if result.get("planned") == []:
                    self._line(f"{host_name} {host.config}: every point already measured (a resumed run)")
        facts: dict[str, Any] = result.get("ansible_facts") or {}
        if "bench_config_dir" in facts:
            host.config_dir = str(facts["bench_config_dir"])
            self.run_dir = Path(host.config_dir).parents[1]
            host.config_open = True
            host.finished_shown = 0
            job: dict[str, Any] = facts.get("bench_job") or {}
            ranks = job.get("hosts") or []
            over = f" over {' + '.join(ranks)}" if len(ranks) > 1 else ""
            self._line(f"{host_name} {host.config}: job {job.get('id', host.config)}{over}")
            self._estimate()
        if facts.get("bench_unfetched"):
            host.config_open = False
        outcomes: list[dict[str, Any]] = facts.get("bench_outcomes") or []
        for outcome in outcomes[host.outcomes_shown :]:
            self._outcome(host_name, host, outcome)
        if len(outcomes) > host.outcomes_shown:
            self._estimate()
            if not self.live and self._eta_now is not None and self._eta_now.done < self._eta_now.jobs:
                self._line(self._eta_now.text(time.time()))
        host.outcomes_shown = max(host.outcomes_shown, len(outcomes))
        if "paths" in result and str(data.get("task_action", "")).endswith("fairbench_report"):
            self.report_paths = [str(path) for path in result["paths"]]

    def _sweep_progress(self, host_name: str, host: HostState, progress: dict[str, Any]) -> None:
        finished: list[str] = progress.get("finished") or []
        for line in finished[host.finished_shown :]:
            self._line(f"{host_name} {host.config}: {line}")
        host.finished_shown = max(host.finished_shown, len(finished))
        if not progress.get("label"):
            return
        host.in_flight = (
            f"{progress['label']} {progress.get('done', 0)}/{progress.get('total', 0)} requests"
            + (f", {progress['failed']} failed" if progress.get("failed") else "")
            + f", {progress.get('output_tokens_per_s', 0):,.0f} tok/s"
        )
        now = time.monotonic()
        if self.live:
            self._status()
        elif now - host.progress_shown_at >= PLAIN_PROGRESS_EVERY_S:
            host.progress_shown_at = now
            self._line(f"{host_name} {host.config}: {host.in_flight}")

    def _outcome(self, host_name: str, host: HostState, outcome: dict[str, Any]) -> None:
        config = outcome.get("config", host.config)
        failure: dict[str, Any] = outcome.get("failure") or {}
        if outcome.get("status") != "failed":
            self._line(f"{host_name} {config}: ok")
            return
        self.failed_configs.append(f"{host_name}/{config}")
        reason = _first_line(failure.get("reason", ""))
        self._line(f"{host_name} {config}: FAILED at {failure.get('stage', '?')}: {reason}")
        for line in quoted_journal(Path(outcome.get("dir") or host.config_dir), JOURNAL_LINES_SHOWN):
            self._line(f"    | {line}")

    def _recap(self, data: dict[str, Any]) -> None:
        counts = {key: data.get(key) or {} for key in ("ok", "changed", "failures", "dark", "skipped")}
        names = sorted(set().union(*(set(per_host) for per_host in counts.values())))
        for name in names:
            self._line(
                f"{name}: ok={counts['ok'].get(name, 0)} changed={counts['changed'].get(name, 0)} "
                f"failed={counts['failures'].get(name, 0)} unreachable={counts['dark'].get(name, 0)}"
            )

    def _line(self, text: str) -> None:
        if self._status_shown:
            self.stream.write("\r\033[K")
            self._status_shown = False
        self.stream.write(text + "\n")
        if self.live:
            self._status()
        self.stream.flush()

    def _status(self) -> None:
        """Redraws the sweeps in flight below the lasting lines (events come seconds apart: no throttle)."""
        flying = [
            f"{name} {host.config} {host.in_flight}" for name, host in self.hosts.items() if host.in_flight
        ]
        if not flying:
            return
        if self._eta_now is not None:
            flying.append(self._eta_now.text(time.time()))
        self.stream.write("\r\033[K" + " | ".join(flying))
        self._status_shown = True
        self.stream.flush()

    def _estimate(self) -> None:
        """The ETA again, now that a job started or ended (``cli.run_eta``)."""
        if self.eta is not None:
            self._eta_now = self.eta.estimate() or self._eta_now

    def close(self) -> None:
        """Ends the status line, so what follows starts on a line of its own."""
        if self._status_shown:
            self.stream.write("\r\033[K")
            self._status_shown = False
            self.stream.flush()


def _first_line(text: object) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""
