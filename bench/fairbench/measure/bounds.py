"""The ranges a real run can have, for every number a campaign file or a command line takes, and the
characters no value that reaches a systemd unit may hold.

Each bound is defined once here; the campaign checks and the command-line parsers read the same
``Bound``, so a value ``fairbench validate`` accepts is one ``fairbench sweep`` accepts too. The limits
are wide (a real run sits far inside them) but finite: beyond them a value is a typo (``1e23``) that would
otherwise become a server launched with nonsense, a sweep that never ends, or an allocation that fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Context, Decimal


@dataclass(frozen=True)
class Bound:
    """A closed range ``[low, high]`` and what its values count, for messages."""

    low: int | float
    high: int | float
    unit: str
    """What a value counts (``tokens``, ``seconds``): the message says ``at most 10000000 tokens``."""
    integer: bool = True

    def problem(self, value: object) -> str | None:
        """Why ``value`` is outside the bound (or not a number of its kind), or None when it fits."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be {self.describe()}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if self.integer and not isinstance(value, int):
            return f"must be {self.describe()}, got {value}"
        if not self.low <= value <= self.high:
            return f"must be {self.describe()}, got {_shown(value)}"
        return None

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        return f"{kind} from {_number(self.low)} to {_number(self.high)} {self.unit}"


def _shown(value: int | float) -> str:
    """A value short enough for a message; a large integer through Decimal, as a float cannot hold one
    such as 10**400."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if abs(value) < 10**15 else f"{Decimal(value).normalize(Context(prec=6)):g}"


def _number(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


GPUS = Bound(1, 4096, "GPUs")
"""A parallel size (tp, ep, pp, dp) or a GPU count: the largest multi-node deployments use hundreds."""
NODES = Bound(1, 64, "hosts")
"""Hosts one server spans (SGLang's ``--nnodes``): the largest deployments span tens of 8-GPU hosts."""
ROLE_SERVERS = Bound(1, 64, "servers")
"""Prefill or decode servers of one disaggregated config: more than a host's GPUs is a mistake already."""
GPU_INDEX = Bound(0, 4095, "(an NVML index)")
RUNNING_REQUESTS = Bound(1, 1_000_000, "requests")
"""A server's cap on requests in flight (max-running-requests)."""
TOKENS = Bound(1, 10_000_000, "tokens")
"""A prompt or output length: the longest context windows hold 10M tokens."""
VOCABULARY = Bound(1, 16_777_216, "token ids")
"""Vocabulary sizes are below 2^18 today; 2^24 leaves room."""
CONCURRENCY = Bound(1, 100_000, "requests in flight")
PREFIX_GROUPS = Bound(1, 1_000_000, "groups")
"""A shared-prefix workload's system prompts: sglang.bench_serving's ``--gsp-num-groups`` (default 64)."""
PROMPTS_PER_GROUP = Bound(1, 10_000_000, "prompts")
"""Requests per shared system prompt: at most a level's requests."""
REQUESTS = Bound(0, 10_000_000, "requests")
"""Prompts or warmup requests at one level, after ``Nx`` is multiplied out."""
COUNT_FACTOR = Bound(0, 10_000, "times the concurrency", integer=False)
"""N of an ``Nx`` request count."""
REPEATS = Bound(1, 1_000, "repeats")
CLIENT_PROCESSES = Bound(1, 1_024, "processes")
METRICS_INTERVAL_S = Bound(0.05, 60, "seconds", integer=False)
"""Between two scrapes of the server's /metrics during a point: 20 a second at most, one a minute at least."""
AUTO_REPEATS = Bound(2, 1_000, "repeats")
"""The least and the most of automatic repeats: one repeat has no interval to judge, and REPEATS' most."""
HALF_WIDTH_PCT = Bound(0.01, 100, "percent of the mean", integer=False)
"""Automatic repeats' target: the 95 % interval's half-width. No throughput is steadier than ±0.01 %
(every level would run to its most repeats); beyond ±100 % the interval says nothing."""
MARGIN_PCT = Bound(0.01, 100, "percent of the lower mean", integer=False)
"""The verdict's margin, the smallest difference that matters (``decision``): below ±0.01 % no two configs
are ever equivalent; beyond 100 % nothing is ever ahead."""
SEARCH_RESOLUTION = Bound(1, 100_000, "requests in flight")
"""How close the search brings the last concurrency level meeting the SLO and the first that does not: at
most CONCURRENCY's range."""
REQUEST_RATE = Bound(0.001, 1_000_000, "requests per second", integer=False)
"""An open loop's target arrival rate: below one request in 1,000 s a level of 16 prompts lasts over four
hours; a million a second is more than one client process sends."""
SPEEDUP = Bound(0.001, 1_000, "(times as fast as recorded)", integer=False)
"""A trace replay's speedup: a thousand times slower makes a second of trace a quarter of an hour, a
thousand times faster a second's requests a millisecond's."""
TRACE_SECONDS = Bound(0.0, 366 * 24 * 3600.0, "seconds", integer=False)
"""Where a trace replay's window starts, in seconds of the trace: the public traces span hours to weeks."""
TRACE_DURATION_S = Bound(0.001, 366 * 24 * 3600.0, "seconds", integer=False)
"""How long a trace replay's window lasts: at least a millisecond (a trace's resolution), at most a year."""
TRACE_REQUESTS = Bound(2, 10_000_000, "requests")
"""The most requests of a trace replayed: at least two (a rate needs a span); REQUESTS's largest."""
TURNS = Bound(1, 1_000, "turns")
"""The turns of a multi-turn conversation."""
THINK_TIME_S = Bound(0.0, 3600.0, "seconds", integer=False)
"""The pause between a multi-turn conversation's reply and its next turn."""
SYSTEM_PROMPTS = Bound(1, 1_000_000, "system prompts")
"""The distinct system prompts of a multi-turn workload's conversations."""
SYSTEM_PROMPT_TOKENS = Bound(0, 10_000_000, "tokens")
"""A multi-turn conversation's system prompt: none (0) up to TOKENS's largest."""
BURSTINESS = Bound(0.001, 1_000, "(a gamma shape)", integer=False)
"""Gamma arrivals' shape: the gaps' coefficient of variation is 1 / sqrt(shape), from 31.6 (nearly every
request in one burst) to 0.03 (nearly even gaps); beyond, a typo."""
PROBES = Bound(0, 10_000, "prompts")
"""Probes each server start answers (``answers.probes``); 0: none."""
PERCENT_POINTS = Bound(0.0, 100.0, "percentage points", integer=False)
"""A drop in a score that is itself a percentage (``accuracy.max_drop_pct``)."""
SEED = Bound(0, 2**32 - 1, "(a 32-bit seed)")
"""numpy and SGLang's ``random-seed`` take 32-bit seeds."""
START_TIMEOUT_S = Bound(1, 7 * 24 * 3600, "seconds")
"""Loading the largest models from a cold disk takes an hour; a week is surely a typo."""
EXPECTED_START_S = Bound(0.0, 7 * 24 * 3600.0, "seconds", integer=False)
"""How long a server is expected to take to start, for the plan: at most what a start may take."""
CONNECT_TIMEOUT_S = Bound(0.001, 3600.0, "seconds", integer=False)
READ_TIMEOUT_S = Bound(0.001, 86_400.0, "seconds", integer=False)
SHARE = Bound(0.0, 1.0, "(a share)", integer=False)
"""A ratio such as ``--range-ratio`` or ``--max-error-rate``."""

UNIT_LINE_ENDS = ("\n", "\r", "\0")
"""Characters systemd's unit parser ends a line at (NUL included): a value holding one could add a
directive to the unit it is written into."""


def unit_text_problem(text: str) -> str | None:
    """Why ``text`` may not be written into a systemd unit, or None."""
    for character in UNIT_LINE_ENDS:
        if character in text:
            return f"holds {character!r}, which ends a line in a systemd unit"
    return None


PORT = Bound(1, 65_535, "(a TCP port)")
TIME_SCALE = Bound(0.0001, 10_000.0, "(a factor)", integer=False)
"""``fairbench sim --sim-time-scale``: below 0.0001 a decode step is shorter than a timer resolves."""
SIM_DELAY_S = Bound(0.0, 7 * 24 * 3600.0, "seconds", integer=False)
"""A wait the simulator plays (model loading, the slow-start fault): at most what a start may take."""
DECODE_STEPS = Bound(1, 10_000_000, "decode steps")
"""Decode steps per scheduling round, draft steps, or steps between log lines: a step yields a token."""
KV_TOKENS = Bound(1, 1_000_000_000, "tokens")
"""A server's KV cache pool (max-total-tokens): a node of today's largest GPUs holds tens of millions."""
HIDDEN_SIZE = Bound(1, 131_072, "(a model's hidden size)")
"""The largest models have hidden sizes of 16,384 to 25,600."""
COLLECTIVES = Bound(1, 1_000_000, "all-reduces")
"""``fairbench nccl``'s warmup, timed or graph-captured all-reduces per message size."""
