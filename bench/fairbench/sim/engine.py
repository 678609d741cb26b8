"""Continuous batching: the scheduler that decides each forward, and the engine that times them.

The scheduler works in *rounds*, each one forward pass or a few back-to-back decode steps:

* A **prefill round** admits waiting requests (first come, first served) while running + admitted stays
  within ``max_running_requests`` and their input fits in one ``chunked_prefill_size`` forward (a single
  longer input is admitted alone and takes several forwards). It costs ``prefill_seconds`` and gives
  each admitted request its first token. Prefill takes priority over decoding, as in SGLang without
  ``--enable-mixed-chunk``: running requests wait while newcomers are prefilled. Only the prompt tokens
  the prefix cache does not hold are computed (and count against ``chunked_prefill_size``).
* A **prebuilt round** (a disaggregated decode server's): requests whose KV a prefill server computed
  (``SimRequest.prefilled``) join the running batch at the next round boundary at no cost, each with
  its first token, as SGLang's decode scheduler runs a prebuilt batch without a forward.
* A **decode round** runs ``num_continuous_decode_steps`` steps over the running batch as it stood at
  the round's start; each step costs ``t(b)`` and gives every unfinished request one token. Under
  speculative decoding each step is a verify step that gives the request its own mean accepted length
  (``SimRequest.accept_length``, from its prompt), carried as a fraction so the average is exact; the
  request counts its verify steps and accepted drafts as SGLang's ``Req`` does (``spec_verify_ct``,
  ``spec_num_correct_drafts``, the histogram of drafts accepted per step). Requests join and leave only
  between rounds; one that reaches its length mid-round still occupies its batch slot until the round
  ends.

At the end of a round tokens are handed to each request's sink following SGLang's streaming rule
(``OutputStreamer.accept``): always when the request finished, else every round when
``--stream-interval`` is 1, else its first token at once and then whenever at least ``stream_interval``
tokens are unsent. So with ``num_continuous_decode_steps = n`` tokens leave in chunks of ``n``.

The engine runs the rounds on a clock: an asyncio loop for the server, a virtual clock for
``predict``, with the same code. Round ``i + 1`` is scheduled from round ``i``'s *scheduled* end, not
from when its callback actually ran, so a late event loop never stretches the modelled timeline; the
lateness is recorded as schedule lag and reported in ``/metrics``.

With ``--sim-noise PCT`` the machine's speed drifts between *busy periods*, as a real GPU server's does
from run to run: each period runs every round at ``seconds * time_scale * f``, with ``f`` drawn once at
its start from a normal distribution of mean 1 and standard deviation ``PCT / 100``, clipped to
[0.5, 1.5]. A busy period begins when a counted request arrives at an engine that has been idle (nothing
running, nothing waiting) for at least ``BUSY_PERIOD_GAP_S``, and ends when the engine is idle again. A
closed-loop benchmark point keeps the engine busy from its first request to its last, so it runs at one
``f``, and the coefficient of variation of its throughput is about PCT %; the pause of the client
between two points, or between a point's warmup and its measurement, starts another period. The
health check's probe never draws: it runs at the factor in use.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fairbench.sim.model import PerformanceModel
from fairbench.sim.prefix_cache import PrefixCache, prefix_keys


class TokenSink(Protocol):
    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        """``tokens`` new tokens of ``request`` leave now; ``finished`` when they are its last."""


@dataclass(slots=True, eq=False)
class SimRequest:
    prompt_tokens: int
    output_limit: int
    """Tokens it generates before it finishes (by length or by its simulated EOS)."""
    sink: TokenSink
    prompt: Sequence[Hashable] | None = None
    """The prompt's tokens as the prefix cache keys them; None: the request is not cached."""
    cached_tokens: int = 0
    """Leading prompt tokens the prefix cache held at admission: the prefill computes only the rest."""
    cache_keys: list[int] | None = None
    """The prompt's prefix keys, from admission until its prefill has inserted them (until it finishes,
    where its ``output`` is cached too)."""
    output: Callable[[int], Sequence[Hashable]] | None = None
    """Its first N output tokens as the prefix cache keys them; None: its output is not cached."""
    counted: bool = True
    """False for the health check's probe, which SGLang keeps out of its metrics."""
    prefilled: bool = False
    """Its KV came from a disaggregated prefill server (a decode server's request): admission computes
    nothing and takes its ``cached_tokens`` as the prefill reported them; the round that admits it hands
    it its first token, the one the prefill sampled (SGLang's prebuilt batch)."""
    admitted: bool = False
    """Taken from the queue into a prefill: from then on it holds KV cache, and ended early it still
    counts as a finished request in SGLang's metrics (one aborted while it waits does not)."""
    submitted_at: float = 0.0
    """When the engine queued it, on the engine's clock."""
    queue_s: float = 0.0
    """Seconds from its submission to the start of its prefill (SGLang's ``queue_time``)."""
    generated: int = 0
    sent: int = 0
    accept_length: float = 0.0
    """Mean tokens a verify step yields it under speculative decoding; 0: the model's mean."""
    spec_credit: float = 0.0
    spec_verify_ct: int = 0
    """Verify steps it took part in (SGLang's ``Req.spec_verify_ct``; the prefill's token is none)."""
    spec_correct_drafts: int = 0
    """Draft tokens its verify steps accepted, the bonus token of each not counted, nor tokens past its
    length cut off (SGLang's ``spec_num_correct_drafts``)."""
    spec_histogram: list[int] = field(default_factory=list)
    """Its verify steps by drafts accepted: entry i counts the steps that accepted i."""
    aborted: bool = False


@dataclass(slots=True)
class Round:
    admitted: list[SimRequest]
    """The requests this prefill round admits; empty for a decode round."""
    batch: list[SimRequest]
    """The running batch this decode round steps; empty for a prefill round."""
    steps: int
    seconds: float
    cache_hit_rate: float | None = None
    """The share of a prefill round's prompt tokens that the prefix cache served; None for a round that
    computed no prompt (only ``prefilled`` requests: SGLang logs no prefill for a prebuilt batch)."""


@dataclass(slots=True)
class SchedulerLimits:
    max_running_requests: int
    chunked_prefill_size: int
    """Input tokens one prefill forward takes; 0 or less: unlimited (``--chunked-prefill-size -1``)."""
    decode_steps_per_round: int
    stream_interval: int


class Scheduler:
    """One data-parallel replica's request queue and running batch."""

    def __init__(
        self, model: PerformanceModel, limits: SchedulerLimits, prefix_cache: PrefixCache | None = None
    ) -> None:
        self.model = model
        self.limits = limits
        self.prefix_cache = prefix_cache
        """Each data-parallel replica has its own, as each SGLang scheduler has its own radix cache."""
        self._prefilled_keys: list[list[int]] = []
        """Prompts whose prefill is done, inserted into the cache before the next admission looks."""
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_finished = 0
        self.cache_hit_rate = 0.0
        """SGLang's ``cache_hit_rate`` gauge: the last prefill round's (``Round.cache_hit_rate``)."""
        self.round_accepted = 0
        """The last decode round's tokens as SGLang's spec metrics count them: every verify step's
        accepted run whole, past a request's length too (``num_correct_drafts + bs``)."""
        self.round_request_steps = 0
        """The last decode round's steps summed over its requests (verify steps under speculation)."""

    def submit(self, request: SimRequest) -> None:
        self.waiting.append(request)

    @property
    def num_waiting(self) -> int:
        return sum(1 for request in self.waiting if not request.aborted)

    def plan_round(self) -> Round | None:
        """The next forward: a prefill if anyone waits and a slot is free, else a decode round."""
        limits = self.limits
        self.running = [request for request in self.running if not request.aborted]
        admitted: list[SimRequest] = []
        tokens = prompt_tokens = 0
        if self.waiting and self._prefilled_keys:
            self._insert_prefilled()
        while self.waiting and len(self.running) + len(admitted) < limits.max_running_requests:
            candidate = self.waiting[0]
            if candidate.aborted:
                self.waiting.popleft()
                continue
            if candidate.prefilled:
                self.waiting.popleft()
                candidate.admitted = True
                admitted.append(candidate)
                continue
            cached = 0
            if self.prefix_cache is not None and candidate.prompt is not None:
                if candidate.cache_keys is None:
                    candidate.cache_keys = prefix_keys(candidate.prompt)
                cached = self.prefix_cache.match(candidate.cache_keys)
            extend = candidate.prompt_tokens - cached
            if admitted and 0 < limits.chunked_prefill_size < tokens + extend:
                break
            self.waiting.popleft()
            candidate.admitted = True
            candidate.cached_tokens = cached
            admitted.append(candidate)
            tokens += extend
            prompt_tokens += candidate.prompt_tokens
        if admitted:
            if all(request.prefilled for request in admitted):
                return Round(admitted, [], 0, 0.0)
            forwards = -(-tokens // limits.chunked_prefill_size) if limits.chunked_prefill_size > 0 else 1
            hit_rate = (prompt_tokens - tokens) / prompt_tokens
            return Round(admitted, [], 0, self.model.prefill_seconds(tokens, forwards), hit_rate)
        if self.running:
            steps = limits.decode_steps_per_round
            return Round(
                [], list(self.running), steps, steps * self.model.decode_step_seconds(len(self.running))
            )
        return None

    def finish_round(self, finished_round: Round) -> int:
        """Apply a round's tokens and hand them to the sinks; returns the tokens generated.

        The simulator's hot loop, one pass per running request per round: hence one function, locals.
        """
        prefill = bool(finished_round.admitted)
        steps = finished_round.steps
        speculative = self.model.speculation is not None and not prefill
        whole_tokens = 0 if speculative else steps
        interval = self.limits.stream_interval
        generated = counted_prompt = counted_generated = 0
        accepted = request_steps = 0
        still_running = []
        for request in finished_round.admitted or finished_round.batch:
            if request.aborted:
                continue
            if prefill:
                gained = 1
            elif whole_tokens:
                gained = whole_tokens
                accepted += gained
                request_steps += steps
            else:
                gained, used = self._verify(request, steps)
                accepted += gained
                request_steps += used
            room = request.output_limit - request.generated
            finished = gained >= room
            if finished:
                gained = room
            request.generated += gained
            generated += gained
            if request.counted:
                counted_generated += gained
                counted_prompt += request.prompt_tokens if prefill else 0
                self.requests_finished += finished
            # SGLang's OutputStreamer.accept: always at the end, else every step at interval 1, else the
            # first token at once and then whenever at least `interval` tokens are unsent.
            unsent = request.generated - request.sent
            if finished or interval == 1 or unsent >= interval or request.sent == 0:
                request.sent = request.generated
                request.sink.deliver(request, unsent, finished)
            if not finished:
                still_running.append(request)
            elif self.prefix_cache is not None:
                self._cache_finished(request)
        if prefill:
            self.running += still_running
            self._cache_prompts(finished_round.admitted)
            if finished_round.cache_hit_rate is not None:
                self.cache_hit_rate = finished_round.cache_hit_rate
        else:
            self.running = still_running
        self.prompt_tokens_total += counted_prompt
        self.generation_tokens_total += counted_generated
        if not prefill:
            self.round_accepted = accepted
            self.round_request_steps = request_steps
        return generated

    def _verify(self, request: SimRequest, steps: int) -> tuple[int, int]:
        """Up to ``steps`` verify steps of ``request``, until it has its length: (tokens accepted, steps
        taken). Each accepts the integer part of the carried credit plus its mean, so the mean comes out
        exact and a step never accepts more than the draft tokens verified."""
        accept = request.accept_length or self.model.tokens_per_step
        room = request.output_limit - request.generated
        credit = request.spec_credit
        histogram = request.spec_histogram
        gained = used = 0
        while used < steps and gained < room:
            credit += accept
            step_tokens = int(credit)
            credit -= step_tokens
            used += 1
            gained += step_tokens
            drafts = step_tokens - 1
            request.spec_correct_drafts += drafts
            if len(histogram) <= drafts:
                histogram.extend([0] * (drafts + 1 - len(histogram)))
            histogram[drafts] += 1
        request.spec_credit = credit
        request.spec_verify_ct += used
        return gained, used

    def _cache_prompts(self, prefilled: list[SimRequest]) -> None:
        """A finished prefill's prompts are due for the prefix cache. They are inserted when the next
        admission matches, which sees the same cache, so the cost falls inside a modelled prefill and not
        on the moment a round's tokens leave."""
        for request in prefilled:
            if request.cache_keys is not None:
                self._prefilled_keys.append(request.cache_keys)
                if request.output is None:
                    request.cache_keys = None

    def _cache_finished(self, request: SimRequest) -> None:
        """A finished request's prompt and output, but its last token, are due for the prefix cache."""
        if request.cache_keys is not None and request.output is not None:
            output = request.output(request.generated - 1)
            self._prefilled_keys.append(prefix_keys(output, request.cache_keys))
            request.cache_keys = None

    def _insert_prefilled(self) -> None:
        if self.prefix_cache is not None:
            for keys in self._prefilled_keys:
                self.prefix_cache.insert(keys)
        self._prefilled_keys.clear()

    def flush_prefix_cache(self) -> None:
        self._prefilled_keys.clear()
        if self.prefix_cache is not None:
            self.prefix_cache.clear()


class Clock(Protocol):
    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> None: ...


class VirtualClock:
    """Time that jumps from event to event: a whole sweep runs in the time it takes to compute it."""

    def __init__(self) -> None:
        self.now = 0.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._order), callback))

    def run(self) -> None:
        while self._events:
            self.now, _, callback = heapq.heappop(self._events)
            callback()


SPEED_FACTOR_RANGE = (0.5, 1.5)
"""Where ``--sim-noise``'s draws are clipped: a normal draw can be negative (a machine that runs backwards)
or arbitrarily slow; half or one and a half times the model's speed is already far outside run-to-run
variation on one machine."""

BUSY_PERIOD_GAP_S = 0.005
"""How long the engine must have been idle, in clock seconds, for a counted request to start a new busy
period. Without it every request of a point at concurrency 1, and every wave of a point whose requests
all end in one round, would start a period of its own while the client turns round, and the point would
average many draws. Against the demo's configuration on two cores, ``fairbench sweep`` turned round
within a point in 1-2.5 ms, rarely up to 6 ms (up to 12 ms with both cores busy elsewhere), and paused at
least 8 ms between two points or a point's warmup and its measurement (its bookkeeping, a
``/server_info`` query, a garbage collection). Too long a gap would let points share a factor, which
hides the variation between them; too short a one splits a point now and then, which only narrows it."""


@dataclass(slots=True)
class SpeedNoise:
    """``--sim-noise``: the source of each busy period's speed factor."""

    sd: float
    """The factor's standard deviation before clipping: ``PCT / 100``."""
    rng: random.Random

    def draw(self) -> float:
        low, high = SPEED_FACTOR_RANGE
        return min(high, max(low, self.rng.gauss(1.0, self.sd)))


def speed_noise(pct: float, seed: int | None) -> SpeedNoise | None:
    """The noise of ``--sim-noise pct``, None for 0 (every round at the model's time exactly). The draws
    follow ``--sim-seed`` when one is given, so a server's sequence of factors repeats; else they come
    from the OS's entropy, so fresh servers differ as fresh runs on a real machine do."""
    if pct == 0:
        return None
    # A seed of its own, so the factors do not move in step with the http-500-rate fault's draws.
    return SpeedNoise(pct / 100, random.Random(None if seed is None else f"sim-noise {seed}"))


@dataclass(slots=True)
class _DecodeLogWindow:
    """SGLang's decode log interval: every ``decode_log_interval`` decode rounds a scheduler reports its
    generation throughput over them (``gen_throughput``) and the tokens a request gained per decode step
    in them (``spec_accept_length``, meaningful under speculative decoding)."""

    interval_rounds: int
    rounds: int = 0
    tokens: int = 0
    accepted: int = 0
    request_steps: int = 0
    since: float = 0.0
    tokens_per_s: float = 0.0
    accept_length: float = 0.0
    total_accepted: int = 0
    total_request_steps: int = 0
    """The intervals' sums since start-up, added as each interval ends (SGLang's
    ``spec_total_num_accept_tokens`` and ``spec_total_num_forward_ct``)."""

    def record(self, now: float, tokens: int, accepted: int, request_steps: int) -> None:
        self.rounds += 1
        self.tokens += tokens
        self.accepted += accepted
        self.request_steps += request_steps
        if self.rounds >= self.interval_rounds:
            if now > self.since:
                self.tokens_per_s = self.tokens / (now - self.since)
            if self.request_steps:
                self.accept_length = self.accepted / self.request_steps
            self.total_accepted += self.accepted
            self.total_request_steps += self.request_steps
            self.rounds = self.tokens = self.accepted = self.request_steps = 0
            self.since = now

    @property
    def average_accept_length(self) -> float | None:
        """``avg_spec_accept_length``: over every interval ended so far; None before the first."""
        return self.total_accepted / self.total_request_steps if self.total_request_steps else None


@dataclass(slots=True)
class _Replica:
    rank: int
    """Its data-parallel rank."""
    scheduler: Scheduler
    decode_log: _DecodeLogWindow
    current: Round | None = None
    scheduled_end: float = 0.0


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What one data-parallel replica's scheduler reports in SGLang's gauges, as of now."""

    running: int
    """Requests in its running batch (not those in a prefill forward, nor those waiting)."""
    waiting: int
    kv_tokens: int
    """KV cache its requests hold: prompt plus generated tokens of the running batch and the prefill in
    flight (a prefix shared by several requests counts once per request)."""
    gen_throughput: float
    cache_hit_rate: float
    spec_accept_length: float
    """The mean tokens per request and decode step of its last decode log interval; 0 without
    speculative decoding, as SGLang reports it."""
    avg_spec_accept_length: float | None = None
    """The same over every decode log interval ended since start-up; None without speculative decoding
    or before the first interval ends (SGLang then leaves ``avg_spec_accept_length`` out)."""


@dataclass(slots=True)
class ScheduleLag:
    """How late round ends ran relative to the model's timeline, in seconds of real time."""

    rounds: int = 0
    total_s: float = 0.0
    max_s: float = 0.0

    def record(self, lag_s: float) -> None:
        self.rounds += 1
        self.total_s += lag_s
        self.max_s = max(self.max_s, lag_s)

    @property
    def mean_s(self) -> float:
        return self.total_s / self.rounds if self.rounds else 0.0


@dataclass(slots=True)
class Engine:
    """Runs each replica's rounds on ``clock``; durations are the model's times ``time_scale``, times the
    busy period's speed factor under ``noise``."""

    schedulers: list[Scheduler]
    clock: Clock
    time_scale: float = 1.0
    decode_log_interval: int = 40
    noise: SpeedNoise | None = None
    on_queue_exit: Callable[[int, float], None] | None = None
    """Called as each request leaves a replica's queue into a prefill, the health check's probe included,
    with the replica's data-parallel rank and the request's ``queue_s`` (SGLang's ``observe_queue_time``)."""
    speed_factor: float = field(init=False, default=1.0)
    """The busy period's factor on every round's duration; 1 until ``noise`` draws one."""
    speed_draws: int = field(init=False, default=0)
    """Busy periods that drew a factor."""
    lag: ScheduleLag = field(init=False, default_factory=ScheduleLag)
    started: bool = field(init=False, default=False)
    halted: bool = field(init=False, default=False)
    _replicas: list[_Replica] = field(init=False)
    _next_replica: int = field(init=False, default=0)
    _output_waiters: list[Callable[[], None]] = field(init=False, default_factory=list)
    _idle_since: float | None = field(init=False, default=-math.inf)
    """When the last busy period ended; None while one lasts."""

    def __post_init__(self) -> None:
        self._replicas = [
            _Replica(rank, scheduler, _DecodeLogWindow(self.decode_log_interval))
            for rank, scheduler in enumerate(self.schedulers)
        ]

    def start(self) -> None:
        """Loading is over: begin running whatever has queued up."""
        self.started = True
        for replica in self._replicas:
            replica.decode_log.since = self.clock.time()
            self._begin(replica, self.clock.time())

    def halt(self) -> None:
        """A hung GPU: no round ever ends again; connections stay open with no more tokens."""
        self.halted = True

    def submit(self, request: SimRequest) -> None:
        """Queue ``request`` on the next replica in turn (SGLang's round-robin DP dispatch)."""
        if request.counted and self._idle_since is not None:
            self._begin_busy_period(self._idle_since)
        replica = self._replicas[self._next_replica]
        self._next_replica = (self._next_replica + 1) % len(self._replicas)
        now = self.clock.time()
        request.submitted_at = now
        replica.scheduler.submit(request)
        if self.started and replica.current is None:
            # Read once: a request that finds its replica idle waits exactly 0 s.
            self._begin(replica, max(now, replica.scheduled_end))

    def abort(self, request: SimRequest) -> None:
        """The client went away: the request leaves the queue or batch at the next round boundary."""
        request.aborted = True

    def stop(self, request: SimRequest) -> bool:
        """``/abort_request``, as SGLang's scheduler takes it: a request still queued leaves at once (True);
        one that has left the queue ends after one more token (False), as its ``to_finish`` ends it after
        the next forward."""
        if request.admitted:
            request.output_limit = min(request.output_limit, request.generated + 1)
            return False
        self.abort(request)
        return True

    def flush_prefix_caches(self) -> None:
        """``/flush_cache``: every replica forgets its cached prefixes."""
        for replica in self._replicas:
            replica.scheduler.flush_prefix_cache()

    def on_next_output(self, waiter: Callable[[], None]) -> None:
        """Call ``waiter`` once, when the next round that produced tokens ends (the health check)."""
        self._output_waiters.append(waiter)

    @property
    def num_running(self) -> int:
        return sum(len(replica.scheduler.running) for replica in self._replicas)

    @property
    def num_waiting(self) -> int:
        return sum(replica.scheduler.num_waiting for replica in self._replicas)

    @property
    def prompt_tokens_total(self) -> int:
        return sum(replica.scheduler.prompt_tokens_total for replica in self._replicas)

    @property
    def generation_tokens_total(self) -> int:
        return sum(replica.scheduler.generation_tokens_total for replica in self._replicas)

    @property
    def requests_finished(self) -> int:
        return sum(replica.scheduler.requests_finished for replica in self._replicas)

    def replica_loads(self) -> list[ReplicaLoad]:
        """Each replica's gauges, in data-parallel rank order."""
        return [self._load(replica) for replica in self._replicas]

    @staticmethod
    def _load(replica: _Replica) -> ReplicaLoad:
        scheduler = replica.scheduler
        prefilling = replica.current.admitted if replica.current is not None else []
        running = [request for request in scheduler.running if not request.aborted]
        return ReplicaLoad(
            running=len(running),
            waiting=scheduler.num_waiting,
            kv_tokens=sum(
                request.prompt_tokens + request.generated
                for request in (*running, *prefilling)
                if not request.aborted
            ),
            gen_throughput=replica.decode_log.tokens_per_s,
            cache_hit_rate=scheduler.cache_hit_rate,
            spec_accept_length=replica.decode_log.accept_length if scheduler.model.speculation else 0.0,
            avg_spec_accept_length=(
                replica.decode_log.average_accept_length if scheduler.model.speculation else None
            ),
        )

    def _begin_busy_period(self, idle_since: float) -> None:
        self._idle_since = None
        if self.noise is not None and self.clock.time() - idle_since >= BUSY_PERIOD_GAP_S:
            self.speed_factor = self.noise.draw()
            self.speed_draws += 1

    def _begin(self, replica: _Replica, start: float) -> None:
        planned = replica.scheduler.plan_round()
        replica.current = planned
        replica.scheduled_end = start
        if planned is None:
            # A probe run while idle leaves the last busy period ended when it was.
            if self._idle_since is None and all(
                other.current is None and not other.scheduler.waiting for other in self._replicas
            ):
                self._idle_since = start
            return
        for request in planned.admitted:
            request.queue_s = max(0.0, start - request.submitted_at)
            if self.on_queue_exit is not None:
                self.on_queue_exit(replica.rank, request.queue_s)
        replica.scheduled_end = start + planned.seconds * self.time_scale * self.speed_factor
        self.clock.call_at(replica.scheduled_end, lambda: self._end(replica))

    def _end(self, replica: _Replica) -> None:
        if self.halted:
            return
        finished_round = replica.current
        assert finished_round is not None, "a round ended that was never begun"
        self.lag.record(max(0.0, self.clock.time() - replica.scheduled_end))
        tokens = replica.scheduler.finish_round(finished_round)
        if finished_round.batch:
            scheduler = replica.scheduler
            replica.decode_log.record(
                replica.scheduled_end, tokens, scheduler.round_accepted, scheduler.round_request_steps
            )
        if tokens and self._output_waiters:
            waiters, self._output_waiters = self._output_waiters, []
            for waiter in waiters:
                waiter()
        self._begin(replica, replica.scheduled_end)
