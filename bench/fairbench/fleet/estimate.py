"""What each point of a campaign sends, and how long the simulator's model says it takes.

A point at level L of a workload (``PointWork``) sends its warmup's ``w`` requests, then, with
``cache_state: primed``, ``p`` primers (each group's system prompt once, one output token), then the ``n``
requests it measures; a flush costs nothing here. With engine ``sim`` its time is the performance model's
(``sim.predict``) in virtual time, as the config's server serves it (its ``--sim-time-scale``), each phase
from an idle server:

    point_s = T(warmup) + T(primers) + T(measured)

- a closed loop: L clients (``conversations_duration_s``); a multi-turn workload's C conversations, each
  next turn sent ``think_time_s`` after the last reply;
- an open loop: requests evenly spaced at the rate L (the mean of Poisson or gamma gaps), at most
  ``max_concurrency`` in flight (``arrivals_duration_s``); a replayed trace: its window's own arrivals
  divided by the speedup, each with its own lengths;
- the primers: ``min(in flight at L, p)`` at a time.

Each request counts the prompt tokens the server computes, those its prefix cache does not hold, as the
simulator's cache would serve them if it held every conversation: a shared system prompt once per group in
a point (none once primed), a conversation's later turns their user turn and the last reply token
(``prefix_cache``: the last token of a reply is never cached), a trace's blocks an earlier request of the
window sent (``traces.reusable_tokens``). A search probe is timed as the listed level above it.
"""

from __future__ import annotations

import argparse
import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from fairbench.campaign.model import Workload
from fairbench.measure.results_format import level_tag
from fairbench.measure.slo import search_probe
from fairbench.measure.trace_replay import load_window, own_rate
from fairbench.measure.traces import TraceError, TraceRequest, reusable_tokens
from fairbench.measure.workload import PRIMED, TraceWindow
from fairbench.sim.args import ConfigError, SimConfig, add_sglang_arguments, add_sim_arguments, resolve
from fairbench.sim.model import ProfileError
from fairbench.sim.predict import Arrival, arrivals_duration_s, conversations_duration_s


class EstimateError(ValueError):
    """A point cannot be timed: the message says why in one line."""


@dataclass(frozen=True)
class PointWork:
    """One point of a workload at one level: what its sweep sends."""

    workload: str
    """The workload's name (``campaign.model.SINGLE_WORKLOAD`` for a campaign of one)."""
    level: float
    """A concurrency, or an open loop's request rate."""
    open_loop: bool
    measured: int
    """Requests measured (a multi-turn workload's turns, of whole conversations)."""
    warmup: int
    primers: int

    @property
    def tag(self) -> str:
        """The level as point ids spell it (``c16``, ``rps2.5``: ``results_format.level_tag``)."""
        return level_tag(self.level, open_loop=self.open_loop)

    @property
    def requests(self) -> int:
        return self.measured + self.warmup + self.primers


def repeat_points(name: str, workload: Workload) -> list[PointWork]:
    """One repeat's points of ``workload``: each listed level in order."""
    return [_point(name, workload, level) for level in workload.levels]


def _point(name: str, workload: Workload, level: float) -> PointWork:
    measured = workload.prompts_at(level)
    warmup = workload.warmup_at(level)
    turns = workload.multi_turn
    if workload.trace is not None:
        measured = len(_window(workload))
        warmup = min(warmup, measured)
    elif turns is not None:
        measured = turns.conversations(measured) * turns.turns
        warmup = turns.conversations(warmup) * turns.turns
    primers = _primers(workload, measured)
    return PointWork(name, level, workload.open_loop, measured, warmup, primers)


def _primers(workload: Workload, measured: int) -> int:
    """The groups whose system prompt a primed point sends first: those among its requests."""
    if workload.cache_state != PRIMED:
        return 0
    return len(_system_prompts(workload, measured))


def _system_prompts(workload: Workload, requests: int) -> range:
    """The shared system prompts among a point's ``requests``: a shared-prefix workload's groups, a
    multi-turn one's system prompts (none without one)."""
    shared, turns = workload.shared_prefix, workload.multi_turn
    if shared is not None:
        return range(min(shared.groups, -(-requests // shared.prompts_per_group)))
    if turns is not None and turns.system_prompt_len:
        return range(min(turns.system_prompts, turns.conversations(requests)))
    return range(0)


def search_probes(name: str, workload: Workload) -> tuple[int, PointWork | None]:
    """The most points the SLO search may add to one repeat (``search_resolution``), and the listed point
    each is timed as (the upper end of the widest gap it bisects); (0, None) without a search.

    The search bisects between a level that met the SLO and the next that did not, ``(L + F) // 2``, until
    ``F - L`` is at most the resolution; the most probes are those of the widest gap between two listed
    levels, taking the wider half each time."""
    resolution = workload.search_resolution
    levels = sorted(workload.concurrency)
    if resolution is None or workload.open_loop or len(levels) < 2:
        return 0, None
    widest = max(itertools.pairwise(levels), key=lambda pair: _probes(pair[0], pair[1], resolution))
    count = _probes(widest[0], widest[1], resolution)
    return count, (_point(name, workload, widest[1]) if count else None)


def _probes(low: int, high: int, resolution: int) -> int:
    """The probes between ``low`` (met) and ``high`` (missed) when each probe meets the SLO, the wider
    half each time (``slo.search_probe``)."""
    count = 0
    while (probe := search_probe(low, high, resolution)) is not None:
        low = probe
        count += 1
    return count


def _window(workload: Workload) -> list[TraceRequest]:
    assert workload.trace is not None
    return _window_requests(workload.trace)


@functools.lru_cache(maxsize=8)
def _window_requests(window: TraceWindow) -> list[TraceRequest]:
    """A trace window's requests, read once however many points and levels a plan times from it."""
    try:
        return load_window(window)
    except (TraceError, OSError) as exc:
        raise EstimateError(str(exc)) from None


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise EstimateError(message)


def sim_config(argv: Sequence[str]) -> SimConfig:
    """The simulator's configuration a config's ``argv`` starts (engine sim); EstimateError when the
    simulator would refuse it."""
    parser = _RaisingParser(add_help=False)
    add_sglang_arguments(parser)
    add_sim_arguments(parser)
    try:
        return resolve(parser.parse_args(list(argv)))
    except (ConfigError, ProfileError) as exc:
        raise EstimateError(str(exc)) from None


class SimPointModel:
    """Points timed by the simulator's model of one config's server (module docstring)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config

    def point_s(self, workload: Workload, point: PointWork) -> float:
        """``T(warmup) + T(primers) + T(measured)``, in the seconds of the server the config starts."""
        seconds = self._phase_s(workload, point.level, point.measured)
        if point.warmup:
            seconds += self._phase_s(workload, point.level, point.warmup)
        if point.primers:
            system = workload.shared_prefix.system_prompt_len if workload.shared_prefix else 0
            if workload.multi_turn is not None:
                system = workload.multi_turn.system_prompt_len
            in_flight = min(_in_flight(workload, point.level), point.primers)
            seconds += conversations_duration_s(
                self.config, [[system]] * point.primers, 1, in_flight, as_served=True
            )
        return seconds

    def _phase_s(self, workload: Workload, level: float, requests: int) -> float:
        if workload.trace is not None:
            whole = _window(workload)
            window = whole[:requests]
            speedup = level / own_rate(whole)
            cached = reusable_tokens(window)
            arrivals = [
                Arrival(
                    request.arrival_ms / 1000.0 / speedup, max(request.input_len - hit, 1), request.output_len
                )
                for request, hit in zip(window, cached, strict=True)
            ]
            return arrivals_duration_s(self.config, arrivals, _in_flight(workload, level), as_served=True)
        if workload.open_loop:
            inputs = _inputs(workload, requests)
            arrivals = [
                Arrival(index / level, tokens, workload.output_len) for index, tokens in enumerate(inputs)
            ]
            return arrivals_duration_s(self.config, arrivals, _in_flight(workload, level), as_served=True)
        turns = workload.multi_turn
        think_s = 0.0 if turns is None else turns.think_time_s
        conversations = (
            _conversations(workload, requests)
            if turns
            else [[tokens] for tokens in _inputs(workload, requests)]
        )
        return conversations_duration_s(
            self.config, conversations, workload.output_len, int(level), think_time_s=think_s, as_served=True
        )


def _in_flight(workload: Workload, level: float) -> int:
    """The most requests of a point in flight: the concurrency, or an open loop's bound (a replay's
    default: its whole window)."""
    if not workload.open_loop:
        return int(level)
    if workload.max_concurrency is not None:
        return workload.max_concurrency
    return len(_window(workload)) if workload.trace is not None else 1


def _inputs(workload: Workload, requests: int) -> list[int]:
    """Each request's prompt tokens the server computes: a shared-prefix group's system prompt on its
    first request alone, none once primed."""
    shared = workload.shared_prefix
    if shared is None:
        return [workload.input_len] * requests
    first = 0 if workload.cache_state == PRIMED else len(_system_prompts(workload, requests))
    return [shared.input_len if index < first else shared.question_len for index in range(requests)]


def _conversations(workload: Workload, requests: int) -> list[list[int]]:
    """Each conversation's turns, the prompt tokens the server computes of each: its first turn's user turn
    (and its system prompt, for the first conversation of each system prompt, unless primed), each later
    turn's user turn and the reply token the cache lacks."""
    turns = workload.multi_turn
    assert turns is not None
    count = turns.conversations(requests)
    first = 0 if workload.cache_state == PRIMED else len(_system_prompts(workload, requests))
    return [
        [turns.user_len + (turns.system_prompt_len if index < first else 0)]
        + [turns.user_len + 1] * (turns.turns - 1)
        for index in range(count)
    ]
