"""The verdict: which config is best in each regime the campaign covers, by how much, and whether that is
more than the run-to-run noise once every comparison the verdict makes is accounted for.

Regimes (each ranks the configs that finished, by the mean of one figure over the repeats of one level):

- **lowest load**: output tok/s at the campaign's lowest listed level (concurrency, or an open loop's
  request rate), the same level for every config;
- **peak throughput**: output tok/s at each config's listed level of highest mean output throughput (the
  headline's peak), per GPU when the configs' GPU counts differ;
- **highest load under the SLO** (a campaign with an ``slo``; in an open loop, the highest request rate
  meeting it): output tok/s (per GPU as above) at each config's highest level that met the SLO on every
  repeat, every level below it too (``summary.slo_reach``).

Levels the SLO search chose (``level_source: bisect``) count for the SLO regime only: the search probes
each config at its own levels, so they line no two configs up. Every pair of ranked configs in every regime
(and, under ``every-host``, of every host: configs are compared within a host only) is one Welch test;
Holm's method over all of them keeps the chance of any false "significant" at 5 %.

Between two runs (``run_changes``): each config of run B against the same config of run A, at the lowest
level and at the peak, Holm over every change tested.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from fairbench.campaign.model import SPREAD
from fairbench.measure.decision import (
    AHEAD,
    BELOW_MARGIN,
    EQUIVALENT,
    UNDECIDED,
    Decision,
    decide,
    decide_rule_from_json,
    margin_tests,
    open_alpha,
    repeats_to_decide,
)
from fairbench.measure.slo import SloError, SloTarget, parse_slo
from fairbench.measure.stats import (
    ALPHA,
    Comparison,
    Estimate,
    Sample,
    difference_interval_pct,
    holm,
    holm_adjusted,
)
from fairbench.report.blocks import Block, BulletList, Heading, Paragraph
from fairbench.report.figures import PER_GPU, THROUGHPUT
from fairbench.report.flags import FlagMarks, doubt_text, raised
from fairbench.report.formatting import Label, decision, figure
from fairbench.report.load import Run
from fairbench.report.rounds import baseline_drift_pct_of
from fairbench.report.summary import (
    CLOSED_LOOP,
    OPEN_LOOP,
    Headline,
    Level,
    Loop,
    compare_of,
    estimate_of,
    loop_of,
    measured,
)

LOWEST = "lowest load"
PEAK = "peak throughput"
UNDER_SLO = "highest load under the SLO"

ABOVE = ">"
"""Between two configs of an order: the first is ahead, significantly after Holm's correction."""
NOISE = "≈"
"""Within noise after Holm's correction."""
UNTESTED = "?"
"""Cannot tell: a side has one repeat (or a value that is not finite)."""


# --- what the verdict holds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Standing:
    """One config's figure in one regime: the values of its repeats at one level."""

    line: Headline
    level: Level
    values: tuple[float, ...]
    rounds: tuple[int, ...] = ()
    """Under spread, the round (repeat) of each of ``values``: two configs are then compared within the
    rounds they share (``stats.Sample``); empty otherwise."""

    @property
    def sample(self) -> Sample:
        """Its values as the comparisons take them: by round under spread, else as a list."""
        return dict(zip(self.rounds, self.values, strict=True)) if self.rounds else self.values

    @property
    def estimate(self) -> Estimate:
        found = estimate_of(self.values)
        assert found is not None  # a standing has values (``_standing``)
        return found


@dataclass(frozen=True)
class Pair:
    """Two configs of a regime, the one ranked higher first."""

    above: Standing
    below: Standing
    comparison: Comparison | None
    """``above`` against ``below`` (``stats.compare``); None where a value is not finite."""
    interval_pct: tuple[float, float] | None
    """The pair's own 95 % interval of the difference of the means, as % of ``below``'s mean."""
    significant: bool | None
    """After Holm's correction over the verdict; None when untested (a side has one repeat)."""
    adjusted_p: float | None = None
    """Holm's adjusted p-value (``stats.holm_adjusted``): significant when at most 5 %."""
    decision: Decision | None = None
    """Against the campaign's margin (``measure.decision``); None without a margin, or untested."""
    repeats_to_decide: int | None = None
    """An undecided pair's estimate of the repeats of each config that would decide it
    (``decision.repeats_to_decide``); None otherwise, or where no number would."""


@dataclass(frozen=True)
class Regime:
    name: str
    """``LOWEST``, ``PEAK`` or ``UNDER_SLO``."""
    key: str
    """The figure ranked: ``output_throughput``, or ``output_throughput_per_gpu``."""
    host: str | None
    """The host whose configs it ranks (every-host over several hosts); None: every config of the run."""
    ranked: tuple[Standing, ...]
    """Best first: by mean, highest first."""
    pairs: tuple[Pair, ...]
    """Every pair of ``ranked``, in the order of ``itertools.combinations``."""
    outside: tuple[tuple[Headline, str], ...]
    """The finished configs it does not rank, each with why (no level that qualifies, no figure)."""
    gpus: tuple[int, ...] = ()
    """The configs' GPU counts, where they differ (then the figure is per GPU)."""

    def pair(self, above: int, below: int) -> Pair:
        """The pair of ``ranked[above]`` and ``ranked[below]`` (above < below)."""
        count = len(self.ranked)
        return self.pairs[above * count - above * (above + 1) // 2 + below - above - 1]

    @property
    def steps(self) -> list[Pair]:
        """Each config against the next one down."""
        return [self.pair(index, index + 1) for index in range(len(self.ranked) - 1)]


@dataclass(frozen=True)
class Verdict:
    regimes: tuple[Regime, ...]
    """By host (every-host over several hosts), then lowest, peak, under the SLO."""
    tested: int
    """The Holm family: the comparisons tested (both sides with two or more repeats, all finite)."""
    compared: int
    """Every pair of ranked configs in every regime, tested or not."""
    left_out: tuple[Headline, ...]
    """Configs that did not finish, or have no listed level: their points stop where they failed."""
    slo: tuple[SloTarget, ...]
    lowest: float | None
    """The lowest listed level: the level of the lowest-load regime."""
    slo_problem: str | None = None
    """Why campaign.json's ``slo`` cannot be used (its regime is then left out); None when it can."""
    loop: Loop = CLOSED_LOOP
    """Whether the campaign's levels are concurrencies or an open loop's request rates."""
    margin_pct: float | None = None
    """The campaign's ``decide.margin_pct``: each pair then has its decision; None: significance only."""
    rounds: bool = False
    """Whether its repeats ran in rounds (spread): two configs sharing rounds are compared paired."""
    refused: tuple[tuple[Headline, str], ...] = ()
    """Configs the answers gate refused (``report.answers``), each with why: ranked in no regime."""

    @property
    def hosts(self) -> list[str]:
        """The hosts the verdict is given per (every-host over several hosts); none otherwise."""
        return list(dict.fromkeys(regime.host for regime in self.regimes if regime.host is not None))

    @property
    def bisected(self) -> bool:
        """Whether any config has levels its SLO search chose (the lowest and peak regimes leave them out)."""
        return any(
            not level.listed
            for regime in self.regimes
            for standing in regime.ranked
            for level in standing.line.levels
        )


def campaign_slo(campaign: Mapping[str, object]) -> tuple[tuple[SloTarget, ...], str | None]:
    """campaign.json's ``slo`` as objectives; none for a campaign without one (or from before SLOs), with
    why when it cannot be used."""
    entries = campaign.get("slo") or {}
    if not isinstance(entries, Mapping):
        return (), f"`slo` is not a mapping of objectives: {entries!r}"
    try:
        return parse_slo(entries), None
    except SloError as exc:
        return (), str(exc)


# --- building it ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Draft:
    """A regime before Holm's correction: its standings ranked, and each pair's test."""

    name: str
    key: str
    host: str | None
    ranked: list[Standing]
    outside: list[tuple[Headline, str]]
    gpus: tuple[int, ...]

    def comparisons(self) -> list[tuple[Standing, Standing, Comparison | None]]:
        return [
            (above, below, compare_of(above.sample, below.sample))
            for above, below in itertools.combinations(self.ranked, 2)
        ]


def _ranked(
    name: str,
    host: str | None,
    chosen: Sequence[tuple[Headline, Level | None, str]],
    gpus: tuple[int, ...],
    *,
    rounds: bool,
) -> _Draft:
    """``chosen``: each config's level (None: none qualifies, with why). A config is ranked by the mean of
    its figure there; one without the figure, or with one that is not finite, is left outside, with why.
    With ``rounds`` (spread), each standing keeps its values' rounds."""
    key = PER_GPU if gpus else THROUGHPUT
    standings, outside = [], []
    for line, level, why in chosen:
        if level is None:
            outside.append((line, why))
            continue
        by_round = line.per_gpu_by_repeat(level) if gpus else level.by_repeat(THROUGHPUT)
        values = tuple(by_round.values())
        if not values:
            outside.append((line, f"no {'GPU count' if gpus else 'output throughput'} at {level.label}"))
        elif not all(map(math.isfinite, values)):
            outside.append((line, f"a value at {level.label} is NaN or infinite"))
        else:
            standings.append(Standing(line, level, values, tuple(by_round) if rounds else ()))
    standings.sort(key=lambda standing: -standing.estimate.mean)
    return _Draft(name, key, host, standings, outside, gpus)


def _gpu_counts(lines: Sequence[Headline]) -> tuple[int, ...]:
    """The GPU counts of ``lines`` where they differ (their throughput is then compared per GPU); () when
    every known count is the same."""
    counts = sorted({line.gpus for line in lines if line.gpus is not None})
    return tuple(counts) if len(counts) > 1 else ()


def _lowest_level(campaign: Mapping[str, object], lines: Sequence[Headline]) -> tuple[Loop, float | None]:
    """The campaign's loop and lowest listed level (``workload.request_rate``, an open loop, else
    ``workload.concurrency``); without a list, the lowest any config measured, of their loop."""
    workload = campaign.get("workload")
    workload = workload if isinstance(workload, Mapping) else {}
    for loop, key in ((OPEN_LOOP, "request_rate"), (CLOSED_LOOP, "concurrency")):
        listed = workload.get(key)
        if isinstance(listed, list) and listed:
            return loop, min(float(level) for level in listed)
    firsts = [line.first for line in lines if line.first]
    loop = loop_of(firsts)
    return loop, min((first.load for first in firsts if first.open_loop == loop.open), default=None)


def _drafts(
    lines: Sequence[Headline], host: str | None, lowest: tuple[Loop, float | None], slo: bool, *, rounds: bool
) -> list[_Draft]:
    gpus = _gpu_counts(lines)
    loop, load = lowest
    missing = f"no point at {'its lowest level' if load is None else loop.label(load)}"
    at_lowest = []
    for line in lines:
        found = (level for level in line.levels if level.listed and level.key == (loop.open, load))
        at_lowest.append((line, next(found, None), missing))
    drafts = [
        _ranked(LOWEST, host, at_lowest, (), rounds=rounds),
        _ranked(PEAK, host, [(line, line.peak, "no listed level") for line in lines], gpus, rounds=rounds),
    ]
    if slo:
        under: list[tuple[Headline, Level | None, str]] = []
        for line in lines:
            reach = line.slo
            if reach is None:
                under.append((line, None, "its points were not judged against the SLO"))
            else:
                under.append((line, reach.level, "meets it at no level"))
        drafts.append(_ranked(UNDER_SLO, host, under, gpus, rounds=rounds))
    return drafts


def _decisions(
    tests: Sequence[Sequence[tuple[Standing, Standing, Comparison | None]]],
    margin_pct: float | None,
    alpha: float,
    drift_pct: float | None = None,
) -> Iterator[tuple[Decision | None, int | None]]:
    """Each pair's decision against the margin, in the order of ``tests``, with an undecided pair's
    repeats to decide it (``decision.open_alpha``: alpha over the undecided pairs); (None, None) for every
    pair without a margin. No difference smaller than the baseline's ``drift_pct`` is called ahead."""
    pairs = [(above, below, comparison) for found in tests for above, below, comparison in found]
    if margin_pct is None:
        return iter([(None, None)] * len(pairs))
    floor = abs(drift_pct) if drift_pct is not None else 0.0
    found = [
        None
        if _p_value(comparison) is None
        else margin_tests(above.sample, below.sample, margin_pct, ahead_floor_pct=floor)
        for above, below, comparison in pairs
    ]
    decided = decide(found, alpha)
    strictest = open_alpha([decision for decision in decided if decision is not None], alpha)
    return iter(
        [
            (
                decision,
                repeats_to_decide(above.sample, below.sample, margin.margin, strictest)
                if decision is not None and margin is not None and decision.word == UNDECIDED
                else None,
            )
            for (above, below, _), margin, decision in zip(pairs, found, decided, strict=True)
        ]
    )


def _regimes(
    drafts: Sequence[_Draft], alpha: float, margin_pct: float | None = None, drift_pct: float | None = None
) -> tuple[list[Regime], int, int]:
    """Each draft with Holm's correction over every tested comparison of them all (and, with a margin,
    each pair's decision, none ahead by less than ``drift_pct``); and how many were tested and made."""
    tests = [draft.comparisons() for draft in drafts]
    tested = [p for found in tests for _, _, comparison in found if (p := _p_value(comparison)) is not None]
    rejected, adjusted = iter(holm(tested, alpha)), iter(holm_adjusted(tested))
    decisions = _decisions(tests, margin_pct, alpha, drift_pct)
    regimes = []
    for draft, found in zip(drafts, tests, strict=True):
        pairs = []
        for above, below, comparison in found:
            interval = difference_interval_pct(above.sample, below.sample)
            decision, more = next(decisions)
            if _p_value(comparison) is None:
                pairs.append(Pair(above, below, comparison, interval, None))
            else:
                significant, adjusted_p = next(rejected), next(adjusted)
                pairs.append(
                    Pair(above, below, comparison, interval, significant, adjusted_p, decision, more)
                )
        regimes.append(
            Regime(
                draft.name,
                draft.key,
                draft.host,
                tuple(draft.ranked),
                tuple(pairs),
                tuple(draft.outside),
                draft.gpus,
            )
        )
    return regimes, len(tested), sum(len(found) for found in tests)


def _p_value(comparison: Comparison | None) -> float | None:
    """A comparison's p-value; None when it was not tested (one repeat, or a value that is not finite)."""
    return None if comparison is None else comparison.p_value


def verdict(
    run: Run, headlines: Sequence[Headline], alpha: float = ALPHA, refused: Mapping[str, str] | None = None
) -> Verdict:
    """The verdict of one run (the module docstring): per host when the run compares configs within a host
    only (every-host) and has several. ``refused``: the configs whose answers fail the gate, by name, with
    why; they are ranked nowhere."""
    slo, slo_problem = campaign_slo(run.campaign)
    refused = refused or {}
    gated = tuple((line, refused[line.result.name]) for line in headlines if line.result.name in refused)
    finished = [line for line in measured(headlines) if line.result.name not in refused]
    by_host: dict[str | None, list[Headline]] = {}
    per_host = run.placement != SPREAD and len({line.result.host for line in headlines}) > 1
    for line in finished:
        by_host.setdefault(line.result.host if per_host else None, []).append(line)
    lowest = _lowest_level(run.campaign, finished)
    rounds = run.placement == SPREAD
    drafts = [
        draft
        for host, lines in by_host.items()
        for draft in _drafts(lines, host, lowest, bool(slo), rounds=rounds)
    ]
    rule = decide_rule_from_json(run.campaign.get("decide"))
    margin_pct = rule.margin_pct if rule else None
    drift_pct = baseline_drift_pct_of(run, headlines)
    regimes, tested, compared = _regimes(drafts, alpha, margin_pct, drift_pct)
    left_out = tuple(
        line
        for line in headlines
        if all(line is not other for other in finished) and line.result.name not in refused
    )
    loop, load = lowest
    return Verdict(
        tuple(regimes), tested, compared, left_out, slo, load, slo_problem, loop, margin_pct, rounds, gated
    )


# --- two runs ---------------------------------------------------------------------------------------------

RUN_FIGURES = ("first", "peak")
"""What two runs of a config are compared at: the lowest listed level, and the peak (``Headline.level``)."""


@dataclass(frozen=True)
class Change:
    """One config's figure in run B against the same config's in run A."""

    a: Headline
    b: Headline
    figure: str
    """``first`` or ``peak``."""
    comparison: Comparison | None
    """B against A; None where a value is not finite."""
    significant: bool | None
    """After Holm's correction over every change tested; None when untested (one repeat)."""


def run_changes(
    matched: Sequence[tuple[Headline, Headline]], alpha: float = ALPHA
) -> tuple[list[Change], int]:
    """Output throughput of each config of run B against run A (each pair in ``matched`` with points on
    both sides), at the lowest level and at the peak, each run's own; Holm over the configs x figures
    tested. Returns the changes and the number tested."""
    found = [
        (a, b, name, compare_of(b.level(name).values(THROUGHPUT), a.level(name).values(THROUGHPUT)))
        for a, b in matched
        if a.peak is not None and b.peak is not None
        for name in RUN_FIGURES
    ]
    p_values = [p for *_, comparison in found if (p := _p_value(comparison)) is not None]
    rejected = iter(holm(p_values, alpha))
    changes = [
        Change(a, b, name, comparison, next(rejected) if _p_value(comparison) is not None else None)
        for a, b, name, comparison in found
    ]
    return changes, len(p_values)


# --- how it reads -----------------------------------------------------------------------------------------


def _percent(value: float) -> str:
    return f"{value:+.1f} %"


def _margin(pair: Pair, below: str, margin_pct: float | None = None) -> str:
    """``+12.3 % over **ep8** at C=64 (95 % CI +8.1 % to +16.5 %): significant``, ``below`` naming the
    next config (and where it is); with a margin, the pair's word (``decision_text``)."""
    if pair.comparison is None:
        return f"not compared with {below} (a value is NaN or infinite)"
    relative = pair.comparison.relative_pct
    amount = "from 0" if math.isinf(relative) else _percent(relative)
    interval = (
        f" (95 % CI {_percent(pair.interval_pct[0])} to {_percent(pair.interval_pct[1])})"
        if pair.interval_pct and pair.significant is not None
        else ""
    )
    if margin_pct is not None:
        return f"{amount} over {below}{interval}: {decision_text(pair, margin_pct)}"
    held = "" if pair.adjusted_p is None else f" ({_p_text(pair.adjusted_p)} after Holm)"
    return f"{amount} over {below}{interval}: {decision(pair.significant)}{held}"


def decision_text(pair: Pair, margin_pct: float) -> str:
    """A pair's word against the margin and the Holm-adjusted p-value of the test that gave it:
    ``ahead by more than the ±1 % margin (p = 0.004 after Holm)``; an undecided pair's repeats of each
    config that would decide it."""
    found = pair.decision
    if found is None:
        return decision(None)
    held = f"{_p_text(found.adjusted_p)} after Holm"
    margin = f"±{margin_pct:g} %"
    if found.word == AHEAD:
        return f"ahead by more than the {margin} margin ({held})"
    if found.word == EQUIVALENT:
        return f"equivalent within {margin} ({held})"
    if found.word == BELOW_MARGIN:
        return f"different, but by less than the {margin} margin ({held})"
    more = (
        f"about {pair.repeats_to_decide} repeats of each would decide it at this difference and spread"
        if pair.repeats_to_decide is not None
        else "no number of repeats would decide it at this difference"
    )
    return f"undecided against the {margin} margin (closest test {held}): {more}"


def _p_text(p_value: float) -> str:
    return "p < 0.001" if p_value < 0.001 else f"p = {p_value:.3f}"


MARKS_BY_WORD = {AHEAD: ABOVE, EQUIVALENT: NOISE, BELOW_MARGIN: "≳", UNDECIDED: UNTESTED}
"""With a margin, between two configs of an order: the pair's word (``measure.decision``)."""


def _mark(step: Pair) -> str:
    if step.decision is not None:
        return MARKS_BY_WORD[step.decision.word]
    return UNTESTED if step.significant is None else ABOVE if step.significant else NOISE


def order_text(regime: Regime, name: Label) -> str:
    """``ep4 > ep8 ≈ tp8-nccl > tp8``: ``>`` where the adjacent pair is significant after Holm, ``≈`` within
    noise, ``?`` untested; with a margin, the pair's word (``MARKS_BY_WORD``); with no pair tested, the
    order by mean, said to be untested."""
    names = [name(standing.line.result) for standing in regime.ranked]
    steps = regime.steps
    if steps and all(step.significant is None for step in steps):
        return f"by mean (untested): {', '.join(names)}"
    text = names[0] if names else ""
    for step, following in zip(steps, names[1:], strict=True):
        text += f" {_mark(step)} {following}"
    return text


def objectives_text(targets: Sequence[SloTarget]) -> str:
    """The objectives as the report writes them: ```ttft_p99_ms` ≤ 2,000 ms, `tpot_p50_ms` ≤ 50 ms``."""
    return ", ".join(f"`{target.key}` ≤ {target.limit_ms:,g} ms" for target in targets)


OPEN_UNDER_SLO = "highest request rate meeting the SLO"
"""What an open loop's ``UNDER_SLO`` regime is called."""


def regime_title(name: str, loop: Loop) -> str:
    """A regime's name as the report writes it: ``UNDER_SLO`` of an open loop is ``OPEN_UNDER_SLO``."""
    return OPEN_UNDER_SLO if name == UNDER_SLO and loop.open else name


def _what(regime: Regime, found: Verdict) -> str:
    """What the regime ranks: which level of each config, which figure."""
    measure = (
        f"output tok/s per GPU (the configs use {', '.join(map(str, regime.gpus))} GPUs)"
        if regime.gpus
        else "output tok/s"
    )
    if regime.name == LOWEST:
        where = "each config's lowest level" if found.lowest is None else found.loop.label(found.lowest)
        return f"{where}, {measure}"
    if regime.name == PEAK:
        return f"each config's listed level of highest mean throughput, {measure}"
    highest = "request rate" if found.loop.open else "level"
    where = f"at each config's highest {highest} meeting it, every {highest} below too"
    return f"{objectives_text(found.slo)}; {measure} {where}"


def _where(standing: Standing, regime: Regime) -> str:
    """The level a standing is at, where it is each config's own: `` at C=64``, `` at least C=64``."""
    if regime.name == LOWEST:
        return ""
    reach = standing.line.slo
    if regime.name == UNDER_SLO and reach is not None and not reach.limit_found:
        return f" at {standing.level.label} (at least: the sweep found no limit)"
    return f" at {standing.level.label}"


def _marks(standing: Standing, regime: Regime, marks: FlagMarks) -> str:
    """The marks of the flags that doubt the standing's figure."""
    return marks.mark(standing.line, standing.level, regime.key)


def regime_text(regime: Regime, name: Label, found: Verdict, marks: FlagMarks) -> str:
    """One regime in a sentence or three: the best, its margin over the next, the whole order; each
    figure compared with the marks of the flags that doubt it."""
    shown = regime_title(regime.name, found.loop)
    title = f"**{shown[0].upper()}{shown[1:]}** ({_what(regime, found)})"
    if not regime.ranked:
        text = f"{title}: no config to rank."
    else:
        best = regime.ranked[0]
        text = (
            f"{title}: **{name(best.line.result)}**{_where(best, regime)}: {figure(best.estimate)}"
            + _marks(best, regime, marks)
        )
        if len(regime.ranked) == 1:
            text += " (no other config to compare)."
        else:
            following = regime.ranked[1]
            below = f"**{name(following.line.result)}**{_where(following, regime)}" + _marks(
                following, regime, marks
            )
            margin = _margin(regime.steps[0], below, found.margin_pct)
            text += f", {margin}.{_tied(regime, name, found.margin_pct)}"
            text += f" Order: {order_text(regime, name)}."
    reasons: dict[str, list[str]] = {}
    for line, why in regime.outside:
        reasons.setdefault(why, []).append(name(line.result))
    for why, names in reasons.items():
        text += f" Not ranked, {why}: {', '.join(names)}."
    return text


def _tied(regime: Regime, name: Label, margin_pct: float | None = None) -> str:
    """`` No clear best: ep8 is within noise of tp8-nccl, tp8.`` where the next config is within noise of
    the best (Holm), naming every config that is; with a margin, where it is within the margin of the best
    (equivalent, or different by less), naming every config that is, or undecided; nothing otherwise."""
    if margin_pct is not None:
        return _within_margin(regime, name, margin_pct)
    tied = [
        name(regime.ranked[index].line.result)
        for index in range(1, len(regime.ranked))
        if regime.pair(0, index).significant is False
    ]
    if regime.steps[0].significant is not False:
        return ""
    return f" No clear best: {name(regime.ranked[0].line.result)} is within noise of {', '.join(tied)}."


def _within_margin(regime: Regime, name: Label, margin_pct: float) -> str:
    best = name(regime.ranked[0].line.result)
    first = regime.steps[0].decision
    if first is None or first.word == AHEAD:
        return ""
    if first.word == UNDECIDED:
        return f" No clear best yet: {best} against {name(regime.ranked[1].line.result)} is undecided."
    within = [
        name(regime.ranked[index].line.result)
        for index in range(1, len(regime.ranked))
        if (found := regime.pair(0, index).decision) is not None and found.word in (EQUIVALENT, BELOW_MARGIN)
    ]
    return (
        f" No clear best: {', '.join(within)} {'is' if len(within) == 1 else 'are'} within the "
        f"±{margin_pct:g} % margin of {best}: pick on other grounds."
    )


def _family(found: Verdict) -> str:
    regimes = len({regime.name for regime in found.regimes})
    scope = "every pair of configs in each of its " + (f"{regimes} regimes" if regimes > 1 else "regime")
    if found.hosts:
        scope += f", on each of {len(found.hosts)} hosts (configs are compared within a host only)"
    untested = found.compared - found.tested
    more = f"; {untested} more cannot be told from noise (a side has one repeat)" if untested else ""
    # Spread repeats run in rounds, each measuring every config once: pairs sharing rounds are paired.
    welch = (
        "the paired t-test of the within-round differences (else Welch's)"
        if found.rounds
        else "Welch's t-test"
    )
    if found.margin_pct is not None:
        margin = f"±{found.margin_pct:g} %"
        return (
            f"The words, against the campaign's margin of {margin} of the lower mean (`decide`), each by "
            f"{welch}: **ahead**: the one-sided test that the difference exceeds the margin; **equivalent**: "
            "two one-sided tests (TOST) that it lies within the margin, and the two-sided test finds no "
            "difference; "
            "**different, but by less than the margin**: both TOST and the two-sided test; **undecided**: "
            f"none of them. Each test is Holm-corrected over the {found.tested} comparison(s) the verdict "
            f"tests ({scope}{more}), so the chance of any false word of a kind is at most {ALPHA * 100:g} %; "
            "the repeats that would decide an undecided pair assume its means and spreads stay as they "
            "are. Each interval is that pair's own 95 % interval, uncorrected."
        )
    return (
        f"Significance: {welch}, two-sided, Holm-corrected over the {found.tested} comparison(s) the "
        f"verdict tests ({scope}{more}), so the chance that any `significant` here is a false alarm is at "
        f"most {ALPHA * 100:g} %. Each interval is that pair's own 95 % interval, uncorrected."
    )


def _why_left_out(line: Headline) -> str:
    if not line.result.ok:
        return line.result.state
    return "no listed level" if line.levels else "no points"


def flagged_text(found: Verdict, name: Label, marks: FlagMarks) -> str | None:
    """What the flags on the figures the verdict compares make of them: ``**Flagged**: C=64 of **ep4** is
    flagged `client_bound` [⚑3](#flag-3): its throughput may be the client's limit, ...``; None where no
    compared figure is flagged."""
    items: dict[tuple[int, tuple[bool, float], str], str] = {}
    for regime in found.regimes:
        for standing in regime.ranked:
            line, level = standing.line, standing.level
            for flag in raised(level, regime.key):
                repeats = len(level.points)
                share = f" on {len(flag.reasons)} of {repeats} repeats" if len(flag.reasons) < repeats else ""
                items.setdefault(
                    (id(line.result), level.key, flag.flag),
                    f"{level.label} of **{name(line.result)}** is flagged `{flag.flag}`{share} "
                    f"{marks.note(line, level, flag.flag).link}: {doubt_text(flag.flag)}",
                )
    if not items:
        return None
    return "**Flagged**: " + "; ".join(items.values()) + "."


def verdict_blocks(
    found: Verdict, name: Label, marks: FlagMarks, *, unfair: str | None = None
) -> list[Block]:
    """The Verdict section: ``unfair``, a one-line pointer to the differences that make the comparison
    unfair; one bullet per regime (per host where the verdict is per host), each figure marked where a
    flag doubts it; what the flags make of the figures compared; how to read it."""
    blocks: list[Block] = [Heading(2, "Verdict")]
    if unfair:
        blocks.append(Paragraph(unfair))
    if found.refused:
        blocks.append(
            Paragraph(
                "**Answers**: "
                + "; ".join(
                    f"**{name(line.result)}** is ranked nowhere: {why}" for line, why in found.refused
                )
                + " (see Answers)."
            )
        )
    if not found.regimes:
        blocks.append(Paragraph("No config finished with points: there is nothing to rank."))
    hosts: list[str | None] = [*found.hosts] or ([None] if found.regimes else [])
    for host in hosts:
        regimes = [regime for regime in found.regimes if regime.host == host]
        if host is not None:
            blocks.append(Paragraph(f"On **{host}**:"))
        blocks.append(BulletList([regime_text(regime, name, found, marks) for regime in regimes]))
    flagged = flagged_text(found, name, marks)
    if flagged:
        blocks.append(Paragraph(flagged))
    notes = []
    if found.tested:
        between = (
            f"`{ABOVE}` ahead; `{NOISE}` equivalent; `{MARKS_BY_WORD[BELOW_MARGIN]}` different, but by less "
            f"than the margin; `{UNTESTED}` undecided, or cannot tell (one repeat)"
            if found.margin_pct is not None
            else f"`{ABOVE}` ahead, significant; `{NOISE}` within noise; `{UNTESTED}` cannot tell "
            "(one repeat)"
        )
        notes.append(f"In an order, between neighbours: {between}. {_family(found)}")
    elif found.compared:
        notes.append("No pair could be tested (one repeat), so each order is by mean alone.")
    if found.bisected:
        notes.append(
            "The lowest-load and peak regimes use the campaign's listed levels only: the SLO search "
            "probes each config at its own levels, which line no two configs up."
        )
    if found.slo_problem:
        notes.append(f"campaign.json's `slo` cannot be used ({found.slo_problem}): no SLO regime.")
    if found.left_out:
        notes.append(
            "Left out (a config that did not finish stops where it failed, so its figures are not its "
            "own): "
            + ", ".join(f"{name(line.result)} ({_why_left_out(line)})" for line in found.left_out)
            + "."
        )
    if notes:
        blocks.append(Paragraph(" ".join(notes)))
    return blocks
