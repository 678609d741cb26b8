"""Speculative decoding per request: an accept length that follows the prompt's repetitiveness, and the
counts SGLang 0.5.23 reports for it.

``TokenizerManager._calculate_spec_decoding_metrics`` adds to a finished ``/generate`` output, after
``e2e_latency``: ``spec_accept_rate`` (accepted drafts / proposed drafts), ``spec_accept_length``
(completion tokens / verify steps), ``spec_num_correct_drafts``, ``spec_num_proposed_drafts`` (verify steps
x (draft tokens - 1)), ``spec_verify_ct`` and ``spec_correct_drafts_histogram`` (verify steps by drafts
accepted). The OpenAI routes return the same as ``sglext.spec_tokens_details`` (``SpecTokensDetails``) when
asked with ``return_spec_tokens_details``. The scheduler's ``sglang:spec_accept_length`` gauge and
``/server_info``'s ``avg_spec_accept_length`` count each verify step's accepted tokens over the steps.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.sim_test_model import simple_model
from tests.unit.test_sim_outputs import Sim, generate, run

from fairbench.sim.engine import Engine, Scheduler, SchedulerLimits, SimRequest, VirtualClock
from fairbench.sim.model import REFERENCE_REPETITIVENESS, Speculation, mean_accept_length

EAGLE = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"]
"""Three draft steps, four draft tokens verified (SGLang's default for a chain draft)."""
SPEC_KEYS = [
    *("spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts"),
    *("spec_verify_ct", "spec_correct_drafts_histogram"),
]
REPETITIVE = "the cat sat on the mat " * 40
RANDOM_IDS = random.Random(7).sample(range(100, 30_000), 240)


def spec_of(meta: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in meta.items() if key.startswith("spec_")}


def check_counts(spec: dict[str, Any], completion_tokens: int, draft_tokens: int = 4) -> None:
    """SGLang's formulas, and what the histogram must add up to."""
    verify = spec["spec_verify_ct"]
    histogram = spec["spec_correct_drafts_histogram"]
    assert spec["spec_num_proposed_drafts"] == verify * (draft_tokens - 1)
    assert spec["spec_accept_rate"] == spec["spec_num_correct_drafts"] / spec["spec_num_proposed_drafts"]
    assert spec["spec_accept_length"] == completion_tokens / verify
    assert sum(histogram) == verify and len(histogram) <= draft_tokens
    assert sum(drafts * steps for drafts, steps in enumerate(histogram)) == spec["spec_num_correct_drafts"]
    # Every verify step yields its accepted drafts plus the bonus token; the last one may overshoot.
    assert (
        completion_tokens - 1 <= spec["spec_num_correct_drafts"] + verify < completion_tokens + draft_tokens
    )


def test_a_finished_generate_output_reports_sglangs_spec_counts_after_e2e_latency() -> None:
    async def scenario(sim: Sim) -> list[Any]:
        _, whole = await sim.post("/generate", generate(REPETITIVE, 200))
        events = await sim.stream("/generate", generate(REPETITIVE, 200))
        return [whole, *(event for event in events if isinstance(event, dict))]

    whole, *streamed = run(EAGLE, scenario)
    meta = whole["meta_info"]
    keys = list(meta)
    assert keys[keys.index("e2e_latency") + 1 : keys.index("e2e_latency") + 7] == SPEC_KEYS
    check_counts(spec_of(meta), 200)
    # Only a stream's last event has them, the same as the whole response's.
    assert all(not spec_of(event["meta_info"]) for event in streamed[:-1])
    assert spec_of(streamed[-1]["meta_info"]) == spec_of(meta)


def test_enable_metrics_puts_the_request_time_stats_after_the_spec_counts() -> None:
    async def scenario(sim: Sim) -> Any:
        _, whole = await sim.post("/generate", generate(REPETITIVE, 20))
        return list(whole["meta_info"])

    keys = run([*EAGLE, "--enable-metrics"], scenario)
    assert keys.index("e2e_latency") < keys.index("spec_accept_rate") < keys.index("request_received_ts")


def test_no_spec_counts_without_speculation_or_before_a_verify_step() -> None:
    async def scenario(sim: Sim) -> list[dict[str, Any]]:
        _, many = await sim.post("/generate", generate(REPETITIVE, 20))
        _, one = await sim.post("/generate", generate(REPETITIVE, 1))
        return [spec_of(many["meta_info"]), spec_of(one["meta_info"])]

    assert run([], scenario) == [{}, {}]
    many, one = run(EAGLE, scenario)
    assert many and one == {}


def test_a_repetitive_prompt_accepts_more_drafts_than_random_ids_and_the_counts_repeat() -> None:
    async def scenario(sim: Sim) -> tuple[dict[str, Any], dict[str, Any]]:
        _, repetitive = await sim.post("/generate", generate(REPETITIVE, 400))
        _, random_ids = await sim.post("/generate", generate(RANDOM_IDS, 400))
        return spec_of(repetitive["meta_info"]), spec_of(random_ids["meta_info"])

    repetitive, random_ids = run(EAGLE, scenario)
    check_counts(repetitive, 400)
    check_counts(random_ids, 400)
    profile = mean_accept_length(0.7, 3)  # the generic profile's acceptance rate over 3 steps
    assert random_ids["spec_accept_length"] < profile < repetitive["spec_accept_length"] <= 4
    assert repetitive["spec_accept_rate"] > 0.9 and random_ids["spec_accept_rate"] < 0.7
    # The same prompts get the same counts on a server scheduled otherwise.
    again = run([*EAGLE, "--num-continuous-decode-steps", "3", "--stream-interval", "5"], scenario)
    assert again == (repetitive, random_ids)


def test_the_openai_routes_return_spec_tokens_details_in_sglext_when_asked() -> None:
    async def scenario(sim: Sim) -> dict[str, Any]:
        body = {"max_tokens": 30, "ignore_eos": True, "return_spec_tokens_details": True}
        chat_body = {**body, "messages": [{"role": "user", "content": REPETITIVE}]}
        found: dict[str, Any] = {}
        _, found["generate"] = await sim.post("/generate", generate(REPETITIVE, 30))
        _, found["completion"] = await sim.post("/v1/completions", {**body, "prompt": REPETITIVE})
        _, found["chat"] = await sim.post("/v1/chat/completions", chat_body)
        _, found["unasked"] = await sim.post("/v1/completions", {"prompt": REPETITIVE, "max_tokens": 30})
        usage = {"stream_options": {"include_usage": True}}
        found["completion_stream"] = await sim.stream(
            "/v1/completions", {**body, **usage, "prompt": REPETITIVE}
        )
        found["chat_stream"] = await sim.stream("/v1/chat/completions", {**chat_body, **usage})
        return found

    found = run(EAGLE, scenario)
    meta = spec_of(found["generate"]["meta_info"])
    details = {
        "spec_accept_rate": meta["spec_accept_rate"],
        "spec_accept_length": meta["spec_accept_length"],
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": meta["spec_num_correct_drafts"],
        "spec_num_proposed_drafts": meta["spec_num_proposed_drafts"],
        "spec_verify_ct": meta["spec_verify_ct"],
        "spec_correct_drafts_histogram": meta["spec_correct_drafts_histogram"],
        "spec_cap_lens_histogram": [],
    }
    for route in ("completion", "chat"):
        response = found[route]
        assert list(response)[-2:] == ["metadata", "sglext"]
        assert response["sglext"] == {"spec_tokens_details": details}
    assert "sglext" not in found["unasked"]
    # Streamed: a chunk of its own, no choices, after the last content or finish chunk, before the usage.
    for route, object_name in (
        ("completion_stream", "text_completion"),
        ("chat_stream", "chat.completion.chunk"),
    ):
        events = found[route]
        assert events[-1] == "[DONE]" and "usage" in events[-2] and events[-2]["usage"]
        sglext = events[-3]
        assert sglext["object"] == object_name and sglext["choices"] == [] and sglext["usage"] is None
        assert sglext["sglext"] == {"spec_tokens_details": details}


def test_without_speculation_asking_for_spec_details_adds_nothing() -> None:
    async def scenario(sim: Sim) -> tuple[Any, list[Any]]:
        body = {"prompt": REPETITIVE, "max_tokens": 5, "return_spec_tokens_details": True}
        _, whole = await sim.post("/v1/completions", body)
        return whole, await sim.stream("/v1/completions", body)

    whole, events = run([], scenario)
    assert "sglext" not in whole
    assert not any(isinstance(event, dict) and "sglext" in event for event in events)


def gauge(text: str, name: str) -> float:
    (family,) = [family for family in text_string_to_metric_families(text) if family.name == name]
    (sample,) = family.samples
    return float(sample.value)


def test_the_accept_length_gauge_and_server_info_count_the_requests_served() -> None:
    prompts: list[str | list[int]] = [REPETITIVE, RANDOM_IDS, "a b c d e f g", REPETITIVE + " again"]

    async def served(sim: Sim) -> tuple[list[dict[str, Any]], Any, str]:
        assert "avg_spec_accept_length" not in (await sim.get("/server_info"))["internal_states"][0]
        outputs = await asyncio.gather(*(sim.post("/generate", generate(prompt, 150)) for prompt in prompts))
        info = await sim.get("/server_info")
        async with sim.client.get(sim.url + "/metrics") as response:
            metrics = await response.text()
        return [spec_of(output["meta_info"]) for _, output in outputs], info, metrics

    # A decode log interval of one round: every verify step is in an interval that has ended.
    specs, info, metrics = run([*EAGLE, "--enable-metrics", "--decode-log-interval", "1"], served)
    accepted = sum(spec["spec_num_correct_drafts"] + spec["spec_verify_ct"] for spec in specs)
    steps = sum(spec["spec_verify_ct"] for spec in specs)
    assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(accepted / steps)
    assert 1 < gauge(metrics, "sglang:spec_accept_length") <= 4

    # One request and an interval as long as its decode: the gauge's one interval is the whole request.
    async def one(sim: Sim) -> tuple[dict[str, Any], Any, str]:
        _, output = await sim.post("/generate", generate(REPETITIVE, 150))
        async with sim.client.get(sim.url + "/metrics") as response:
            return spec_of(output["meta_info"]), await sim.get("/server_info"), await response.text()

    verify_ct = specs[0]["spec_verify_ct"]
    spec, info, metrics = run([*EAGLE, "--enable-metrics", "--decode-log-interval", str(verify_ct)], one)
    assert spec == specs[0]
    expected = (spec["spec_num_correct_drafts"] + verify_ct) / verify_ct
    assert gauge(metrics, "sglang:spec_accept_length") == pytest.approx(expected)
    assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(expected)


def test_the_accept_length_follows_repetitiveness_around_the_profiles_and_within_the_draft() -> None:
    speculation = Speculation(num_steps=3, num_draft_tokens=4, accept_length=mean_accept_length(0.7, 3))
    assert speculation.accept_length_for(0.9) == speculation.accept_length  # no profile rate: fixed
    speculation = Speculation(3, 4, mean_accept_length(0.7, 3), acceptance_rate=0.7)
    lengths = [speculation.accept_length_for(share / 10) for share in range(11)]
    assert lengths == sorted(lengths) and lengths[0] > 1 and lengths[-1] <= 4
    assert speculation.accept_length_for(REFERENCE_REPETITIVENESS) == speculation.accept_length
    capped = Speculation(3, 2, 2.0, acceptance_rate=0.7)
    assert capped.accept_length_for(1.0) == 2.0


class Recorder:
    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        pass


def test_each_request_verifies_at_its_own_accept_length_and_counts_its_steps() -> None:
    clock = VirtualClock()
    speculation = Speculation(num_steps=3, num_draft_tokens=4, accept_length=2.0)
    engine = Engine([Scheduler(simple_model(speculation), SchedulerLimits(8, 8192, 2, 1))], clock)
    requests = [
        SimRequest(prompt_tokens=10, output_limit=101, sink=Recorder(), accept_length=length)
        for length in (0.0, 1.0, 2.5, 4.0)
    ]
    for request in requests:
        engine.submit(request)
    engine.start()
    clock.run()
    # 100 tokens after the prefill's: the model's 2 a step, then 1, 2.5 (2, 3, 2, 3, ...) and 4.
    assert [request.spec_verify_ct for request in requests] == [50, 100, 40, 25]
    assert [request.spec_correct_drafts for request in requests] == [50, 0, 60, 75]
    assert [request.spec_histogram for request in requests] == [[0, 50], [100], [0, 20, 20], [0, 0, 0, 25]]
    assert all(request.generated == 101 for request in requests)
