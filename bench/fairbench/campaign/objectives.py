"""The campaign's ``slo:``: its service-level objectives, each entry ``<metric>_p<q>_ms: limit``.

Each entry is judged by the rules of ``fairbench.measure.slo`` (``SLO_KEY_RULE`` for its key,
``SLO_LIMIT_RULE`` for its limit), every broken one reported at ``slo.<key>``. An empty mapping, like an
absent one, is no objective: the points are then judged against none.
"""

from __future__ import annotations

from fairbench.campaign.checks import keyed
from fairbench.campaign.findings import Findings, describe, join_path
from fairbench.measure.slo import SLO_KEY, SLO_KEY_RULE, SloTarget, limit_problem, parse_target


def check_slo(findings: Findings, path: str, value: object) -> tuple[SloTarget, ...]:
    """The objectives of a ``slo:`` mapping, in its order."""
    targets = []
    for key, limit in keyed(findings, path, value).items():
        key_path = join_path(path, key)
        if SLO_KEY.fullmatch(key) is None:
            findings.error(key_path, f"unknown objective: {SLO_KEY_RULE}")
        elif (problem := limit_problem(limit)) is not None:
            findings.error(key_path, f"{problem}, got {describe(limit)}")
        else:
            targets.append(parse_target(key, limit))
    return tuple(targets)
