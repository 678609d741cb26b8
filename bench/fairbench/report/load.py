"""A run's results tree read into memory: ``results/<campaign>/<run_id>/`` (docs/results.md).

``Run.results`` holds one ``ConfigResult`` per ``<host>/<config>/`` directory (``report.config_files``);
``Run.configs`` holds what the report compares, one ``ConfigRun`` each, by the campaign's ``placement``
(``report.placement``). Every config the campaign names appears, even when its directory is missing or holds
no points: under ``every-host`` on every host that ran any config, under ``spread`` once. A report never
drops a config silently. Nor does it drop a damaged file silently: what cannot be used of a config's files
is named in its ``problems``, and the rest is read; so is what cannot be used of a host's nccl.json
(``report.nccl_file``) and of the run's fleet.json (``report.fleet_file``): file, and key path. A
campaign.json the report cannot use is a ``ResultsError`` (``report.campaign_file``).

A campaign of several workloads is read one workload at a time (``load_runs``): each ``Run`` shows one, its
``campaign`` holding that one as ``workload``, its configs' points and sweep.json that workload's
(``campaign.model.workload_dir``), so everything the report says of a run it says of each workload.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from fairbench.campaign.model import SINGLE_WORKLOAD, SPREAD, workloads_json
from fairbench.measure.results import ResultsError
from fairbench.measure.results_format import POINTS_FILE, STATUS_FILE
from fairbench.report.campaign_file import load_campaign_file, load_earlier_campaigns
from fairbench.report.config_files import load_config
from fairbench.report.fleet_file import Fleet, load_fleet
from fairbench.report.nccl_file import run_nccl
from fairbench.report.placement import compared, placement
from fairbench.report.tree import NO_HOST, ConfigResult, ConfigRun


@dataclass(frozen=True)
class Run:
    path: Path
    campaign: dict[str, Any]
    """campaign.json, with every key the report reads checked (``campaign_file.CAMPAIGN_RULES``); of a
    campaign of several workloads, with this run's one as its ``workload``."""
    results: list[ConfigResult]
    """One per config directory: by host, then in the campaign's config order, then configs the campaign
    does not name."""
    nccl: dict[str, dict[str, Any]]
    """Each host's nccl.json (``fairbench nccl``), by host, holding only what is well-formed of it
    (``nccl_file.load_nccl``)."""
    fleet: Fleet | None = None
    """fleet.json; None for a run without one (before campaigns ran over fleets), or one unusable."""
    workload: str = SINGLE_WORKLOAD
    """The campaign's workload this run shows: ``SINGLE_WORKLOAD`` for a campaign of one."""
    earlier_campaigns: tuple[tuple[str, dict[str, Any]], ...] = ()
    """The campaigns the run ran under before campaign.json's, oldest first, each as its file's name and
    content (``campaign.<n>.json``: a resume allowed to change the campaign kept them,
    fairbench.fleet.campaign_record); those that are not a JSON object are left out, and named
    (``campaign_file.load_earlier_campaigns``)."""

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def placement(self) -> str:
        """``spread`` or ``every-host`` (``placement.placement``)."""
        return placement(self.campaign, self.fleet)

    @cached_property
    def configs(self) -> list[ConfigRun]:
        """What the report compares (``placement.compared``)."""
        return compared(self.results, self.campaign, self.placement)

    @property
    def name(self) -> str:
        return str(self.campaign["name"])

    @property
    def title(self) -> str:
        """``<campaign>: run <run id>``, and the workload where the campaign has several."""
        named = f", workload {self.workload}" if self.workload != SINGLE_WORKLOAD else ""
        return f"{self.name}{named}: run {self.run_id}"

    def declared(self, config: str) -> dict[str, Any]:
        """The config's entry in campaign.json (``declared``, ``unset``, ``args``, ...); {} if not named."""
        entry: dict[str, Any] = self.campaign["configs"].get(config, {})
        return entry


def _listing(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such directory") from None
    except NotADirectoryError:
        raise ResultsError(f"{path}: not a directory: a run is results/<campaign>/<run_id>") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _is_config_dir(path: Path) -> bool:
    try:
        return path.is_dir() and any((path / name).exists() for name in (STATUS_FILE, POINTS_FILE))
    except OSError:
        return True  # unreadable: loading it names what cannot be read


def load_runs(path: Path) -> list[Run]:
    """``results/<campaign>/<run_id>`` read once per workload of its campaign, in the campaign's order
    (``load_run``)."""
    _listing(path)  # not a directory: said before campaign.json is looked for
    return [load_run(path, workload) for workload in workloads_json(load_campaign_file(path))]


def load_run(path: Path, workload: str = SINGLE_WORKLOAD) -> Run:
    """Read ``results/<campaign>/<run_id>``, the points of its campaign's ``workload``; ``ResultsError``
    naming the path when it is not a run, its campaign.json cannot be used, or has no such workload."""
    children = _listing(path)
    campaign = _one_workload(path, load_campaign_file(path), workload)
    fleet, fleet_problems = load_fleet(path)
    named = list(campaign["configs"])
    config_dirs = {
        child.name: [grandchild.name for grandchild in _listing(child) if _is_config_dir(grandchild)]
        for child in children
        if child.is_dir()
    }
    hosts = [host for host, present in config_dirs.items() if present]
    results = []
    spread = placement(campaign, fleet) == SPREAD
    # Every-host: every config on every host, a directory missing included; with no host directory at
    # all, the configs still appear, each as missing. Spread: the directories there are, then once each
    # config no host ran.
    for host in hosts or ([] if spread else [NO_HOST]):
        present = config_dirs.get(host, [])
        for name in [*named, *(name for name in present if name not in named)]:
            if not spread or name in present:
                results.append(
                    load_config(host, name, path / host / name, campaign=campaign["name"], workload=workload)
                )
    ran = {result.name for result in results}
    results += [
        load_config(NO_HOST, name, path / NO_HOST / name, campaign=campaign["name"], workload=workload)
        for name in named
        if spread and name not in ran
    ]
    nccl, nccl_problems = run_nccl(path)
    earlier_campaigns, earlier_problems = load_earlier_campaigns(path)
    # Compared with this run's campaign as it shows it: an earlier one without the workload as it was.
    earlier_campaigns = [
        (name, _workload_view(earlier, workload) or earlier) for name, earlier in earlier_campaigns
    ]
    extra = (*nccl_problems, *fleet_problems, *earlier_problems)
    if results and extra:
        # The first screen names the problems of the configs' files; nccl.json, fleet.json and the earlier
        # campaigns lie beside them.
        results[0] = replace(results[0], problems=(*results[0].problems, *extra))
    return Run(
        path=path,
        campaign=campaign,
        results=results,
        nccl=nccl,
        fleet=fleet,
        workload=workload,
        earlier_campaigns=tuple(earlier_campaigns),
    )


def _one_workload(path: Path, campaign: dict[str, Any], workload: str) -> dict[str, Any]:
    """campaign.json as one workload's run shows it: that workload as its ``workload``."""
    view = _workload_view(campaign, workload)
    if view is None:
        listed = ", ".join(name or "one unnamed" for name in workloads_json(campaign))
        raise ResultsError(f"{path}: its campaign has no workload {workload!r}; it has {listed}")
    return view


def _workload_view(campaign: dict[str, Any], workload: str) -> dict[str, Any] | None:
    """``campaign`` with ``workload`` as its one ``workload``; None where it has no such workload."""
    try:
        chosen = workloads_json(campaign)[workload]
    except (KeyError, TypeError, ValueError):
        return None
    others = {key: value for key, value in campaign.items() if key not in ("workload", "workloads")}
    return {**others, "workload": chosen}
