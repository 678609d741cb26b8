"""Prompts: exact lengths, reproducible, distinct across points and phases."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairbench.measure.bounds import COUNT_FACTOR, REQUESTS
from fairbench.measure.client import ApiFormat
from fairbench.measure.progress import Progress
from fairbench.measure.results import ResultsDir
from fairbench.measure.sweep import Sweep, SweepSpec
from fairbench.measure.vocabulary import Vocabulary
from fairbench.measure.workload import (
    MULTI_TURN,
    MultiTurn,
    Workload,
    WorkloadError,
    WorkloadSpec,
    parse_count,
)

# A small vocabulary whose specials sit at both ends, as in SentencePiece (0-2) and GPT-2 (the last id).
SMALL = Vocabulary(size=512, excluded=(0, 1, 2, 511), source="test")


def test_random_ids_have_exact_length_and_use_only_the_vocabulary_s_ordinary_ids() -> None:
    spec = WorkloadSpec(input_len=1024, output_len=64)
    prompts = Workload(spec, SMALL).prompts(20, level="c4", repeat=0)
    assert len(prompts) == 20
    seen: set[int] = set()
    for index, prompt in enumerate(prompts):
        assert prompt.index == index
        assert isinstance(prompt.prompt, list)
        assert len(prompt.prompt) == prompt.prompt_len == 1024
        assert prompt.output_len == 64
        seen.update(prompt.prompt)
    # 20480 draws over 508 ids: every ordinary id appears, no special and nothing past the end.
    assert seen == set(range(3, 511))


def test_token_id_prompts_without_a_vocabulary_are_refused() -> None:
    with pytest.raises(WorkloadError, match="vocabulary"):
        Workload(WorkloadSpec(input_len=8, output_len=8))
    # Text needs none.
    assert Workload(WorkloadSpec(input_len=8, output_len=8, as_text=True)).prompts(1, level="c1", repeat=0)


def test_same_seed_same_prompts_bit_for_bit() -> None:
    spec = WorkloadSpec(input_len=128, output_len=16, seed=7, range_ratio=0.5)
    first = Workload(spec, SMALL).prompts(10, level="c8", repeat=1)
    second = Workload(spec, SMALL).prompts(10, level="c8", repeat=1)
    assert first == second


def test_points_phases_and_seeds_get_different_prompts() -> None:
    workload = Workload(WorkloadSpec(input_len=64, output_len=8), SMALL)
    base = workload.prompts(4, level="c4", repeat=0)
    others = [
        workload.prompts(4, level="c8", repeat=0),
        workload.prompts(4, level="c4", repeat=1),
        workload.prompts(4, level="c4", repeat=0, phase="warmup"),
        Workload(WorkloadSpec(input_len=64, output_len=8, seed=2), SMALL).prompts(4, level="c4", repeat=0),
    ]
    seen = {tuple(p.prompt) for p in base if isinstance(p.prompt, list)}
    for other in others:
        for prompt in other:
            assert isinstance(prompt.prompt, list)
            assert tuple(prompt.prompt) not in seen


def test_range_ratio_draws_lengths_within_bounds() -> None:
    prompts = Workload(WorkloadSpec(input_len=100, output_len=40, range_ratio=0.25), SMALL).prompts(
        200, level="c1", repeat=0
    )
    inputs = {p.prompt_len for p in prompts}
    outputs = {p.output_len for p in prompts}
    assert min(inputs) >= 25 and max(inputs) <= 100 and len(inputs) > 20
    assert min(outputs) >= 10 and max(outputs) <= 40 and len(outputs) > 10
    assert all(isinstance(p.prompt, list) and len(p.prompt) == p.prompt_len for p in prompts)


def test_chat_prompts_are_text_of_about_the_input_length() -> None:
    prompts = Workload(WorkloadSpec(input_len=50, output_len=8, as_text=True)).prompts(
        3, level="c1", repeat=0
    )
    for prompt in prompts:
        assert isinstance(prompt.prompt, str)
        assert len(prompt.prompt.split()) == 50


def test_sharegpt_file_gives_first_human_turns(tmp_path: Path) -> None:
    data = [
        {"conversations": [{"from": "human", "value": "hello there"}, {"from": "gpt", "value": "hi"}]},
        {"conversations": [{"from": "human", "value": "lonely"}]},
        {"conversation": [{"from": "human", "value": "second form"}, {"from": "gpt", "value": "ok"}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    prompts = Workload(WorkloadSpec(input_len=10, output_len=5, dataset=str(path))).prompts(
        30, level="c1", repeat=0
    )
    assert {p.prompt for p in prompts} == {"hello there", "second form"}
    assert all(p.output_len == 5 for p in prompts)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"a": 1}', "must be a JSON list"),
        (b'[{"conversations": []}]', "no conversation with two or more turns"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", r"not UTF-8 text \(invalid start byte at byte 0\)"),
        (b"[" * 100_000, "nested too deeply to be a list of conversations"),
    ],
)
def test_bad_sharegpt_file_is_named_with_the_rule(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(WorkloadError, match=message) as info:
        Workload(WorkloadSpec(input_len=10, output_len=5, dataset=str(path)))
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("input_len", {"input_len": 0}),
        ("output_len", {"output_len": -1}),
        ("range_ratio", {"range_ratio": 0.0}),
    ],
)
def test_invalid_spec_names_the_field(field: str, kwargs: dict[str, float]) -> None:
    args: dict[str, float] = {"input_len": 10, "output_len": 10, **kwargs}
    with pytest.raises(WorkloadError, match=f"^{field}:"):
        WorkloadSpec(**args)  # type: ignore[arg-type]


def test_parse_count() -> None:
    assert parse_count("10x", 4, minimum=16) == 40
    assert parse_count("10x", 1, minimum=16) == 16
    assert parse_count("2x", 3) == 6
    assert parse_count("0.5x", 8) == 4
    assert parse_count(25, 4) == 25
    with pytest.raises(WorkloadError, match="not a count"):
        parse_count("ten", 4)
    with pytest.raises(WorkloadError) as info:
        parse_count("-3", 4)
    assert str(info.value) == f"'-3': {REQUESTS.problem(-3)}"


@pytest.mark.parametrize(
    ("count", "concurrency", "message"),
    [
        ("infx", 1, f"'infx': N {COUNT_FACTOR.problem(math.inf)}"),
        ("nanx", 1, f"'nanx': N {COUNT_FACTOR.problem(math.nan)}"),
        ("1e9x", 1, f"'1e9x': N {COUNT_FACTOR.problem(1e9)}"),
        ("-1x", 1, f"'-1x': N {COUNT_FACTOR.problem(-1.0)}"),
        ("20000000", 1, f"'20000000': {REQUESTS.problem(20_000_000)}"),
        ("1000x", 100_000, f"'1000x' at concurrency 100000: {REQUESTS.problem(10**8)}"),
    ],
)
def test_counts_beyond_their_bounds_are_refused_naming_the_bound(
    count: str, concurrency: int, message: str
) -> None:
    with pytest.raises(WorkloadError) as info:
        parse_count(count, concurrency)
    assert str(info.value) == message


def test_a_points_prompts_are_drawn_one_at_a_time_and_let_go_once_their_bodies_are_made(
    tmp_path: Path,
) -> None:
    """What bounds a long-context point's memory: each prompt drawn when it is taken, and kept without its
    tokens once its body holds them (a conversation's turns keep theirs: the later turns send them)."""
    spec = WorkloadSpec(input_len=4096, output_len=8)
    drawn = Workload(spec, SMALL).each_prompt(3, level="c1", repeat=0)
    assert isinstance(drawn, Iterator)
    sweep = Sweep(SweepSpec(url="http://x", workload=spec, concurrency=[1]), ResultsDir(tmp_path), Progress())
    api = ApiFormat("completions", "m")
    kept, requests = sweep.prepared(drawn, api, 1, 0, phase="measure")
    assert [(prompt.prompt, prompt.prompt_len) for prompt in kept] == [([], 4096)] * 3
    assert [request.prompt for request in requests] == kept
    whole = Workload(spec, SMALL).prompts(3, level="c1", repeat=0)
    assert [json.loads(request.body)["prompt"] for request in requests] == [p.prompt for p in whole]
    turns = MultiTurn(turns=2, user_len=5)
    conversation = WorkloadSpec(input_len=5, output_len=8, dataset=MULTI_TURN, multi_turn=turns)
    kept, _ = sweep.prepared(
        Workload(conversation, SMALL).each_prompt(2, level="c1", repeat=0), api, 1, 0, phase="m"
    )
    assert [len(prompt.prompt) for prompt in kept] == [5, 5]
