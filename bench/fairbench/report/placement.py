"""Where a campaign's configs ran, and the directories of one config merged into what the report compares:
under ``spread`` one ``ConfigRun`` per config, merging every host directory that holds a job of it (a
config's repeats may run on several hosts; a server over several nodes keeps its other ranks' files under
``ranks/<host>/`` of its rank-0 host's directory); under ``every-host`` (also a campaign.json from before
placements existed) one per host and config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fairbench.campaign.model import DEFAULT_NODES, EVERY_HOST, SPREAD
from fairbench.report.fleet_file import Fleet
from fairbench.report.tree import ConfigResult, ConfigRun


def placement(campaign: Mapping[str, Any], fleet: Fleet | None) -> str:
    """campaign.json's ``placement``, else fleet.json's; else ``every-host``: how every campaign ran
    before campaigns had a placement."""
    return str(campaign.get("placement") or (fleet.placement if fleet else None) or EVERY_HOST)


def compared(results: Sequence[ConfigResult], campaign: Mapping[str, Any], placed: str) -> list[ConfigRun]:
    """What the report compares of ``results`` under placement ``placed``: under spread one per config in
    the campaign's order (then configs it does not name), else one per directory, in ``results``' order."""
    if placed != SPREAD:
        return [ConfigRun.of(result) for result in results]
    by_name: dict[str, list[ConfigResult]] = {}
    for result in results:
        by_name.setdefault(result.name, []).append(result)
    configs = campaign["configs"]
    order = [*configs, *(name for name in by_name if name not in configs)]
    return [
        merged(name, by_name[name], int(configs.get(name, {}).get("nodes", DEFAULT_NODES)))
        for name in order
        if name in by_name
    ]


def merged(name: str, parts: Sequence[ConfigResult], nodes: int = DEFAULT_NODES) -> ConfigRun:
    """The directories of one config (spread) as one: the one holding its earliest repeat first, then the
    others by their first repeat. A point id found in two directories is counted in the first only, and
    named: one job's points never split over two hosts, so two copies are two measurements of one point."""
    ordered = sorted(parts, key=lambda part: (part.first_repeat, part.host))
    points: list[dict[str, Any]] = []
    problems = []
    first_in: dict[str, Path] = {}
    for part in ordered:
        again = [point["point_id"] for point in part.points if point["point_id"] in first_in]
        if again:
            problems.append(
                f"{part.points_path}: {len(again)} point(s) of {name} also in "
                f"{first_in[again[0]]} ({', '.join(again[:3])}{', ...' if len(again) > 3 else ''}); "
                "counted there only"
            )
        for point in part.points:
            if point["point_id"] not in first_in:
                first_in[point["point_id"]] = part.points_path
                points.append(point)
    return ConfigRun(name, tuple(ordered), points, tuple(problems), nodes)
