"""``/metrics`` on a virtual clock: SGLang's families, types and label sets, and what each value means."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.sim_test_model import simple_model

from fairbench.sim.engine import Engine, Scheduler, SchedulerLimits, SimRequest, VirtualClock
from fairbench.sim.metrics import MetricsSource, QueueTimes, RequestCounters, render
from fairbench.sim.model import Speculation
from fairbench.sim.prefix_cache import PrefixCache

# t(b) = 10 ms + 1 ms * b; prefill = 20 ms per forward + 1 ms per 10 input tokens.
MODEL_NAME = "sim/test-model"
SCHEDULER_LABELS = {
    "model_name": MODEL_NAME,
    "engine_type": "unified",
    "tp_rank": "0",
    "pp_rank": "0",
    "moe_ep_rank": "0",
}
SCHEDULER_GAUGES = [
    *("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput"),
    *("sglang:cache_hit_rate", "sglang:token_usage", "sglang:spec_accept_length"),
]

Series = dict[frozenset[tuple[str, str]], float]


class Discard:
    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        pass


def engine(
    *,
    replicas: int = 1,
    max_running: int = 8,
    speculation: Speculation | None = None,
    cached: bool = False,
    decode_log_interval: int = 40,
    time_scale: float = 1.0,
    queue_times: QueueTimes | None = None,
) -> tuple[Engine, VirtualClock]:
    model = simple_model(speculation)
    limits = SchedulerLimits(max_running, 8192, 1, 1)
    clock = VirtualClock()
    schedulers = [Scheduler(model, limits, PrefixCache(1 << 16) if cached else None) for _ in range(replicas)]
    sim_engine = Engine(
        schedulers,
        clock,
        time_scale,
        decode_log_interval,
        on_queue_exit=queue_times.observe if queue_times is not None else None,
    )
    return sim_engine, clock


def exposition(
    sim_engine: Engine,
    counters: RequestCounters | None = None,
    kv_pool_tokens: int = 1000,
    queue_times: QueueTimes | None = None,
) -> str:
    return render(
        MetricsSource(
            MODEL_NAME, kv_pool_tokens, sim_engine, counters or RequestCounters(), queue_times or QueueTimes()
        )
    )


def series(text: str, name: str) -> Series:
    """Every sample of the family ``name`` (as prometheus_client's parser reads it), by its label set."""
    found = {family.name: family for family in text_string_to_metric_families(text)}
    assert name in found, f"no family {name}"
    return {frozenset(sample.labels.items()): sample.value for sample in found[name].samples}


def value(text: str, name: str, labels: dict[str, str] = SCHEDULER_LABELS) -> float:
    return series(text, name)[frozenset(labels.items())]


def snapshots(clock: VirtualClock, times: list[float], take: Callable[[], str]) -> list[str]:
    """``take()`` at each of ``times`` on the virtual clock, then the run to its end."""
    taken: list[str] = []
    for at in times:
        clock.call_at(at, lambda: taken.append(take()))
    clock.run()
    return taken


def submit(sim_engine: Engine, prompt: list[int], output: int) -> None:
    sim_engine.submit(
        SimRequest(prompt_tokens=len(prompt), output_limit=output, sink=Discard(), prompt=prompt)
    )


COUNTED = ("prompt_tokens", "generation_tokens", "num_requests", "cached_tokens", "num_aborted_requests")
"""The counter families, without their ``sglang:`` prefix."""


def test_families_have_sglangs_types_and_label_sets_and_a_counter_appears_once_counted() -> None:
    sim_engine, _ = engine()
    text = exposition(sim_engine)
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name in SCHEDULER_GAUGES:
        assert families[name].type == "gauge"
        assert series(text, name) == {frozenset(SCHEDULER_LABELS.items()): 0.0}
    # Nothing has finished: SGLang's multiprocess registry has no series, and so no family, for them.
    for name in (*COUNTED, "e2e_request_latency_seconds", "queue_time_seconds"):
        assert f"sglang:{name}" not in families
    assert families["fairbench_sim_rounds"].type == "counter"

    counters = RequestCounters()
    counters.observe_finished(True, 10, 5, 3, 0.5)
    counters.observe_finished(True, 20, 1, 0, 0.25)
    counters.observe_finished(False, 7, 2, 4, 3.0)
    counters.observe_aborted()
    text = exposition(sim_engine, counters)
    families = {family.name: family for family in text_string_to_metric_families(text)}
    tokenizer = {"model_name": MODEL_NAME, "engine_type": "unified"}

    def by_stream(true: float, false: float) -> Series:
        return {
            frozenset({**tokenizer, "is_streaming": "true"}.items()): true,
            frozenset({**tokenizer, "is_streaming": "false"}.items()): false,
        }

    for name in COUNTED:
        family = families[f"sglang:{name}"]
        assert family.type == "counter"
        assert {sample.name for sample in family.samples} == {f"sglang:{name}_total"}
    assert series(text, "sglang:prompt_tokens") == by_stream(30.0, 7.0)
    assert series(text, "sglang:generation_tokens") == by_stream(6.0, 2.0)
    assert series(text, "sglang:num_requests") == by_stream(2.0, 1.0)
    assert series(text, "sglang:cached_tokens") == {
        frozenset({**tokenizer, "cache_source": "device"}.items()): 7.0
    }
    assert series(text, "sglang:num_aborted_requests") == {frozenset(tokenizer.items()): 1.0}
    latency = histograms(text, "sglang:e2e_request_latency_seconds")
    assert {labels: (count, total) for labels, (_, count, total) in latency.items()} == {
        frozenset({**tokenizer, "is_streaming": "true"}.items()): (2.0, 0.75),
        frozenset({**tokenizer, "is_streaming": "false"}.items()): (1.0, 3.0),
    }


# The buckets' bounds as SGLang's prometheus_client writes them in ``le``.
E2E_LE = [
    *("0.1", "0.2", "0.4", "0.6", "0.8", "1.0", "2.0", "4.0", "6.0", "8.0", "10.0", "20.0", "40.0"),
    *("60.0", "80.0", "100.0", "200.0", "400.0", "600.0", "1200.0", "1800.0", "2400.0", "+Inf"),
]
QUEUE_LE = [
    *("0.0", "0.001", "0.005", "0.01", "0.05", "0.1", "0.2", "0.5", "1.0", "2.0", "3.0", "4.0", "5.0"),
    *("10.0", "15.0", "20.0", "30.0", "40.0", "50.0", "60.0", "70.0", "80.0", "90.0", "100.0", "200.0"),
    *("300.0", "400.0", "500.0", "600.0", "700.0", "800.0", "900.0", "1000.0", "1200.0", "1400.0"),
    *("1600.0", "1800.0", "2000.0", "2500.0", "3000.0", "+Inf"),
]

Histograms = dict[frozenset[tuple[str, str]], tuple[dict[str, float], float, float]]


def histograms(text: str, name: str) -> Histograms:
    """The histogram family ``name``: per label set its cumulative bucket counts by ``le``, its count and its
    sum; a family of another type, or a sample other than these three, fails the test."""
    found = {family.name: family for family in text_string_to_metric_families(text)}
    assert found[name].type == "histogram"
    buckets: dict[frozenset[tuple[str, str]], dict[str, float]] = {}
    totals: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for sample in found[name].samples:
        labels = {key: label for key, label in sample.labels.items() if key != "le"}
        key = frozenset(labels.items())
        if sample.name == f"{name}_bucket":
            buckets.setdefault(key, {})[sample.labels["le"]] = sample.value
        else:
            assert sample.name in (f"{name}_count", f"{name}_sum"), sample
            totals[sample.name.removeprefix(name), key] = sample.value
    return {key: (by_le, totals["_count", key], totals["_sum", key]) for key, by_le in buckets.items()}


def test_a_histogram_is_written_as_sglangs_multiprocess_registry_writes_it() -> None:
    """Per series its sum, its buckets (cumulative, in SGLang's bounds, then +Inf), its count; no _created."""
    queue_times = QueueTimes()
    sim_engine, clock = engine(queue_times=queue_times)
    submit(sim_engine, list(range(10)), 1)
    sim_engine.start()
    clock.run()
    counters = RequestCounters()
    counters.observe_finished(False, 10, 1, 0, 0.6)
    counters.observe_finished(False, 10, 1, 0, 2500.0)
    lines = exposition(sim_engine, counters, queue_times=queue_times).splitlines()

    def family_lines(
        name: str, *, labels: str, help_text: str, sum_text: str, buckets: list[tuple[str, float]]
    ) -> list[str]:
        """HELP, TYPE, then the one series: ``labels`` has a ``{le}`` where the ``le`` label goes."""

        def sample(suffix: str, value: float, le: str | None = None) -> str:
            le_label = f'le="{le}",' if le is not None else ""
            return f"{name}_{suffix}{{{labels.format(le=le_label)}}} {value}"

        return [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} histogram",
            f"{name}_sum{{{labels.format(le='')}}} {sum_text}",
            *(sample("bucket", count, le) for le, count in buckets),
            sample("count", buckets[-1][1]),
        ]

    def located(expected: list[str]) -> list[str]:
        at = lines.index(expected[0])
        return lines[at : at + len(expected)]

    # 0.6 falls in le="0.6" (a bound holds the values up to it), 2500 past the last bound.
    e2e = family_lines(
        "sglang:e2e_request_latency_seconds",
        labels=f'engine_type="unified",is_streaming="false",{{le}}model_name="{MODEL_NAME}"',
        help_text="Histogram of End-to-end request latency in seconds",
        sum_text="2500.6",
        buckets=list(zip(E2E_LE, [0.0] * 3 + [1.0] * 19 + [2.0], strict=True)),
    )
    assert located(e2e) == e2e
    # The one request met an idle engine: it waited 0 s, which the first bucket, le="0.0", holds.
    queue = family_lines(
        "sglang:queue_time_seconds",
        labels=f'engine_type="unified",{{le}}model_name="{MODEL_NAME}",moe_ep_rank="0",pp_rank="0",tp_rank="0"',
        help_text="Histogram of queueing time in seconds.",
        sum_text="0.0",
        buckets=[(le, 1.0) for le in QUEUE_LE],
    )
    assert located(queue) == queue
    assert not [line for line in lines if "_created" in line]


def test_running_and_waiting_follow_the_batch_and_the_queue_and_token_usage_the_kv_held() -> None:
    sim_engine, clock = engine(max_running=2)
    for first in range(5):
        submit(sim_engine, [first, *range(99)], 10)
    sim_engine.start()
    # 0.001: two requests in their prefill forward (20 ms + 200 tokens: until 0.040), three waiting.
    # 0.045: the two run (1 token each so far, a decode round at b = 2 under way), three still wait.
    during_prefill, decoding, done = snapshots(
        clock, [0.001, 0.045, 10.0], lambda: exposition(sim_engine, kv_pool_tokens=250)
    )
    assert value(during_prefill, "sglang:num_running_reqs") == 0.0
    assert value(during_prefill, "sglang:num_queue_reqs") == 3.0
    assert value(during_prefill, "sglang:token_usage") == 0.8
    assert value(decoding, "sglang:num_running_reqs") == 2.0
    assert value(decoding, "sglang:num_queue_reqs") == 3.0
    assert value(decoding, "sglang:token_usage") == 0.81  # 202 / 250, rounded as SGLang rounds it
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"):
        assert value(done, name) == 0.0


def test_token_usage_stays_within_0_and_1_when_the_pool_is_smaller_than_the_batch() -> None:
    sim_engine, clock = engine()
    for first in range(4):
        submit(sim_engine, [first, *range(99)], 10)
    sim_engine.start()
    [crowded] = snapshots(clock, [0.1], lambda: exposition(sim_engine, kv_pool_tokens=100))
    assert value(crowded, "sglang:token_usage") == 1.0


def test_spec_accept_length_is_the_last_decode_log_intervals_mean_and_0_without_speculation() -> None:
    def around_first_interval(speculation: Speculation | None) -> list[str]:
        """Readings after 3 and after 4 decode rounds (30 ms of prefill, then 11 ms a round at b = 1)."""
        sim_engine, clock = engine(speculation=speculation, decode_log_interval=4)
        submit(sim_engine, list(range(100)), 1000)
        sim_engine.start()
        return snapshots(clock, [0.030 + 3.5 * 0.011, 0.030 + 4.5 * 0.011], lambda: exposition(sim_engine))

    before, after = around_first_interval(Speculation(num_steps=3, num_draft_tokens=4, accept_length=2.5))
    assert value(before, "sglang:spec_accept_length") == 0.0
    # Four rounds gave 2, 3, 2 and 3 tokens: a mean of 2.5 a step.
    assert value(after, "sglang:spec_accept_length") == 2.5
    assert value(after, "sglang:gen_throughput") == pytest.approx(10 / (0.030 + 4 * 0.011))
    without = around_first_interval(None)
    assert [value(text, "sglang:spec_accept_length") for text in without] == [0.0, 0.0]
    assert value(without[1], "sglang:gen_throughput") == pytest.approx(4 / (0.030 + 4 * 0.011))


def test_cache_hit_rate_is_the_last_prefills_share_of_cached_prompt_tokens() -> None:
    sim_engine, clock = engine(cached=True)
    prompt = list(range(100))
    submit(sim_engine, prompt, 1)
    sim_engine.start()
    clock.call_at(0.1, lambda: submit(sim_engine, prompt, 1))
    clock.call_at(0.3, lambda: submit(sim_engine, [7, *prompt[1:]], 1))
    first, repeated, other = snapshots(clock, [0.05, 0.2, 0.4], lambda: exposition(sim_engine))
    assert value(first, "sglang:cache_hit_rate") == 0.0
    # All but the prompt's last token come from the cache.
    assert value(repeated, "sglang:cache_hit_rate") == 0.99
    assert value(other, "sglang:cache_hit_rate") == 0.0


def test_each_data_parallel_replica_has_its_own_series_labelled_with_its_dp_rank() -> None:
    sim_engine, clock = engine(replicas=2, max_running=1)
    for first in range(3):  # round robin: replica 0 gets two, replica 1 one
        submit(sim_engine, [first, *range(99)], 50)
    sim_engine.start()
    [running] = snapshots(clock, [0.1], lambda: exposition(sim_engine))

    def rank(dp_rank: str) -> frozenset[tuple[str, str]]:
        return frozenset({**SCHEDULER_LABELS, "dp_rank": dp_rank}.items())

    assert series(running, "sglang:num_running_reqs") == {rank("0"): 1.0, rank("1"): 1.0}
    assert series(running, "sglang:num_queue_reqs") == {rank("0"): 1.0, rank("1"): 0.0}


def queue_time(text: str, labels: dict[str, str] = SCHEDULER_LABELS) -> tuple[dict[str, float], float, float]:
    """One scheduler's ``sglang:queue_time_seconds``: its buckets by ``le``, its count, its sum."""
    return histograms(text, "sglang:queue_time_seconds")[frozenset(labels.items())]


def five_requests_waiting_at_once(max_running: int, time_scale: float = 1.0) -> str:
    """Five 100-token prompts of 10 output tokens queued before the engine starts; ``/metrics`` at the end."""
    queue_times = QueueTimes()
    sim_engine, clock = engine(max_running=max_running, time_scale=time_scale, queue_times=queue_times)
    for first in range(5):
        submit(sim_engine, [first, *range(99)], 10)
    sim_engine.start()
    clock.run()
    return exposition(sim_engine, queue_times=queue_times)


def test_queue_time_is_each_requests_wait_from_its_arrival_to_its_prefill() -> None:
    # All five fit in the batch: one prefill admits them all at once.
    by_le, count, total = queue_time(five_requests_waiting_at_once(max_running=8))
    assert (count, total, by_le["0.0"]) == (5.0, 0.0, 5.0)
    # Two at a time: a pair's prefill (20 ms + 200 tokens = 40 ms) and 9 decode steps at b = 2 (12 ms)
    # free the batch at 148 ms; the next pair waits that long, the last one twice that.
    expected_waits = [0.0, 0.0, 0.148, 0.148, 0.296]
    by_le, count, total = queue_time(five_requests_waiting_at_once(max_running=2))
    assert count == 5.0
    assert total == pytest.approx(sum(expected_waits))
    assert [by_le[le] for le in ("0.0", "0.1", "0.2", "0.5")] == [2.0, 2.0, 4.0, 5.0]
    # In the server's seconds: --sim-time-scale 2 doubles every round, and so every wait.
    _, _, scaled = queue_time(five_requests_waiting_at_once(max_running=2, time_scale=2.0))
    assert scaled == pytest.approx(2 * sum(expected_waits))


def test_a_request_that_arrives_during_a_round_waits_for_its_end() -> None:
    queue_times = QueueTimes()
    sim_engine, clock = engine(queue_times=queue_times)
    submit(sim_engine, list(range(100)), 10)
    sim_engine.start()
    # The first one's prefill ends at 30 ms, its first decode step (11 ms) at 41 ms, the second at 52 ms.
    clock.call_at(0.045, lambda: submit(sim_engine, [7, *range(99)], 10))
    clock.run()
    _, count, total = queue_time(exposition(sim_engine, queue_times=queue_times))
    assert count == 2.0
    assert total == pytest.approx(0.052 - 0.045)


def test_each_data_parallel_replica_observes_its_own_queue_time() -> None:
    queue_times = QueueTimes()
    sim_engine, clock = engine(replicas=2, max_running=1, queue_times=queue_times)
    for first in range(3):  # round robin: replica 0 gets two, replica 1 one
        submit(sim_engine, [first, *range(99)], 50)
    sim_engine.start()
    clock.run()
    text = exposition(sim_engine, queue_times=queue_times)
    # Replica 0's second request waits for its first: a 30 ms prefill and 49 decode steps of 11 ms.
    for dp_rank, wanted_count, wanted_total in (("0", 2.0, 0.030 + 49 * 0.011), ("1", 1.0, 0.0)):
        _, count, total = queue_time(text, {**SCHEDULER_LABELS, "dp_rank": dp_rank})
        assert count == wanted_count
        assert total == pytest.approx(wanted_total)


def test_label_values_are_escaped_as_the_text_format_wants() -> None:
    sim_engine, _ = engine()
    name = 'odd "model"\\name\nline'
    text = render(MetricsSource(name, 1000, sim_engine, RequestCounters(), QueueTimes()))
    [labels] = series(text, "sglang:num_running_reqs")
    assert dict(labels)["model_name"] == name
