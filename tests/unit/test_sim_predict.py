"""The virtual-clock predictor: per-request latency distributions, the time scale, and the highest
concurrency meeting latency limits."""

from __future__ import annotations

import argparse
import time

import pytest

from fairbench.cli.sim import configure
from fairbench.sim.args import SimConfig, resolve
from fairbench.sim.predict import (
    highest_concurrency_meeting,
    percentile,
    predict_point,
    predict_sweep,
)

# campaigns/demo.yml's tp8 config and workload.
DEMO_FLAGS = (
    *("--model-path", "moonshotai/Kimi-K2.6", "--trust-remote-code", "--mem-fraction-static", "0.88"),
    *("--max-running-requests", "256", "--num-continuous-decode-steps", "8", "--attention-backend"),
    *("triton", "--tp-size", "8", "--sim-profile", "kimi-k2.6-8xpro6000"),
)
INPUT_LEN, OUTPUT_LEN = 256, 128
UPPER = 256
SAMPLED = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def demo(*flags: str, scale: float = 0.25) -> SimConfig:
    parser = argparse.ArgumentParser()
    configure(parser)
    return resolve(parser.parse_args([*DEMO_FLAGS, "--sim-time-scale", str(scale), *flags]))


def prompts(concurrency: int) -> int:
    return max(16, concurrency)


def meets(config: SimConfig, concurrency: int, limits: dict[str, float]) -> bool:
    """Judged here from the point's own per-request values, not through ``percentile_ms``."""
    point = predict_point(config, INPUT_LEN, OUTPUT_LEN, concurrency, prompts(concurrency), as_served=True)
    values = {"ttft": point.ttfts_s, "tpot": point.tpots_s, "e2e_latency": point.e2e_latencies_s}
    for key, limit in limits.items():
        metric, _, rest = key.rpartition("_p")
        if percentile(values[metric], float(rest.removesuffix("_ms"))) * 1000 > limit:
            return False
    return True


def highest(config: SimConfig, limits: dict[str, float], upper: int = UPPER) -> int | None:
    return highest_concurrency_meeting(
        config, INPUT_LEN, OUTPUT_LEN, limits=limits, num_prompts=prompts, upper=upper
    )


# --- percentiles ----------------------------------------------------------------------------------------


def test_percentiles_follow_numpys_linear_rule_worked_by_hand() -> None:
    # Sorted 10, 20, 40, 80: q = 75 is v = 3 * 0.75 = 2.25, 40 + 0.25 * (80 - 40) = 50;
    # q = 50 is v = 1.5, 20 + 0.5 * 20 = 30; q = 10 is v = 0.3, 10 + 0.3 * 10 = 13.
    values = [80.0, 10.0, 40.0, 20.0]
    assert percentile(values, 75) == pytest.approx(50.0)
    assert percentile(values, 50) == pytest.approx(30.0)
    assert percentile(values, 10) == pytest.approx(13.0)
    assert percentile(values, 0) == 10.0
    assert percentile(values, 100) == 80.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) == 0.0


def test_a_point_carries_each_requests_ttft_tpot_and_e2e_latency() -> None:
    point = predict_point(demo(), INPUT_LEN, OUTPUT_LEN, 64, 128, as_served=True)
    assert len(point.ttfts_s) == len(point.tpots_s) == len(point.e2e_latencies_s) == 128
    for ttft, tpot, latency in zip(point.ttfts_s, point.tpots_s, point.e2e_latencies_s, strict=True):
        assert latency == pytest.approx(ttft + tpot * (OUTPUT_LEN - 1))
    # 64 requests prefill in two forwards of 32: the second half waits for the first's forward.
    assert point.percentile_ms("ttft", 0) < point.percentile_ms("ttft", 100)
    assert point.percentile_ms("ttft", 50) == pytest.approx(1000 * percentile(point.ttfts_s, 50))
    assert point.percentile_ms("e2e_latency", 90) == pytest.approx(
        1000 * percentile(point.e2e_latencies_s, 90)
    )
    assert point.percentile_ms("tpot", 99) == pytest.approx(1000 * percentile(point.tpots_s, 99))
    with pytest.raises(ValueError, match="no latency 'itl'"):
        point.percentile_ms("itl", 50)


def test_at_concurrency_1_every_request_is_alike_and_one_output_token_has_no_tpot() -> None:
    point = predict_point(demo(), INPUT_LEN, OUTPUT_LEN, 1, 16, as_served=True)
    assert point.percentile_ms("tpot", 0) == pytest.approx(point.percentile_ms("tpot", 100))
    assert point.percentile_ms("tpot", 50) == pytest.approx(point.mean_tpot_s * 1000)
    single = predict_point(demo(), INPUT_LEN, 1, 4, 16, as_served=True)
    assert single.tpots_s == ()
    assert single.percentile_ms("tpot", 99) == 0.0
    assert single.e2e_latencies_s == single.ttfts_s


# --- the time scale and the noise -----------------------------------------------------------------------


def test_as_served_applies_the_time_scale_and_the_models_own_times_do_not_depend_on_it() -> None:
    quarter, whole = demo(scale=0.25), demo(scale=1.0)
    model = predict_point(quarter, INPUT_LEN, OUTPUT_LEN, 16, 32)
    assert model == predict_point(whole, INPUT_LEN, OUTPUT_LEN, 16, 32)
    scaled = predict_point(quarter, INPUT_LEN, OUTPUT_LEN, 16, 32, as_served=True)
    assert scaled.output_throughput == pytest.approx(4 * model.output_throughput)
    assert scaled.duration_s == pytest.approx(model.duration_s / 4)
    for metric in ("ttft", "tpot", "e2e_latency"):
        assert scaled.percentile_ms(metric, 99) == pytest.approx(model.percentile_ms(metric, 99) / 4)
    # --sim-predict prints what the server serves.
    assert [point.output_throughput for point in predict_sweep(quarter, INPUT_LEN, OUTPUT_LEN)] == (
        pytest.approx([4 * point.output_throughput for point in predict_sweep(whole, INPUT_LEN, OUTPUT_LEN)])
    )


def test_the_prediction_is_that_of_the_noiseless_server() -> None:
    noisy = demo("--sim-noise", "10", "--sim-seed", "1")
    assert noisy.noise_pct == 10
    for concurrency in (1, 64):
        assert predict_point(noisy, INPUT_LEN, OUTPUT_LEN, concurrency, 64, as_served=True) == predict_point(
            demo(), INPUT_LEN, OUTPUT_LEN, concurrency, 64, as_served=True
        )


# --- the highest concurrency meeting limits -------------------------------------------------------------


def test_the_median_tpot_grows_with_concurrency_on_the_k26_profile() -> None:
    """The bisection's assumption, at the concurrencies a sweep samples."""
    config = demo()
    tpots = [
        predict_point(config, INPUT_LEN, OUTPUT_LEN, level, prompts(level), as_served=True).percentile_ms(
            "tpot", 50
        )
        for level in SAMPLED
    ]
    assert tpots == sorted(tpots)
    assert tpots[-1] > 10 * tpots[0]


def test_between_sampled_concurrencies_the_median_tpot_can_dip() -> None:
    """Why the bisection's answer is a boundary (meets at C, fails at C + 1), not always the largest C:
    a request's TPOT includes the prefill forwards of those admitted after it, so where C passes a
    multiple of the 32 requests one 8192-token forward holds, the median request changes group."""
    config = demo()
    point = {
        level: predict_point(config, INPUT_LEN, OUTPUT_LEN, level, prompts(level), as_served=True)
        for level in (63, 65)
    }
    assert point[65].percentile_ms("tpot", 50) < 0.9 * point[63].percentile_ms("tpot", 50)
    assert point[65].percentile_ms("tpot", 99) > point[63].percentile_ms("tpot", 99)


@pytest.mark.parametrize(
    ("key", "at"),
    [("ttft_p99_ms", 40), ("tpot_p99_ms", 40), ("e2e_latency_p90_ms", 100), ("tpot_p50_ms", 20)],
)
def test_the_answer_meets_the_limit_and_the_next_concurrency_does_not(key: str, at: int) -> None:
    config = demo()
    metric, _, rest = key.rpartition("_p")
    q = float(rest.removesuffix("_ms"))
    limit = predict_point(config, INPUT_LEN, OUTPUT_LEN, at, prompts(at), as_served=True).percentile_ms(
        metric, q
    )
    answer = highest(config, {key: limit})
    assert answer is not None
    assert answer >= at
    assert meets(config, answer, {key: limit})
    assert answer == UPPER or not meets(config, answer + 1, {key: limit})


def test_on_a_range_where_the_p99_latencies_grow_the_answer_is_the_largest_concurrency() -> None:
    config = demo()
    for key, limit in (("ttft_p99_ms", 600.0), ("tpot_p99_ms", 9.0), ("e2e_latency_p99_ms", 1500.0)):
        largest = max(level for level in range(1, 97) if meets(config, level, {key: limit}))
        assert highest(config, {key: limit}, upper=96) == largest


def test_several_limits_must_all_hold() -> None:
    config = demo()
    ttft, tpot = {"ttft_p99_ms": 700.0}, {"tpot_p99_ms": 8.0}
    alone = [highest(config, ttft), highest(config, tpot)]
    assert None not in alone
    assert alone[0] != alone[1]
    assert highest(config, {**ttft, **tpot}) == min(level for level in alone if level is not None)


def test_none_when_concurrency_1_fails_and_upper_when_everything_passes() -> None:
    config = demo()
    at_1 = predict_point(config, INPUT_LEN, OUTPUT_LEN, 1, 16, as_served=True).percentile_ms("ttft", 99)
    assert highest(config, {"ttft_p99_ms": at_1 * 0.99}) is None
    assert highest(config, {"ttft_p99_ms": at_1}) is not None
    assert highest(config, {"e2e_latency_p99_ms": 1e9}) == UPPER
    assert highest(config, {"e2e_latency_p99_ms": 1e9}, upper=3) == 3


def test_the_limits_are_in_the_servers_milliseconds() -> None:
    """At --sim-time-scale 0.25 the server is four times faster: a quarter of the limit is as hard."""
    limits = {"tpot_p99_ms": 12.0, "ttft_p50_ms": 900.0}
    quartered = {key: limit / 4 for key, limit in limits.items()}
    assert highest(demo(scale=0.25), quartered) == highest(demo(scale=1.0), limits)
    assert highest(demo(scale=0.25), limits) != highest(demo(scale=1.0), limits)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"itl_p99_ms": 5.0}, "'itl_p99_ms': a limit's key is <metric>_p<q>_ms"),
        ({"ttft_p101_ms": 5.0}, "q from 0 to 100"),
        ({"ttft_p99": 5.0}, "'ttft_p99': a limit's key"),
        ({"ttft_p99_ms": float("nan")}, "ttft_p99_ms: the limit must be a finite number"),
    ],
)
def test_a_limit_it_cannot_judge_is_refused(limits: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        highest(demo(), limits)


def test_upper_must_be_a_concurrency() -> None:
    with pytest.raises(ValueError, match="upper: must be at least 1, got 0"):
        highest(demo(), {"ttft_p99_ms": 5.0}, upper=0)


def test_one_search_for_the_demo_workload_takes_well_under_a_second() -> None:
    """Eight or nine predictions of at most 256 requests x 128 tokens: ~10 ms here on two cores."""
    config = demo()
    started = time.perf_counter()
    answer = highest(config, {"tpot_p99_ms": 30.0})
    elapsed = time.perf_counter() - started
    assert answer is not None
    assert 1 < answer < UPPER
    assert elapsed < 1.0, f"one search took {elapsed:.2f} s"
