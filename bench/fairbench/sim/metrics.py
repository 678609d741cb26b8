"""``/metrics``: SGLang 0.5.23's Prometheus metrics under its names, label sets and meanings, plus the
simulator's own (named ``fairbench_sim_*``).

Scheduler gauges (``SchedulerMetricsCollector``), one series per data-parallel replica, labelled
``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``, ``moe_ep_rank`` and, with more than one replica,
``dp_rank``:

* ``sglang:num_running_reqs``: requests in the running batch; ``sglang:num_queue_reqs``: requests waiting
  to be admitted;
* ``sglang:token_usage``: KV tokens in use over the replica's KV pool, rounded to two decimals as SGLang
  rounds it; the tokens in use are those of the running batch and the prefill in flight (see
  ``ReplicaLoad.kv_tokens``). The simulator does not hold admission back for KV room, so the ratio is
  capped at 1;
* ``sglang:gen_throughput``, ``sglang:spec_accept_length``: from the last decode log interval (0 for the
  accept length without speculative decoding); ``sglang:cache_hit_rate``: the last prefill's.

SGLang refreshes its gauges at its log points (each prefill, every ``decode_log_interval`` decode steps,
when idle); the simulator's running, waiting and token usage are read when ``/metrics`` is.

``sglang:queue_time_seconds`` (``observe_queue_time``), a scheduler histogram with the gauges' labels: one
observation per request as it leaves the waiting queue into a prefill (``set_forward_entry_time``), the
seconds it waited there, the health check's probe included (SGLang's scheduler observes it too; it runs
only on an idle engine, so it waits for nothing).

Tokenizer counters (``TokenizerMetricsCollector.observe_one_finished_request``), bumped once per finished
request, an aborted one included if it had been admitted: ``sglang:prompt_tokens_total``,
``sglang:generation_tokens_total`` and ``sglang:num_requests_total`` by ``is_streaming``, and
``sglang:cached_tokens_total`` by ``cache_source`` (``device``: the simulator's prefix cache is all on the
GPU). ``sglang:num_aborted_requests_total`` counts aborts as ``TokenizerManager.abort_request`` does: one per
``/abort_request`` that names a request in flight by its rid (or says ``abort_all``), one per client that
goes away before its response is complete. With the counters, ``sglang:e2e_request_latency_seconds`` by
``is_streaming`` observes the request's seconds from its arrival to its end.

A prefill or decode server (``--disaggregation-mode``) labels every series ``engine_type="prefill"`` or
``"decode"`` and adds SGLang's PD queue gauges (``sglang:num_prefill_bootstrap_queue_reqs``,
``..._inflight_...``, ``sglang:num_decode_prealloc_queue_reqs``, ``..._transfer_...``), the counters
``sglang:num_bootstrap_failed_reqs_total`` and ``sglang:num_transfer_failed_reqs_total``, and on a prefill
server the histograms ``sglang:kv_transfer_latency_ms``, ``..._total_mb`` and ``..._speed_gb_s``
(``TransferCounters``).

The histograms' sums are exact on the server's clock, in seconds as the client sees them (a
``--sim-time-scale`` included): the change in ``e2e_request_latency_seconds_sum`` over an interval,
divided by its length, is the mean number of requests in flight (Little's law), that of
``queue_time_seconds_sum`` the mean number waiting. As in SGLang's multiprocess registry, a counter's or a
histogram's series appears once something has counted in it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from fairbench.sim.engine import Engine, ReplicaLoad

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CACHE_SOURCE = "device"
"""``get_cached_tokens_details``' source of every cached token without a hierarchical cache."""

E2E_REQUEST_LATENCY_BUCKETS = (
    *(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100),
    *(200, 400, 600, 1200, 1800, 2400),
)
"""``TokenizerMetricsCollector``'s default ``bucket_e2e_request_latency``, in seconds."""
KV_TRANSFER_LATENCY_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
KV_TRANSFER_SPEED_GB_S_BUCKETS = (0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400)
KV_TRANSFER_TOTAL_MB_BUCKETS = (1, 5, 10, 50, 100, 500, 1000, 5000, 10000)
"""``SchedulerMetricsCollector``'s ``kv_transfer_*`` buckets."""
QUEUE_TIME_BUCKETS = (
    *(0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50),
    *(60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800),
    *(2000, 2500, 3000),
)
"""``SchedulerMetricsCollector``'s ``queue_time`` buckets, in seconds."""

Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Histogram:
    """One series of a ``prometheus_client`` histogram: how many observations fell in each bucket (the
    first bound a value does not exceed; past the last bound, ``+Inf``'s) and their sum."""

    bounds: tuple[float, ...]
    counts: list[int] = field(init=False)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


@dataclass(slots=True)
class _FinishedCounts:
    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    e2e_latency: Histogram = field(default_factory=lambda: Histogram(E2E_REQUEST_LATENCY_BUCKETS))


@dataclass(slots=True)
class RequestCounters:
    """The tokenizer side's counters: what finished requests and aborts add up to."""

    finished: dict[bool, _FinishedCounts] = field(default_factory=dict)
    """By whether the request streamed."""
    cached_tokens: int = 0
    aborted: int = 0

    def observe_finished(
        self,
        streamed: bool,
        prompt_tokens: int,
        generation_tokens: int,
        cached_tokens: int,
        e2e_latency_s: float,
    ) -> None:
        """A request ended; ``e2e_latency_s``: the seconds from its arrival to its end."""
        counts = self.finished.setdefault(streamed, _FinishedCounts())
        counts.requests += 1
        counts.prompt_tokens += prompt_tokens
        counts.generation_tokens += generation_tokens
        counts.e2e_latency.observe(e2e_latency_s)
        self.cached_tokens += cached_tokens

    def observe_aborted(self) -> None:
        self.aborted += 1


@dataclass(slots=True)
class QueueTimes:
    """The schedulers' ``queue_time`` histograms, by data-parallel rank, each from its first observation;
    ``observe`` is the engine's ``on_queue_exit``."""

    by_replica: dict[int, Histogram] = field(default_factory=dict)

    def observe(self, replica: int, waited_s: float) -> None:
        self.by_replica.setdefault(replica, Histogram(QUEUE_TIME_BUCKETS)).observe(waited_s)


@dataclass(slots=True)
class TransferCounters:
    """A disaggregated server's scheduler counters and, on a prefill server, its transfers' histograms
    (``observe_kv_transfer_metrics``: latency from the prefill's end to the transfer's, size in MB of
    2**20 bytes, speed in GB/s of 2**30 bytes a second)."""

    bootstrap_failed: int = 0
    """Requests whose two servers never met: SGLang's ``increment_bootstrap_failed_reqs``."""
    transfer_failed: int = 0
    """Requests whose KV never arrived: SGLang's ``increment_transfer_failed_reqs``."""
    latency_ms: Histogram = field(default_factory=lambda: Histogram(KV_TRANSFER_LATENCY_MS_BUCKETS))
    total_mb: Histogram = field(default_factory=lambda: Histogram(KV_TRANSFER_TOTAL_MB_BUCKETS))
    speed_gb_s: Histogram = field(default_factory=lambda: Histogram(KV_TRANSFER_SPEED_GB_S_BUCKETS))

    def observe_transfer(self, kv_bytes: int, seconds: float) -> None:
        total_mb = kv_bytes / (1 << 20)
        self.latency_ms.observe(seconds * 1000)
        self.total_mb.observe(total_mb)
        self.speed_gb_s.observe(total_mb / 1024 / seconds if seconds > 0 else 0.0)


@dataclass(frozen=True, slots=True)
class TransferQueues:
    """A disaggregated server's queues, as of now: SGLang's ``num_*_queue_reqs`` gauges."""

    prefill_bootstrap: int = 0
    """Prefill requests waiting for their decode server to ask for their room."""
    prefill_inflight: int = 0
    """Prefill requests whose KV is being sent."""
    decode_prealloc: int = 0
    """Decode requests reaching their prefill's bootstrap server."""
    decode_transfer: int = 0
    """Decode requests waiting for their KV."""


@dataclass(frozen=True, slots=True)
class Disaggregated:
    """What a prefill or decode server adds to ``/metrics``."""

    engine_type: str
    queues: TransferQueues
    counters: TransferCounters


@dataclass(frozen=True, slots=True)
class MetricsSource:
    """What ``/metrics`` reads: the engine's replicas, the counters, the queue times, and the labels'
    constants."""

    model_name: str
    kv_pool_tokens: int
    """One replica's KV pool, in tokens (SGLang's ``max_total_num_tokens`` of that scheduler)."""
    engine: Engine
    counters: RequestCounters
    queue_times: QueueTimes
    disaggregated: Disaggregated | None = None
    """A prefill or decode server's own: its ``engine_type`` label and its transfer metrics."""


def token_usage(load: ReplicaLoad, kv_pool_tokens: int) -> float:
    """SGLang's ``token_usage``: ``round(used / pool, 2)``, here at most 1 (see the module's docstring)."""
    return min(1.0, round(load.kv_tokens / kv_pool_tokens, 2))


def render(source: MetricsSource) -> str:
    """The Prometheus text exposition (format 0.0.4) of every metric the simulator serves."""
    text = _Exposition()
    model: Labels = (("model_name", source.model_name),)
    pd = source.disaggregated
    engine_labels: Labels = (*model, ("engine_type", pd.engine_type if pd is not None else "unified"))
    replicas = source.engine.replica_loads()
    several = len(replicas) > 1
    by_replica = [
        (
            (
                *engine_labels,
                *(("tp_rank", "0"), ("pp_rank", "0"), ("moe_ep_rank", "0")),
                *((("dp_rank", str(rank)),) if several else ()),
            ),
            load,
        )
        for rank, load in enumerate(replicas)
    ]

    def scheduler_gauge(name: str, help_text: str, value: Callable[[ReplicaLoad], float]) -> None:
        text.gauge(name, help_text, [(labels, value(load)) for labels, load in by_replica])

    scheduler_gauge("sglang:num_running_reqs", "The number of running requests.", lambda x: x.running)
    scheduler_gauge(
        "sglang:num_queue_reqs", "The number of requests in the waiting queue.", lambda x: x.waiting
    )
    scheduler_gauge(
        "sglang:gen_throughput", "The generation throughput (token/s).", lambda x: x.gen_throughput
    )
    scheduler_gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", lambda x: x.cache_hit_rate)
    scheduler_gauge("sglang:token_usage", "The token usage.", lambda x: token_usage(x, source.kv_pool_tokens))
    scheduler_gauge(
        "sglang:spec_accept_length",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
        lambda x: x.spec_accept_length,
    )
    text.histogram(
        "sglang:queue_time_seconds",
        "Histogram of queueing time in seconds.",
        [
            (by_replica[rank][0], histogram)
            for rank, histogram in sorted(source.queue_times.by_replica.items())
        ],
    )
    if pd is not None:
        _render_disaggregated(text, by_replica[0][0], pd)

    counters = source.counters
    by_stream = [
        ((*engine_labels, ("is_streaming", "true" if streamed else "false")), counts)
        for streamed, counts in sorted(counters.finished.items(), reverse=True)
    ]
    text.counter(
        "sglang:prompt_tokens",
        "Number of prefill tokens processed.",
        [(labels, counts.prompt_tokens) for labels, counts in by_stream],
    )
    text.counter(
        "sglang:generation_tokens",
        "Number of generation tokens processed.",
        [(labels, counts.generation_tokens) for labels, counts in by_stream],
    )
    text.counter(
        "sglang:cached_tokens",
        "Number of cached prompt tokens by source (device/host/storage).",
        [((*engine_labels, ("cache_source", CACHE_SOURCE)), counters.cached_tokens)]
        if counters.cached_tokens
        else [],
    )
    text.counter(
        "sglang:num_requests",
        "Number of requests processed.",
        [(labels, counts.requests) for labels, counts in by_stream],
    )
    text.counter(
        "sglang:num_aborted_requests",
        "Number of requests aborted.",
        [(engine_labels, counters.aborted)] if counters.aborted else [],
    )
    text.histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        [(labels, counts.e2e_latency) for labels, counts in by_stream],
    )

    engine = source.engine
    lag = engine.lag
    text.gauge(
        "fairbench_sim_schedule_lag_max_seconds",
        "Largest delay of a round's end past its modelled time (the simulator's own lateness).",
        [(model, lag.max_s)],
    )
    text.gauge(
        "fairbench_sim_schedule_lag_mean_seconds", "Mean delay of a round's end.", [(model, lag.mean_s)]
    )
    text.counter(
        "fairbench_sim_rounds", "Prefill forwards and decode rounds completed.", [(model, lag.rounds)]
    )
    text.gauge(
        "fairbench_sim_speed_factor",
        "The factor on every round's duration in this busy period (--sim-noise; 1 without it).",
        [(model, engine.speed_factor)],
    )
    text.counter(
        "fairbench_sim_speed_draws",
        "Busy periods that drew a speed factor (--sim-noise).",
        [(model, engine.speed_draws)],
    )
    return text.finish()


def _render_disaggregated(text: _Exposition, labels: Labels, pd: Disaggregated) -> None:
    """SGLang's PD disaggregation metrics, with the scheduler's labels (data-parallel rank 0's: the
    simulator's transfers belong to the server, not to a replica). Every queue gauge appears on both
    roles, as SGLang's ``log_stats`` sets them all; the transfer histograms on a prefill server only."""
    queues = pd.queues
    for name, role, value in (
        ("sglang:num_prefill_bootstrap_queue_reqs", "prefill bootstrap", queues.prefill_bootstrap),
        ("sglang:num_prefill_inflight_queue_reqs", "prefill inflight", queues.prefill_inflight),
        ("sglang:num_decode_prealloc_queue_reqs", "decode prealloc", queues.decode_prealloc),
        ("sglang:num_decode_transfer_queue_reqs", "decode transfer", queues.decode_transfer),
    ):
        text.gauge(name, f"The number of requests in the {role} queue.", [(labels, value)])
    counters = pd.counters
    text.counter(
        "sglang:num_bootstrap_failed_reqs",
        "The number of bootstrap failed requests.",
        [(labels, counters.bootstrap_failed)] if counters.bootstrap_failed else [],
    )
    text.counter(
        "sglang:num_transfer_failed_reqs",
        "The number of transfer failed requests.",
        [(labels, counters.transfer_failed)] if counters.transfer_failed else [],
    )
    observed = sum(counters.latency_ms.counts) > 0
    for name, help_text, histogram in (
        (
            "sglang:kv_transfer_speed_gb_s",
            "Histogram of KV cache transfer speed in GB/s.",
            counters.speed_gb_s,
        ),
        (
            "sglang:kv_transfer_latency_ms",
            "Histogram of KV cache transfer latency in ms.",
            counters.latency_ms,
        ),
        ("sglang:kv_transfer_total_mb", "Histogram of KV cache transfer size in MB.", counters.total_mb),
    ):
        text.histogram(name, help_text, [(labels, histogram)] if observed else [])


class _Exposition:
    """Families written as SGLang's ``prometheus_client`` writes them (text format 0.0.4): HELP, TYPE, then
    the samples with their labels in name order; a counter's family named with its ``_total`` suffix; a
    family with no sample left out, as the multiprocess registry leaves out a metric nothing has set, and
    no ``_created`` samples, which that registry does not keep."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def gauge(self, name: str, help_text: str, samples: list[tuple[Labels, float]]) -> None:
        self._family(name, "gauge", help_text, samples)

    def counter(self, name: str, help_text: str, samples: list[tuple[Labels, float]]) -> None:
        """The counter ``name``: its family and its samples are named ``name_total``."""
        self._family(f"{name}_total", "counter", help_text, samples)

    def histogram(self, name: str, help_text: str, series: list[tuple[Labels, Histogram]]) -> None:
        """Each series as the multiprocess collector writes it: its ``_sum``, its cumulative ``_bucket``
        counts by ``le`` (the last ``+Inf``), then its ``_count``."""
        if not series:
            return
        self._head(name, "histogram", help_text)
        for labels, histogram in series:
            self._sample(f"{name}_sum", labels, histogram.total)
            cumulative = 0
            for bound, count in zip((*histogram.bounds, math.inf), histogram.counts, strict=True):
                cumulative += count
                self._sample(f"{name}_bucket", (*labels, ("le", _number(bound))), cumulative)
            self._sample(f"{name}_count", labels, cumulative)

    def _family(self, name: str, kind: str, help_text: str, samples: list[tuple[Labels, float]]) -> None:
        if not samples:
            return
        self._head(name, kind, help_text)
        for labels, value in samples:
            self._sample(name, labels, value)

    def _head(self, name: str, kind: str, help_text: str) -> None:
        self._lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"))

    def _sample(self, name: str, labels: Labels, value: float) -> None:
        label_text = ",".join(f'{key}="{_escape(label)}"' for key, label in sorted(labels))
        self._lines.append(f"{name}{{{label_text}}} {_number(value)}")

    def finish(self) -> str:
        return "\n".join(self._lines) + "\n"


def _escape(value: str) -> str:
    """A label value in the text format: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """A value as the client's ``floatToGoString`` writes it: ``+Inf`` for infinity, else Python's
    ``repr``, but from a million up in Go's exponent form (``1.234567e+06``)."""
    if value == math.inf:
        return "+Inf"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text
