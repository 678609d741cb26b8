"""What the simulator's responses say (``fairbench.sim.outputs``): the same tokens for the same prompt on
every server of one numerics family, another family's from an early position on, the ``diverge-after``
fault's wrong tokens, and the sum of a text prompt's integers as the first token.

The simulator runs in this process on a loopback port; the requests are written against SGLang's formats
directly, with aiohttp, sharing nothing with fairbench's client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from fairbench.cli.sim import configure
from fairbench.sim.args import resolve
from fairbench.sim.http import serve
from fairbench.sim.outputs import DIVERGENCE_WINDOW, NumericsFamily, numerics_family, repetitiveness
from fairbench.sim.server import SimServer

PROMPT = "tell me a story about the sea and the ships that sail on it"
IDS = [17, 4023, 9, 311, 77, 1500, 2, 64, 9001, 12]


@dataclass
class Sim:
    url: str
    client: aiohttp.ClientSession
    server: SimServer

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        async with self.client.post(self.url + path, json=body) as response:
            return response.status, await response.json(content_type=None)

    async def stream(self, path: str, body: dict[str, Any]) -> list[Any]:
        """Every ``data:`` payload of a streamed response, parsed (``[DONE]`` as that string)."""
        events: list[Any] = []
        async with self.client.post(self.url + path, json={**body, "stream": True}) as response:
            assert response.status == 200
            async for line in response.content:
                if line.startswith(b"data: "):
                    payload = line[6:].strip().decode()
                    events.append(payload if payload == "[DONE]" else json.loads(payload))
        return events

    async def get(self, path: str) -> Any:
        async with self.client.get(self.url + path) as response:
            return await response.json(content_type=None)


@asynccontextmanager
async def running(*flags: str) -> AsyncIterator[Sim]:
    """The simulator with ``flags`` (SGLang's launch flags and ``--sim-*``), loaded, on a free port;
    its model runs a thousand times faster than the generic profile says."""
    parser = argparse.ArgumentParser()
    configure(parser)
    argv = ["--model-path", "sim/test-model", "--sim-time-scale", "0.001", *flags]
    server = SimServer(resolve(parser.parse_args(argv)), asyncio.get_running_loop())
    listener = await serve(server.handle, "127.0.0.1", 0)
    server.finish_loading()
    port = listener.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
            yield Sim(f"http://127.0.0.1:{port}", client, server)
    finally:
        listener.close()
        await listener.wait_closed()


def run(flags: list[str], scenario: Callable[[Sim], Awaitable[Any]]) -> Any:
    """``scenario`` against a fresh simulator started with ``flags``; what it returns."""

    async def main() -> Any:
        async with running(*flags) as sim:
            return await scenario(sim)

    return asyncio.run(main())


def generate(prompt: str | list[int], tokens: int = 24, **extra: Any) -> dict[str, Any]:
    key = "text" if isinstance(prompt, str) else "input_ids"
    return {key: prompt, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}, **extra}


async def answers(sim: Sim, tokens: int = 24) -> dict[str, Any]:
    """One server's answers: /generate's ids for a text and an ids prompt, completions' and chat's texts."""
    _, text = await sim.post("/generate", generate(PROMPT, tokens))
    _, ids = await sim.post("/generate", generate(IDS, tokens))
    _, completion = await sim.post(
        "/v1/completions", {"prompt": PROMPT, "max_tokens": tokens, "ignore_eos": True}
    )
    _, chat = await sim.post(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": tokens, "ignore_eos": True},
    )
    return {
        "text_ids": text["output_ids"],
        "text": text["text"],
        "ids_ids": ids["output_ids"],
        "completion": completion["choices"][0]["text"],
        "chat": chat["choices"][0]["message"]["content"],
    }


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((position for position, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


# --- one family, one answer -----------------------------------------------------------------------------


def test_the_same_prompt_gets_the_same_tokens_every_time_and_other_prompts_other_tokens() -> None:
    async def scenario(sim: Sim) -> None:
        first = await answers(sim)
        again = await answers(sim)
        assert first == again
        # The text a completion and a chat reply hold is the /generate text of the same words.
        assert first["text"] == first["completion"] == first["chat"]
        assert len(first["text"].split()) == 24
        _, other = await sim.post("/generate", generate(PROMPT + " today"))
        _, other_ids = await sim.post("/generate", generate([*IDS[:-1], 13]))
        assert other["output_ids"] != first["text_ids"]
        assert other_ids["output_ids"] != first["ids_ids"]

    run([], scenario)


def test_layout_parallelism_scheduling_speculation_and_chunking_do_not_change_the_answer() -> None:
    baseline = run([], answers)
    for flags in (
        ["--tp-size", "8", "--ep-size", "4", "--dp-size", "2"],
        ["--max-running-requests", "2", "--num-continuous-decode-steps", "4", "--stream-interval", "3"],
        ["--chunked-prefill-size", "4", "--schedule-policy", "fcfs", "--enable-mixed-chunk"],
        ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5"],
        ["--attention-backend", "triton", "--disable-cuda-graph", "--page-size", "16"],
        # SGLang resolves auto to the model's dtype: the simulated model's bfloat16, given, is no change.
        ["--dtype", "bfloat16", "--kv-cache-dtype", "bf16"],
    ):
        assert run(flags, answers) == baseline, flags


@pytest.mark.parametrize(
    "flags",
    [
        ["--dtype", "float16"],
        ["--kv-cache-dtype", "fp8_e4m3"],
        ["--quantization", "fp8"],
        ["--enable-fp32-lm-head"],
        ["--dtype", "float16", "--quantization", "w8a8_int8", "--tp-size", "2"],
    ],
)
def test_a_numerics_flag_gives_another_family_whose_tokens_leave_the_defaults_early(flags: list[str]) -> None:
    baseline = run([], answers)
    family = run(flags, answers)
    for key in ("text_ids", "ids_ids"):
        position = first_difference(baseline[key], family[key])
        assert position is not None and position < DIVERGENCE_WINDOW, (key, position)
    # Deterministic: the family answers the same again, on another server.
    assert run(flags, answers) == family


def test_the_family_is_reported_in_server_info() -> None:
    async def scenario(sim: Sim) -> Any:
        return (await sim.get("/server_info"))["sim"]["numerics_family"]

    assert run([], scenario) == {"name": "default", "flags": {}}
    assert run(["--kv-cache-dtype", "fp8_e5m2", "--dtype", "half"], scenario) == {
        "name": "dtype=float16,kv_cache_dtype=fp8_e5m2",
        "flags": {"dtype": "float16", "kv_cache_dtype": "fp8_e5m2"},
    }


def test_numerics_family_normalizes_synonyms_and_what_auto_resolves_to() -> None:
    assert numerics_family({"dtype": "auto", "kv_cache_dtype": "auto"}).is_default
    assert numerics_family({"dtype": "bfloat16", "kv_cache_dtype": "bfloat16"}).is_default
    # A float16 checkpoint: auto is float16, and bfloat16 is a change.
    assert numerics_family({"dtype": "half", "kv_cache_dtype": "auto"}, "float16").is_default
    assert numerics_family({"dtype": "bfloat16"}, "float16") == NumericsFamily((("dtype", "bfloat16"),))
    # A KV cache in the model's own dtype is no setting of its own; a quantization "unquant" none.
    assert numerics_family({"dtype": "float16", "kv_cache_dtype": "float16"}).name == "dtype=float16"
    assert numerics_family({"quantization": "unquant", "enable_fp32_lm_head": False}).is_default
    assert numerics_family({"tp_size": 8, "chunked_prefill_size": 64}).is_default


# --- the diverge-after fault ----------------------------------------------------------------------------


@pytest.mark.parametrize("position", [0, 1, 5, 23])
def test_diverge_after_k_changes_every_token_from_position_k_on(position: int) -> None:
    baseline = run([], answers)
    faulty = run(["--sim-fault", f"diverge-after={position}"], answers)
    for key in ("text_ids", "ids_ids"):
        good, bad = baseline[key], faulty[key]
        assert good[:position] == bad[:position]
        assert all(x != y for x, y in zip(good[position:], bad[position:], strict=True)), key


def test_diverge_after_past_the_output_changes_nothing_and_counts_from_the_familys_tokens() -> None:
    assert run(["--sim-fault", "diverge-after=24"], answers) == run([], answers)
    family = run(["--dtype", "float16"], answers)
    faulty = run(["--dtype", "float16", "--sim-fault", "diverge-after=3"], answers)
    assert faulty["text_ids"][:3] == family["text_ids"][:3]
    assert all(x != y for x, y in zip(faulty["text_ids"][3:], family["text_ids"][3:], strict=True))


def test_diverge_after_is_reported_with_the_other_faults() -> None:
    async def scenario(sim: Sim) -> Any:
        return (await sim.get("/server_info"))["sim"]["faults"]

    assert run(["--sim-fault", "diverge-after=7"], scenario) == {"diverge-after": 7}


# --- sums -----------------------------------------------------------------------------------------------

PROBLEMS = [
    ("Maya has 12 stickers and gets 30 more. How many now?", 42),
    ("Tom had 20 marbles and gave away 5. How many are left?", 25),
    ("A box holds 6 rows of 7 crayons. How many crayons?", 13),
    ("What is 3 + -5 ?", -2),
    ("Items 3-5 cost $4 each, and 1000 more.", 1012),
]


def first_token(text: str) -> str:
    return text.split(maxsplit=1)[0]


@pytest.mark.parametrize(("question", "total"), PROBLEMS)
def test_the_first_token_of_a_text_reply_is_the_sum_of_its_integers(question: str, total: int) -> None:
    async def scenario(sim: Sim) -> list[str]:
        _, generated = await sim.post("/generate", generate(question, 6))
        _, completed = await sim.post("/v1/completions", {"prompt": question, "max_tokens": 6})
        _, chat = await sim.post(
            "/v1/chat/completions",
            {
                "messages": [
                    {"role": "system", "content": "You add 100 and 200 in your head."},
                    {"role": "user", "content": "What is 1 + 1?"},
                    {"role": "assistant", "content": "2"},
                    {"role": "user", "content": question},
                ],
                "max_tokens": 6,
            },
        )
        assert chat["usage"]["completion_tokens"] == len(chat["choices"][0]["message"]["content"].split())
        return [
            generated["text"],
            completed["choices"][0]["text"],
            chat["choices"][0]["message"]["content"],
        ]

    replies = run([], scenario)
    # Only the last user message counts; the number is one token, then the usual words.
    assert [first_token(reply) for reply in replies] == [str(total)] * 3
    assert all(len(reply.split()) == 6 and reply.startswith(" ") for reply in replies)


def test_a_sum_is_one_token_with_an_id_of_its_own_and_ids_prompts_get_none() -> None:
    async def scenario(sim: Sim) -> tuple[Any, Any]:
        _, text = await sim.post("/generate", generate("add 40 and 2", 3))
        _, ids = await sim.post("/generate", generate([40, 2], 3))
        return text, ids

    text, ids = run([], scenario)
    assert text["meta_info"]["completion_tokens"] == 3 == len(text["output_ids"])
    assert text["text"].startswith(" 42 ")
    assert text["output_ids"][0] not in ids["output_ids"]
    assert not any(character.isdigit() for character in ids["text"])


def test_another_family_or_diverge_after_0_answers_another_number() -> None:
    async def scenario(sim: Sim) -> list[str]:
        replies = []
        for question, _ in PROBLEMS:
            _, generated = await sim.post("/generate", generate(question, 2))
            replies.append(first_token(generated["text"]))
        return replies

    right = [str(total) for _, total in PROBLEMS]
    assert run([], scenario) == right
    for flags in (["--kv-cache-dtype", "fp8_e4m3"], ["--sim-fault", "diverge-after=0"]):
        wrong = run(flags, scenario)
        assert all(int(answer) != int(truth) for answer, truth in zip(wrong, right, strict=True)), flags
    assert run(["--sim-fault", "diverge-after=1"], scenario) == right


# --- a multi-turn conversation sends its replies back ---------------------------------------------------


def test_a_conversation_that_sends_replies_back_gets_new_replies_and_its_cache_hits() -> None:
    async def scenario(sim: Sim) -> None:
        history = [{"role": "user", "content": PROMPT}]
        replies = []
        for turn in range(3):
            _, chat = await sim.post(
                "/v1/chat/completions", {"messages": history, "max_tokens": 8, "ignore_eos": True}
            )
            reply = chat["choices"][0]["message"]["content"]
            replies.append(reply)
            history += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": f"and then {turn}"},
            ]
        assert len(set(replies)) == 3
        ids: list[int] = list(IDS)
        cached = []
        for _ in range(3):
            _, out = await sim.post("/generate", generate(ids, 8))
            cached.append(out["meta_info"]["cached_tokens"])
            ids = [*ids, *out["output_ids"], 5, 6]
        # Each turn finds the previous turn's prompt and reply, but its last token, in the prefix cache.
        assert cached == [0, len(IDS) + 7, len(IDS) + 8 + 2 + 7]

    run([], scenario)


def test_repetitiveness_is_the_share_of_tokens_that_end_a_repeated_3_gram() -> None:
    assert repetitiveness(list(range(1000))) == 0.0
    assert repetitiveness([1, 2]) == 0.0
    assert repetitiveness(["a", "b", "c", "a", "b", "c", "a", "b", "c"]) == pytest.approx(4 / 7)
    assert repetitiveness(["x"] * 50) == pytest.approx(47 / 48)
