"""Log-probabilities in SGLang 0.5.23's shapes, from the simulator's HTTP server.

- ``/generate`` with ``return_logprob`` (``TokenizerManager.add_logprob_to_meta_info``): ``meta_info`` gets,
  after ``num_retractions``, ``input_token_logprobs: []``, ``output_token_logprobs`` (one
  ``[logprob, token_id, text or null]`` per output token), ``output_token_logprobs_length``; with
  ``top_logprobs_num`` > 0 ``input_top_logprobs: []`` and ``output_top_logprobs`` (a list of such entries per
  token); with ``token_ids_logprob`` ``input_token_ids_logprobs: []`` and ``output_token_ids_logprobs``.
- ``/v1/completions`` with ``logprobs: N`` (``to_openai_style_logprobs``): ``text_offset`` (-1 each),
  ``token_logprobs``, ``tokens``, ``top_logprobs`` ({text: logprob} per token).
- ``/v1/chat/completions`` with ``logprobs``/``top_logprobs`` (``ChoiceLogprobs``): ``content``, one
  ``{token, bytes, logprob, top_logprobs}`` per token.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_sim_outputs import PROMPT, Sim, generate, run

GENERATE_LOGPROB_KEYS = [
    *("id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions"),
    *("input_token_logprobs", "output_token_logprobs", "output_token_logprobs_length"),
    *("input_top_logprobs", "output_top_logprobs", "input_token_ids_logprobs", "output_token_ids_logprobs"),
    *("reasoning_tokens", "completion_tokens", "cached_tokens", "weight_versions", "cached_tokens_details"),
    *("dp_rank", "e2e_latency", "response_sent_to_client_ts"),
]


def chat(content: str, tokens: int = 6, **extra: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": tokens,
        "ignore_eos": True,
        **extra,
    }


def test_generate_returns_logprobs_in_meta_info_in_sglangs_order_and_shape() -> None:
    async def scenario(sim: Sim) -> Any:
        asked = {"return_logprob": True, "top_logprobs_num": 3, "token_ids_logprob": [1000, 1001, 7]}
        _, out = await sim.post("/generate", generate(PROMPT, 5, **asked))
        return out

    out = run([], scenario)
    meta = out["meta_info"]
    assert list(meta) == GENERATE_LOGPROB_KEYS
    assert (
        meta["input_token_logprobs"] == meta["input_top_logprobs"] == meta["input_token_ids_logprobs"] == []
    )
    assert meta["output_token_logprobs_length"] == 5
    # Without return_text_in_logprobs the text is null.
    assert [entry[1:] for entry in meta["output_token_logprobs"]] == [
        [token, None] for token in out["output_ids"]
    ]
    for chosen, top, listed in zip(
        meta["output_token_logprobs"],
        meta["output_top_logprobs"],
        meta["output_token_ids_logprobs"],
        strict=True,
    ):
        assert len(top) == 3 and top[0] == chosen
        values = [entry[0] for entry in top]
        assert chosen[0] == max(values) and values == sorted(values, reverse=True)
        assert -1 < chosen[0] < 0 and len({entry[1] for entry in top}) == 3
        assert [entry[1] for entry in listed] == [1000, 1001, 7]
        # A token's value is the same wherever it is listed; an id no word has, the floor.
        for value, token, _ in listed:
            assert value == next((entry[0] for entry in top if entry[1] == token), value)
        assert listed[2][0] == -60.0


def test_return_text_in_logprobs_gives_each_entrys_text() -> None:
    async def scenario(sim: Sim) -> Any:
        asked = {"return_logprob": True, "top_logprobs_num": 2, "return_text_in_logprobs": True}
        _, out = await sim.post("/generate", generate("add 20 and 22", 4, **asked))
        return out

    out = run([], scenario)
    chosen = out["meta_info"]["output_token_logprobs"]
    assert "".join(entry[2] for entry in chosen) == out["text"]
    assert chosen[0][2] == " 42"
    assert all(isinstance(entry[2], str) for row in out["meta_info"]["output_top_logprobs"] for entry in row)


def test_without_return_logprob_there_are_no_logprob_keys_and_prompt_logprobs_are_refused() -> None:
    async def scenario(sim: Sim) -> Any:
        _, plain = await sim.post("/generate", generate(PROMPT, 3))
        refused = await sim.post("/generate", generate(PROMPT, 3, return_logprob=True, logprob_start_len=0))
        allowed, _ = await sim.post(
            "/generate", generate(PROMPT, 3, return_logprob=True, logprob_start_len=-1)
        )
        echoed = await sim.post("/v1/completions", {"prompt": PROMPT, "logprobs": 1, "echo": True})
        return plain, refused, allowed, echoed

    plain, refused, allowed, echoed = run([], scenario)
    assert not any("logprob" in key for key in plain["meta_info"])
    assert refused[0] == 400 and "logprob_start_len" in refused[1]["error"]["message"]
    assert allowed == 200
    assert echoed[0] == 400 and echoed[1]["object"] == "error"


def test_a_streamed_generate_carries_the_logprobs_so_far_in_every_event() -> None:
    async def scenario(sim: Sim) -> tuple[Any, list[Any]]:
        asked = {"return_logprob": True, "top_logprobs_num": 2, "return_text_in_logprobs": True}
        _, whole = await sim.post("/generate", generate(PROMPT, 6, **asked))
        events = await sim.stream("/generate", generate(PROMPT, 6, **asked))
        return whole, events

    whole, events = run([], scenario)
    outputs = [event for event in events if isinstance(event, dict)]
    assert [len(event["meta_info"]["output_token_logprobs"]) for event in outputs] == [1, 2, 3, 4, 5, 6]
    last = outputs[-1]["meta_info"]
    for key in ("output_token_logprobs", "output_top_logprobs"):
        assert last[key] == whole["meta_info"][key]


def test_completions_logprobs_are_the_legacy_logprobs_object() -> None:
    async def scenario(sim: Sim) -> tuple[Any, Any, list[Any]]:
        _, generated = await sim.post(
            "/generate", generate(PROMPT, 5, return_logprob=True, top_logprobs_num=2)
        )
        _, whole = await sim.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "logprobs": 2})
        events = await sim.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "logprobs": 2})
        return generated, whole, events

    generated, whole, events = run([], scenario)
    logprobs = whole["choices"][0]["logprobs"]
    assert list(logprobs) == ["text_offset", "token_logprobs", "tokens", "top_logprobs"]
    assert logprobs["text_offset"] == [-1] * 5
    assert logprobs["token_logprobs"] == [
        entry[0] for entry in generated["meta_info"]["output_token_logprobs"]
    ]
    assert "".join(logprobs["tokens"]) == whole["choices"][0]["text"] == generated["text"]
    for token, value, top in zip(
        logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True
    ):
        assert len(top) == 2 and top[token] == value == max(top.values())
    # Streamed, each chunk carries its own tokens' logprobs; together they are the whole response's.
    chunks = [event["choices"][0]["logprobs"] for event in events if isinstance(event, dict)]
    for key in ("token_logprobs", "top_logprobs"):
        assert [item for chunk in chunks for item in chunk[key]] == logprobs[key]


def test_completions_logprobs_0_has_no_top_logprobs() -> None:
    async def scenario(sim: Sim) -> Any:
        _, whole = await sim.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "logprobs": 0})
        _, plain = await sim.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 3})
        return whole["choices"][0]["logprobs"], plain["choices"][0]["logprobs"]

    logprobs, plain = run([], scenario)
    assert logprobs["top_logprobs"] == [] and len(logprobs["token_logprobs"]) == 3
    assert plain is None


def test_chat_logprobs_are_choice_logprobs_with_bytes_and_top_logprobs() -> None:
    async def scenario(sim: Sim) -> tuple[Any, list[Any], Any]:
        _, whole = await sim.post("/v1/chat/completions", chat(PROMPT, logprobs=True, top_logprobs=3))
        events = await sim.stream("/v1/chat/completions", chat(PROMPT, logprobs=True, top_logprobs=3))
        _, without_top = await sim.post("/v1/chat/completions", chat(PROMPT, logprobs=True))
        return whole, events, without_top

    whole, events, without_top = run([], scenario)
    choice = whole["choices"][0]
    content = choice["logprobs"]["content"]
    assert "".join(entry["token"] for entry in content) == choice["message"]["content"]
    for entry in content:
        assert list(entry) == ["token", "bytes", "logprob", "top_logprobs"]
        assert entry["bytes"] == list(entry["token"].encode())
        assert entry["top_logprobs"][0] == {key: entry[key] for key in ("token", "bytes", "logprob")}
        assert [top["logprob"] for top in entry["top_logprobs"]] == sorted(
            (top["logprob"] for top in entry["top_logprobs"]), reverse=True
        )
    assert all(entry["top_logprobs"] == [] for entry in without_top["choices"][0]["logprobs"]["content"])
    # Streamed: on the content chunks only (the role and finish chunks carry null).
    chunks = [event for event in events if isinstance(event, dict) and event["choices"]]
    streamed = [
        entry
        for event in chunks
        if event["choices"][0]["logprobs"]
        for entry in event["choices"][0]["logprobs"]["content"]
    ]
    assert streamed == content
    assert chunks[0]["choices"][0]["logprobs"] is None and chunks[-1]["choices"][0]["logprobs"] is None


def test_logprobs_are_deterministic_and_another_family_moves_them_slightly() -> None:
    async def scenario(sim: Sim) -> tuple[list[int], list[float]]:
        _, out = await sim.post("/generate", generate(PROMPT, 24, return_logprob=True))
        entries = out["meta_info"]["output_token_logprobs"]
        return [entry[1] for entry in entries], [entry[0] for entry in entries]

    ids, values = run([], scenario)
    assert run(["--tp-size", "4", "--speculative-algorithm", "EAGLE"], scenario) == (ids, values)
    other_ids, other_values = run(["--dtype", "float16"], scenario)
    same = [position for position, (a, b) in enumerate(zip(ids, other_ids, strict=True)) if a == b]
    assert same and same[0] == 0  # the families agree at first...
    for position in same:
        # ...with values a little apart wherever they choose the same token.
        assert 0 < abs(values[position] - other_values[position]) < 0.05


def test_diverge_after_keeps_the_chosen_token_the_most_likely() -> None:
    async def scenario(sim: Sim) -> Any:
        _, out = await sim.post("/generate", generate(PROMPT, 8, return_logprob=True, top_logprobs_num=4))
        return out["meta_info"]

    meta = run(["--sim-fault", "diverge-after=2"], scenario)
    for chosen, top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"], strict=True):
        assert top[0] == chosen


def test_chat_return_meta_info_carries_generates_meta_info_and_is_refused_streamed() -> None:
    async def scenario(sim: Sim) -> tuple[Any, Any]:
        _, whole = await sim.post("/v1/chat/completions", chat(PROMPT, logprobs=True, return_meta_info=True))
        refused = await sim.post("/v1/chat/completions", chat(PROMPT, return_meta_info=True, stream=True))
        return whole, refused

    whole, (status, error) = run([], scenario)
    choice = whole["choices"][0]
    assert list(choice) == ["index", "message", "logprobs", "finish_reason", "matched_stop", "meta_info"]
    meta = choice["meta_info"]
    assert meta["id"] == whole["id"] and meta["completion_tokens"] == 6
    assert [entry[0] for entry in meta["output_token_logprobs"]] == [
        entry["logprob"] for entry in choice["logprobs"]["content"]
    ]
    assert status == 400 and error["message"].startswith("return_meta_info is not supported with streaming.")


@pytest.mark.parametrize(
    "body",
    [
        {"return_logprob": "yes"},
        {"return_logprob": True, "top_logprobs_num": "2"},
        {"return_logprob": True, "token_ids_logprob": ["a"]},
    ],
)
def test_a_malformed_logprob_field_is_a_400(body: dict[str, Any]) -> None:
    async def scenario(sim: Sim) -> int:
        status, _ = await sim.post("/generate", generate(PROMPT, 2, **body))
        return status

    assert run([], scenario) == 400
