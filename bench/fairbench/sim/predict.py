"""What a closed-loop fixed-concurrency sweep against the simulator will measure, computed in virtual time.

The server's engine and scheduler run on a virtual clock with ``C`` clients that each send their next
request the moment the previous one finishes (a sweep client's overhead, typically well under a
millisecond, is taken as zero). The metrics follow ``sglang.bench_serving``: output throughput is all
output tokens over the point's duration; a request's TTFT is its first token minus its send time, its
e2e latency its last token minus its send time, its TPOT ``(latency - TTFT) / (output_len - 1)`` (none
for one output token); percentiles are numpy's linear ones over the point's requests (``percentile``).

``--sim-noise`` plays no part: a prediction is that of the noiseless server. ``--sim-time-scale`` does
when asked for (``as_served``): the times are then those the server started with the configuration
serves, the model's times the scale, as its engine runs them; without it they are the model's own.

``highest_concurrency_meeting`` finds the largest concurrency whose point meets latency limits keyed as a
campaign's ``slo:`` is (``ttft_p99_ms``), by bisection.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from statistics import mean

from fairbench.measure.workload import DEFAULT_PROMPTS_PER_LEVEL, prompts_at
from fairbench.sim.args import SimConfig
from fairbench.sim.engine import Engine, Scheduler, SimRequest, VirtualClock

LATENCY_METRICS = ("ttft", "tpot", "e2e_latency")
LIMIT_KEY = re.compile(r"^(ttft|tpot|e2e_latency)_p(\d+)_ms$")
"""A latency limit's key: the metric, the percentile (0 to 100), milliseconds (``tpot_p50_ms``)."""


def percentile(values: Sequence[float], q: float) -> float:
    """numpy's ``percentile(values, q)`` with its default ``method="linear"``; 0.0 for no values.

    With x sorted ascending and n values: v = (n - 1) * q / 100, i = floor(v), g = v - i,
    result = x[i] + (x[i+1] - x[i]) * g (x[i+1] taken as x[n-1] past the end).
    """
    ordered = sorted(values)
    if not ordered:
        return 0.0
    virtual_index = (len(ordered) - 1) * q / 100
    lower = math.floor(virtual_index)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (virtual_index - lower)


@dataclass(frozen=True, slots=True)
class PointPrediction:
    """One point, in model seconds or, predicted ``as_served``, in the server's seconds."""

    concurrency: int
    requests: int
    duration_s: float
    output_throughput: float
    mean_ttft_s: float
    mean_tpot_s: float
    ttfts_s: tuple[float, ...]
    """Every request's TTFT, in the order the requests finished."""
    tpots_s: tuple[float, ...]
    """Every request's TPOT; empty when the output is one token."""
    e2e_latencies_s: tuple[float, ...]

    def percentile_ms(self, metric: str, q: float) -> float:
        """The ``q``-th percentile of ``metric`` (``ttft``, ``tpot`` or ``e2e_latency``) in milliseconds."""
        values = {"ttft": self.ttfts_s, "tpot": self.tpots_s, "e2e_latency": self.e2e_latencies_s}
        if metric not in values:
            raise ValueError(f"no latency {metric!r}: one of {', '.join(LATENCY_METRICS)}")
        return percentile(values[metric], q) * 1000


def prompts_per_point(concurrency: int) -> int:
    """The requests of a point at the sweep's default ``prompts_per_level`` (``10x``, at least 16)."""
    return prompts_at(DEFAULT_PROMPTS_PER_LEVEL, concurrency)


class _VirtualServer:
    """The server ``config`` starts, on a virtual clock; ``time_scale`` 1.0: the model's own seconds."""

    def __init__(self, config: SimConfig, time_scale: float) -> None:
        self.clock = VirtualClock()
        model = config.model
        if model.speculation is not None:
            # A sweep's prompts are random token ids, which repeat no 3-gram: the served server gives
            # each such request the accept length of repetitiveness 0 (outputs.repetitiveness).
            speculation = replace(model.speculation, accept_length=model.speculation.accept_length_for(0.0))
            model = replace(model, speculation=speculation)
        schedulers = [Scheduler(model, config.limits) for _ in range(config.dp_size)]
        self.engine = Engine(
            schedulers, self.clock, time_scale, decode_log_interval=config.decode_log_interval
        )

    def run(self) -> float:
        """Serves until every request has finished; the clock's time then, from the first send at 0."""
        self.engine.start()
        self.clock.run()
        return self.clock.time()


class _ClosedLoop:
    """``concurrency`` clients, each sending its next request as soon as its last one finishes."""

    def __init__(self, server: _VirtualServer, input_len: int, output_len: int, num_prompts: int) -> None:
        self.clock = server.clock
        self.engine = server.engine
        self.input_len = input_len
        self.output_len = output_len
        self.unsent = num_prompts
        self.sent_at: dict[int, float] = {}
        self.first_token_at: dict[int, float] = {}
        self.ttfts: list[float] = []
        self.tpots: list[float] = []
        self.latencies: list[float] = []

    def send(self) -> None:
        self.unsent -= 1
        request = SimRequest(prompt_tokens=self.input_len, output_limit=self.output_len, sink=self)
        self.sent_at[id(request)] = self.clock.time()
        self.engine.submit(request)

    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        now = self.clock.time()
        key = id(request)
        self.first_token_at.setdefault(key, now)
        if not finished:
            return
        sent_at = self.sent_at.pop(key)
        ttft = self.first_token_at.pop(key) - sent_at
        latency = now - sent_at
        self.ttfts.append(ttft)
        self.latencies.append(latency)
        if self.output_len > 1:
            self.tpots.append((latency - ttft) / (self.output_len - 1))
        if self.unsent:
            self.send()


def predict_point(
    config: SimConfig,
    input_len: int,
    output_len: int,
    concurrency: int,
    num_prompts: int,
    *,
    as_served: bool = False,
) -> PointPrediction:
    """The point at ``concurrency`` of ``num_prompts`` requests; ``as_served``: in the seconds of the
    server ``config`` starts (``--sim-time-scale`` applied), else in the model's (the profile's own)."""
    server = _VirtualServer(config, config.time_scale if as_served else 1.0)
    loop = _ClosedLoop(server, input_len, output_len, num_prompts)
    for _ in range(min(concurrency, num_prompts)):
        loop.send()
    duration = server.run()
    return PointPrediction(
        concurrency=concurrency,
        requests=num_prompts,
        duration_s=duration,
        output_throughput=num_prompts * output_len / duration,
        mean_ttft_s=mean(loop.ttfts),
        mean_tpot_s=mean(loop.tpots) if loop.tpots else 0.0,
        ttfts_s=tuple(loop.ttfts),
        tpots_s=tuple(loop.tpots),
        e2e_latencies_s=tuple(loop.latencies),
    )


class _Conversations:
    """``concurrency`` clients, each holding one conversation at a time: its turns in order, each sent
    ``think_time_s`` after the reply to the one before ended, and the next conversation the moment its last
    turn ends. A request of its own is a conversation of one turn."""

    def __init__(
        self,
        server: _VirtualServer,
        conversations: Sequence[Sequence[int]],
        output_len: int,
        think_time_s: float,
    ) -> None:
        self.server = server
        self.conversations = conversations
        self.output_len = output_len
        self.think_time_s = think_time_s
        self.started = 0
        self.turn_of: dict[int, tuple[int, int]] = {}
        """A request in flight (by ``id``): its conversation and turn."""

    def start(self, concurrency: int) -> None:
        for _ in range(min(concurrency, len(self.conversations))):
            self._next_conversation()

    def _next_conversation(self) -> None:
        if self.started < len(self.conversations):
            self.started += 1
            self._send(self.started - 1, 0)

    def _send(self, conversation: int, turn: int) -> None:
        prompt_tokens = self.conversations[conversation][turn]
        request = SimRequest(prompt_tokens=prompt_tokens, output_limit=self.output_len, sink=self)
        self.turn_of[id(request)] = (conversation, turn)
        self.server.engine.submit(request)

    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        if not finished:
            return
        conversation, turn = self.turn_of.pop(id(request))
        if turn + 1 < len(self.conversations[conversation]):
            clock = self.server.clock
            clock.call_at(clock.time() + self.think_time_s, lambda: self._send(conversation, turn + 1))
        else:
            self._next_conversation()


def conversations_duration_s(
    config: SimConfig,
    conversations: Sequence[Sequence[int]],
    output_len: int,
    concurrency: int,
    *,
    think_time_s: float = 0.0,
    as_served: bool = False,
) -> float:
    """How long a closed loop of ``concurrency`` conversations in flight takes to send ``conversations``,
    each a list of its turns' prompt tokens that the server must compute (those its prefix cache does not
    hold), every turn ``output_len`` tokens out: from the first send to the last token. A list of
    one-turn conversations of equal lengths is ``predict_point``'s closed loop. ``as_served``: in the
    seconds of the server ``config`` starts, else in the model's."""
    server = _VirtualServer(config, config.time_scale if as_served else 1.0)
    loop = _Conversations(server, conversations, output_len, think_time_s)
    loop.start(concurrency)
    return server.run()


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request of an open loop: when it is due, from the point's start, and its lengths."""

    offset_s: float
    input_len: int
    output_len: int


class _OpenLoop:
    """Requests sent at their offsets, at most ``max_in_flight`` at once: one due while that many are in
    flight is sent the moment one of them ends, the later ones queued behind it in order."""

    def __init__(self, server: _VirtualServer, arrivals: Sequence[Arrival], max_in_flight: int) -> None:
        self.server = server
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.due: deque[Arrival] = deque()
        for arrival in arrivals:
            server.clock.call_at(arrival.offset_s, partial(self._arrive, arrival))

    def _arrive(self, arrival: Arrival) -> None:
        self.due.append(arrival)
        self._send_due()

    def _send_due(self) -> None:
        while self.due and self.in_flight < self.max_in_flight:
            arrival = self.due.popleft()
            self.in_flight += 1
            self.server.engine.submit(
                SimRequest(prompt_tokens=arrival.input_len, output_limit=arrival.output_len, sink=self)
            )

    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        if finished:
            self.in_flight -= 1
            self._send_due()


def arrivals_duration_s(
    config: SimConfig, arrivals: Sequence[Arrival], max_in_flight: int, *, as_served: bool = False
) -> float:
    """How long an open loop of ``arrivals`` takes, at most ``max_in_flight`` requests in flight: from the
    point's start (offset 0) to the last token. ``as_served`` as for ``conversations_duration_s``."""
    server = _VirtualServer(config, config.time_scale if as_served else 1.0)
    _OpenLoop(server, arrivals, max_in_flight)
    return server.run()


def parse_limit(key: str) -> tuple[str, float]:
    """The metric and the percentile of a limit's key (``ttft_p99_ms``: ``("ttft", 99.0)``)."""
    match = LIMIT_KEY.fullmatch(key)
    if match is None or int(match[2]) > 100:
        raise ValueError(
            f"{key!r}: a limit's key is <metric>_p<q>_ms, metric one of {', '.join(LATENCY_METRICS)} "
            "and q from 0 to 100"
        )
    return match[1], float(match[2])


def highest_concurrency_meeting(
    config: SimConfig,
    input_len: int,
    output_len: int,
    *,
    limits: Mapping[str, float],
    num_prompts: Callable[[int], int],
    upper: int,
) -> int | None:
    """The largest concurrency ``C`` in [1, ``upper``] whose predicted point, as served, has every limited
    percentile at most its limit (milliseconds, ``{"tpot_p99_ms": 50.0}``); None when ``C = 1`` fails.
    The point at ``C`` has ``num_prompts(C)`` requests.

    Found by bisection, which assumes that a point meeting the limits at ``C`` meets them at every lower
    concurrency: latency grows with the running batch (each decode step is ``t0 + k * b``, and more
    requests queue for each prefill). It takes 1 + ceil(log2(upper)) predictions, ~10 ms for the demo's
    workload. The answer meets the limits and ``C + 1`` does not (or ``C`` is ``upper``) whether or not the
    assumption holds; where it does not, a larger ``C`` may meet them too. It fails for the median TPOT
    between the concurrencies a sweep samples: a request's TPOT includes the prefill forwards of the
    requests admitted after it, so where ``C`` passes a multiple of the requests one forward holds the
    median request changes group, and the median can fall by a fifth from one ``C`` to the next.
    """
    if upper < 1:
        raise ValueError(f"upper: must be at least 1, got {upper}")
    parsed = []
    for key, limit in limits.items():
        if not math.isfinite(limit):
            raise ValueError(f"{key}: the limit must be a finite number of milliseconds, got {limit}")
        parsed.append((*parse_limit(key), limit))

    def meets(concurrency: int) -> bool:
        point = predict_point(
            config, input_len, output_len, concurrency, num_prompts(concurrency), as_served=True
        )
        return all(point.percentile_ms(metric, q) <= limit for metric, q, limit in parsed)

    if not meets(1):
        return None
    # meets(low) holds; high is the lowest concurrency known to fail, or upper + 1.
    low, high = 1, upper + 1
    while high - low > 1:
        middle = (low + high) // 2
        if meets(middle):
            low = middle
        else:
            high = middle
    return low


def default_concurrencies(config: SimConfig) -> list[int]:
    """1, 2, 4, ... up to the server's total running-request capacity."""
    capacity = config.limits.max_running_requests * config.dp_size
    levels = [1]
    while levels[-1] * 2 <= capacity:
        levels.append(levels[-1] * 2)
    return levels


def predict_sweep(config: SimConfig, input_len: int, output_len: int) -> list[PointPrediction]:
    """``--sim-predict``: the points of a sweep at ``default_concurrencies``, as the server serves them."""
    return [
        predict_point(
            config, input_len, output_len, concurrency, prompts_per_point(concurrency), as_served=True
        )
        for concurrency in default_concurrencies(config)
    ]


def format_sweep(config: SimConfig, input_len: int, output_len: int, points: list[PointPrediction]) -> str:
    peak = max(points, key=lambda point: point.output_throughput)
    limits = config.limits
    lines = [
        f"profile {config.profile.name}, layout {config.model.layout}, dp {config.dp_size}: closed loop, "
        f"input {input_len}, output {output_len}, max running {limits.max_running_requests} per dp rank, "
        f"chunked prefill {limits.chunked_prefill_size}, "
        f"{limits.decode_steps_per_round} decode steps per round, time scale {config.time_scale:g}",
        f"{'concurrency':>11} {'output tok/s':>12} {'mean TTFT ms':>12} {'mean TPOT ms':>12}",
    ]
    lines += [
        f"{point.concurrency:>11} {point.output_throughput:>12.1f} "
        f"{point.mean_ttft_s * 1000:>12.1f} {point.mean_tpot_s * 1000:>12.2f}"
        for point in points
    ]
    lines.append(f"peak {peak.output_throughput:.1f} tok/s at concurrency {peak.concurrency}")
    return "\n".join(lines)
