"""The figures of a point that the report reads, each a number in points.jsonl (``measure.metrics`` defines
them), and the columns that show them."""

from __future__ import annotations

import math

THROUGHPUT = "output_throughput"
PER_GPU = "output_throughput_per_gpu"
PER_USER = "per_user_tps"
TOKENS_PER_JOULE = "output_tokens_per_j"

Column = tuple[str, str, int]
"""A table column: its title, the point's key, the digits shown."""

LEVEL_COLUMNS: tuple[Column, ...] = (
    ("out tok/s", THROUGHPUT, 1),
    ("steady out tok/s", "steady_output_throughput", 1),
    ("tok/s per user", PER_USER, 1),
    ("TTFT p50 ms", "median_ttft_ms", 1),
    ("TTFT p99 ms", "p99_ttft_ms", 1),
    ("TPOT p50 ms", "median_tpot_ms", 2),
    ("ITL p50 ms", "median_itl_ms", 2),
    ("E2E p50 ms", "median_e2e_latency_ms", 1),
    ("completed", "completed", 0),
    ("failed", "failed", 0),
)
# GPU energy (NVML, during the measured loop): columns only for a config whose points have it.
ENERGY_COLUMNS: tuple[Column, ...] = (
    ("GPU energy J", "gpu_energy_j", 0),
    ("GPU mean W", "gpu_mean_power_w", 0),
    ("out tok/J", TOKENS_PER_JOULE, 2),
)

SLO_ATTAINMENT = "slo_attainment"
"""The share (0 to 1) of a point's requests that succeeded and met every objective on their own."""
GOODPUT = "goodput_output_throughput"
# Against the campaign's SLO: columns only for a config whose points were judged against one.
SLO_COLUMNS: tuple[Column, ...] = (
    ("goodput out tok/s", GOODPUT, 1),
    ("goodput req/s", "goodput_request_throughput", 2),
)

ACHIEVED_RATE = "achieved_request_rate"
"""The rate an open loop's requests went out at, req/s (``arrivals.achieved_rate``); null with fewer than
two sent, so not among ``FIGURES``."""
SEND_DELAYS = ("median_send_delay_ms", "p99_send_delay_ms", "max_send_delay_ms")
"""How late an open loop's requests went out after their scheduled time: over every request sent."""
# An open loop's sending: columns only for an open loop's levels, beside the target rate.
OPEN_LOOP_COLUMNS: tuple[Column, ...] = (
    ("achieved req/s", ACHIEVED_RATE, 2),
    ("send delay p50 ms", SEND_DELAYS[0], 2),
    ("send delay p99 ms", SEND_DELAYS[1], 2),
)

FIGURES = frozenset(
    {key for _, key, _ in LEVEL_COLUMNS + ENERGY_COLUMNS + SLO_COLUMNS}
    | {PER_GPU, SLO_ATTAINMENT, "goodput_output_throughput_per_gpu", *SEND_DELAYS}
)
"""Every key of a point that the report reads as a number (``ACHIEVED_RATE`` may also be null)."""
OF_COMPLETED = frozenset({key for key in FIGURES if key.endswith("_ms")} - set(SEND_DELAYS) | {PER_USER})
"""Figures that are statistics of the completed requests (latencies and the per-user speed): measure.metrics
writes 0 for them when none completed, and that 0 measured nothing."""


# Speculative decoding (measure/metrics.py, spec_metrics and accept_length; measure/server_metrics.py):
# absent from a point of a server without it, and the per-request ones from a point on the OpenAI APIs.
SPEC_REQUESTS = "spec_requests"
"""The ok requests of a point that reported their verify steps (``/generate``'s ``meta_info``)."""
SPEC_ACCEPT_LENGTH = "spec_accept_length"
"""Tokens per verify step over the point's requests: sum of output tokens / sum of verify steps."""
SPEC_ACCEPT_RATE = "spec_accept_rate"
"""Draft tokens accepted / proposed over the point's requests, 0 to 1; null where none were proposed."""
SPEC_HISTOGRAM = "spec_accept_length_histogram"
"""Requests per bin of their own accept length (``metrics.SPEC_HISTOGRAM_EDGES``)."""
SERVER_SPEC_ACCEPT_LENGTH = "server_spec_accept_length"
"""The mean of the server's ``sglang:spec_accept_length`` gauge over the point's scrapes."""
ACCEPT_LENGTH = "accept_length"
"""``/server_info``'s ``avg_spec_accept_length`` once the point's loop ended: the server's since its start."""

DERIVED_FROM: dict[str, tuple[str, ...]] = {
    PER_GPU: (THROUGHPUT,),
    PER_USER: ("median_tpot_ms",),
    TOKENS_PER_JOULE: ("total_output_tokens",),
}
"""Figures computed from other keys of the point (``measure.metrics``): a flag cast on those casts its doubt
on them too (report/flags.py)."""

# The measurement cross-checks of a point (measure/server_metrics.py, measure/event_loop.py,
# measure/metrics.py): absent from points measured before them, and from a point whose server's
# /metrics was not scraped.
FLAGS = "flags"
"""The checks a point failed: each ``{"flag", "on", "reason"}`` (measure/point_flags.py)."""
GPU_STATE = "gpu_state"
"""Each GPU's clocks, clock-event reasons and temperature over the point (measure/gpu_state.py)."""
GPU_THROTTLED = "gpu_throttled_share"
GPU_POWER_CAPPED = "gpu_power_capped_share"
"""The largest share of a point's samples the machine held a GPU down, and that a GPU ran at its power
limit (measure/gpu_state.py)."""
CLIENT_CPU_BUSY = "client_cpu_busy_share"
CLIENT_CPU_STEAL = "client_cpu_steal_share"
"""The client machine's CPU over the point (measure/machine_load.py)."""
OBSERVATIONS = "observations"
"""What the checks saw of the server's or its GPUs' behaviour without doubting the point: each
``{"observation", "reason"}`` (measure/point_flags.py)."""
OUTPUT_TOKENS = "total_output_tokens"
SERVER_SAMPLES = "server_metric_samples"
"""Present on every point whose server's /metrics was scraped (server_metrics.point_fields)."""
SERVER_PROMPT_TOKENS = "server_prompt_tokens"
SERVER_GENERATION_TOKENS = "server_generation_tokens"
SERVER_CACHED_TOKENS = "server_cached_tokens"
SERVER_TOKENS = (SERVER_PROMPT_TOKENS, SERVER_GENERATION_TOKENS, SERVER_CACHED_TOKENS)
"""Counter deltas over the point; null where a scrape at either end failed."""
SERVER_GAUGES = (
    "server_running_mean",
    "server_running_max",
    "server_queue_mean",
    "server_queue_max",
    "server_token_usage_mean",
    "server_token_usage_max",
    SERVER_SPEC_ACCEPT_LENGTH,
)
SERVER_LITTLE = ("server_in_flight_mean", "server_queued_mean")
"""The server's own Little's law over the point (its latency histograms' sums): requests in it, and queued."""
SERVER_FAILURES = "server_metric_failures"
SERVER_ERROR = "server_metric_error"
CLIENT_PROCESSES = "client_processes"
CLIENT_USE = "client_process_use"
"""Per client process: its CPU and wait shares, requests and loop lag (event_loop.ProcessUse.to_json)."""
LOOP_LAGS = ("event_loop_lag_mean_ms", "event_loop_lag_p99_ms", "event_loop_lag_max_ms")
"""The worst client process's loop lag (older points: the one process's)."""
SEND_GAPS = ("server_send_gap_median_ms", "server_send_gap_p99_ms", "server_send_gap_max_ms")
"""The client's read of a stream's first chunk after the server's own send time; /generate only."""
CHECK_NUMBERS = (
    OUTPUT_TOKENS,
    *SERVER_TOKENS,
    *SERVER_GAUGES,
    *SERVER_LITTLE,
    "client_cpu_s",
    *LOOP_LAGS,
    *SEND_GAPS,
    GPU_THROTTLED,
    GPU_POWER_CAPPED,
    CLIENT_CPU_BUSY,
    CLIENT_CPU_STEAL,
)
"""The checks' keys that are a number, or null where not measured."""


def non_finite_text(value: float) -> str:
    """How the report writes a figure that is not a finite number: ``NaN``, ``inf`` or ``-inf``."""
    return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
