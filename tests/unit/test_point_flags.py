"""The cross-checks of a point: each flag raised past its threshold, with its reason, and not below it."""

from __future__ import annotations

from typing import Any

import pytest

from fairbench.measure.point_flags import (
    CACHE_RATE_SLACK,
    CLIENT_LAG_MEAN_MAX_MS,
    CLIENT_RUNNABLE_SHARE_MAX,
    allowed_cache_rate,
    client_flags,
    server_flags,
    server_observations,
)


def point(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "completed": 100,
        "num_prompts": 100,
        "total_output_tokens": 25_600,
        "total_input_tokens": 12_800,
        "max_concurrency": 64,
        "concurrency": 60.0,
        "server_generation_tokens": 25_600,
        "server_prompt_tokens": 12_800,
        "server_cached_tokens": 0,
        "server_running_mean": 63.5,
        "server_queue_mean": 0.0,
    }
    return base | fields


def names(flags: list[dict[str, Any]]) -> list[str]:
    return [flag["flag"] for flag in flags]


def test_a_point_that_agrees_with_its_server_raises_nothing() -> None:
    assert server_flags(point(), api="completions", closed_loop=True) == []


def test_a_token_count_the_server_disagrees_with_is_flagged_on_throughput() -> None:
    (flag,) = server_flags(point(server_generation_tokens=25_601), api="completions", closed_loop=True)
    assert flag["flag"] == "server_tokens_differ"
    assert "output_throughput" in flag["on"]
    assert "25,601" in flag["reason"] and "25,600" in flag["reason"]


def test_token_counts_are_not_compared_when_a_request_failed() -> None:
    flags = server_flags(
        point(server_generation_tokens=25_000, completed=99), api="completions", closed_loop=True
    )
    assert flags == []


def test_without_server_counters_nothing_is_checked() -> None:
    empty = point(server_generation_tokens=None, server_running_mean=None, server_cached_tokens=None)
    assert server_flags(empty, api="completions", closed_loop=True) == []


@pytest.mark.parametrize(
    ("queued", "why"),
    [
        (6.0, "neither its /server_info nor its running-requests gauge says how many it runs at once"),
        (0.5, "the client was late sending or reading them"),  # 57.5 held: below 90 % of 64 too
        (0.0, "the client was late sending or reading them"),
    ],
)
def test_running_below_90_percent_of_c_says_why(queued: float, why: str) -> None:
    (flag,) = server_flags(
        point(server_running_mean=57.0, server_queue_mean=queued), api="completions", closed_loop=True
    )
    assert flag["flag"] == "running_below_concurrency"
    assert why in flag["reason"]
    assert "max_concurrency" in flag["on"]


@pytest.mark.parametrize(
    ("in_server", "queued", "why"),
    [
        (60.0, 44.0, "it may be capped"),  # 16 ran of the 60 the client had, the gauge unsampled
        (40.0, 4.0, "the client was late sending or reading them"),  # 36 ran: the rest outside the server
    ],
)
def test_the_servers_own_littles_law_is_held_against_what_the_client_had_in_flight(
    in_server: float, queued: float, why: str
) -> None:
    # The gauge would pass (63.5 of 64): the histograms' Little's law is what counts where present.
    measured = point(server_in_flight_mean=in_server, server_queued_mean=queued)
    (flag,) = server_flags(measured, api="completions", closed_loop=True)
    assert flag["flag"] == "running_below_concurrency"
    assert why in flag["reason"] and "its own Little's law" in flag["reason"]
    # 54 of the 60 in flight: at 90 %, no flag, though the gauge would read low.
    steady = point(server_in_flight_mean=56.0, server_queued_mean=2.0, server_running_mean=30.0)
    assert server_flags(steady, api="completions", closed_loop=True) == []


def test_a_server_that_ran_c_at_once_and_queued_the_rest_on_their_way_in_is_an_observation() -> None:
    # 55.7 of 63.9 ran on average, 8.2 queued for a prefill; its gauge reached all 64 at once.
    queueing = point(
        server_in_flight_mean=63.9, server_queued_mean=8.2, concurrency=63.9, server_running_max=64.0
    )
    assert server_flags(queueing, api="completions", closed_loop=True) == []
    (seen,) = server_observations(queueing, closed_loop=True)
    assert seen["observation"] == "queued_at_concurrency"
    assert (
        "8.2 waited in its queue on average, and its running-requests gauge read up to 64 at once"
        in (seen["reason"])
    )
    # The limit its /server_info states says the same where no gauge sample fell in a short point.
    unsampled = {**queueing, "server_running_max": None, "server_running_limit": 256}
    assert server_flags(unsampled, api="completions", closed_loop=True) == []
    (seen,) = server_observations(unsampled, closed_loop=True)
    assert "its /server_info says it runs up to 256 at once" in seen["reason"]
    assert server_observations(queueing, closed_loop=False) == []
    # A server capped at 4 running requests, swept at C=16: it never ran more than 4, a doubt.
    capped = point(
        max_concurrency=16, concurrency=15.9, server_in_flight_mean=15.9, server_queued_mean=11.9,
        server_running_max=4.0, server_running_mean=4.0, server_queue_mean=11.9,
    )  # fmt: skip
    (flag,) = server_flags(capped, api="completions", closed_loop=True)
    assert flag["flag"] == "running_below_concurrency"
    assert "its running-requests gauge read up to 4 at once (below 90% of C=16" in flag["reason"]
    # Its /server_info's limit of 4 is told first.
    (flag,) = server_flags({**capped, "server_running_limit": 4}, api="completions", closed_loop=True)
    assert "its /server_info says it runs up to 4 at once" in flag["reason"]
    assert server_observations(capped, closed_loop=True) == []
    # A client that held fewer than C in flight: the time went outside the server, a doubt.
    late = point(server_in_flight_mean=40.0, server_queued_mean=0.5, server_running_max=64.0)
    assert names(server_flags(late, api="completions", closed_loop=True)) == ["running_below_concurrency"]


def test_a_failed_scrape_of_the_servers_metrics_doubts_the_checks_and_names_no_figure() -> None:
    failed = point(server_metric_failures=2, server_metric_error="timed out")
    (flag,) = server_flags(failed, api="completions", closed_loop=True)
    assert flag["flag"] == "server_metrics_failed" and flag["on"] == []
    assert flag["reason"].startswith(
        "2 scrape(s) of the server's /metrics failed during the point (the first"
    )


def test_running_at_90_percent_of_c_or_in_an_open_loop_is_not_flagged() -> None:
    assert server_flags(point(server_running_mean=57.6), api="completions", closed_loop=True) == []
    assert server_flags(point(server_running_mean=10.0), api="completions", closed_loop=False) == []


def test_a_cache_hit_rate_above_what_the_workload_allows_is_prefix_reuse() -> None:
    allowed = allowed_cache_rate("completions", 128)
    assert allowed == pytest.approx(CACHE_RATE_SLACK)
    under = point(server_cached_tokens=int(12_800 * allowed) - 1)
    over = point(server_cached_tokens=int(12_800 * allowed) + 1)
    assert server_flags(under, api="completions", closed_loop=True) == []
    (flag,) = server_flags(over, api="completions", closed_loop=True)
    assert flag["flag"] == "prefix_reuse" and "median_ttft_ms" in flag["on"]


def test_a_chat_template_prefix_is_allowed_in_the_cache() -> None:
    assert allowed_cache_rate("chat", 128) > allowed_cache_rate("completions", 128)
    shared = point(server_cached_tokens=100 * 40)  # 40 template tokens of each prompt
    assert server_flags(shared, api="chat", closed_loop=True) == []
    assert names(server_flags(shared, api="completions", closed_loop=True)) == ["prefix_reuse"]


def use(cpu_share: float, lag_ms: float, waiting: float | None = 0.0) -> dict[str, Any]:
    return {
        "cpu_s": cpu_share * 10,
        "cpu_share": cpu_share,
        "runqueue_wait_share": waiting,
        "requests": 10,
        "event_loop_lag_mean_ms": lag_ms,
    }


def test_a_busy_starved_or_late_client_process_is_flagged_client_bound_naming_it() -> None:
    assert client_flags([use(0.5, 0.2), use(0.6, 1.4, waiting=0.29), use(0.89, 0.9, waiting=None)]) == []
    (busy,) = client_flags([use(0.5, 0.2), use(CLIENT_RUNNABLE_SHARE_MAX + 0.01, 0.2)])
    assert busy["flag"] == "client_bound" and "client process 1" in busy["reason"]
    (starved,) = client_flags([use(0.1, 1.0, waiting=0.85)])
    assert "85% waiting for a core" in starved["reason"]
    (late,) = client_flags([use(0.4, CLIENT_LAG_MEAN_MAX_MS + 0.5)])
    assert "woke 2.00 ms late" in late["reason"] and "client process 0" in late["reason"]
