"""A campaign's ``decide`` key: how its verdict decides between configs.

- ``margin_pct``: the smallest difference that matters, in % of the lower config's mean (``MARGIN_PCT``);
  required. The verdict then calls each comparison ahead, equivalent, below the margin or undecided
  (``fairbench.measure.decision``) instead of significant or within noise.

Absent, the verdict has no margin: significant or within noise, as before margins existed.
"""

from __future__ import annotations

from fairbench.campaign.checks import mapping, number_in
from fairbench.campaign.findings import Findings
from fairbench.measure.bounds import MARGIN_PCT
from fairbench.measure.decision import DECIDE_KEYS, DecideRule


def check_decide(findings: Findings, path: str, value: object) -> DecideRule:
    """``decide``: a mapping of ``DECIDE_KEYS``, ``margin_pct`` required (a campaign with an error is never
    returned, so the stand-in only keeps the checks going)."""
    fields = mapping(findings, path, value, DECIDE_KEYS, required=("margin_pct",))
    return DecideRule(fields.get("margin_pct", number_in(MARGIN_PCT, 1.0), 1.0))
