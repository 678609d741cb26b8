"""The server's counters around a point: parsing SGLang's /metrics page, the sampler process, the fields."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from time import perf_counter_ns, sleep

import pytest

from fairbench.measure.server_metrics import (
    PointScrapes,
    Scrape,
    ServerMetricsSampler,
    parse_metrics,
    point_fields,
    role_fields,
)

LABELS = 'model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"'

# As SGLang 0.5.23 writes it: counters with a _total and a _created sample per label set, a gauge per
# scheduler (two data-parallel ranks here), histograms the parser must skip.
PAGE = f"""# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{model_name="m",is_streaming="true"}} 1200.0
sglang:prompt_tokens_total{{model_name="m",is_streaming="false"}} 34.0
# HELP sglang:prompt_tokens_created Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_created gauge
sglang:prompt_tokens_created{{model_name="m",is_streaming="true"}} 1.7e9
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="m",is_streaming="true"}} 5000.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{{model_name="m"}} 64.0
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{LABELS},dp_rank="0"}} 30.0
sglang:num_running_reqs{{{LABELS},dp_rank="1"}} 31.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{{LABELS},dp_rank="0"}} 2.0
sglang:num_queue_reqs{{{LABELS},dp_rank="1"}} 1.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{{{LABELS},dp_rank="0"}} 0.25
sglang:token_usage{{{LABELS},dp_rank="1"}} 0.75
# HELP sglang:e2e_request_latency_seconds Histogram of End-to-end request latency in seconds
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{{model_name="m",le="0.1"}} 3.0
sglang:e2e_request_latency_seconds_bucket{{model_name="m",le="+Inf"}} 9.0
sglang:e2e_request_latency_seconds_count{{model_name="m"}} 9.0
sglang:e2e_request_latency_seconds_sum{{model_name="m"}} 4.5
"""


def test_counters_sum_their_label_sets_gauges_sum_counts_and_average_ratios() -> None:
    assert parse_metrics(PAGE) == {
        "prompt_tokens": 1234.0,
        "generation_tokens": 5000.0,
        "cached_tokens": 64.0,
        "running": 61.0,
        "queue": 3.0,
        "token_usage": 0.5,
        "e2e_latency_s": 4.5,
        "e2e_latency_s_count": 9.0,
        "queue_time_s": 0.0,  # not written yet, beside the generation counter
    }


def test_a_counter_sglang_has_not_written_yet_is_zero_beside_its_generation_counter() -> None:
    without_cache_hits = "\n".join(line for line in PAGE.splitlines() if "cached_tokens" not in line) + "\n"
    assert parse_metrics(without_cache_hits)["cached_tokens"] == 0
    running_only = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 3\n"
    assert parse_metrics(running_only) == {"running": 3.0}


def test_a_page_that_is_not_prometheus_text_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_metrics("<html>not metrics</html>\n")


def scrape_at(t_ns: int, **values: float) -> Scrape:
    return Scrape(t_ns, values)


def test_fields_are_the_counter_deltas_and_the_gauges_inside_the_window() -> None:
    scrapes = PointScrapes(
        before=scrape_at(0, generation_tokens=100, prompt_tokens=50, cached_tokens=0),
        after=scrape_at(10, generation_tokens=612, prompt_tokens=306, cached_tokens=5),
        samples=[
            scrape_at(1, running=2, queue=0, token_usage=0.1),
            scrape_at(4, running=8, queue=1, token_usage=0.4),
            scrape_at(6, running=6, queue=3, token_usage=0.6),
            scrape_at(9, running=1, queue=0, token_usage=0.1),
        ],
        failures=[],
    )
    fields = point_fields(scrapes, window=(3, 8))
    assert fields["server_generation_tokens"] == 512
    assert fields["server_prompt_tokens"] == 256
    assert fields["server_cached_tokens"] == 5
    assert (fields["server_running_mean"], fields["server_running_max"]) == (7.0, 8)
    assert (fields["server_queue_mean"], fields["server_queue_max"]) == (2.0, 3)
    assert fields["server_token_usage_max"] == 0.6
    assert fields["server_spec_accept_length"] is None
    assert fields["server_metric_samples"] == 2
    # No sample inside the window (a short point): no gauge figures, rather than the ramp's and the tail's.
    short = point_fields(scrapes, window=(2, 3))
    assert (short["server_metric_samples"], short["server_running_mean"]) == (0, None)
    # No window (an open loop): every sample of the point.
    assert point_fields(scrapes, window=None)["server_metric_samples"] == 4


def test_the_histograms_sums_give_the_servers_own_mean_in_flight_and_queued_by_littles_law() -> None:
    # Over 4 s between the scrapes, finished requests spent 30 s in the server, 6 of them in its queue.
    scrapes = PointScrapes(
        scrape_at(1_000_000_000, e2e_latency_s=10.0, queue_time_s=1.0),
        scrape_at(5_000_000_000, e2e_latency_s=40.0, queue_time_s=7.0),
        [],
        [],
    )
    fields = point_fields(scrapes, window=None)
    assert fields["server_in_flight_mean"] == pytest.approx(7.5)
    assert fields["server_queued_mean"] == pytest.approx(1.5)
    no_histograms = point_fields(PointScrapes(scrape_at(0), scrape_at(5), [], []), window=None)
    assert no_histograms["server_in_flight_mean"] is None


def test_a_counter_absent_at_the_start_had_counted_nothing_yet() -> None:
    scrapes = PointScrapes(scrape_at(0, running=0), scrape_at(5, generation_tokens=64), [], [])
    fields = point_fields(scrapes, window=None)
    assert fields["server_generation_tokens"] == 64
    assert fields["server_prompt_tokens"] is None  # nor at the end: the server has no such counter


def test_a_failed_end_scrape_leaves_the_deltas_unknown_and_says_why() -> None:
    scrapes = PointScrapes(scrape_at(0, generation_tokens=1), "http://h/metrics answered HTTP 500", [], ["x"])
    fields = point_fields(scrapes, window=None)
    assert fields["server_generation_tokens"] is None
    assert fields["server_running_mean"] is None
    assert fields["server_metric_failures"] == 2
    assert fields["server_metric_error"] == "http://h/metrics answered HTTP 500"


class _Counting(BaseHTTPRequestHandler):
    """/metrics whose generation counter grows by 10 on every scrape."""

    scrapes = 0

    def do_GET(self) -> None:  # http.server names the handler so
        type(self).scrapes += 1
        body = (
            "# TYPE sglang:generation_tokens_total counter\n"
            f'sglang:generation_tokens_total{{a="b"}} {10 * type(self).scrapes}\n'
            "# TYPE sglang:num_running_reqs gauge\n"
            f'sglang:num_running_reqs{{a="b"}} {type(self).scrapes}\n'
        ).encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_sampler_process_scrapes_at_both_ends_and_about_every_interval_between(metrics_url: str) -> None:
    with ServerMetricsSampler(metrics_url, {}, interval_s=0.1) as sampler:
        sampler.begin()
        started = perf_counter_ns()
        sleep(0.55)
        scrapes = sampler.end()
        ended = perf_counter_ns()
    assert isinstance(scrapes.before, Scrape) and isinstance(scrapes.after, Scrape)
    assert 3 <= len(scrapes.samples) <= 6
    assert all(started <= sample.t_ns <= ended for sample in scrapes.samples)  # the same clock as ours
    fields = point_fields(scrapes, window=None)
    assert fields["server_generation_tokens"] == 10 * (len(scrapes.samples) + 1)
    assert fields["server_running_max"] == len(scrapes.samples) + 1


def test_the_sampler_reports_a_server_without_metrics(metrics_url: str) -> None:
    with ServerMetricsSampler(metrics_url + "/nothing-here", {}, interval_s=0.1) as sampler:
        sampler.begin()
        scrapes = sampler.end()
    assert isinstance(scrapes.before, str) and "HTTP 404" in scrapes.before


def _decode_page(transferred: int, latency_ms_sum: float, queue: int) -> str:
    """A decode server's page as SGLang 0.5.23 writes its disaggregation families."""
    labels = 'model_name="m",engine_type="decode",tp_rank="0",pp_rank="0"'
    return f"""# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="m"}} {100 * transferred}.0
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_count{{model_name="m"}} {transferred}.0
sglang:e2e_request_latency_seconds_sum{{model_name="m"}} {transferred * 0.5}
# TYPE sglang:num_decode_transfer_queue_reqs gauge
sglang:num_decode_transfer_queue_reqs{{{labels}}} {queue}.0
# TYPE sglang:num_transfer_failed_reqs_total counter
sglang:num_transfer_failed_reqs_total{{{labels}}} 1.0
# TYPE sglang:kv_transfer_latency_ms histogram
sglang:kv_transfer_latency_ms_bucket{{{labels},le="+Inf"}} {transferred}.0
sglang:kv_transfer_latency_ms_count{{{labels}}} {transferred}.0
sglang:kv_transfer_latency_ms_sum{{{labels}}} {latency_ms_sum}
"""


def test_a_disaggregated_servers_fields_are_its_queues_failures_and_mean_transfer_over_the_point() -> None:
    # 10 transfers before the point, 30 after it: the point's 20 took 300 ms in all, 15 ms each.
    before = Scrape(0, parse_metrics(_decode_page(10, 200.0, 0)))
    during = [Scrape(t, parse_metrics(_decode_page(20, 350.0, queue))) for t, queue in ((10, 4), (20, 2))]
    after = Scrape(30, parse_metrics(_decode_page(30, 500.0, 0)))
    fields = role_fields(PointScrapes(before, after, during, []), None)
    assert fields["kv_transfer_latency_ms"] == pytest.approx(15.0)
    assert (fields["decode_transfer_queue_mean"], fields["decode_transfer_queue_max"]) == (3.0, 4.0)
    assert (fields["transfer_failed"], fields["bootstrap_failed"]) == (0, None)
    assert fields["generation_tokens"] == 2000
    assert fields["request_latency_ms"] == pytest.approx(500.0)
    # A prefill server's queues it does not export: unknown, not 0.
    assert fields["prefill_bootstrap_queue_mean"] is None
    # No transfer ended during a point: no mean.
    idle = role_fields(PointScrapes(after, after, [], []), None)
    assert idle["kv_transfer_latency_ms"] is None
