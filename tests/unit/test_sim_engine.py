"""Continuous batching on a virtual clock: who runs when, what leaves when, and the K2.6 calibration."""

from __future__ import annotations

import argparse

import pytest
from tests.support.sim_test_model import simple_model

from fairbench.sim.args import add_sglang_arguments, add_sim_arguments, resolve
from fairbench.sim.engine import Engine, Scheduler, SchedulerLimits, SimRequest, VirtualClock
from fairbench.sim.model import Speculation
from fairbench.sim.predict import predict_point


class Recorder:
    """A sink keeping (time, tokens, finished) for every delivery."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.events: list[tuple[float, int, bool]] = []

    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        self.events.append((round(self.clock.time(), 9), tokens, finished))


def run(
    requests: list[tuple[int, int]],
    *,
    max_running: int = 8,
    chunk: int = 8192,
    steps: int = 1,
    interval: int = 1,
    speculation: Speculation | None = None,
) -> list[Recorder]:
    """Submit (prompt tokens, output tokens) requests at time 0 and run to the end."""
    clock = VirtualClock()
    limits = SchedulerLimits(max_running, chunk, steps, interval)
    engine = Engine([Scheduler(simple_model(speculation), limits)], clock)
    recorders = []
    for prompt, output in requests:
        recorder = Recorder(clock)
        engine.submit(SimRequest(prompt_tokens=prompt, output_limit=output, sink=recorder))
        recorders.append(recorder)
    engine.start()
    clock.run()
    return recorders


def test_one_request_gets_its_first_token_from_prefill_then_one_per_decode_step() -> None:
    (recorder,) = run([(100, 3)])
    prefill = 0.020 + 0.010
    step = 0.011
    assert recorder.events == [
        (pytest.approx(prefill), 1, False),
        (pytest.approx(prefill + step), 1, False),
        (pytest.approx(prefill + 2 * step), 1, True),
    ]


def test_requests_beyond_the_running_limit_wait_and_join_at_a_round_boundary() -> None:
    first, second, third = run([(100, 2), (100, 2), (100, 2)], max_running=2)
    both_prefilled = 0.020 + 0.020  # one forward over 200 tokens
    assert first.events[0][0] == second.events[0][0] == pytest.approx(both_prefilled)
    finished = both_prefilled + 0.012  # one step at b = 2
    assert first.events[-1] == (pytest.approx(finished), 1, True)
    # The third is admitted by the prefill that runs once a slot is free, right after that step.
    assert third.events[0] == (pytest.approx(finished + 0.030), 1, False)
    assert third.events[-1] == (pytest.approx(finished + 0.030 + 0.011), 1, True)


def test_a_prefill_forward_takes_no_more_input_than_the_chunked_prefill_size() -> None:
    recorders = run([(1000, 1), (1000, 1), (1000, 1)], chunk=2000)
    first_forward = 0.020 + 0.200
    assert [recorder.events[0][0] for recorder in recorders] == pytest.approx(
        [first_forward, first_forward, first_forward + 0.020 + 0.100]
    )


def test_running_requests_wait_while_newcomers_are_prefilled() -> None:
    early, late = run([(100, 3), (5000, 2)], chunk=1000)
    # The 5000-token prompt does not fit with the first: it takes its own prefill, five forwards,
    # before the first request's decoding resumes.
    second_prefill = 0.030 + 5 * 0.020 + 0.500
    assert late.events[0][0] == pytest.approx(second_prefill)
    assert early.events[1][0] == pytest.approx(second_prefill + 0.012)


def test_continuous_decode_steps_send_tokens_in_chunks_of_that_many_steps() -> None:
    (recorder,) = run([(100, 20)], steps=8)
    prefill = 0.030
    round_time = 8 * 0.011
    assert recorder.events == [
        (pytest.approx(prefill), 1, False),
        (pytest.approx(prefill + round_time), 8, False),
        (pytest.approx(prefill + 2 * round_time), 8, False),
        # 3 tokens remain; the round still takes its 8 steps before they leave.
        (pytest.approx(prefill + 3 * round_time), 3, True),
    ]


def test_stream_interval_sends_the_first_token_at_once_then_every_interval() -> None:
    (recorder,) = run([(100, 10)], interval=4)
    assert [tokens for _, tokens, _ in recorder.events] == [1, 4, 4, 1]
    assert recorder.events[-1][2]


def test_speculative_decoding_yields_the_mean_accepted_length_exactly_over_a_response() -> None:
    speculation = Speculation(num_steps=2, num_draft_tokens=3, accept_length=2.5)
    (recorder,) = run([(100, 101)], speculation=speculation)
    tokens = [tokens for _, tokens, _ in recorder.events]
    assert tokens[0] == 1
    assert tokens[1:-1] == [2, 3] * 19 + [2]
    assert sum(tokens) == 101


def test_an_aborted_request_gets_nothing_more_and_frees_its_slot() -> None:
    clock = VirtualClock()
    engine = Engine([Scheduler(simple_model(), SchedulerLimits(1, 8192, 1, 1))], clock)
    gone, waiting = Recorder(clock), Recorder(clock)
    leaving = SimRequest(prompt_tokens=100, output_limit=100, sink=gone)
    engine.submit(leaving)
    engine.submit(SimRequest(prompt_tokens=100, output_limit=1, sink=waiting))
    engine.start()
    clock.call_at(0.05, lambda: engine.abort(leaving))
    clock.run()
    # Aborted at 50 ms, during the step that ends at 52 ms: that step's token is never delivered.
    assert gone.events == [(pytest.approx(0.030), 1, False), (pytest.approx(0.041), 1, False)]
    assert waiting.events == [(pytest.approx(0.030 + 2 * 0.011 + 0.030), 1, True)]


def test_a_halted_engine_delivers_nothing_more() -> None:
    clock = VirtualClock()
    engine = Engine([Scheduler(simple_model(), SchedulerLimits(8, 8192, 1, 1))], clock)
    recorder = Recorder(clock)
    engine.submit(SimRequest(prompt_tokens=100, output_limit=100, sink=recorder))
    engine.start()
    clock.call_at(0.05, engine.halt)
    clock.run()
    assert [event[0] for event in recorder.events] == pytest.approx([0.030, 0.041])


def test_data_parallel_replicas_take_requests_in_turn_and_run_side_by_side() -> None:
    clock = VirtualClock()
    limits = SchedulerLimits(1, 8192, 1, 1)
    engine = Engine([Scheduler(simple_model(), limits), Scheduler(simple_model(), limits)], clock)
    recorders = [Recorder(clock) for _ in range(2)]
    for recorder in recorders:
        engine.submit(SimRequest(prompt_tokens=100, output_limit=1, sink=recorder))
    engine.start()
    clock.run()
    assert [recorder.events for recorder in recorders] == [[(pytest.approx(0.030), 1, True)]] * 2


def test_time_scale_stretches_every_duration_and_output_waiters_fire_on_the_next_tokens() -> None:
    clock = VirtualClock()
    engine = Engine([Scheduler(simple_model(), SchedulerLimits(8, 8192, 1, 1))], clock, time_scale=0.5)
    recorder = Recorder(clock)
    fired: list[float] = []
    engine.on_next_output(lambda: fired.append(clock.time()))
    engine.submit(SimRequest(prompt_tokens=100, output_limit=2, sink=recorder))
    engine.start()
    clock.run()
    assert [event[0] for event in recorder.events] == pytest.approx([0.015, 0.0205])
    assert fired == [pytest.approx(0.015)]
    assert (engine.prompt_tokens_total, engine.generation_tokens_total, engine.requests_finished) == (
        100,
        2,
        1,
    )


# The measurements the kimi-k2.6-8xpro6000 profile is calibrated to (its header, and those of
# campaigns/kimi-k2.6-pcie.yml): (layout flags, C=1 tok/s, peak tok/s); EPLB's C=1 was not measured.
PUBLISHED = [
    ([], 98.0, 1291.0),
    (["--ep-size", "4"], 69.0, 1531.0),
    (["--ep-size", "8"], 65.0, 1500.0),
    (["--ep-size", "8", "--enable-eplb"], None, 862.0),
]


def k26_config(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sglang_arguments(parser)
    add_sim_arguments(parser)
    common = [
        "--model-path",
        "moonshotai/Kimi-K2.6",
        "--sim-profile",
        "kimi-k2.6-8xpro6000",
        "--tp-size",
        "8",
    ]
    campaign = ["--max-running-requests", "256", "--num-continuous-decode-steps", "8"]
    return parser.parse_args([*common, *campaign, *flags])


@pytest.mark.parametrize(("flags", "at_c1", "peak"), PUBLISHED)
def test_the_k26_profile_reproduces_the_published_campaign_within_5_percent(
    flags: list[str], at_c1: float | None, peak: float
) -> None:
    config = resolve(k26_config(*flags))
    c1 = predict_point(config, 1024, 512, concurrency=1, num_prompts=16).output_throughput
    c256 = predict_point(config, 1024, 512, concurrency=256, num_prompts=512).output_throughput
    if at_c1 is not None:
        assert c1 == pytest.approx(at_c1, rel=0.05)
    assert c256 == pytest.approx(peak, rel=0.05)


def test_eplb_has_much_worse_low_concurrency_latency_than_plain_ep8() -> None:
    ep8 = predict_point(resolve(k26_config("--ep-size", "8")), 1024, 512, 1, 16)
    eplb = predict_point(resolve(k26_config("--ep-size", "8", "--enable-eplb")), 1024, 512, 1, 16)
    assert eplb.mean_tpot_s > 2 * ep8.mean_tpot_s
