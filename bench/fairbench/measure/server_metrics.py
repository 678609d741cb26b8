"""The server's own counters around each point: SGLang's Prometheus ``/metrics`` (``--enable-metrics``).

A sampler process scrapes ``/metrics`` once as a point starts, about once a second while it runs, and
once as it ends; it parses each scrape with ``prometheus_client``'s parser and keeps only the families
below. It is a process of its own, not a thread: parsing SGLang's page (every histogram's buckets) takes
milliseconds of pure Python, which in the client's process would hold its event loop and show up as
TTFT.

From the two end scrapes come the counters' deltas over the point; from the samples in between, the
gauges' mean and max. SGLang counts a request's tokens once it has finished (its
``observe_one_finished_request``), so after a point whose requests have all ended the deltas cover
exactly that point's requests. With several schedulers (data parallelism) each reports its own gauges:
request counts are summed over them, ratios averaged.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from time import perf_counter_ns
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from fairbench.measure.child_process import start_child, stop_child

METRICS_PATH = "/metrics"
SAMPLE_INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 5.0

COUNTERS = {
    "sglang:prompt_tokens": "prompt_tokens",
    "sglang:generation_tokens": "generation_tokens",
    "sglang:cached_tokens": "cached_tokens",
}
"""Counter families (``prometheus_client`` names them without ``_total``) and the point's name for each."""
HISTOGRAM_SUMS = {
    "sglang:e2e_request_latency_seconds": "e2e_latency_s",
    "sglang:queue_time_seconds": "queue_time_s",
}
"""Histograms whose ``_sum`` is read: the seconds finished requests spent in the server, and in its queue.
Counted like the counters (the sum grows as requests finish or leave the queue)."""
SUMMED_GAUGES = {
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "queue",
    # A disaggregated server's queues (prefill: waiting for its decode server's handshake, then for the
    # transfer to end; decode: waiting for memory, then for the KV cache to arrive).
    "sglang:num_prefill_bootstrap_queue_reqs": "prefill_bootstrap_queue",
    "sglang:num_prefill_inflight_queue_reqs": "prefill_inflight_queue",
    "sglang:num_decode_prealloc_queue_reqs": "decode_prealloc_queue",
    "sglang:num_decode_transfer_queue_reqs": "decode_transfer_queue",
}
ROLE_QUEUES = (
    "prefill_bootstrap_queue",
    "prefill_inflight_queue",
    "decode_prealloc_queue",
    "decode_transfer_queue",
)
"""The disaggregation queues of ``SUMMED_GAUGES``: a prefill or decode server's own (``role_fields``)."""
ROLE_COUNTERS = {
    "sglang:num_bootstrap_failed_reqs": "bootstrap_failed",
    "sglang:num_transfer_failed_reqs": "transfer_failed",
}
"""A disaggregated server's failure counters (``prometheus_client`` names them without ``_total``)."""
HISTOGRAM_MEANS = {"sglang:kv_transfer_latency_ms": "kv_transfer_latency_ms"}
"""Histograms whose ``_sum`` and ``_count`` are read, for the mean of what they observed over a point: the
milliseconds each KV cache transfer took."""
AVERAGED_GAUGES = {"sglang:token_usage": "token_usage", "sglang:spec_accept_length": "spec_accept_length"}


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape: when (``perf_counter_ns``, the client's clock) and the watched values found in it."""

    t_ns: int
    values: dict[str, float]


def parse_metrics(text: str) -> dict[str, float]:
    """The watched values of a ``/metrics`` page: each counter's ``_total`` summed over its label sets (0
    where the page has the generation counter but not it yet), each gauge summed (request counts) or
    averaged (ratios) over its label sets; absent ones left out."""
    values: dict[str, float] = {}
    averaged: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name in COUNTERS or family.name in ROLE_COUNTERS:
            total_name = family.name + "_total"
            key = COUNTERS.get(family.name) or ROLE_COUNTERS[family.name]
            values[key] = sum(s.value for s in family.samples if s.name == total_name)
        elif family.name in HISTOGRAM_MEANS:
            for part in ("sum", "count"):
                name = f"{family.name}_{part}"
                values[f"{HISTOGRAM_MEANS[family.name]}_{part}"] = sum(
                    sample.value for sample in family.samples if sample.name == name
                )
        elif family.name in HISTOGRAM_SUMS:
            sum_name, count_name = family.name + "_sum", family.name + "_count"
            values[HISTOGRAM_SUMS[family.name]] = sum(s.value for s in family.samples if s.name == sum_name)
            values[HISTOGRAM_SUMS[family.name] + "_count"] = sum(
                sample.value for sample in family.samples if sample.name == count_name
            )
        elif family.name in SUMMED_GAUGES:
            values[SUMMED_GAUGES[family.name]] = sum(sample.value for sample in family.samples)
        elif family.name in AVERAGED_GAUGES:
            averaged[AVERAGED_GAUGES[family.name]] = [sample.value for sample in family.samples]
    for key, samples in averaged.items():
        if samples:
            values[key] = sum(samples) / len(samples)
    if "generation_tokens" in values:
        # SGLang writes a labelled counter only once it has counted something (a cached token, say):
        # beside its generation counter, one not written yet is 0.
        for key in (*COUNTERS.values(), *HISTOGRAM_SUMS.values()):
            values.setdefault(key, 0.0)
    return values


def scrape(url: str, headers: Mapping[str, str]) -> Scrape | str:
    """One scrape of ``url``; the reason in words when it failed."""
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT_S) as response:
            text = response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return f"{url} answered HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return f"{url}: {exc}"
    try:
        return Scrape(perf_counter_ns(), parse_metrics(text))
    except ValueError as exc:  # the parser's error for a page that is not Prometheus text
        return f"{url} is not Prometheus text: {exc}"


@dataclass(slots=True)
class PointScrapes:
    """What the sampler saw over one point."""

    before: Scrape | str
    after: Scrape | str
    samples: list[Scrape]
    failures: list[str]
    """Why each failed scrape between the two ends failed."""


def sampler_main(url: str, headers: dict[str, str], interval_s: float, conn: Connection) -> None:
    """The sampler process: for each "begin" the parent sends, scrape at once (sent back), then every
    ``interval_s`` until "end", then once more; exits on None."""
    while conn.recv() is not None:
        conn.send(scrape(url, headers))
        samples: list[Scrape] = []
        failures: list[str] = []
        while not conn.poll(interval_s):
            taken = scrape(url, headers)
            if isinstance(taken, Scrape):
                samples.append(taken)
            else:
                failures.append(taken)
        conn.recv()
        conn.send((scrape(url, headers), samples, failures))


class ServerMetricsSampler:
    """The sampler process of one sweep: ``begin`` as a point starts, ``end`` as it ends."""

    def __init__(self, base_url: str, headers: Mapping[str, str], interval_s: float = SAMPLE_INTERVAL_S):
        self._conn, self._process = start_child(
            sampler_main,
            (base_url.rstrip("/") + METRICS_PATH, dict(headers), interval_s),
            "fairbench-server-metrics",
        )
        self._before: Scrape | str = ""

    def begin(self) -> None:
        """Scrape now (waits for it) and sample until ``end``."""
        self._conn.send("begin")
        self._before = self._conn.recv()

    def end(self) -> PointScrapes:
        """Scrape now, and return the point's scrapes."""
        self._conn.send("end")
        after, samples, failures = self._conn.recv()
        return PointScrapes(self._before, after, samples, failures)

    def close(self) -> None:
        stop_child(self._conn, self._process)

    def __enter__(self) -> ServerMetricsSampler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _stats(samples: Sequence[Scrape], key: str) -> tuple[float | None, float | None]:
    values = [sample.values[key] for sample in samples if key in sample.values]
    return (sum(values) / len(values), max(values)) if values else (None, None)


def _in_window(samples: Sequence[Scrape], window: tuple[int, int] | None) -> list[Scrape]:
    """The samples taken in ``window`` (``perf_counter_ns`` bounds); all of them without one."""
    return [sample for sample in samples if window is None or window[0] <= sample.t_ns < window[1]]


def point_fields(scrapes: PointScrapes, window: tuple[int, int] | None) -> dict[str, Any]:
    """A point's server fields.

    - server_{prompt,generation,cached}_tokens = the counter at the end scrape - at the start scrape (0
      where the start scrape did not have it yet); None when either scrape failed or the end scrape has
      no such counter
    - server_in_flight_mean = the e2e latency histogram's sum at the end - at the start, over the seconds
      between the two scrapes: by Little's law the mean number of requests in the server over the point,
      from its receipt of each to its finish; server_queued_mean likewise from the queue-time histogram,
      the mean number waiting in its queue. Both from counters, exact where the gauges are not: SGLang
      refreshes ``num_running_reqs`` only at its log points, and counts a prefill's own requests in
      neither gauge. None without those histograms
    - server_{running,queue}_{mean,max}, server_token_usage_{mean,max}: over the samples taken in
      ``window`` (a closed loop's steady window: every stream active; the ramp and the tail would read
      low), or over all of the point's samples without one (an open loop); None without samples
    - server_spec_accept_length = the mean of the gauge over the same samples that read above 0; None
      where none did (SGLang writes 0 without speculative decoding)
    - server_metric_samples = the samples those figures are over; server_metric_failures = the scrapes
      that failed, with the first reason in server_metric_error
    """
    fields: dict[str, Any] = {}
    before, after = scrapes.before, scrapes.after
    start = before.values if isinstance(before, Scrape) else {}
    end = after.values if isinstance(after, Scrape) else {}

    def delta(key: str) -> float | None:
        # Absent at the start is not counted yet (a fresh server has written no counter): 0.
        known = isinstance(before, Scrape) and key in end
        return end[key] - start.get(key, 0.0) if known else None

    for key in COUNTERS.values():
        counted = delta(key)
        fields[f"server_{key}"] = None if counted is None else round(counted)
    span_s = (
        (after.t_ns - before.t_ns) / 1e9 if isinstance(before, Scrape) and isinstance(after, Scrape) else 0
    )
    for field, key in (("server_in_flight_mean", "e2e_latency_s"), ("server_queued_mean", "queue_time_s")):
        seconds = delta(key)
        fields[field] = seconds / span_s if seconds is not None and span_s > 0 else None
    samples = _in_window(scrapes.samples, window)
    for key in ("running", "queue", "token_usage"):
        fields[f"server_{key}_mean"], fields[f"server_{key}_max"] = _stats(samples, key)
    # SGLang writes the gauge as 0 where it does not speculate (and before a speculating server's first
    # decode log): a real accept length is at least 1, so a 0 is no reading.
    accepted = [sample for sample in samples if sample.values.get("spec_accept_length", 0.0) > 0]
    fields["server_spec_accept_length"] = _stats(accepted, "spec_accept_length")[0]
    fields["server_metric_samples"] = len(samples)
    failures = [*(end for end in (before, after) if isinstance(end, str)), *scrapes.failures]
    fields["server_metric_failures"] = len(failures)
    fields["server_metric_error"] = failures[0] if failures else None
    return fields


def role_fields(scrapes: PointScrapes, window: tuple[int, int] | None) -> dict[str, Any]:
    """A disaggregated config's prefill or decode server's fields over a point (``server_roles``): its
    :func:`point_fields` without the ``server_`` prefix, and

    - {prefill_bootstrap,prefill_inflight,decode_prealloc,decode_transfer}_queue_{mean,max}: its
      disaggregation queues over the same samples; None where it exports none
    - kv_transfer_latency_ms = (the transfer-latency histogram's sum at the end - at the start) / (its count
      at the end - at the start): the mean transfer the point's requests waited for; None where none ended
    - {bootstrap,transfer}_failed = the failure counters' deltas; None where it exports none
    - request_latency_ms = the e2e latency histogram's sum delta / its count delta: the mean time the
      point's finished requests spent in this server, from its receipt of each to its answer (a prefill
      server answers once the KV cache has reached its decode server); None where none finished
    """
    fields = {key.removeprefix("server_"): value for key, value in point_fields(scrapes, window).items()}
    before, after = scrapes.before, scrapes.after
    start = before.values if isinstance(before, Scrape) else {}
    end = after.values if isinstance(after, Scrape) else {}
    samples = _in_window(scrapes.samples, window)
    for key in ROLE_QUEUES:
        fields[f"{key}_mean"], fields[f"{key}_max"] = _stats(samples, key)
    both = isinstance(before, Scrape) and isinstance(after, Scrape)
    for key in ROLE_COUNTERS.values():
        fields[key] = round(end[key] - start.get(key, 0.0)) if both and key in end else None
    for key in HISTOGRAM_MEANS.values():
        count = end.get(f"{key}_count", 0.0) - start.get(f"{key}_count", 0.0) if both else 0.0
        total = end.get(f"{key}_sum", 0.0) - start.get(f"{key}_sum", 0.0)
        fields[key] = total / count if count > 0 else None
    finished = end.get("e2e_latency_s_count", 0.0) - start.get("e2e_latency_s_count", 0.0) if both else 0.0
    seconds = end.get("e2e_latency_s", 0.0) - start.get("e2e_latency_s", 0.0)
    fields["request_latency_ms"] = 1000 * seconds / finished if finished > 0 else None
    return fields
