"""Fault switches for reliability tests: ``--sim-fault NAME=VALUE[,NAME=VALUE...]`` (repeatable).

=================  ========================================================================================
crash-after=N      the process exits with status 1 when generation request N+1 arrives: the first N run,
                   every stream still open is cut off, nothing more is answered (a crashed server).
hang-after=N       when generation request N+1 arrives the engine stops for good: every stream stays open
                   and receives no more tokens, new requests are accepted and never answered, and
                   ``/health_generate`` answers 503 after its timeout (a hung GPU).
http-500-rate=P    each generation request is answered, with probability P (seeded by ``--sim-seed``),
                   by SGLang's HTTP 500 error body instead of being served.
malformed-every=N  every N-th streamed event, counted over all streams, is cut off in the middle of its
                   JSON (its tokens are lost), so a client must detect and report the broken line.
slow-start=S       ``/health`` and ``/health_generate`` answer 503 for S seconds after start-up even though
                   the model has loaded and requests are served: a health check that lags the server.
diverge-after=K    every response's token at output position K (0-based) and each after it differs from
                   what the server's numerics family answers (``outputs``): a wrong token from position K
                   on, for an equivalence check to catch. A response shorter than K + 1 tokens is
                   unchanged; at K = 0 a sum is answered wrong.
=================  ========================================================================================

Generation requests are those to ``/generate``, ``/v1/completions`` and ``/v1/chat/completions``; the
health check's own probe is not one of them.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field
from enum import Enum

from fairbench.measure import bounds
from fairbench.measure.bounds import Bound


@dataclass(slots=True)
class FaultSettings:
    crash_after: int | None = None
    hang_after: int | None = None
    http_500_rate: float = 0.0
    malformed_every: int | None = None
    slow_start_s: float = 0.0
    diverge_after: int | None = None

    def describe(self) -> dict[str, float | int]:
        """The faults switched on, spelled as on the command line (for ``/server_info``)."""
        described: dict[str, float | int | None] = {
            "crash-after": self.crash_after,
            "hang-after": self.hang_after,
            "http-500-rate": self.http_500_rate or None,
            "malformed-every": self.malformed_every,
            "slow-start": self.slow_start_s or None,
            "diverge-after": self.diverge_after,
        }
        return {name: value for name, value in described.items() if value is not None}


OUTPUT_POSITION = Bound(0, bounds.TOKENS.high, "(an output position, 0-based)")
"""``diverge-after``'s position: from the first token to the longest output a request can ask for."""

FAULT_BOUNDS: dict[str, Bound | None] = {
    "crash-after": bounds.REQUESTS,
    "hang-after": bounds.REQUESTS,
    "http-500-rate": bounds.SHARE,
    "slow-start": bounds.SIM_DELAY_S,
    "malformed-every": None,
    "diverge-after": OUTPUT_POSITION,
}
"""Each fault and the range of its value; ``malformed-every`` counts streamed events, which no bound
covers, so it needs only to be at least 1."""


def parse_fault_spec(spec: str) -> dict[str, float | int]:
    """One ``--sim-fault`` value; an argparse ``type`` so a bad spec is a usage error naming the flag."""
    return dict(_fault(item) for item in filter(None, (part.strip() for part in spec.split(","))))


def _fault(item: str) -> tuple[str, float | int]:
    """One ``NAME=VALUE`` of a spec: a count or a number, finite and within a real run's range."""
    name, _, text = item.partition("=")
    if name not in FAULT_BOUNDS:
        raise argparse.ArgumentTypeError(
            f"unknown fault {name!r}; known: crash-after=N, hang-after=N, http-500-rate=P, "
            "malformed-every=N, slow-start=S, diverge-after=K"
        )
    bound = FAULT_BOUNDS[name]
    try:
        value = float(text) if bound is not None and not bound.integer else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{item!r}: not a valid value for {name}") from None
    if bound is not None and (problem := bound.problem(value)) is not None:
        raise argparse.ArgumentTypeError(f"{name}: {problem}")
    if bound is None and value < 1:
        raise argparse.ArgumentTypeError(f"{name}: must be at least 1, got {value}")
    return name, value


def combine_fault_specs(specs: list[dict[str, float | int]]) -> FaultSettings:
    merged: dict[str, float | int] = {}
    for spec in specs:
        merged.update(spec)
    return FaultSettings(
        crash_after=int(merged["crash-after"]) if "crash-after" in merged else None,
        hang_after=int(merged["hang-after"]) if "hang-after" in merged else None,
        http_500_rate=float(merged.get("http-500-rate", 0.0)),
        malformed_every=int(merged["malformed-every"]) if "malformed-every" in merged else None,
        slow_start_s=float(merged.get("slow-start", 0.0)),
        diverge_after=int(merged["diverge-after"]) if "diverge-after" in merged else None,
    )


class FaultAction(Enum):
    """What to do with one arriving generation request."""

    SERVE = "serve"
    CRASH = "crash"
    HANG = "hang"
    HTTP_500 = "http-500"


@dataclass(slots=True)
class FaultState:
    """The counters the faults trigger on."""

    settings: FaultSettings
    seed: int
    generation_requests: int = 0
    streamed_events: int = 0
    _random: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def on_generation_request(self) -> FaultAction:
        self.generation_requests += 1
        settings = self.settings
        if settings.crash_after is not None and self.generation_requests > settings.crash_after:
            return FaultAction.CRASH
        if settings.hang_after is not None and self.generation_requests > settings.hang_after:
            return FaultAction.HANG
        if settings.http_500_rate and self._random.random() < settings.http_500_rate:
            return FaultAction.HTTP_500
        return FaultAction.SERVE

    def next_event_is_malformed(self) -> bool:
        """Counts one streamed event; True when it is the one to break."""
        if self.settings.malformed_every is None:
            return False
        self.streamed_events += 1
        return self.streamed_events % self.settings.malformed_every == 0
