"""What stopping when the verdict is decided costs and buys, in the simulator's noiseless model with noise
drawn here: GPU time to a verdict against fixed grids, and false alarms under a load that changes in time.

    .venv/bin/python tests/perf/decision_cost.py [--seeds 40] [--first-seed 1000] [--noise-pct 1]
        [--round-drift-pct 1] [--start-s 60] [--hosts 2] [--runs 20] [--load-pct 5]
        [--drift-per-job-pct 0.5] [--fixed-repeats 5]

Every job is one repeat of one config on a fresh server, as a spread campaign runs it. Its throughput at
each listed level is the config's truth there (the simulator's performance model without noise,
``sim.predict`` through ``fleet.estimate``: output tokens over the measured requests' time) times what the
machine did, times 1 + N(0, noise). It costs the server's start (``--start-s``: the demo declares none and
the simulator loads at once, where a real model takes minutes) plus its points' time as the simulator's
model serves them (warmup, primers and measured requests, at the demo's time scale). The queue is the
product's own (``fleet.queue.QueueState``, built as the campaign run builds it); hosts claim, run and finish
jobs on a clock, and the verdict's words are those of ``fleet.stopping.comparisons`` and
``measure.decision.decide`` on the final values.

1. GPU time to a decision. The demo campaign's five configs (campaigns/demo.yml, both workloads), with the
   machine drifting per round (every job of a round shares a factor 1 + N(0, round drift)), run over seeds
   not used to tune anything, (a) with ``repeats: {min: 3, max: 10}`` and ``decide: {margin_pct: 1}``,
   stopping when decided, (b) as fixed grids of N repeats of every config (N = 3 to 10, the same
   rounds), and (c) as automatic repeats stopped by each level's interval (``half_width_pct: 2``, no
   ``decide``: how repeats stopped before margins). Each word is scored against the truth: RIGHT is
   "ahead" with the true sign and a true difference beyond the margin, or "equivalent" / "below the
   margin" with a true difference within it;
   WRONG is "ahead" against the truth (the wrong sign, or a true difference within the margin), or
   "equivalent" / "below the margin" where the truth is beyond the margin; anything else is undecided.
   The words are scored without the drift floor and, in the rows marked so, as the report's verdict (and
   the queue, which stops by the same words) gives them (no difference smaller than the baseline's drift
   between its first and last round at its peak, per workload, called ahead). The fixed grid that reaches
   the same verdict is taken as the smallest one right as often as stopping when decided. tp8 and
   tp8-nccl differ only in NCCL's environment, which the simulator does not model: their truth is the
   same, and only "equivalent" or "below the margin" is right for them.

2. False alarms. A config (the demo's tp8) and its twin, on one host (hosts sharing a machine take jobs
   one at a time), under a load that changes per job in the order the jobs start: every other job 5 %
   slower (a CPU load switched on and off), and in the second case also a machine that gets faster by
   0.5 % per job, the twin being truly 2 % ahead. Each run has its own seed, which draws its rounds' order.
   The product's design (orders drawn per round, paired within rounds, stopping when decided) is set beside
   fixed grids of ``--fixed-repeats`` rounds with the order drawn or fixed (the campaign's, every round)
   and the comparison paired or not (Welch's over the values as lists).

Targets: stopping when decided at 0.4x or less of the job-minutes of the fixed grid reaching the same
verdict, right as often or more; for the product's design, the twins "ahead" in at most 1 run of 20
(TARGET_TWINS_AHEAD_SHARE) and the true 2 % difference never "ahead" with the wrong sign. The script exits
1, naming each miss.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fairbench.campaign.load import load_campaign
from fairbench.campaign.model import SPREAD, repeats_json
from fairbench.fleet.estimate import SimPointModel, repeat_points, sim_config
from fairbench.fleet.plan import PLAY_POOL, plan, round_order, rounds_seed
from fairbench.fleet.queue import RUN, WAIT, QueueState, judging_json, new_state
from fairbench.fleet.stopping import Comparison, comparisons, levels_of
from fairbench.measure.decision import AHEAD, BELOW_MARGIN, EQUIVALENT, UNDECIDED, decide, margin_tests
from fairbench.measure.metrics import mean
from fairbench.measure.repeats import JUDGED_METRIC, repeats_from_json
from fairbench.measure.rounds import baseline_drift_pct
from fairbench.measure.stats import Sample

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "campaigns" / "demo.yml"
MARGIN_PCT = 1.0
AUTO = {"min": 3, "max": 10, "half_width_pct": 2.0}
FIXED_GRIDS = range(3, 11)
TARGET_COST_RATIO = 0.4
TARGET_TWINS_AHEAD_SHARE = 1 / 20

RIGHT, WRONG, OPEN = "right", "wrong", "undecided"
Values = dict[str, dict[str, dict[int, float]]]
"""Per config, per level (``workload/c16``), its throughput by round: ``fleet.stopping.Levels``."""
Measure = Callable[[str, int, int], dict[str, float]]
"""A job's throughput at each level, from its config, its round and its place in the order jobs start."""


@dataclass(frozen=True)
class Campaign:
    """A campaign as the queue and the verdict see it, with each config's truth and job time."""

    data: dict[str, Any]
    """campaign.json's data."""
    truth: dict[str, dict[str, float]]
    """Per config, per level, its output tok/s without noise."""
    job_s: dict[str, float]

    def with_repeats(self, repeats: int | Mapping[str, float], seed: int) -> dict[str, Any]:
        """The data with every workload's ``repeats`` and ``seed`` (which the rounds' orders are drawn
        from) replaced."""
        data = copy.deepcopy(self.data)
        for workload in data["workloads"].values():
            workload["repeats"] = repeats if isinstance(repeats, int) else dict(repeats)
            workload["seed"] = seed
        return data


def demo(start_s: float) -> Campaign:
    """The demo campaign, each config's truth at each listed level and its job's seconds."""
    campaign = load_campaign(DEMO)
    truth: dict[str, dict[str, float]] = {}
    job_s: dict[str, float] = {}
    for name, config in campaign.configs.items():
        model = SimPointModel(sim_config(config.argv))
        truth[name], job_s[name] = {}, start_s
        for workload_name, workload in campaign.workloads.items():
            for point in repeat_points(workload_name, workload):
                job_s[name] += model.point_s(workload, point)
                measured_s = model.point_s(workload, replace(point, warmup=0, primers=0))
                truth[name][f"{workload_name}/{point.tag}"] = (
                    point.measured * workload.output_len / measured_s
                )
    return Campaign(campaign.to_json(), truth, job_s)


def twins(demo_campaign: Campaign, ratio: float) -> Campaign:
    """The demo's first config ``a`` and its twin ``b``, ``ratio`` times as fast at every level."""
    data = copy.deepcopy(demo_campaign.data)
    first = next(iter(data["configs"]))
    data["configs"] = {name: {**data["configs"][first], "name": name} for name in ("a", "b")}
    data["decide"] = {"margin_pct": MARGIN_PCT}
    truth = demo_campaign.truth[first]
    return Campaign(
        data,
        {"a": dict(truth), "b": {level: value * ratio for level, value in truth.items()}},
        dict.fromkeys(("a", "b"), demo_campaign.job_s[first]),
    )


def _points(round_index: int, values: Mapping[str, float]) -> list[dict[str, Any]]:
    """A job's points as its rank 0 reports them with its finish."""
    points = []
    for level, value in values.items():
        workload, _, tag = level.rpartition("/")
        points.append(
            {
                "repeat": round_index,
                "workload": workload,
                "max_concurrency": int(tag[1:]),
                JUDGED_METRIC: value,
            }
        )
    return points


@dataclass
class Played:
    """One run through the queue: its jobs' values, GPU time and wall time."""

    values: Values
    job_s: float
    wall_s: float


def through_queue(campaign: Campaign, data: dict[str, Any], hosts: Sequence[str], measure: Measure) -> Played:
    """The run of ``data`` as ``fairbench run`` queues it: hosts claim jobs, each runs for its config's job
    time and measures what ``measure`` says, its rank 0 finishes it with its points (the queue then judges
    a round that has ended and queues the next), until every host is told it is done."""
    pools = {PLAY_POOL: list(hosts)}
    state = QueueState(
        new_state(
            placement=SPREAD,
            pools=pools,
            jobs=plan(data, pools, placement=SPREAD),
            excluded={},
            equivalence=None,
            sticky={},
            repeats=repeats_from_json(repeats_json(data)),
            seed=rounds_seed(data),
            judging=judging_json(data),
        )
    )
    clock, started = 0.0, 0
    idle = list(hosts)
    running: list[tuple[float, int, str, str, list[dict[str, Any]]]] = []  # ends, started, job, host, points
    while idle or running:
        waiting = []
        for host in idle:
            claim = state.claim(host, clock)
            if claim.answer == RUN and claim.job is not None:
                config, [round_index] = claim.job["config"], claim.job["repeats"]
                points = _points(round_index, measure(config, round_index, started))
                running.append((clock + campaign.job_s[config], started, claim.job["id"], host, points))
                started += 1
            elif claim.answer == WAIT:
                waiting.append(host)
        idle = waiting
        if not running:
            if waiting:
                raise RuntimeError(f"hosts {', '.join(waiting)} wait with nothing running")
            break
        running.sort()
        clock, _, job_id, host, points = running.pop(0)
        state.finish(job_id, host, ok=True, reason=None, now=clock, points=points)
        idle.append(host)
    cost = sum(campaign.job_s[job["config"]] for job in state.jobs)
    return Played(levels_of(state.jobs), cost, clock)


def in_order(orders: Sequence[Sequence[str]], measure: Measure) -> Values:
    """Rounds measured one job after another in ``orders``, round by round, without the queue."""
    values: Values = {}
    started = 0
    for round_index, order in enumerate(orders):
        for config in order:
            for level, value in measure(config, round_index, started).items():
                values.setdefault(config, {}).setdefault(level, {})[round_index] = value
            started += 1
    return values


# --- the verdict and its score ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Word:
    pair: Comparison
    word: str
    true_pct: float
    """100 x (truth of ``above`` / truth of ``below`` - 1), each at the level the comparison used."""

    @property
    def score(self) -> str:
        if self.word == AHEAD:
            return RIGHT if self.true_pct > MARGIN_PCT else WRONG
        if self.word in (EQUIVALENT, BELOW_MARGIN):
            return RIGHT if abs(self.true_pct) <= MARGIN_PCT else WRONG
        return OPEN


def _level(levels: Mapping[str, Mapping[int, float]], sample: Mapping[int, float]) -> str:
    """The level whose values the comparison took (every config here has the same GPUs: none divided)."""
    return next(level for level, by_round in levels.items() if by_round == sample)


def drift_floors(values: Values, baseline: str) -> dict[str, float]:
    """Per workload, |the baseline's drift| between its first and last round at its peak, in %, as the
    report's verdict takes it (no difference smaller than it called ahead)."""
    floors: dict[str, float] = {}
    levels = values.get(baseline, {})
    for workload in dict.fromkeys(level.rpartition("/")[0] for level in levels):
        mine = [level for level in levels if level.rpartition("/")[0] == workload]
        peak = max(mine, key=lambda level: mean(list(levels[level].values())))
        drift = baseline_drift_pct(levels[peak])
        floors[workload] = abs(drift) if drift is not None else 0.0
    return floors


def verdict(campaign: Campaign, values: Values, *, paired: bool = True, floor: bool = False) -> list[Word]:
    """The words of the verdict's comparisons on the final ``values``, Holm over them all, as the queue
    judges them; ``paired`` false: each side's values as a list (Welch's); ``floor``: none ahead by less
    than the baseline's drift (``drift_floors``)."""
    judging = judging_json(campaign.data)
    baseline = str(judging["baseline"])
    compared = comparisons(values, baseline, judging["gpus"])
    floors = drift_floors(values, baseline) if floor else {}
    tests = []
    truths = []
    for pair in compared:
        above, below = (
            _level(values[pair.above], pair.above_values),
            _level(values[pair.below], pair.below_values),
        )
        truths.append(100 * (campaign.truth[pair.above][above] / campaign.truth[pair.below][below] - 1))
        sample_a: Sample = pair.above_values if paired else list(pair.above_values.values())
        sample_b: Sample = pair.below_values if paired else list(pair.below_values.values())
        tests.append(margin_tests(sample_a, sample_b, MARGIN_PCT, floors.get(above.rpartition("/")[0], 0.0)))
    return [
        Word(pair, decision.word if decision is not None else UNDECIDED, true_pct)
        for pair, decision, true_pct in zip(compared, decide(tests), truths, strict=True)
    ]


# --- 1. GPU time to a decision ------------------------------------------------------------------------------


def measurements(campaign: Campaign, seed: int, noise_pct: float, round_drift_pct: float) -> Measure:
    """truth x (1 + N(0, round drift)) shared by a round's jobs x (1 + N(0, noise)) per job and level, each
    drawn from the seed and what it is of alone, so every mode of a seed measures the same job alike."""
    factors: dict[int, float] = {}

    def measure(config: str, round_index: int, started: int) -> dict[str, float]:
        factor = factors.setdefault(
            round_index, 1 + random.Random(f"{seed}/round/{round_index}").gauss(0, round_drift_pct / 100)
        )
        return {
            level: truth
            * factor
            * (1 + random.Random(f"{seed}/{config}/{round_index}/{level}").gauss(0, noise_pct / 100))
            for level, truth in campaign.truth[config].items()
        }

    return measure


@dataclass
class Tally:
    job_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    scores: dict[str, int] = field(default_factory=lambda: dict.fromkeys((RIGHT, WRONG, OPEN), 0))
    missed: dict[str, int] = field(default_factory=dict)
    """Per comparison (regime, above, below), the runs it was not right in."""

    def add(self, played: Played, words: Sequence[Word]) -> None:
        self.job_s.append(played.job_s)
        self.wall_s.append(played.wall_s)
        for word in words:
            self.scores[word.score] += 1
            if word.score != RIGHT:
                key = f"{word.pair.regime}: {word.pair.above}/{word.pair.below} {word.word}"
                self.missed[key] = self.missed.get(key, 0) + 1

    def share(self, score: str) -> float:
        return self.scores[score] / max(1, sum(self.scores.values()))


def gpu_time(args: argparse.Namespace, missed: list[str]) -> None:
    campaign = demo(args.start_s)
    hosts = [f"h{index + 1}" for index in range(args.hosts)]
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    modes: dict[str, Tally] = {}
    for seed in seeds:
        measure = measurements(campaign, seed, args.noise_pct, args.round_drift_pct)
        played = through_queue(campaign, campaign.with_repeats(AUTO, seed), hosts, measure)
        modes.setdefault("stop when decided", Tally()).add(played, verdict(campaign, played.values))
        modes.setdefault("  + report's drift floor", Tally()).add(
            played, verdict(campaign, played.values, floor=True)
        )
        # Before margins: automatic repeats until every level's interval is within +-2 %.
        by_interval = {
            key: value for key, value in campaign.with_repeats(AUTO, seed).items() if key != "decide"
        }
        played = through_queue(campaign, by_interval, hosts, measure)
        modes.setdefault("until each level's ±2 %", Tally()).add(played, verdict(campaign, played.values))
        for count in FIXED_GRIDS:
            played = through_queue(campaign, campaign.with_repeats(count, seed), hosts, measure)
            modes.setdefault(f"fixed {count}", Tally()).add(played, verdict(campaign, played.values))
            if count == 3:
                modes.setdefault("fixed 3 + drift floor", Tally()).add(
                    played, verdict(campaign, played.values, floor=True)
                )
    seconds = sorted(campaign.job_s.values())
    print(
        f"1. GPU time to a decision: demo ({', '.join(campaign.job_s)}), {len(seeds)} seeds from "
        f"{args.first_seed}, {args.hosts} hosts, noise {args.noise_pct:g} % per job, round drift "
        f"{args.round_drift_pct:g} %, margin {MARGIN_PCT:g} %"
    )
    print(
        f"   job = start {args.start_s:g} s + points {seconds[0] - args.start_s:.1f}-"
        f"{seconds[-1] - args.start_s:.1f} s (simulator's model, as served); truth: simulator's model"
    )
    base = mean(modes["fixed 3"].job_s)
    header = ("job-min", "x fixed 3", "wall-min", "right", "wrong", "undec")
    print(f"   {'mode':<26} " + " ".join(f"{cell:>{max(6, len(cell))}}" for cell in header))
    for name, tally in modes.items():
        print(
            f"   {name:<26} {mean(tally.job_s) / 60:>8.1f} {mean(tally.job_s) / base:>9.2f} "
            f"{mean(tally.wall_s) / 60:>8.1f} {tally.share(RIGHT):>6.1%} {tally.share(WRONG):>6.1%} "
            f"{tally.share(OPEN):>6.1%}"
        )
    auto = modes["stop when decided"]
    same = next(
        (count for count in FIXED_GRIDS if modes[f"fixed {count}"].share(RIGHT) >= auto.share(RIGHT)), None
    )
    if same is None:
        ratio = mean(auto.job_s) / mean(modes[f"fixed {FIXED_GRIDS[-1]}"].job_s)
        print(f"   no fixed grid up to {FIXED_GRIDS[-1]} is right as often: under {ratio:.2f}x of that one")
    else:
        ratio = mean(auto.job_s) / mean(modes[f"fixed {same}"].job_s)
        print(f"   same verdict quality: fixed {same}; stop when decided costs {ratio:.2f}x its job-minutes")
        if ratio > TARGET_COST_RATIO:
            missed.append(f"stop when decided at {ratio:.2f}x of fixed {same}, over {TARGET_COST_RATIO}x")
    if auto.share(RIGHT) < modes["fixed 3"].share(RIGHT):
        missed.append("stop when decided right less often than fixed 3")
    worst = sorted(auto.missed.items(), key=lambda item: -item[1])[:4]
    print(f"   stop when decided, not right most often (runs of {len(seeds)}):")
    for key, count in worst:
        print(f"     {count:>3}  {key}")


# --- 2. False alarms ------------------------------------------------------------------------------------


def loaded(campaign: Campaign, seed: int, noise_pct: float, load_pct: float, drift_pct: float) -> Measure:
    """truth x the machine's load at the job's place in the order jobs start (every other job ``load_pct``
    slower; faster by ``drift_pct`` a job) x (1 + N(0, noise)) per job and level."""

    def measure(config: str, round_index: int, started: int) -> dict[str, float]:
        machine = (1 - load_pct / 100 * (started % 2)) * (1 + drift_pct / 100 * started)
        return {
            level: truth
            * machine
            * (1 + random.Random(f"{seed}/{config}/{round_index}/{level}").gauss(0, noise_pct / 100))
            for level, truth in campaign.truth[config].items()
        }

    return measure


def _designs(args: argparse.Namespace) -> dict[str, Callable[[Campaign, int, Measure], list[Word]]]:
    """Each design of part 2: how a run of seed ``seed`` measures and judges."""
    count = args.fixed_repeats

    def product(floor: bool) -> Callable[[Campaign, int, Measure], list[Word]]:
        def run(campaign: Campaign, seed: int, measure: Measure) -> list[Word]:
            played = through_queue(campaign, campaign.with_repeats(AUTO, seed), ["h1"], measure)
            return verdict(campaign, played.values, floor=floor)

        return run

    def grid(drawn: bool, paired: bool) -> Callable[[Campaign, int, Measure], list[Word]]:
        def run(campaign: Campaign, seed: int, measure: Measure) -> list[Word]:
            configs = list(campaign.data["configs"])
            orders = [round_order(configs, seed, index) if drawn else configs for index in range(count)]
            return verdict(campaign, in_order(orders, measure), paired=paired)

        return run

    return {
        "product: drawn, paired, stop when decided": product(False),
        "  + report's drift floor": product(True),
        f"drawn order, paired, fixed {count}": grid(True, True),
        f"drawn order, unpaired, fixed {count}": grid(True, False),
        f"fixed order, paired, fixed {count}": grid(False, True),
        f"naive: fixed order, unpaired, fixed {count}": grid(False, False),
    }


def false_alarms(args: argparse.Namespace, missed: list[str]) -> None:
    base = demo(args.start_s)
    same, ahead = twins(base, 1.0), twins(base, 1.02)
    seeds = range(args.first_seed, args.first_seed + args.runs)
    print(
        f"2. False alarms: a and its twin b, {len(seeds)} runs from seed {args.first_seed}, one host, noise "
        f"{args.noise_pct:g} %; A/A: every other job {args.load_pct:g} % slower;"
    )
    print(f"   2 %: b truly 2 % ahead, that load and {args.drift_per_job_pct:g} % faster a job. Runs with:")
    print(f"   {'design':<44} {'A/A ahead':>9} {'2%: a ahead':>11} {'b ahead':>8}")
    for name, run in _designs(args).items():
        twins_ahead = wrong = right = 0
        for seed in seeds:
            words = run(same, seed, loaded(same, seed, args.noise_pct, args.load_pct, 0.0))
            twins_ahead += any(word.word == AHEAD for word in words)
            drifting = loaded(ahead, seed, args.noise_pct, args.load_pct, args.drift_per_job_pct)
            words = run(ahead, seed, drifting)
            wrong += any(word.word == AHEAD and word.pair.above == "a" for word in words)
            right += any(word.word == AHEAD and word.pair.above == "b" for word in words)
        print(f"   {name:<44} {twins_ahead:>9} {wrong:>11} {right:>8}")
        if name.startswith("product"):
            if twins_ahead > TARGET_TWINS_AHEAD_SHARE * len(seeds):
                missed.append(f"the twins ahead in {twins_ahead} of {len(seeds)} runs")
            if wrong:
                missed.append(f"a wrong-sign ahead in {wrong} of {len(seeds)} runs")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=40, help="runs of each mode in part 1")
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--noise-pct", type=float, default=1.0, help="each job's noise, per level")
    parser.add_argument("--round-drift-pct", type=float, default=1.0, help="part 1: the machine, per round")
    parser.add_argument("--start-s", type=float, default=60.0, help="a server's start")
    parser.add_argument("--hosts", type=int, default=2, help="part 1's hosts")
    parser.add_argument("--runs", type=int, default=20, help="runs of each design in part 2")
    parser.add_argument("--load-pct", type=float, default=5.0, help="part 2: every other job this slower")
    parser.add_argument("--drift-per-job-pct", type=float, default=0.5, help="part 2: faster by this a job")
    parser.add_argument("--fixed-repeats", type=int, default=5, help="part 2: the fixed grids' rounds")
    args = parser.parse_args(argv)
    missed: list[str] = []
    gpu_time(args, missed)
    false_alarms(args, missed)
    for line in missed:
        print(f"MISSED: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
