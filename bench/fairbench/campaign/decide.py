"""A campaign's ``decide`` key: how its verdict decides between configs.

- ``margin_pct``: the smallest difference that matters, in % of the lower config's mean (``MARGIN_PCT``);
  required. The verdict then calls each comparison ahead, equivalent, below the margin or undecided
  (``fairbench.measure.decision``) instead of significant or within noise.
- ``baseline``: the config every other is compared with and whose drift between the first round and the
  last is watched; a config's name; default the first config.

Absent, the verdict has no margin: significant or within noise, as before margins existed.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairbench.campaign.checks import mapping, number_in, unit_name_part
from fairbench.campaign.findings import Findings
from fairbench.measure.bounds import MARGIN_PCT
from fairbench.measure.decision import DECIDE_KEYS, DecideRule


def check_decide(findings: Findings, path: str, value: object) -> DecideRule:
    """``decide``: a mapping of ``DECIDE_KEYS``, ``margin_pct`` required (a campaign with an error is never
    returned, so the stand-in only keeps the checks going); ``baseline`` is checked against the configs by
    :func:`check_baseline`."""
    fields = mapping(findings, path, value, DECIDE_KEYS, required=("margin_pct",))
    baseline: str | None = fields.get("baseline", unit_name_part, None)
    return DecideRule(fields.get("margin_pct", number_in(MARGIN_PCT, 1.0), 1.0), baseline)


def check_baseline(findings: Findings, rule: DecideRule | None, configs: Sequence[str]) -> None:
    """``decide.baseline`` names one of the campaign's configs."""
    if rule is not None and rule.baseline is not None and rule.baseline not in configs:
        known = ", ".join(configs)
        findings.error("decide.baseline", f"{rule.baseline!r} is not a config of the campaign ({known})")
