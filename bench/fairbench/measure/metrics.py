"""Metrics of one point (one concurrency level, one repeat): pure functions of its request records.

The entry point is :func:`point_metrics`. Its keys start with the measured keys of ``sglang.bench_serving``'s
result line (SGLang 0.5.23), in the same order and with the same formulas (``calculate_metrics`` in
``sglang/benchmark/serving.py``), so tools that read sglang results read ours; fairbench's extras follow
under their own names. A point line (measure/sweep.py) adds SGLang's argument keys and
:func:`accept_length`; the keys of SGLang's line it lacks are :data:`SGLANG_KEYS_ABSENT`, each with why.
Definitions, with *ok* the successful requests (``record.success``):

- ``ttft`` = first content chunk - send; ``latency`` (e2e) = last stream line - send (see RequestRecord).
- ``tpot`` = (latency - ttft) / (output_len - 1), for ok requests with output_len > 1 (:func:`tpot_ns`).
- ``itl``: sglang's chunk ITL, one gap per content chunk after the first (:func:`chunk_itls_ns`).
- ``token_itl``: per-token ITL, a chunk of k tokens counts as k gaps (:func:`token_itls_ns`).
- Distributions over ok requests only: mean, median, population std (numpy's ddof=0) and percentiles
  with numpy's default linear interpolation; an empty distribution gives 0 for every statistic, as
  sglang's ``np.mean(x or 0)`` does. Times are in milliseconds.
- Token counts come from the server (``record.output_len``); a failed request counts 0 output tokens.

Numbers match numpy up to float rounding: we compute in integer nanoseconds and sum with ``math.fsum``,
numpy sums float seconds pairwise. No numpy here: fairbench must reach its first request within 1 s of
starting, and importing numpy alone would take a large share of that.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence

from fairbench.measure.records import RequestRecord
from fairbench.measure.slo import SloTarget

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000

Metrics = dict[str, float | int]

SGLANG_KEYS_ABSENT: Mapping[str, str] = {
    "server_info": "SGLang repeats the server's /server_info in every line; a campaign run saves it once "
    "per config, as server_info.json beside points.jsonl",
    "total_output_tokens_retokenized": "SGLang encodes the generated text again with the model's tokenizer; "
    "fairbench counts the tokens the server reports and keeps no text",
}
"""The keys of sglang.bench_serving 0.5.23's result line that no point line has, each with the reason. Those
it writes only when asked (``--goodput``'s, ``--cache-report``'s: options fairbench does not have) are not
in its plain line, nor in ours."""

SGLANG_QUANTILES = (90, 95, 99)
"""Percentiles sglang reports for ttft, tpot, itl and e2e latency."""
TOKEN_ITL_QUANTILES = (95, 99)
"""Percentiles fairbench reports for the per-token ITL (a subset of sglang's)."""


# --- Statistics, numpy-compatible, stdlib only -------------------------------------------------------


def mean(values: Sequence[float]) -> float:
    """``np.mean(values or 0)``: sum(x) / n, and 0.0 for no values."""
    return math.fsum(values) / len(values) if values else 0.0


def std(values: Sequence[float]) -> float:
    """``np.std(values or 0)``, the population standard deviation (ddof=0):
    sqrt(sum((x - mean)^2) / n), and 0.0 for no values.
    """
    if not values:
        return 0.0
    center = mean(values)
    return math.sqrt(math.fsum((value - center) ** 2 for value in values) / len(values))


def median(values: Sequence[float]) -> float:
    """``np.median(values or 0)``: the middle value, or the mean of the two middle values; 0.0 if none."""
    return _median_of_sorted(sorted(values))


def percentile(values: Sequence[float], q: float) -> float:
    """``np.percentile(values or 0, q)`` with numpy's default ``method="linear"``; 0.0 for no values.

    With x sorted ascending and n values: v = (n - 1) * q / 100, i = floor(v), g = v - i,
    result = x[i] + (x[i+1] - x[i]) * g (x[i+1] taken as x[n-1] past the end).
    """
    return _percentile_of_sorted(sorted(values), q)


def _median_of_sorted(ordered: Sequence[float]) -> float:
    count = len(ordered)
    if count == 0:
        return 0.0
    middle = count // 2
    if count % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2


def _percentile_of_sorted(ordered: Sequence[float], q: float) -> float:
    count = len(ordered)
    if count == 0:
        return 0.0
    virtual_index = (count - 1) * (q / 100)
    lower = math.floor(virtual_index)
    upper = min(lower + 1, count - 1)
    weight = virtual_index - lower
    low, high = ordered[lower], ordered[upper]
    # numpy's _lerp interpolates from the nearer end (for rounding); doing the same keeps us bit-equal.
    if weight >= 0.5:
        return float(high - (high - low) * (1 - weight))
    return float(low + (high - low) * weight)


def _summary_ms(
    values: Sequence[float], ordered: Sequence[float], name: str, quantiles: Sequence[int]
) -> Metrics:
    """Statistics of nanosecond values, in milliseconds, under sglang's key names: ``mean_{name}_ms``,
    ``median_{name}_ms``, ``std_{name}_ms``, then ``p{q}_{name}_ms`` per quantile.

    ``ordered`` is ``sorted(values)``. The sums run over ``values`` as built: a sorted list visits its
    number objects out of memory order, which made them several times slower on a million values.
    """
    stats: Metrics = {
        f"mean_{name}_ms": mean(values) / NS_PER_MS,
        f"median_{name}_ms": _median_of_sorted(ordered) / NS_PER_MS,
        f"std_{name}_ms": std(values) / NS_PER_MS,
    }
    for q in quantiles:
        stats[f"p{q}_{name}_ms"] = _percentile_of_sorted(ordered, q) / NS_PER_MS
    return stats


# --- Per-request quantities --------------------------------------------------------------------------


def tpot_ns(record: RequestRecord) -> float | None:
    """Time per output token: (latency - ttft) / (output_len - 1); None when output_len <= 1.

    As in sglang, the decode time runs to the last stream line (not the last content chunk) and is
    divided by every token after the first, including any that arrived in the first chunk.
    """
    if record.output_len <= 1:
        return None
    return (record.latency_ns - record.ttft_ns) / (record.output_len - 1)


def chunk_itls_ns(record: RequestRecord) -> list[int]:
    """sglang's inter-token latencies: chunk_ns[i] - chunk_ns[i-1] for every content chunk i >= 1.

    One gap per chunk whatever its token count, as sglang's OpenAI-API clients measure it: with chunks
    of several tokens (``--num-continuous-decode-steps``, speculative decoding) this is a per-chunk
    latency, which is why :func:`token_itls_ns` exists.
    """
    times = record.chunk_ns
    return list(map(operator.sub, times[1:], times))


def token_itls_ns(record: RequestRecord) -> list[float]:
    """Per-token inter-token latencies: content chunk i >= 1 carrying k tokens adds k gaps of
    (chunk_ns[i] - chunk_ns[i-1]) / k.

    This spreads each chunk's gap evenly over its tokens, as sglang's native ``/generate`` client does.
    The first chunk adds no gaps, even when it carries several tokens: the gaps between those tokens
    passed inside the TTFT, unobserved. Counting them as 0 would pull the mean and percentiles below
    the true decode rate, and spreading the TTFT over them would mix prefill into decode; leaving them
    out keeps every gap a measured decode interval (sglang's ``/generate`` client leaves them out too).
    A chunk of 0 tokens (the records' contract excludes them) is merged into the next chunk, as
    sglang's ``/generate`` client does, instead of dividing by zero.
    """
    times = record.chunk_ns
    if _one_token_per_later_chunk(record):
        gaps: list[float] = list(map(operator.sub, times[1:], times))
        return gaps
    later_tokens = record.chunk_tokens[1:]
    gaps = []
    previous = times[0]
    for arrival, count in zip(times[1:], later_tokens, strict=True):
        if count <= 0:
            continue
        if count == 1:
            gaps.append(float(arrival - previous))
        else:
            gaps.extend([(arrival - previous) / count] * count)
        previous = arrival
    return gaps


def server_send_gap_ns(record: RequestRecord) -> int | None:
    """The way of the first chunk from the server's send to the client's read: chunk_ns[0] -
    server_sent_ns; None when the server did not say when it sent it, or no chunk came.

    On one machine this is the server's serialization and send, loopback and the client's lateness in
    reading: a client that falls behind its streams shows here first. Across machines it also holds the
    offset between their clocks (see RequestRecord.server_sent_ns).
    """
    if record.server_sent_ns is None or not record.chunk_ns:
        return None
    return record.chunk_ns[0] - record.server_sent_ns


def server_arrival_delay_ns(record: RequestRecord) -> int | None:
    """How long after it was due a request reached the server: server_received_ns - start_ns; None when the
    server did not say when it received it.

    start_ns is the request's scheduled time in an open loop (its send in a closed loop), so this holds
    the client's send delay, the way to the server and the server's own reading of it up to its tokenizer
    manager: a replay whose requests reach the server on schedule shows a few milliseconds at most. Across
    machines it also holds the offset between their clocks (see RequestRecord.server_sent_ns).
    """
    if record.server_received_ns is None:
        return None
    return record.server_received_ns - record.start_ns


def _one_token_per_later_chunk(record: RequestRecord) -> bool:
    """Whether every chunk after the first carried exactly one token: then token ITL = chunk ITL."""
    later_tokens = record.chunk_tokens[1:]
    return later_tokens.count(1) == len(later_tokens)


# --- Whole-point quantities --------------------------------------------------------------------------


def peak_per_second(records: Sequence[RequestRecord]) -> tuple[float, int]:
    """sglang's ``(max_output_tokens_per_s, max_concurrent_requests)``, from 1-second buckets.

    Over ok requests, with t0 = the earliest start and T = the latest end, there are
    ceil((T - t0) / 1 s) + 1 buckets, bucket b covering [t0 + b s, t0 + (b+1) s).
    - Output events: sglang places one at start + ttft and one more per ITL gap, which with its
      chunk ITL puts one event at each content chunk's arrival (a successful request without any
      content chunk has ttft 0, so one event at its start). A chunk of k tokens is one event, so on
      the OpenAI API this counts chunks, not tokens. max_output_tokens_per_s = max events in a bucket.
    - A request is active in every bucket from its start's to its end's, both included.
      max_concurrent_requests = max active requests in a bucket.
    Both are 0 when no request succeeded.
    """
    succeeded = [record for record in records if record.success]
    if not succeeded:
        return 0.0, 0
    origin = min(record.start_ns for record in succeeded)
    last_end = max(record.end_ns for record in succeeded)
    bucket_count = -(-(last_end - origin) // NS_PER_S) + 1
    events_per_bucket = [0] * bucket_count
    active_per_bucket = [0] * bucket_count
    for record in succeeded:
        events = record.chunk_ns or [record.start_ns]
        # Events are in arrival order: bisect each bucket's upper edge instead of visiting every event.
        first_bucket = (events[0] - origin) // NS_PER_S
        last_bucket = min((events[-1] - origin) // NS_PER_S, bucket_count - 1)
        taken = 0
        for bucket in range(first_bucket, last_bucket + 1):
            below_edge = bisect_left(events, origin + (bucket + 1) * NS_PER_S, taken)
            events_per_bucket[bucket] += below_edge - taken
            taken = below_edge
        start_bucket = (record.start_ns - origin) // NS_PER_S
        end_bucket = (record.end_ns - origin) // NS_PER_S
        for bucket in range(start_bucket, min(end_bucket + 1, bucket_count)):
            active_per_bucket[bucket] += 1
    return float(max(events_per_bucket)), max(active_per_bucket)


def steady_window(records: Sequence[RequestRecord], concurrency: int) -> tuple[int, int] | None:
    """The stretch of the point in which all C streams were active, as [start_ns, end_ns).

    start = the C-th earliest request start (before it, the point was still ramping up);
    end = the earliest request end strictly after the last request start (from then on no request
    replaces a finished one, so fewer than C run). Every request counts, failed ones too: each holds
    one of the C slots while it runs. It assumes a closed loop that starts a new request the moment
    one ends, as fairbench's sweep does; the instants between an end and its replacement's start
    are not taken out. None when there are fewer than C requests or the window is empty.
    """
    starts = sorted(record.start_ns for record in records)
    if concurrency < 1 or len(starts) < concurrency:
        return None
    window_start = starts[concurrency - 1]
    last_start = starts[-1]
    window_end = min((record.end_ns for record in records if record.end_ns > last_start), default=None)
    if window_end is None or window_end <= window_start:
        return None
    return window_start, window_end


def tokens_in_window(records: Sequence[RequestRecord], window: tuple[int, int]) -> int:
    """Output tokens of ok requests whose chunk arrived in [start_ns, end_ns): sum of chunk_tokens[i]
    over chunks with start_ns <= chunk_ns[i] < end_ns. Failed requests count 0, as in output_throughput.
    """
    window_start, window_end = window
    total = 0
    for record in records:
        if not record.success:
            continue
        first = bisect_left(record.chunk_ns, window_start)
        past = bisect_left(record.chunk_ns, window_end, first)
        total += sum(record.chunk_tokens[first:past])
    return total


# --- The point -------------------------------------------------------------------------------------


def point_metrics(
    records: Sequence[RequestRecord],
    duration_s: float,
    concurrency: int,
    gpus: int | None = None,
    *,
    closed_loop: bool = True,
) -> Metrics:
    """All metrics of one point: sglang.bench_serving's result keys in its order, then fairbench's extras.

    ``duration_s`` is the point's measured wall time (sglang's ``benchmark_duration``: from before the
    first request to after the last), ``concurrency`` the target number of requests in flight, ``gpus``
    the number of GPUs serving (``output_throughput_per_gpu`` only when given).

    sglang keys, with D = duration_s and sums over ok requests:
    - duration = D; completed = number of ok requests
    - total_input_tokens = sum(prompt_len); total_input_text_tokens = the same (text prompts only);
      total_input_vision_tokens = 0; total_output_tokens = sum(output_len)
    - request_throughput = completed / D; input_throughput = total_input_tokens / D;
      output_throughput = total_output_tokens / D;
      total_throughput = (total_input_tokens + total_output_tokens) / D
    - {mean,median,std,p90,p95,p99}_{e2e_latency,ttft,tpot,itl}_ms (see the module docstring);
      max_itl_ms = max chunk ITL (in sglang's metrics, though not in its result line)
    - concurrency = sum(latency) / D, the mean number of requests in flight (Little's law)
    - max_output_tokens_per_s, max_concurrent_requests: see :func:`peak_per_second`
    Extras:
    - {mean,median,std,p95,p99}_token_itl_ms: per-token ITL (:func:`token_itls_ns`)
    - per_user_tps = 1000 / median_tpot_ms, the decode speed one user sees; 0 when there is no TPOT
    - output_throughput_per_gpu = output_throughput / gpus, only when gpus is given
    - steady_duration = length of :func:`steady_window` in seconds, 0.0 when there is none or the point
      is an open loop (``closed_loop`` false: its window assumes a closed loop's replacements);
      steady_output_throughput = :func:`tokens_in_window` / steady_duration, only when steady_duration > 0
    - server_send_gap_{median,p99,max}_ms: statistics of :func:`server_send_gap_ns` (chunk_ns[0] -
      server_sent_ns) over the ok requests that have it, median and p99 as above; only when one has it
      (SGLang's ``/generate`` reports its send time, the OpenAI APIs do not)
    - server_arrival_delay_{median,p99,max}_ms: statistics of :func:`server_arrival_delay_ns`
      (server_received_ns - start_ns) over the ok requests that have it; only when one has it (SGLang's
      ``/generate`` with ``--enable-metrics``)
    - failed = number of failed requests; error_rate = failed / number of requests (0 for none)
    """
    if not duration_s > 0:
        raise ValueError(f"duration_s must be positive, got {duration_s}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if gpus is not None and gpus < 1:
        raise ValueError(f"gpus must be at least 1 when given, got {gpus}")

    succeeded = [record for record in records if record.success]
    completed = len(succeeded)
    total_input = sum(record.prompt_len for record in succeeded)
    total_output = sum(record.output_len for record in succeeded)
    latencies = [record.latency_ns for record in succeeded]
    ttfts = [record.ttft_ns for record in succeeded]
    tpots = [tpot for tpot in map(tpot_ns, succeeded) if tpot is not None]
    chunk_itls: list[int] = []
    for record in succeeded:
        chunk_itls += chunk_itls_ns(record)
    sorted_chunk_itls = sorted(chunk_itls)
    chunk_itl_stats = _summary_ms(chunk_itls, sorted_chunk_itls, "itl", SGLANG_QUANTILES)
    # A point can hold a million gaps, and sorting them dominates the cost. With one token per chunk
    # the per-token ITLs are the chunk ITLs: copy their statistics instead of computing them again.
    token_itl_keys = ["mean", "median", "std", *(f"p{q}" for q in TOKEN_ITL_QUANTILES)]
    if all(map(_one_token_per_later_chunk, succeeded)):
        token_itl_stats = {f"{key}_token_itl_ms": chunk_itl_stats[f"{key}_itl_ms"] for key in token_itl_keys}
    else:
        token_itls: list[float] = []
        for record in succeeded:
            token_itls += token_itls_ns(record)
        token_itl_stats = _summary_ms(token_itls, sorted(token_itls), "token_itl", TOKEN_ITL_QUANTILES)
    max_tokens_per_s, max_concurrent = peak_per_second(succeeded)

    metrics: Metrics = {
        "duration": float(duration_s),
        "completed": completed,
        "total_input_tokens": total_input,
        "total_input_text_tokens": total_input,
        "total_input_vision_tokens": 0,
        "total_output_tokens": total_output,
        "request_throughput": completed / duration_s,
        "input_throughput": total_input / duration_s,
        "output_throughput": total_output / duration_s,
        "total_throughput": (total_input + total_output) / duration_s,
    }
    metrics |= _summary_ms(latencies, sorted(latencies), "e2e_latency", SGLANG_QUANTILES)
    metrics |= _summary_ms(ttfts, sorted(ttfts), "ttft", SGLANG_QUANTILES)
    tpot_stats = _summary_ms(tpots, sorted(tpots), "tpot", SGLANG_QUANTILES)
    metrics |= tpot_stats
    metrics |= chunk_itl_stats
    metrics["max_itl_ms"] = (sorted_chunk_itls[-1] if sorted_chunk_itls else 0) / NS_PER_MS
    metrics["concurrency"] = sum(latencies) / NS_PER_S / duration_s
    metrics["max_output_tokens_per_s"] = max_tokens_per_s
    metrics["max_concurrent_requests"] = max_concurrent

    metrics |= token_itl_stats
    median_tpot_ms = tpot_stats["median_tpot_ms"]
    metrics["per_user_tps"] = 1000 / median_tpot_ms if median_tpot_ms > 0 else 0.0
    if gpus is not None:
        metrics["output_throughput_per_gpu"] = metrics["output_throughput"] / gpus
    window = steady_window(records, concurrency) if closed_loop else None
    if window is None:
        metrics["steady_duration"] = 0.0
    else:
        steady_duration = (window[1] - window[0]) / NS_PER_S
        metrics["steady_duration"] = steady_duration
        metrics["steady_output_throughput"] = tokens_in_window(records, window) / steady_duration
    send_gaps = sorted(gap for gap in map(server_send_gap_ns, succeeded) if gap is not None)
    if send_gaps:
        metrics["server_send_gap_median_ms"] = _median_of_sorted(send_gaps) / NS_PER_MS
        metrics["server_send_gap_p99_ms"] = _percentile_of_sorted(send_gaps, 99) / NS_PER_MS
        metrics["server_send_gap_max_ms"] = send_gaps[-1] / NS_PER_MS
    arrivals = sorted(delay for delay in map(server_arrival_delay_ns, succeeded) if delay is not None)
    if arrivals:
        metrics["server_arrival_delay_median_ms"] = _median_of_sorted(arrivals) / NS_PER_MS
        metrics["server_arrival_delay_p99_ms"] = _percentile_of_sorted(arrivals, 99) / NS_PER_MS
        metrics["server_arrival_delay_max_ms"] = arrivals[-1] / NS_PER_MS
    failed = len(records) - completed
    metrics["failed"] = failed
    metrics["error_rate"] = failed / len(records) if records else 0.0
    return metrics


def cache_metrics(
    records: Sequence[RequestRecord], designed: Mapping[int, int], cache_state: str
) -> dict[str, str | int | float | None]:
    """The prompt tokens of a point's ok requests that came from the server's prefix cache, as the server
    reported them per request and as the workload designed them (``workload.designed_cached_tokens``,
    ``designed`` by request index), with I = total_input_tokens:

    - cache_state: what the cache held when the point's measurement started (``workload.CACHE_STATES``)
    - designed_cached_tokens = sum(designed[index]); designed_cached_share = it / I
    - cached_tokens = sum(cached_tokens) and cached_share = it / I, only when every ok request reported its
      cached tokens (``RequestRecord.cached_tokens``); null otherwise (an OpenAI API without SGLang's
      ``--enable-cache-report``): the server's ``/metrics`` counter (``server_cached_tokens``) remains
    """
    succeeded = [record for record in records if record.success]
    total_input = sum(record.prompt_len for record in succeeded)
    designed_total = sum(designed.get(record.index, 0) for record in succeeded)
    reported = [record.cached_tokens for record in succeeded]
    cached = None if None in reported or not reported else sum(value or 0 for value in reported)
    return {
        "cache_state": cache_state,
        "designed_cached_tokens": designed_total,
        "designed_cached_share": designed_total / total_input if total_input else 0.0,
        "cached_tokens": cached,
        "cached_share": None if cached is None else cached / total_input if total_input else 0.0,
    }


def turn_metrics(records: Sequence[RequestRecord], turns: int) -> dict[str, list[float | None]]:
    """A multi-turn point's figures by turn k (0 to ``turns`` - 1), each over the ok requests of turn k
    (``RequestRecord.turn``), null for a turn none of whose requests succeeded:

    - median_ttft_ms_by_turn[k] = median(TTFT in ms): where the prefix cache does its job, a later turn's
      first token comes about as soon as the first turn's, however long the conversation has grown
    - mean_input_tokens_by_turn[k] = mean(prompt_len)
    - mean_cached_tokens_by_turn[k] = mean(cached_tokens), null also where one did not report it
    """
    by_turn: list[list[RequestRecord]] = [[] for _ in range(turns)]
    for record in records:
        if record.success and record.turn is not None and record.turn < turns:
            by_turn[record.turn].append(record)
    ttft: list[float | None] = []
    inputs: list[float | None] = []
    cached: list[float | None] = []
    for done in by_turn:
        ttft.append(median([record.ttft_ns / NS_PER_MS for record in done]) if done else None)
        inputs.append(mean([record.prompt_len for record in done]) if done else None)
        reported = [record.cached_tokens for record in done]
        cached.append(None if not done or None in reported else mean([value or 0 for value in reported]))
    return {
        "median_ttft_ms_by_turn": ttft,
        "mean_input_tokens_by_turn": inputs,
        "mean_cached_tokens_by_turn": cached,
    }


SPEC_HISTOGRAM_EDGES = tuple(1.0 + 0.5 * step for step in range(1, 15))
"""The inner edges of the per-request accept length histogram's fixed bins, 1.5 to 8.0 by 0.5: bin 0 takes
lengths below 1.5, bin i (1 to 13) [1 + 0.5 i, 1.5 + 0.5 i), bin 14 lengths of 8 or more. A request's
length is at least 1 (each verify step gives a token) and at most speculative-num-draft-tokens plus a
little (the prefill's token): half a token shows an MTP head's 1 to 2 as well as EAGLE's longer drafts."""


def spec_bin(accept_length: float) -> int:
    """The histogram bin of a request's accept length (``SPEC_HISTOGRAM_EDGES``): 0 to 14."""
    return bisect_right(SPEC_HISTOGRAM_EDGES, accept_length)


def spec_bin_label(index: int) -> str:
    """How bin ``index`` is written: ``<1.5``, ``2-2.5`` (from 2, below 2.5), ``>=8``."""
    edges = SPEC_HISTOGRAM_EDGES
    if index == 0:
        return f"<{edges[0]:g}"
    if index == len(edges):
        return f">={edges[-1]:g}"
    return f"{edges[index - 1]:g}-{edges[index]:g}"


def spec_metrics(records: Sequence[RequestRecord]) -> dict[str, int | float | list[int] | None]:
    """A point's speculative decoding over its requests, from what SGLang's ``/generate`` reported of each
    (``RequestRecord.spec_*``), with R the ok requests that reported their verify steps (spec_verify_ct):

    - spec_requests = |R|
    - spec_accept_length = sum(output_len) / sum(spec_verify_ct) over R: the tokens a verify step gave,
      weighted by tokens as SGLang's own accept length is (each request's spec_accept_length is its
      completion_tokens / spec_verify_ct; this is their ratio of sums, not their plain mean). A request's
      first token came from the prefill, not a verify step, so this stands above the server's gauge (its
      accepted tokens per verify step) by about |R| / sum(spec_verify_ct)
    - spec_accept_rate = sum(spec_num_correct_drafts) / sum(spec_num_proposed_drafts) over R: the share of
      draft tokens accepted, weighted by drafts proposed (proposed = verify steps x (draft tokens - 1), so
      by verify steps), as SGLang's server-wide rate is; null where none proposed any
    - spec_accept_length_histogram[i] = the requests of R whose own output_len / spec_verify_ct falls in
      bin i (:func:`spec_bin`, ``SPEC_HISTOGRAM_EDGES``): 15 counts that sum to |R|

    None of these (an empty dict) where no ok request reported any: a server without speculative decoding,
    or the OpenAI APIs, which carry no ``meta_info`` (the server's gauge, ``server_spec_accept_length``, and
    /server_info's ``accept_length`` remain there).
    """
    reported = [
        (record, steps)
        for record in records
        if record.success and (steps := record.spec_verify_ct) is not None and steps > 0
    ]
    if not reported:
        return {}
    histogram = [0] * (len(SPEC_HISTOGRAM_EDGES) + 1)
    for record, steps in reported:
        histogram[spec_bin(record.output_len / steps)] += 1
    proposed = correct = 0
    for record, _ in reported:
        if record.spec_num_proposed_drafts is not None and record.spec_num_correct_drafts is not None:
            proposed += record.spec_num_proposed_drafts
            correct += record.spec_num_correct_drafts
    return {
        "spec_requests": len(reported),
        "spec_accept_length": sum(record.output_len for record, _ in reported)
        / sum(steps for _, steps in reported),
        "spec_accept_rate": correct / proposed if proposed else None,
        "spec_accept_length_histogram": histogram,
    }


def accept_length(server_info: object) -> float | None:
    """sglang.bench_serving's ``accept_length``: the mean number of tokens a speculative decoding step
    accepts, as the server reports it in ``/server_info``: internal_states[0].avg_spec_accept_length (that
    of decode[0], behind a prefill-decode router). SGLang reads it once its run has ended, fairbench once
    each point's loop has: the server's own running figure, not one computed from the point's requests.
    None where the server reports none, or no finite number (without speculative decoding), as in sglang.
    """
    info = server_info
    if isinstance(info, dict) and "decode" in info:
        decode = info["decode"]
        info = decode[0] if isinstance(decode, list) and decode else None
    states = info.get("internal_states") if isinstance(info, dict) else None
    first = states[0] if isinstance(states, list) and states else None
    value = first.get("avg_spec_accept_length") if isinstance(first, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past any float
        return None
    return number if math.isfinite(number) else None


def running_limit(server_info: object) -> int | None:
    """The most requests the server runs at once: the sum over its DP ranks (``/server_info``'s
    ``internal_states``, one per rank) of ``effective_max_running_requests_per_dp``, the limit each drew
    from its ``max-running-requests`` and its KV cache's capacity. None where any rank does not say."""
    states = server_info.get("internal_states") if isinstance(server_info, dict) else None
    if not isinstance(states, list) or not states:
        return None
    limits = []
    for state in states:
        limit = state.get("effective_max_running_requests_per_dp") if isinstance(state, dict) else None
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            return None
        limits.append(limit)
    return sum(limits)


# --- GPU energy of a point -------------------------------------------------------------------------


def mean_power_w(energy_j: float, duration_s: float) -> float:
    """Mean power over an interval, in watts: energy_j / duration_s."""
    if not duration_s > 0:
        raise ValueError(f"duration_s must be positive, got {duration_s}")
    return energy_j / duration_s


def output_tokens_per_joule(total_output_tokens: int, energy_j: float) -> float:
    """Output tokens per joule of GPU energy: total_output_tokens / energy_j (the inverse of J per token)."""
    if not energy_j > 0:
        raise ValueError(f"energy_j must be positive, got {energy_j}")
    return total_output_tokens / energy_j


def energy_metrics(total_output_tokens: int, gpus: Mapping[int, tuple[float, float]]) -> dict[str, object]:
    """A point's GPU energy figures from ``{GPU index: (energy_j, duration_s)}`` over its measured loop.

    - gpu_energy_j = sum of energy_j over the GPUs
    - gpu_energy_per_gpu_j = {"<index>": energy_j}, NVML's index as a string (JSON object keys are strings)
    - gpu_mean_power_w = sum over the GPUs of :func:`mean_power_w` (energy_j / duration_s)
    - output_tokens_per_j = :func:`output_tokens_per_joule` (total_output_tokens / gpu_energy_j),
      only when gpu_energy_j > 0
    No GPUs gives no figures (an empty dict), never zeros: a point measured without GPUs has no energy.
    """
    if not gpus:
        return {}
    total_j = math.fsum(energy_j for energy_j, _ in gpus.values())
    figures: dict[str, object] = {
        "gpu_energy_j": total_j,
        "gpu_energy_per_gpu_j": {str(index): energy_j for index, (energy_j, _) in sorted(gpus.items())},
        "gpu_mean_power_w": math.fsum(mean_power_w(*reading) for reading in gpus.values()),
    }
    if total_j > 0:
        figures["output_tokens_per_j"] = output_tokens_per_joule(total_output_tokens, total_j)
    return figures


# --- Service-level objectives and goodput ----------------------------------------------------------


def _slo_value_ns(record: RequestRecord, target: SloTarget) -> float | None:
    """One request's own value of an objective's metric, in ns: its TTFT, TPOT or e2e latency, and for
    ``itl`` the objective's percentile of its own per-token gaps. None where it has none (TPOT of a
    one-token output, ITL of a request without gaps): that request is not judged on that objective."""
    if target.metric == "ttft":
        return float(record.ttft_ns)
    if target.metric == "e2e_latency":
        return float(record.latency_ns)
    if target.metric == "tpot":
        return tpot_ns(record)
    gaps = token_itls_ns(record)
    return percentile(gaps, target.percentile) if gaps else None


def _point_slo_value_ms(records: Sequence[RequestRecord], target: SloTarget) -> float:
    """The objective's percentile over the point: of the requests' values (for ``itl``, of every per-token
    gap of the point), a failed request counting as one infinitely slow observation."""
    observed: list[float] = []
    for record in records:
        if not record.success:
            observed.append(math.inf)
        elif target.metric == "itl":
            observed += token_itls_ns(record)
        elif (value := _slo_value_ns(record, target)) is not None:
            observed.append(value)
    return percentile(observed, target.percentile) / NS_PER_MS if observed else 0.0


def meets_slo(record: RequestRecord, targets: Sequence[SloTarget]) -> bool:
    """Whether one request met every objective on its own: it succeeded, and each of its values
    (:func:`_slo_value_ns`) is at most the limit; a value it does not have is not held against it."""
    if not record.success:
        return False
    for target in targets:
        value = _slo_value_ns(record, target)
        if value is not None and value > target.limit_ms * NS_PER_MS:
            return False
    return True


def slo_metrics(
    records: Sequence[RequestRecord], duration_s: float, targets: Sequence[SloTarget], gpus: int | None = None
) -> dict[str, object]:
    """A point's figures against its campaign's objectives; none (an empty dict) without objectives.

    With G the requests that :func:`meets_slo` (succeeded and met every objective on their own), N all the
    point's requests and D = duration_s:
    - slo_measured = {key: the key's percentile of its metric over the point (ms)}: the q-th percentile of
      the requests' TTFT, TPOT or e2e latency, for ``itl`` of every per-token gap, a failed request counting
      as one infinitely slow observation; null (JSON has no infinity) where that percentile is a failure
    - slo_met = every slo_measured value is at most its limit (a null one is not)
    - slo_attainment = |G| / N (0 for no requests)
    - goodput_request_throughput = |G| / D; goodput_output_throughput = sum(output_len over G) / D
    - goodput_output_throughput_per_gpu = goodput_output_throughput / gpus, only when gpus is given

    vLLM's ``--goodput`` and AIPerf's goodput count the same requests per second: a request is good when
    each of its TTFT, TPOT and e2e latency is within its limit (AIPerf's inter-token latency is fairbench's
    TPOT). Neither has a percentile in its limits or judges a point; fairbench's keys carry one, which
    judges the point (slo_met), while the per-request test ignores it except for ``itl``, where a request's
    own gaps are many and the percentile picks one of them. Output goodput in tok/s is fairbench's.
    """
    if not targets:
        return {}
    measured = {target.key: _point_slo_value_ms(records, target) for target in targets}
    good = [record for record in records if meets_slo(record, targets)]
    goodput_tokens = sum(record.output_len for record in good) / duration_s
    figures: dict[str, object] = {
        "slo_met": all(measured[target.key] <= target.limit_ms for target in targets),
        "slo_measured": {key: value if math.isfinite(value) else None for key, value in measured.items()},
        "slo_attainment": len(good) / len(records) if records else 0.0,
        "goodput_request_throughput": len(good) / duration_s,
        "goodput_output_throughput": goodput_tokens,
    }
    if gpus is not None:
        figures["goodput_output_throughput_per_gpu"] = goodput_tokens / gpus
    return figures
