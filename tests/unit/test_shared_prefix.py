"""The shared-prefix workload: groups as sglang.bench_serving's generated-shared-prefix draws them, its
requests' bodies, the cache state it is designed for, and the cached tokens the server reports."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fairbench.measure.client import ApiFormat
from fairbench.measure.metrics import cache_metrics
from fairbench.measure.point_flags import server_flags
from fairbench.measure.records import RequestRecord
from fairbench.measure.vocabulary import Vocabulary
from fairbench.measure.workload import (
    FLUSHED,
    PRIMED,
    SHARED_PREFIX,
    SharedPrefix,
    Workload,
    WorkloadError,
    WorkloadSpec,
    designed_cached_tokens,
)
from fairbench.report.workload_text import _cache_text, _prompts_text

VOCABULARY = Vocabulary(size=32_000, excluded=(0, 1, 2), source="test")


def workload(order: str = "grouped", *, as_text: bool = False, cache_state: str = FLUSHED) -> Workload:
    shared = SharedPrefix(groups=3, prompts_per_group=4, system_prompt_len=40, question_len=8, order=order)
    spec = WorkloadSpec(
        input_len=48,
        output_len=16,
        dataset=SHARED_PREFIX,
        shared_prefix=shared,
        as_text=as_text,
        cache_state=cache_state,
    )
    return Workload(spec, None if as_text else VOCABULARY)


def test_grouped_prompts_are_each_groups_questions_after_its_own_system_prompt() -> None:
    prompts = workload().prompts(12, level="c4", repeat=0)
    assert [prompt.group for prompt in prompts] == [0] * 4 + [1] * 4 + [2] * 4
    systems = {prompt.group: prompt.system for prompt in prompts}
    for prompt in prompts:
        assert prompt.system == systems[prompt.group]
        assert isinstance(prompt.prompt, list) and len(prompt.prompt) == 8
        assert prompt.shared_len == 40 and prompt.prompt_len == 48
    assert len({tuple(system) for system in systems.values() if isinstance(system, list)}) == 3
    assert len({tuple(prompt.prompt) for prompt in prompts if isinstance(prompt.prompt, list)}) == 12


def test_a_point_beyond_the_groups_wraps_around_them_as_sglang_assigns_them() -> None:
    prompts = workload().prompts(20, level="c4", repeat=0)
    assert [prompt.group for prompt in prompts] == [0] * 4 + [1] * 4 + [2] * 4 + [0] * 4 + [1] * 4
    fewer = workload().prompts(5, level="c4", repeat=0)
    assert [prompt.group for prompt in fewer] == [0, 0, 0, 0, 1]


def test_shuffled_prompts_are_the_grouped_ones_in_a_seeded_order_renumbered() -> None:
    grouped = workload().prompts(12, level="c4", repeat=0)
    shuffled = workload("shuffled").prompts(12, level="c4", repeat=0)
    assert [prompt.index for prompt in shuffled] == list(range(12))
    assert [prompt.group for prompt in shuffled] != [prompt.group for prompt in grouped]
    key = lambda prompt: (prompt.group, prompt.prompt)  # noqa: E731 - a sort key
    assert sorted(map(key, shuffled)) == sorted(map(key, grouped))
    assert shuffled == workload("shuffled").prompts(12, level="c4", repeat=0)
    assert shuffled != workload("shuffled").prompts(12, level="c4", repeat=1)


def test_each_point_and_phase_has_system_prompts_of_its_own() -> None:
    def systems(phase: str, level: str) -> set[tuple[int, ...]]:
        prompts = workload().prompts(12, level=level, repeat=0, phase=phase)
        return {tuple(prompt.system) for prompt in prompts if isinstance(prompt.system, list)}

    assert not systems("measure", "c4") & systems("warmup", "c4")
    assert not systems("measure", "c4") & systems("measure", "c8")


def test_primers_send_each_group_s_system_prompt_alone_for_one_token() -> None:
    source = workload("shuffled")
    prompts = source.prompts(12, level="c4", repeat=0)
    primers = source.primers(prompts)
    firsts = list(dict.fromkeys(prompt.group for prompt in prompts))
    assert [primer.group for primer in primers] == firsts
    for primer in primers:
        assert primer.prompt == [] and primer.output_len == 1 and primer.prompt_len == 40
        assert primer.system == next(prompt.system for prompt in prompts if prompt.group == primer.group)


def test_the_design_caches_every_system_prompt_primed_and_all_but_each_group_s_first_flushed() -> None:
    prompts = workload("shuffled").prompts(12, level="c4", repeat=0)
    assert designed_cached_tokens(prompts, PRIMED) == {index: 40 for index in range(12)}
    flushed = designed_cached_tokens(prompts, FLUSHED)
    firsts = {next(prompt.index for prompt in prompts if prompt.group == group) for group in range(3)}
    assert flushed == {index: 0 if index in firsts else 40 for index in range(12)}
    plain = Workload(WorkloadSpec(input_len=8, output_len=8), VOCABULARY).prompts(4, level="c1", repeat=0)
    assert designed_cached_tokens(plain, FLUSHED) == dict.fromkeys(range(4), 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": SHARED_PREFIX}, "shared_prefix: given exactly when the dataset is shared-prefix"),
        ({"cache_state": PRIMED}, "cache_state: primed primes shared system prompts"),
        ({"cache_state": "warm"}, "cache_state: 'warm' is not one of flushed, primed, carried"),
        (
            {"dataset": SHARED_PREFIX, "shared_prefix": SharedPrefix(2, 2, 40, 9)},
            "input_len: 48 must be the shared prefix's system_prompt_len \\+ question_len, 49",
        ),
    ],
)
def test_a_spec_that_breaks_a_shared_prefix_rule_names_it(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        WorkloadSpec(input_len=48, output_len=8, **kwargs)


@pytest.mark.parametrize("field", ["groups", "prompts_per_group", "system_prompt_len", "question_len"])
def test_a_shared_prefix_count_below_one_is_refused(field: str) -> None:
    lengths: dict[str, Any] = {
        "groups": 1,
        "prompts_per_group": 1,
        "system_prompt_len": 1,
        "question_len": 1,
        field: 0,
    }
    with pytest.raises(WorkloadError, match=f"shared_prefix.{field}: 0 must be a positive integer"):
        SharedPrefix(**lengths)


# --- the requests ----------------------------------------------------------------------------------------


def test_a_token_id_request_sends_the_system_prompt_then_the_question_as_one_prompt() -> None:
    prompt = workload().prompts(1, level="c1", repeat=0)[0]
    assert isinstance(prompt.system, list) and isinstance(prompt.prompt, list)
    completions = json.loads(ApiFormat("completions", "m").body(prompt, "r1"))
    assert completions["prompt"] == prompt.system + prompt.prompt
    generate = json.loads(ApiFormat("generate", "m").body(prompt, "r1"))
    assert generate["input_ids"] == prompt.system + prompt.prompt


def test_a_text_request_joins_system_prompt_and_question_as_sglang_does() -> None:
    prompt = workload(as_text=True).prompts(1, level="c1", repeat=0)[0]
    chat = json.loads(ApiFormat("chat", "m").body(prompt, "r1"))
    assert chat["messages"] == [{"role": "user", "content": f"{prompt.system}\n\n{prompt.prompt}"}]
    primer = workload(as_text=True).primers([prompt])[0]
    assert json.loads(ApiFormat("chat", "m").body(primer, "r2"))["messages"][0]["content"] == prompt.system


def _sse(*events: dict[str, Any]) -> list[tuple[int, bytes]]:
    lines = [f"data: {json.dumps(event)}\n\n".encode() for event in events]
    return [(index, line) for index, line in enumerate([*lines, b"data: [DONE]\n\n"])]


def test_generate_s_meta_info_cached_tokens_is_the_request_s() -> None:
    events = [
        {"text": "a", "meta_info": {"prompt_tokens": 48, "completion_tokens": 1, "cached_tokens": 40}},
        {"text": "ab", "meta_info": {"prompt_tokens": 48, "completion_tokens": 2, "cached_tokens": 40}},
    ]
    assert ApiFormat("generate", "m").parse(_sse(*events)).cached_tokens == 40


@pytest.mark.parametrize(
    ("details", "cached"),
    [
        ({"cached_tokens": 32}, 32),
        (None, None),
        ({"cached_tokens": -1}, None),
        ({"cached_tokens": True}, None),
    ],
    ids=["reported", "no-cache-report", "negative", "not-a-count"],
)
def test_openai_usage_cached_tokens_only_where_the_server_reports_them(
    details: dict[str, Any] | None, cached: int | None
) -> None:
    usage = {"prompt_tokens": 48, "completion_tokens": 1, "prompt_tokens_details": details}
    events: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "text": "a"}], "usage": {**usage, "prompt_tokens_details": None}},
        {"choices": [], "usage": usage},
    ]
    assert ApiFormat("completions", "m").parse(_sse(*events)).cached_tokens == cached


# --- the point's numbers and its flag --------------------------------------------------------------------


def _record(index: int, cached: int | None, *, error: str = "") -> RequestRecord:
    return RequestRecord(index, 48, 16, cached_tokens=cached, error=error)


def test_cache_metrics_sum_the_reported_and_the_designed_tokens_of_the_ok_requests() -> None:
    records = [_record(0, 0), _record(1, 40), _record(2, 40), _record(3, 40, error="HTTP 500")]
    metrics = cache_metrics(records, {0: 0, 1: 40, 2: 40, 3: 40}, FLUSHED)
    assert metrics == {
        "cache_state": FLUSHED,
        "designed_cached_tokens": 80,
        "designed_cached_share": 80 / 144,
        "cached_tokens": 80,
        "cached_share": 80 / 144,
    }


def test_cache_metrics_report_no_measured_share_unless_every_ok_request_reported() -> None:
    metrics = cache_metrics([_record(0, 40), _record(1, None)], {0: 40, 1: 40}, PRIMED)
    assert metrics["cached_tokens"] is None and metrics["cached_share"] is None
    assert metrics["designed_cached_share"] == 80 / 96


def _point(cache_state: str, designed: float, measured: float | None, **fields: Any) -> dict[str, Any]:
    return {
        "completed": 10,
        "num_prompts": 10,
        "total_input_tokens": 480,
        "total_output_tokens": 160,
        "cache_state": cache_state,
        "designed_cached_share": designed,
        "cached_share": measured,
        **fields,
    }


@pytest.mark.parametrize(
    ("point", "reason"),
    [
        (_point(FLUSHED, 0.5, 0.6), "60% of the prompt tokens the server reported for the point's requests"),
        (_point(PRIMED, 0.8, 0.5), "below the 80% this workload is designed to reuse"),
        (
            _point(FLUSHED, 0.0, None, server_cached_tokens=240, server_prompt_tokens=480),
            "50% of the prompt tokens the server's /metrics counted",
        ),
    ],
    ids=["above-design", "primed-below-design", "metrics-counter"],
)
def test_reuse_far_from_the_design_is_prefix_reuse(point: dict[str, Any], reason: str) -> None:
    (flag,) = server_flags(point, api="completions", closed_loop=False)
    assert flag["flag"] == "prefix_reuse" and reason in flag["reason"], flag


@pytest.mark.parametrize(
    "point",
    [
        _point(FLUSHED, 0.8, 0.5),
        _point(PRIMED, 0.8, 0.78),
        _point(PRIMED, 0.8, 0.84),
        _point(FLUSHED, 0.0, None),
    ],
    ids=[
        "flushed-below-its-upper-bound",
        "primed-within-slack-below",
        "within-slack-above",
        "nothing-counted",
    ],
)
def test_reuse_near_the_design_or_below_a_bound_is_not_flagged(point: dict[str, Any]) -> None:
    assert server_flags(point, api="completions", closed_loop=False) == []


def test_the_report_describes_a_shared_prefix_workload_and_its_cache_state() -> None:
    shared = SharedPrefix(groups=8, prompts_per_group=32, system_prompt_len=4096, question_len=256)
    workload = {"shared_prefix": shared.to_json(), "cache_state": PRIMED}
    assert (
        _prompts_text(workload) == "8 groups of 32 requests sharing a 4096-token system prompt (shuffled), "
    )
    assert _cache_text(workload) == ", each point's prefix cache primed"
    assert _prompts_text({}) == "" and _cache_text({}) == ""
