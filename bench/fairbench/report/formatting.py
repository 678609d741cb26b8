"""How the report writes its figures, changes and setting values in text, and names its configs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from fairbench.campaign.model import SPREAD
from fairbench.measure.stats import Comparison, Estimate
from fairbench.report.figures import non_finite_text
from fairbench.report.load import Run
from fairbench.report.tree import ConfigResult, ConfigRun

Label = Callable[[ConfigRun | ConfigResult], str]
"""How the report names a config (``tp8``, ``tp8@lab1``): the one it compares, or one of its directories."""


def figure(value: Estimate | None, digits: int = 1) -> str:
    """``1,234.5``, or ``1,234.5 ± 6.7`` (95 % CI) with repeats; ``-`` for no value; ``NaN`` or ``inf``
    for a value that is not finite (the first screen names its point)."""
    if value is None:
        return "-"
    if not math.isfinite(value.mean):
        return non_finite_text(value.mean)
    text = f"{value.mean:,.{digits}f}"
    return text if value.half_width is None else f"{text} ± {value.half_width:,.{digits}f}"


def setting_value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def setting_values(values: Sequence[Any]) -> list[str]:
    """Each value as :func:`setting_value` shows it, unless two that differ would look alike (``8`` and
    ``"8"``, ``none`` and ``"none"``): then each as JSON, where a string has its quotes."""
    shown = [setting_value(value) for value in values]
    typed = [json.dumps(value, separators=(",", ":"), default=str) for value in values]
    return shown if len(set(shown)) == len(set(typed)) else typed


def change(comparison: Comparison | None) -> str:
    """``+12.3 % (significant)``, ``-0.4 % (within noise)``, or untested with one repeat; not compared
    where a value is not finite."""
    if comparison is None:
        return "not compared (a value is NaN or infinite)"
    amount = "from 0" if math.isinf(comparison.relative_pct) else f"{comparison.relative_pct:+.1f} %"
    if comparison.significant is None:
        return f"{amount} (one repeat: not tested)"
    return f"{amount} ({'significant' if comparison.significant else 'within noise'})"


def decision(significant: bool | None) -> str:
    """A test's outcome after a correction for the number of tests (Holm): ``significant``,
    ``within noise``, or ``one repeat: cannot tell``."""
    if significant is None:
        return "one repeat: cannot tell"
    return "significant" if significant else "within noise"


def corrected_change(comparison: Comparison | None, significant: bool | None) -> str:
    """``+12.3 % (significant)`` as :func:`change` writes it, the outcome being ``significant`` (after a
    correction for the number of tests) rather than the comparison's own."""
    if comparison is None:
        return change(None)
    amount = "from 0" if math.isinf(comparison.relative_pct) else f"{comparison.relative_pct:+.1f} %"
    return f"{amount} ({decision(significant)})"


def seconds(value: float | None) -> str:
    """``12.34``: seconds, two decimals; ``-`` for none."""
    return "-" if value is None else f"{value:,.2f}"


def labeller(runs: Sequence[Run]) -> Label:
    """Configs by name alone when each is merged over its hosts (spread) or one host ran them all, else
    ``config@host``."""
    hosts = {config.host for run in runs if run.placement != SPREAD for config in run.configs}
    if len(hosts) <= 1:
        return lambda item: item.name
    return lambda item: f"{item.name}@{item.host}"
