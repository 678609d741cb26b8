"""A run's results tree read into memory: ``results/<campaign>/<run_id>/`` (DESIGN.md, "Results").

Every config the campaign names appears on every host that ran any config, even when its directory is
missing or holds no points: a report never drops a config silently.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairbench.journal import excerpt
from fairbench.results import CAMPAIGN_FILE, POINTS_FILE, STATUS_FILE, SWEEP_FILE, ResultsDir, ResultsError

SERVER_INFO_FILE = "server_info.json"
HOST_FILE = "host.json"
UNIT_FILE = "unit.service"
JOURNAL_FILE = "journal.log"
JOURNAL_EXCERPT_LINES = 30
"""Lines of journal.log quoted for a failed config whose status.json carries no journal_tail."""
NO_HOST = "(no host)"
MISSING = "missing"
"""The status of a config the campaign names but the tree has no status.json for."""


@dataclass(frozen=True)
class ConfigResult:
    """One config on one host, as fetched; a file that is absent is None (or empty)."""

    host: str
    name: str
    path: Path
    status: dict[str, Any]
    points: list[dict[str, Any]]
    server_info: dict[str, Any] | None
    host_info: dict[str, Any] | None
    environment: dict[str, str] | None
    """The unit's Environment= assignments."""
    sweep_settings: dict[str, Any] | None
    journal_excerpt: list[str]

    @property
    def ok(self) -> bool:
        return self.status.get("status") == "ok"

    @property
    def state(self) -> str:
        return str(self.status.get("status") or "unreadable")


@dataclass(frozen=True)
class Run:
    path: Path
    campaign: dict[str, Any]
    results: list[ConfigResult]
    """By host, then in the campaign's config order, then configs the campaign does not name."""

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def name(self) -> str:
        return str(self.campaign["name"])

    def declared(self, config: str) -> dict[str, Any]:
        """The config's entry in campaign.json (``declared``, ``unset``, ``args``, ...); {} if not named."""
        entry: dict[str, Any] = self.campaign["configs"].get(config, {})
        return entry


def _json_file(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def unit_environment(unit_text: str) -> dict[str, str]:
    """The variables a systemd unit's ``Environment=`` lines set, later lines winning as in systemd.

    Each line holds space-separated ``NAME=value`` words, each possibly quoted; ``%%`` is a literal %.
    """
    environment: dict[str, str] = {}
    for line in unit_text.splitlines():
        key, _, value = line.strip().partition("=")
        if key != "Environment":
            continue
        for word in shlex.split(value.replace("%%", "%")):
            name, _, assigned = word.partition("=")
            environment[name] = assigned
    return environment


def _journal_excerpt(status: dict[str, Any], journal: Path) -> list[str]:
    tail = status.get("journal_tail")
    if isinstance(tail, list) and tail:
        return [str(line) for line in tail]
    try:
        lines = journal.read_text(encoding="utf-8", errors="replace").splitlines()
        return excerpt(lines, JOURNAL_EXCERPT_LINES)
    except OSError:
        return []


def load_config(host: str, name: str, path: Path) -> ConfigResult:
    status = _json_file(path / STATUS_FILE)
    if status is None:
        status = {"status": MISSING if not (path / STATUS_FILE).exists() else "unreadable"}
    try:
        points = ResultsDir(path).points() if (path / POINTS_FILE).exists() else []
    except ValueError:
        points = []
    unit = path / UNIT_FILE
    return ConfigResult(
        host=host,
        name=name,
        path=path,
        status=status,
        points=points,
        server_info=_json_file(path / SERVER_INFO_FILE),
        host_info=_json_file(path / HOST_FILE),
        environment=unit_environment(unit.read_text(encoding="utf-8")) if unit.exists() else None,
        sweep_settings=_json_file(path / SWEEP_FILE),
        journal_excerpt=_journal_excerpt(status, path / JOURNAL_FILE) if status.get("status") != "ok" else [],
    )


def _is_config_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in (STATUS_FILE, POINTS_FILE))


def load_run(path: Path) -> Run:
    """Read ``results/<campaign>/<run_id>``; ``ResultsError`` when it has no readable campaign.json."""
    campaign = _json_file(path / CAMPAIGN_FILE)
    if campaign is None or not isinstance(campaign.get("configs"), dict):
        raise ResultsError(f"{path / CAMPAIGN_FILE}: missing or not a campaign: is this a run directory?")
    named = list(campaign["configs"])
    hosts = sorted(
        child.name
        for child in path.iterdir()
        if child.is_dir() and any(_is_config_dir(grandchild) for grandchild in child.iterdir())
    )
    results = []
    # With no host directory at all, the configs still appear, each as missing.
    for host in hosts or [NO_HOST]:
        host_dir = path / host
        present = sorted(child.name for child in host_dir.iterdir() if _is_config_dir(child)) if hosts else []
        for name in [*named, *(name for name in present if name not in named)]:
            results.append(load_config(host, name, path / host / name))
    return Run(path=path, campaign=campaign, results=results)
