"""Whether a spread campaign's automatic repeats need another round, and for which configs.

Each round measures every config still needed once (``fleet.queue``); once a round has ended, each config
is judged over the rounds it has (its jobs' throughputs at each listed level, by round):

- with the campaign's margin (``decide``), by the comparisons its verdict makes (``report.verdict``), per
  workload: at the lowest level (each config's first listed level) and at each config's peak (per GPU
  where the configs' GPU counts differ), the best config against the next, and the baseline against each
  other. Each is a ``measure.decision`` test, paired within rounds, Holm over them all, none ahead by less
  than the baseline's drift (``measure.rounds``), as in the verdict. A config needs
  another round while one of its comparisons is undecided and could be decided within the maximum
  (``decision.repeats_to_decide``); one whose comparisons are all decided (a config clearly behind, say)
  stops. The baseline is measured in every round while any other config is: it is the drift sentinel
  (``measure.rounds``), measured in the first round and the last;
- without one, each level by its interval's width (``repeats.stop_reason``), as a single config's
  repeats are, and every config gets another round while any needs one: the verdict compares configs
  within the rounds they share, so a config stopped early would leave the others' later rounds without a
  partner (three pairs, say, where ten were measured, and an interval three times as wide).

A config that has had ``maximum`` jobs gets none more.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fairbench.campaign.model import SPREAD
from fairbench.measure.decision import (
    UNDECIDED,
    DecideRule,
    decide,
    decide_rule_from_json,
    margin_tests,
    open_alpha,
    repeats_to_decide,
)
from fairbench.measure.metrics import mean
from fairbench.measure.repeats import AutoRepeats, stop_reason
from fairbench.measure.rounds import baseline_drift_pct

ByRound = dict[int, float]
Levels = Mapping[str, Mapping[str, ByRound]]
"""Per config: per level (``workload/c16``, lowest first within a workload), its throughput by round."""


@dataclass(frozen=True)
class Comparison:
    """One comparison the verdict makes: ``above`` ranked above ``below`` in ``regime`` of a workload."""

    regime: str
    above: str
    below: str
    above_values: ByRound
    below_values: ByRound
    floor_pct: float = 0.0
    """The baseline's drift in its workload (``measure.rounds.baseline_drift_pct``, at its peak): no
    difference smaller than it is ahead, as the verdict has it."""

    def text(self, word: str) -> str:
        return f"{self.above} {word} {self.below} ({self.regime})"


def _workload(level: str) -> str:
    return level.rpartition("/")[0]


def _peak(levels: Mapping[str, ByRound], workload: str) -> str | None:
    """The config's level of highest mean throughput in ``workload``."""
    mine = [level for level in levels if _workload(level) == workload and levels[level]]
    return max(mine, key=lambda level: mean(list(levels[level].values())), default=None)


def _per_gpu(values: ByRound, gpus: int | None) -> ByRound:
    return {index: value / gpus for index, value in values.items()} if gpus else dict(values)


def comparisons(values: Levels, baseline: str, gpus: Mapping[str, int]) -> list[Comparison]:
    """The verdict's comparisons over ``values`` (module docstring), each once."""
    workloads = list(dict.fromkeys(_workload(level) for levels in values.values() for level in levels))
    by_gpu = len(set(gpus.get(config) for config in values)) > 1
    found: dict[tuple[str, str, str], Comparison] = {}
    for workload in workloads:
        # Every config is swept at the workload's listed levels: the first any has is the lowest.
        lowest = next(
            (level for levels in values.values() for level in levels if _workload(level) == workload), ""
        )
        regimes: dict[str, dict[str, ByRound]] = {
            f"{workload}: lowest load" if workload else "lowest load": {
                config: dict(levels[lowest]) for config, levels in values.items() if levels.get(lowest)
            },
            f"{workload}: peak" if workload else "peak": {
                config: _per_gpu(levels[peak], gpus.get(config) if by_gpu else None)
                for config, levels in values.items()
                if (peak := _peak(levels, workload)) is not None
            },
        }
        peak = _peak(values.get(baseline, {}), workload)
        drift = baseline_drift_pct(values[baseline][peak]) if peak is not None else None
        floor = abs(drift) if drift is not None else 0.0
        for regime, standing in regimes.items():
            ranked = sorted(standing, key=lambda config: -mean(list(standing[config].values())))
            pairs = list(itertools.pairwise(ranked))[:1]
            if baseline in standing:
                pairs += [
                    (config, baseline)
                    if ranked.index(config) < ranked.index(baseline)
                    else (baseline, config)
                    for config in ranked
                    if config != baseline
                ]
            for above, below in pairs:
                found.setdefault(
                    (regime, above, below),
                    Comparison(regime, above, below, standing[above], standing[below], floor),
                )
    return list(found.values())


def judge(
    values: Levels,
    counts: Mapping[str, int],
    policy: AutoRepeats,
    *,
    rule: DecideRule | None,
    baseline: str,
    gpus: Mapping[str, int],
) -> dict[str, str | None]:
    """Per config of ``counts`` (its jobs so far): why it needs no more rounds, or None while it needs one
    (module docstring)."""
    found: dict[str, str | None] = {}
    if rule is None:
        for config, count in counts.items():
            levels = values.get(config, {})
            reasons = {
                level: stop_reason(list(by_round.values()), policy) for level, by_round in levels.items()
            }
            if None in reasons.values():
                found[config] = None
            else:
                shown = "; ".join(f"{level}: {why}" for level, why in reasons.items())
                found[config] = shown or f"no level measured in {count} job(s)"
        found = _bounded(found, counts, policy)
        return _bounded(dict.fromkeys(found), counts, policy) if None in found.values() else found
    compared = comparisons(values, baseline, gpus)
    tests = [
        margin_tests(pair.above_values, pair.below_values, rule.margin_pct, ahead_floor_pct=pair.floor_pct)
        for pair in compared
    ]
    decisions = decide(tests)
    strictest = open_alpha(decisions)
    open_pairs: dict[str, list[str]] = {config: [] for config in counts}
    decided: dict[str, list[str]] = {config: [] for config in counts}
    hopeless: dict[str, list[str]] = {config: [] for config in counts}
    for pair, test, decision in zip(compared, tests, decisions, strict=True):
        word = decision.word if decision is not None else UNDECIDED
        if word != UNDECIDED:
            for config in (pair.above, pair.below):
                decided.setdefault(config, []).append(pair.text(word))
            continue
        needed = (
            repeats_to_decide(pair.above_values, pair.below_values, test.margin, strictest)
            if test is not None
            else None
        )
        into = hopeless if needed is not None and needed > policy.maximum else open_pairs
        why = pair.text(UNDECIDED) + (f", ~{needed} repeats to decide" if needed else "")
        for config in (pair.above, pair.below):
            into.setdefault(config, []).append(why)
    for config in counts:
        if open_pairs.get(config):
            found[config] = None
        elif hopeless.get(config):
            found[config] = (
                f"undecidable within the maximum of {policy.maximum}: {'; '.join(hopeless[config])}"
            )
        else:
            found[config] = "decided: " + ("; ".join(decided.get(config, [])) or "in no comparison")
    if baseline in found and any(why is None for config, why in found.items() if config != baseline):
        found[baseline] = None
    return _bounded(found, counts, policy)


def _bounded(
    found: dict[str, str | None], counts: Mapping[str, int], policy: AutoRepeats
) -> dict[str, str | None]:
    """``found``, but a config that has had ``maximum`` jobs (or more) stops, with why."""
    return {
        config: (
            f"maximum of {policy.maximum} repeats reached"
            if why is None and counts[config] >= policy.maximum
            else why
        )
        for config, why in found.items()
    }


def stopping_margin(campaign: Mapping[str, Any]) -> float | None:
    """The margin a campaign's automatic repeats stop by (campaign.json's data): ``decide.margin_pct`` under
    spread; None where each level's interval judges them (no ``decide``, or every-host)."""
    rule = decide_rule_from_json(campaign.get("decide"))
    return rule.margin_pct if rule is not None and campaign.get("placement", SPREAD) == SPREAD else None


def levels_of(jobs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, ByRound]]:
    """Per config, per level, its jobs' throughputs by round (a spread job measures one: its repeat)."""
    found: dict[str, dict[str, ByRound]] = {}
    for job in jobs:
        config = found.setdefault(str(job["config"]), {})
        for level, value in (job.get("throughputs") or {}).items():
            config.setdefault(level, {})[int(job["repeats"][0])] = float(value)
    return found
