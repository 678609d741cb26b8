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

Tokenizer counters (``TokenizerMetricsCollector.observe_one_finished_request``), bumped once per finished
request, an aborted one included if it had been admitted: ``sglang:prompt_tokens_total``,
``sglang:generation_tokens_total`` and ``sglang:num_requests_total`` by ``is_streaming``, and
``sglang:cached_tokens_total`` by ``cache_source`` (``device``: the simulator's prefix cache is all on the
GPU). ``sglang:num_aborted_requests_total`` counts aborts as ``TokenizerManager.abort_request`` does: one per
``/abort_request`` that names a request in flight by its rid (or says ``abort_all``), one per client that
goes away before its response is complete. As in SGLang's multiprocess registry, a counter series appears
once something has counted in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fairbench.sim.engine import Engine, ReplicaLoad

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CACHE_SOURCE = "device"
"""``get_cached_tokens_details``' source of every cached token without a hierarchical cache."""

Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class _FinishedCounts:
    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0


@dataclass(slots=True)
class RequestCounters:
    """The tokenizer side's counters: what finished requests and aborts add up to."""

    finished: dict[bool, _FinishedCounts] = field(default_factory=dict)
    """By whether the request streamed."""
    cached_tokens: int = 0
    aborted: int = 0

    def observe_finished(
        self, streamed: bool, prompt_tokens: int, generation_tokens: int, cached_tokens: int
    ) -> None:
        counts = self.finished.setdefault(streamed, _FinishedCounts())
        counts.requests += 1
        counts.prompt_tokens += prompt_tokens
        counts.generation_tokens += generation_tokens
        self.cached_tokens += cached_tokens

    def observe_aborted(self) -> None:
        self.aborted += 1


@dataclass(frozen=True, slots=True)
class MetricsSource:
    """What ``/metrics`` reads: the engine's replicas, the counters, and the labels' constants."""

    model_name: str
    kv_pool_tokens: int
    """One replica's KV pool, in tokens (SGLang's ``max_total_num_tokens`` of that scheduler)."""
    engine: Engine
    counters: RequestCounters


def token_usage(load: ReplicaLoad, kv_pool_tokens: int) -> float:
    """SGLang's ``token_usage``: ``round(used / pool, 2)``, here at most 1 (see the module's docstring)."""
    return min(1.0, round(load.kv_tokens / kv_pool_tokens, 2))


def render(source: MetricsSource) -> str:
    """The Prometheus text exposition (format 0.0.4) of every metric the simulator serves."""
    text = _Exposition()
    model: Labels = (("model_name", source.model_name),)
    engine_labels: Labels = (*model, ("engine_type", "unified"))
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


class _Exposition:
    """Families written as SGLang's ``prometheus_client`` writes them (text format 0.0.4): HELP, TYPE, then
    the samples with their labels in name order; a counter's family named with its ``_total`` suffix; a
    family with no sample left out, as the multiprocess registry leaves out a metric nothing has set."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def gauge(self, name: str, help_text: str, samples: list[tuple[Labels, float]]) -> None:
        self._family(name, "gauge", help_text, samples)

    def counter(self, name: str, help_text: str, samples: list[tuple[Labels, float]]) -> None:
        """The counter ``name``: its family and its samples are named ``name_total``."""
        self._family(f"{name}_total", "counter", help_text, samples)

    def _family(self, name: str, kind: str, help_text: str, samples: list[tuple[Labels, float]]) -> None:
        if not samples:
            return
        self._lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"))
        for labels, value in samples:
            label_text = ",".join(f'{key}="{_escape(label)}"' for key, label in sorted(labels))
            self._lines.append(f"{name}{{{label_text}}} {_number(value)}")

    def finish(self) -> str:
        return "\n".join(self._lines) + "\n"


def _escape(value: str) -> str:
    """A label value in the text format: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """A sample's value as the client's ``floatToGoString`` writes a finite one: Python's ``repr``, but
    from a million up in Go's exponent form (``1.234567e+06``)."""
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text
