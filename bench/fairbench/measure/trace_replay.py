"""A request trace replayed: the requests of its window, each sent at its time in the trace, sped up or
slowed down, with prompts whose shared blocks are shared.

A replay's levels are request rates, as any open loop's: the window's own rate, (n - 1) / (its last
arrival - its first), times each speedup (``replay_rates``). At rate R the window's arrival offsets are
divided by R / its own rate (``TraceReplay.offsets_s``), and the open loop (``measure.arrivals``) sends
each request at its offset, timed from it, lateness recorded.

Prompts: each of a request's hash ids is a block of ``traces.MOONCAKE_BLOCK_TOKENS`` tokens drawn from
the point's seed and the id, so that two requests of the window that share their first k ids share those
k blocks, and nothing else: the trace's prefix sharing, as its publisher recorded it. The last block is
cut to the request's input length; tokens beyond its blocks (and every token of a trace without hash ids)
are its own. Every point draws its own blocks (the seed names the point and its phase), so no point finds
another's in the server's cache; within a point the design is ``traces.reusable_tokens``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

from fairbench.measure.traces import (
    MOONCAKE_BLOCK_TOKENS,
    TraceError,
    TraceRequest,
    load_trace,
    reusable_tokens,
    trace_format,
)
from fairbench.measure.vocabulary import Vocabulary
from fairbench.measure.workload import (
    LevelCount,
    Prompt,
    PromptSource,
    Tokens,
    TraceWindow,
    Workload,
    WorkloadError,
    WorkloadSpec,
    point_seed,
    usable_ids,
)


def window_of(requests: list[TraceRequest], window: TraceWindow) -> list[TraceRequest]:
    """The requests of ``window`` (those arriving from start_s on, before start_s + duration_s, the first
    count of them), arrivals counted from the first of them; TraceError when it holds fewer than two, or
    two at one instant (a replay's rate needs a span)."""
    start_ms = window.start_s * 1000.0
    end_ms = None if window.duration_s is None else start_ms + window.duration_s * 1000.0
    chosen = [r for r in requests if r.arrival_ms >= start_ms and (end_ms is None or r.arrival_ms < end_ms)]
    chosen = chosen[: window.count]
    span_s = requests[-1].arrival_ms / 1000.0
    if len(chosen) < 2 or chosen[-1].arrival_ms == chosen[0].arrival_ms:
        raise TraceError(
            f"{window.path}: the window (from {window.start_s:g} s"
            + (f", for {window.duration_s:g} s" if window.duration_s is not None else "")
            + (f", at most {window.count} requests" if window.count is not None else "")
            + f") holds {len(chosen)} request(s)"
            + (" at one instant" if len(chosen) >= 2 else "")
            + f"; the trace has {len(requests):,} over {span_s:,.3f} s: a replay needs two at different times"
        )
    first = chosen[0].arrival_ms
    return [TraceRequest(r.arrival_ms - first, r.input_len, r.output_len, r.hash_ids) for r in chosen]


def load_window(window: TraceWindow) -> list[TraceRequest]:
    """The requests of ``window`` of its trace file (``window_of``); TraceError naming the file."""
    return window_of(load_trace(Path(window.path)), window)


def window_sha256(requests: list[TraceRequest]) -> str:
    """The SHA-256 of a window's requests (each one's arrival, lengths and hash ids, as read): a trace file
    edited or replaced since, within the window, gives another; its lines outside the window do not."""
    digest = hashlib.sha256()
    for request in requests:
        fields = (request.arrival_ms, request.input_len, request.output_len, list(request.hash_ids))
        digest.update(json.dumps(fields).encode() + b"\n")
    return digest.hexdigest()


def own_rate(requests: list[TraceRequest]) -> float:
    """A window's own request rate, requests per second: (n - 1) / (last arrival - first), the quantity
    ``arrivals.achieved_rate`` measures of the sends."""
    return (len(requests) - 1) * 1000.0 / (requests[-1].arrival_ms - requests[0].arrival_ms)


def replay_rates(requests: list[TraceRequest], speedups: list[float]) -> list[float]:
    """The open loop's levels of a replay at each speedup (2: twice as fast as recorded): the window's own
    rate times the speedup."""
    rate = own_rate(requests)
    return [rate * speedup for speedup in speedups]


class TraceReplay:
    """The prompts and schedule of a trace's window (``WorkloadSpec.trace``), a ``PromptSource``; random
    token ids come from ``vocabulary``, which a spec that sends token ids must be given."""

    def __init__(self, spec: WorkloadSpec, vocabulary: Vocabulary | None = None) -> None:
        if spec.trace is None:
            raise WorkloadError("trace: a replay needs the trace's window")
        self.spec = spec
        self.requests = load_window(spec.trace)
        self.rate = own_rate(self.requests)
        """The window's own request rate (``own_rate``)."""
        self.format = trace_format(Path(spec.trace.path))
        self.sha256 = window_sha256(self.requests)
        """What a resumed replay must find unchanged (``window_sha256``)."""
        self._tokens = Tokens(spec.as_text, usable_ids(spec, vocabulary))

    def speedup(self, rate: float) -> float:
        """How much faster than recorded a replay at ``rate`` sends."""
        return rate / self.rate

    def offsets_s(self, rate: float, count: int) -> list[float]:
        """The send offsets of the window's first ``count`` requests replayed at ``rate`` requests per
        second: each arrival divided by ``speedup(rate)``."""
        scale = self.speedup(rate)
        return [request.arrival_ms / 1000.0 / scale for request in self.requests[:count]]

    def measured_count(self, per_level: LevelCount, level: float) -> int:
        """Every request of the window, whatever the count per level."""
        return len(self.requests)

    def prompts(self, count: int, *, level: str, repeat: int, phase: str = "measure") -> list[Prompt]:
        """``each_prompt``'s, all at once."""
        return list(self.each_prompt(count, level=level, repeat=repeat, phase=phase))

    def each_prompt(self, count: int, *, level: str, repeat: int, phase: str = "measure") -> Iterator[Prompt]:
        """The window's first ``count`` requests as prompts of one point, blocks drawn from the point's
        seed and each hash id once (a block shared by many requests is one list)."""
        seed = point_seed(self.spec.seed, phase, level, repeat)
        blocks: dict[int, list[int] | str] = {}
        for index, request in enumerate(self.requests[:count]):
            parts: list[list[int] | str] = []
            left = request.input_len
            for hash_id in request.hash_ids:
                block = blocks.get(hash_id)
                if block is None:
                    block = self._tokens.draw(random.Random(f"{seed}/block{hash_id}"), MOONCAKE_BLOCK_TOKENS)
                    blocks[hash_id] = block
                parts.append(_head(block, min(left, MOONCAKE_BLOCK_TOKENS)))
                left -= MOONCAKE_BLOCK_TOKENS
            if left > 0:
                parts.append(self._tokens.draw(random.Random(f"{seed}/request{index}"), left))
            prompt = _joined(parts, self.spec.as_text)
            lengths = (request.input_len, request.output_len)
            yield Prompt(index, prompt, *lengths, hash_ids=request.hash_ids)

    def primers(self, prompts: list[Prompt]) -> list[Prompt]:
        return []

    def designed_cached_tokens(self, prompts: list[Prompt], cache_state: str) -> dict[int, int]:
        """Within the point, ``traces.reusable_tokens`` of its requests: flushed or carried, the cache
        holds nothing of the point's own blocks when it starts (they are drawn for it alone)."""
        reusable = reusable_tokens(self.requests[: len(prompts)])
        return {prompt.index: reusable[prompt.index] for prompt in prompts}


def _head(block: list[int] | str, length: int) -> list[int] | str:
    """The first ``length`` tokens of a block (words, for text)."""
    if isinstance(block, list):
        return block[:length]
    return block if length == MOONCAKE_BLOCK_TOKENS else " ".join(block.split()[:length])


def _joined(parts: list[list[int] | str], as_text: bool) -> list[int] | str:
    if as_text:
        return " ".join(part for part in parts if isinstance(part, str))
    return list(chain.from_iterable(part for part in parts if isinstance(part, list)))


def prompt_source(spec: WorkloadSpec, vocabulary: Vocabulary | None) -> PromptSource:
    """What builds a sweep's prompts: a replay of the spec's trace, else its ``Workload``."""
    return TraceReplay(spec, vocabulary) if spec.trace is not None else Workload(spec, vocabulary)
