"""What the rounds of a spread run show of the machines: the Rounds section, and the drift sentinel on the
first screen.

Under ``placement: spread`` repeats run in rounds: job ``tp8#r2`` is round 2 of config tp8 (its points'
``repeat``), and each round measures every config still needed once, on whichever host takes the job. Each
config that finished stands here for its output tok/s at its peak (``Headline.peak``, the level the
verdict ranks throughput at) by round, each value on the host whose directory holds its point
(``ConfigRun.parts``). The arithmetic is ``measure.rounds``'s, every effect relative to each config's own
mean so that configs of different speeds weigh alike:

- dev(c, r) = 100 x (v(c, r) / mean_c - 1), mean_c over config c's rounds;
- a round's effect: the mean of dev(c, r) over the configs it measured;
- a host's effect: the mean of dev(c, r) over the values it measured;
- the baseline's drift: 100 x (v(b, last) / v(b, first) - 1), b the campaign's baseline config
  (``decision.baseline_of``), over the earliest and the latest round it was measured in.

A round or host effect beyond the campaign's margin is a machine-level change that moved every config
measured there alike: comparisons paired within a round cancel a round's, and spreading each config's
rounds evenly over the hosts balances a host's out. A drift of the baseline beyond the
margin says the machines changed during the run by more than the smallest difference that matters, so the
first screen warns of it. Nothing here is shown for an every-host run, or a spread run of one round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fairbench.campaign.model import SPREAD
from fairbench.measure.decision import baseline_of, decide_rule_from_json
from fairbench.measure.rounds import baseline_drift_pct, host_effects, round_effects
from fairbench.report.blocks import Alert, Block, Heading, Paragraph, Table
from fairbench.report.figures import THROUGHPUT
from fairbench.report.load import Run
from fairbench.report.summary import Headline, Level, measured

ROUNDS_TITLE = "Rounds"


def _by_round(line: Headline) -> dict[int, float]:
    """A config's output tok/s at its peak by round, its finite values only (one that is not finite is
    named on the first screen and compared with nothing)."""
    values = line.level("peak").by_repeat(THROUGHPUT)
    return {round_index: value for round_index, value in values.items() if math.isfinite(value)}


def _hosts_by_round(line: Headline) -> dict[int, str]:
    """The host of each round of a config's peak: that of the directory holding its point (a point in two
    directories counts in the first, as ``placement.merged`` counts it)."""
    host_of: dict[str, str] = {}
    for part in line.result.parts:
        for point in part.points:
            host_of.setdefault(point["point_id"], part.host)
    return {int(point.get("repeat", 0)): host_of[point["point_id"]] for point in line.level("peak").points}


@dataclass(frozen=True)
class Drift:
    """The baseline config's drift between its first round and its last, at its peak."""

    config: str
    level: Level
    first: tuple[int, float]
    """Its earliest round, and its output tok/s then."""
    last: tuple[int, float]
    pct: float
    """100 x (last / first - 1) (``measure.rounds.baseline_drift_pct``)."""


def baseline_drift(run: Run, headlines: Sequence[Headline]) -> Drift | None:
    """The baseline's drift; None unless the run is spread and the baseline finished with two rounds or
    more at its peak (and a first value other than 0)."""
    if run.placement != SPREAD:
        return None
    baseline = baseline_of(run.campaign)
    line = next((line for line in measured(headlines) if line.result.name == baseline), None)
    if line is None:
        return None
    values = _by_round(line)
    pct = baseline_drift_pct(values)
    if pct is None:
        return None
    first, last = min(values), max(values)
    return Drift(line.result.name, line.level("peak"), (first, values[first]), (last, values[last]), pct)


def baseline_drift_pct_of(run: Run, headlines: Sequence[Headline]) -> float | None:
    """The baseline's drift in % (``baseline_drift``); None where there is none."""
    drift = baseline_drift(run, headlines)
    return None if drift is None else drift.pct


def _margin_pct(run: Run) -> float | None:
    """The campaign's ``decide.margin_pct``; None without ``decide``."""
    rule = decide_rule_from_json(run.campaign.get("decide"))
    return None if rule is None else rule.margin_pct


def drift_alerts(run: Run, headlines: Sequence[Headline]) -> list[Alert]:
    """The drift sentinel: a warning where the baseline drifted by more than the campaign's margin; none
    without a margin or a drift."""
    drift, margin = baseline_drift(run, headlines), _margin_pct(run)
    if drift is None or margin is None or abs(drift.pct) <= margin:
        return []
    return [
        Alert(
            "warning",
            f"The baseline, {drift.config}, drifted {drift.pct:+.1f} % between its first and its last round "
            f"(output tok/s at {drift.level.label}, rounds {drift.first[0]} and {drift.last[0]}), more than "
            f"the ±{margin:g} % margin: the machines changed during the run, and differences smaller than "
            f"the drift are not called ahead ({ROUNDS_TITLE}).",
        )
    ]


def _effect(value: float) -> str:
    """An effect or a drift: signed, one decimal, ``-2.0 %``."""
    return f"{value:+.1f} %"


def _intro(run: Run, margin: float | None) -> str:
    """What the effects are and mean, and the seed the rounds' orders were drawn from where recorded."""
    larger = (
        f"larger than the campaign's ±{margin:g} % margin"
        if margin is not None
        else "as large as the differences between configs"
    )
    rounds = run.fleet.rounds if run.fleet else None
    seed = (
        f" Each round's configs were queued in an order drawn from seed {rounds.seed} (fleet.json)."
        if rounds is not None and rounds.seed is not None
        else ""
    )
    return (
        "Each round measured every config still needed once, on whichever host took its job (a point's "
        "repeat is its round). Each config's output tok/s at its peak deviates from its own mean over its "
        "rounds by 100 x (value / mean - 1); a round's effect is the mean deviation of the configs it "
        "measured, a host's the mean deviation of the values it measured (`fairbench.measure.rounds`). "
        f"An effect {larger} moved every config measured there alike: a round's is a drift of the "
        "machines between rounds, which comparisons paired within a round cancel; a host's is a difference "
        "between hosts, which each config meeting the hosts as evenly as its rounds allow balances out, "
        f"and which widens the intervals of a config whose repeats ran on several.{seed}"
    )


def _in_order(configs: Sequence[str], queued: Sequence[str]) -> list[str]:
    """``configs`` in the order ``queued`` (fleet.json's, for their round), any it lacks after them."""
    return [*(name for name in queued if name in configs), *(name for name in configs if name not in queued)]


def _drift_text(run: Run, headlines: Sequence[Headline], margin: float | None) -> str:
    drift = baseline_drift(run, headlines)
    if drift is None:
        return (
            f"The baseline, {baseline_of(run.campaign)}, has no two rounds at its peak among the configs "
            "that finished: its drift is not known."
        )
    (first, first_value), (last, last_value) = drift.first, drift.last
    judged = (
        ""
        if margin is None
        else f", {'more than' if abs(drift.pct) > margin else 'within'} the ±{margin:g} % margin"
    )
    return (
        f"The baseline, {drift.config}, measured {first_value:,.1f} tok/s at {drift.level.label} in round "
        f"{first} and {last_value:,.1f} in round {last}: drift {_effect(drift.pct)}{judged}."
    )


def rounds_blocks(run: Run, headlines: Sequence[Headline]) -> list[Block]:
    """The Rounds section: each round's effect and the configs it measured, each host's effect (with two
    hosts or more), and the baseline's drift; nothing unless the run is spread with two rounds or more."""
    if run.placement != SPREAD:
        return []
    lines = measured(headlines)
    values = {line.result.name: _by_round(line) for line in lines}
    by_round = round_effects(values)
    if len(by_round) < 2:
        return []
    by_host = host_effects(values, {line.result.name: _hosts_by_round(line) for line in lines})
    margin = _margin_pct(run)
    orders = run.fleet.rounds.orders if run.fleet and run.fleet.rounds else ()
    rows = [
        [
            str(round_index),
            _effect(effect),
            ", ".join(
                _in_order(
                    [name for name, found in values.items() if round_index in found],
                    orders[round_index] if round_index < len(orders) else (),
                )
            ),
        ]
        for round_index, effect in by_round.items()
    ]
    measured_in = "configs measured, in the order queued" if orders else "configs measured"
    blocks: list[Block] = [
        Heading(2, ROUNDS_TITLE),
        Paragraph(_intro(run, margin)),
        Table(["round", "effect", measured_in], rows, [True, True, False]),
    ]
    if len(by_host) > 1:
        host_rows = [[host, _effect(effect)] for host, effect in by_host.items()]
        blocks.append(Table(["host", "effect"], host_rows, [False, True]))
    return [*blocks, Paragraph(_drift_text(run, headlines, margin))]
