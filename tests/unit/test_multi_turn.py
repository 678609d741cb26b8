"""The multi-turn workload: its conversations' turns as drawn, each turn's input holding the server's own
earlier replies, the cache state it is designed for, its replies read from each API's stream, its
figures by turn, and the settings it refuses."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.campaign_documents import DELETE, VALIDATOR, changed, errors_of, parse

from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import SINGLE_WORKLOAD
from fairbench.campaign.sweep import sweep_spec
from fairbench.campaign.workload import workload_from_json
from fairbench.measure.client import ApiFormat
from fairbench.measure.conversation import converse
from fairbench.measure.metrics import turn_metrics
from fairbench.measure.records import RequestRecord
from fairbench.measure.sweep import SweepSpec
from fairbench.measure.vocabulary import Vocabulary
from fairbench.measure.workload import (
    FLUSHED,
    MULTI_TURN,
    PRIMED,
    LevelCount,
    MultiTurn,
    Prompt,
    Workload,
    WorkloadError,
    WorkloadSpec,
    designed_cached_tokens,
)
from fairbench.report.workload_text import _lengths_text, _prompts_text

VOCABULARY = Vocabulary(size=32_000, excluded=(0, 1, 2), source="test")
TURNS = MultiTurn(turns=3, user_len=10, system_prompt_len=20, system_prompts=2)


def spec(turns: MultiTurn = TURNS, **fields: Any) -> WorkloadSpec:
    input_len = turns.first_input_len if turns.sharegpt is None else 1
    return WorkloadSpec(input_len=input_len, output_len=5, dataset=MULTI_TURN, multi_turn=turns, **fields)


def test_a_point_holds_whole_conversations_each_turn_counting_the_replies_before_it() -> None:
    workload = Workload(spec(), VOCABULARY)
    count = workload.measured_count(LevelCount(16, times_concurrency=False), 4)
    assert count == 18  # 16 turns asked: six whole conversations of three
    prompts = workload.prompts(count, level="c4", repeat=0)
    assert [(p.index, p.conversation, p.turn) for p in prompts[:4]] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 0, 2),
        (3, 1, 0),
    ]
    # Turn k's input: the system prompt, k user turns and k replies of 5 tokens, then its own user turn.
    assert [p.prompt_len for p in prompts[:3]] == [30, 45, 60]
    assert all(len(p.prompt) == 10 and p.output_len == 5 for p in prompts)
    # Two system prompts, conversation j having the (j mod 2)-th; every turn of a conversation the same.
    systems = [p.system for p in prompts if p.turn == 0]
    assert systems[0] == systems[2] == systems[4] != systems[1] == systems[3]
    assert [p.group for p in prompts if p.turn == 0] == [0, 1, 0, 1, 0, 1]
    assert len({tuple(p.prompt) for p in prompts}) == 18  # every user turn its own
    again = Workload(spec(), VOCABULARY).prompts(count, level="c4", repeat=0)
    assert again == prompts
    assert Workload(spec(), VOCABULARY).prompts(count, level="c4", repeat=1) != prompts


def test_without_a_system_prompt_a_conversation_starts_with_its_first_user_turn() -> None:
    turns = MultiTurn(turns=2, user_len=7)
    prompts = Workload(spec(turns), VOCABULARY).prompts(4, level="c1", repeat=0)
    assert [(p.system, p.group, p.prompt_len) for p in prompts] == [(None, None, 7), (None, None, 19)] * 2


def test_the_design_caches_the_previous_turn_and_its_reply_but_its_last_token() -> None:
    prompts = Workload(spec(), VOCABULARY).prompts(6, level="c1", repeat=0)
    designed = designed_cached_tokens(prompts, FLUSHED)
    # Conversation 0: its first turn finds nothing; turn k the previous turn's input and reply less one.
    # Conversation 1 has the other system prompt: nothing cached for its first turn either.
    assert [designed[p.index] for p in prompts] == [0, 30 + 5 - 1, 45 + 5 - 1, 0, 34, 49]
    later = Workload(spec(), VOCABULARY).prompts(9, level="c1", repeat=0)
    assert designed_cached_tokens(later, FLUSHED)[6] == 20  # conversation 2: system prompt 0 again
    primed = designed_cached_tokens(prompts, PRIMED)
    assert [primed[p.index] for p in prompts] == [20, 34, 49, 20, 34, 49]
    primers = Workload(spec(cache_state=PRIMED), VOCABULARY).primers(prompts)
    assert [(p.prompt, p.system, p.output_len) for p in primers] == [
        ([], prompts[0].system, 1),
        ([], prompts[3].system, 1),
    ]


def test_a_turns_input_is_the_conversation_so_far_on_every_api() -> None:
    system, users, replies = [1, 2], ([3, 4], [5], [6]), ([7, 8], [9])
    earlier = tuple(zip(users[:2], replies, strict=True))
    turn = Prompt(2, users[2], 11, 2, system, 0, conversation=0, turn=2, earlier=earlier)
    assert turn.whole_input() == [1, 2, 3, 4, 7, 8, 5, 9, 6]
    generate = json.loads(ApiFormat("generate", "m").body(turn, "r"))
    assert generate["input_ids"] == [1, 2, 3, 4, 7, 8, 5, 9, 6]
    # Text: a reply follows its user turn as the server wrote it, so the next turn starts with what it saw.
    text = Prompt(
        1, "and now?", 9, 2, "be brief", 0, conversation=0, turn=1, earlier=(("hello", " hi there"),)
    )
    assert text.whole_input() == "be brief\n\nhello hi there\n\nand now?"
    chat = json.loads(ApiFormat("chat", "m").body(text, "r"))
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": " hi there"},
        {"role": "user", "content": "and now?"},
    ]
    first = Prompt(0, "hello", 3, 2, None, None, conversation=0, turn=0)
    assert json.loads(ApiFormat("chat", "m").body(first, "r"))["messages"] == [
        {"role": "user", "content": "hello"}
    ]


def _generate(text: str | None, ids: list[int], completion_tokens: int) -> bytes:
    event = {"text": text, "output_ids": ids, "meta_info": {"completion_tokens": completion_tokens}}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    "events",
    [
        # SGLang's default: every event holds the whole output so far (the text only on the last).
        [_generate(None, [11], 1), _generate(None, [11, 12], 2), _generate(" a b c", [11, 12, 13], 3)],
        # --incremental-streaming-output: each event its own ids and text.
        [_generate(" a", [11], 1), _generate(" b", [12], 2), _generate(" c", [13], 3)],
        # Speculative decoding's events carry several tokens at once.
        [_generate(" a b", [11, 12], 2), _generate(" c", [13], 3)],
    ],
)
def test_generates_reply_is_its_output_ids_whether_streamed_whole_or_in_pieces(events: list[bytes]) -> None:
    parser = ApiFormat("generate", "m").parser(keep_reply=True)
    for at, event in enumerate([*events, DONE]):
        parser.feed(at, event)
    assert parser.finish().output_len == 3
    assert parser.reply.ids == [11, 12, 13]
    assert "".join(parser.reply.text) == " a b c"


def test_the_openai_apis_reply_is_their_streamed_text_without_reasoning() -> None:
    def chat(delta: dict[str, Any], tokens: int) -> bytes:
        event = {"choices": [{"index": 0, "delta": delta}], "usage": {"completion_tokens": tokens}}
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    parser = ApiFormat("chat", "m").parser(keep_reply=True)
    events = [chat({"role": "assistant", "content": ""}, 0), chat({"reasoning_content": "hmm"}, 1)]
    events += [chat({"content": " yes"}, 2), chat({"content": " indeed"}, 3), DONE]
    for at, event in enumerate(events):
        parser.feed(at, event)
    parser.finish()
    assert "".join(parser.reply.text) == " yes indeed"
    completion = ApiFormat("completions", "m").parser(keep_reply=True)
    for at, text in enumerate((" one", " two")):
        completion.feed(at, b"data: " + json.dumps({"choices": [{"text": text}]}).encode() + b"\n\n")
    assert "".join(completion.reply.text) == " one two"
    assert ApiFormat("chat", "m").parser().reply.text == []  # kept only when asked for


class _Server:
    """A client whose every turn's reply is the turn's index, twice: what the next turn must send back."""

    def __init__(self, fail_turn: int | None = None) -> None:
        self.api = ApiFormat("generate", "m")
        self.sent: list[list[int]] = []
        self.fail_turn = fail_turn

    async def turn(self, prompt: Prompt, body: bytes, rid: str) -> tuple[RequestRecord, list[int] | str]:
        self.sent.append(json.loads(body)["input_ids"])
        record = RequestRecord(prompt.index, prompt.prompt_len, prompt.output_len, rid=rid, turn=prompt.turn)
        if prompt.turn == self.fail_turn:
            record.error = "HTTP 500"
            return record, []
        return record, [100 + prompt.turn] * 2


def test_a_conversation_sends_each_reply_back_and_ends_at_a_failed_turn() -> None:
    prompts = [Prompt(k, [k], 1 + 3 * k, 2, [9], 0, conversation=0, turn=k) for k in range(3)]
    first = (prompts[0], ApiFormat("generate", "m").body(prompts[0], "r0"), "r0")
    later = [(prompt, f"r{prompt.index}") for prompt in prompts[1:]]
    server = _Server()
    ended: list[RequestRecord] = []
    run = converse(server, first, later, think_time_s=0.0, ended=ended.append, stopped=lambda: False)
    asyncio.run(run)
    assert server.sent == [[9, 0], [9, 0, 100, 100, 1], [9, 0, 100, 100, 1, 101, 101, 2]]
    assert [(record.rid, record.turn) for record in ended] == [("r0", 0), ("r1", 1), ("r2", 2)]
    failing = _Server(fail_turn=1)
    ended.clear()
    asyncio.run(converse(failing, first, later, think_time_s=0.0, ended=ended.append, stopped=lambda: False))
    assert [record.turn for record in ended] == [0, 1] and len(failing.sent) == 2
    stopping = _Server()
    asyncio.run(converse(stopping, first, later, think_time_s=0.0, ended=ended.append, stopped=lambda: True))
    assert len(stopping.sent) == 1


def test_figures_by_turn_are_over_each_turns_ok_requests() -> None:
    def record(turn: int, ttft_ms: float, cached: int | None, ok: bool = True) -> RequestRecord:
        done = RequestRecord(0, 10 + 20 * turn, 4, start_ns=0, end_ns=10**9, turn=turn, cached_tokens=cached)
        done.chunk_ns, done.chunk_tokens, done.output_len = [int(ttft_ms * 1e6)], [4], 4
        done.error = "" if ok else "HTTP 500"
        return done

    records = [record(0, 50, 0), record(0, 70, 8), record(1, 20, 20), record(1, 999, None, ok=False)]
    records.append(record(2, 30, None))
    figures = turn_metrics(records, 4)
    assert figures["median_ttft_ms_by_turn"] == pytest.approx([60.0, 20.0, 30.0, None])
    assert figures["mean_input_tokens_by_turn"] == [10.0, 30.0, 50.0, None]
    assert figures["mean_cached_tokens_by_turn"] == [4.0, 20.0, None, None]


def test_user_turns_from_a_sharegpt_file_are_its_human_turns(tmp_path: Path) -> None:
    conversations = [
        {
            "conversations": [
                {"from": "human", "value": "a b"},
                {"from": "gpt", "value": "x"},
                {"from": "human", "value": "c"},
            ]
        },
        {"conversations": [{"from": "human", "value": "only one"}, {"from": "gpt", "value": "y"}]},
    ]
    path = tmp_path / "chats.json"
    path.write_text(json.dumps(conversations))
    turns = MultiTurn(turns=2, sharegpt=str(path))
    workload_spec = spec(turns)
    assert not workload_spec.sends_token_ids
    prompts = Workload(workload_spec).prompts(4, level="c1", repeat=0)
    assert [(p.prompt, p.prompt_len) for p in prompts] == [("a b", 2), ("c", 2 + 5 + 1)] * 2
    with pytest.raises(WorkloadError, match=r"no conversation with 3 human turns or more"):
        Workload(spec(MultiTurn(turns=3, sharegpt=str(path))))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: MultiTurn(turns=0), r"multi_turn.turns: 0 must be a positive integer"),
        (lambda: MultiTurn(turns=2, think_time_s=float("nan")), r"think_time_s: nan must be seconds >= 0"),
        (
            lambda: WorkloadSpec(input_len=99, output_len=5, dataset=MULTI_TURN, multi_turn=TURNS),
            r"input_len: 99",
        ),
        (
            lambda: WorkloadSpec(input_len=30, output_len=5, multi_turn=TURNS),
            r"multi_turn: given exactly when",
        ),
        (lambda: spec(MultiTurn(turns=2), cache_state=PRIMED), r"primed primes shared system prompts"),
        (
            lambda: SweepSpec(url="http://x", workload=spec(), concurrency=[], request_rate=[1.0]),
            r"closed loop",
        ),
        (
            lambda: SweepSpec(url="http://x", workload=spec(), concurrency=[1], api="completions"),
            r"api: completions answers a token-id conversation's turns with text",
        ),
    ],
)
def test_what_a_multi_turn_workload_cannot_be_is_refused(build: Any, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        build()
    SweepSpec(url="http://x", workload=spec(as_text=True), concurrency=[1], api="chat")  # text: any API


# --- in a campaign ---------------------------------------------------------------------------------------

CONVERSATIONS: dict[str, Any] = {
    "api": "generate",
    "dataset": "multi-turn",
    "multi_turn": {"turns": 3, "user_len": 10, "system_prompt_len": 20, "think_time_s": 0.5},
    "input_len": DELETE,
    "cache_state": "primed",
}
"""The workload's edits that make the campaign tests' VALID a multi-turn one."""


def conversing(**workload: Any) -> dict[str, Any]:
    return changed({**CONVERSATIONS, **workload})


def test_a_campaigns_conversations_reach_the_sweep_and_are_written_back_whole() -> None:
    workload = parse(conversing()).workloads[SINGLE_WORKLOAD]
    assert workload.multi_turn == MultiTurn(turns=3, user_len=10, system_prompt_len=20, think_time_s=0.5)
    assert workload.input_len == 30 and workload.file is None
    data = workload.to_json()
    assert data["multi_turn"] == {
        "turns": 3, "user_len": 10, "system_prompt_len": 20, "system_prompts": 1, "think_time_s": 0.5,
    }  # fmt: skip
    assert workload_from_json(data, "workload argument") == workload
    sweep = sweep_spec(workload, "http://h:30000")
    assert sweep.workload.multi_turn == workload.multi_turn and sweep.workload.sends_token_ids
    assert VALIDATOR.is_valid(conversing()), list(VALIDATOR.iter_errors(conversing()))
    described = _prompts_text(data) + _lengths_text(data)
    assert described == (
        "conversations of 3 turns (10-token user turns, a 20-token system prompt shared by all, 0.5 s "
        "between a reply and the next turn), each turn sending the server's earlier replies back, first "
        "turn 30 tokens in, 512 out, "
    )


def test_a_campaigns_sharegpt_turns_are_found_beside_it_and_on_a_host(tmp_path: Path) -> None:
    chats = tmp_path / "chats.json"
    chats.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}] * 3}]))
    document = conversing(api="completions", multi_turn={"turns": 2, "sharegpt": "chats.json"})
    document["workload"].pop("cache_state")
    workload = parse_campaign(yaml.safe_dump(document), str(tmp_path / "c.yml"), tmp_path).workloads[
        SINGLE_WORKLOAD
    ]
    assert workload.multi_turn is not None and workload.file == str(chats)
    host = tmp_path / "host"
    host.mkdir()
    (host / "chats.json").write_bytes(chats.read_bytes())
    on_host = workload_from_json(workload.to_json(), "workload argument", host)
    assert on_host.multi_turn is not None and on_host.multi_turn.sharegpt == str(host / "chats.json")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(
            changed({"multi_turn": {"turns": 2}}),
            "workload.multi_turn: describes the multi-turn dataset's conversations: set dataset: multi-turn",
            id="without-dataset",
        ),
        pytest.param(
            conversing(input_len=64),
            "workload.input_len: 64 is not multi_turn's system_prompt_len + user_len, 30: leave it out",
            id="input-len",
        ),
        pytest.param(
            conversing(concurrency=DELETE, request_rate=[1], max_concurrency=4),
            "workload: multi-turn conversations run in a closed loop",
            id="open-loop",
        ),
        pytest.param(
            conversing(api="completions"),
            "workload.api: multi-turn's token ids need api: generate",
            id="completions",
        ),
        pytest.param(
            conversing(multi_turn={"turns": 0}),
            "workload.multi_turn.turns: must be an integer from 1 to 1,000 turns, got 0",
            id="turns",
        ),
        pytest.param(
            conversing(multi_turn={"turns": 2, "system_prompt_len": 0}),
            "workload.cache_state: primed",
            id="primed-without-system-prompt",
        ),
        pytest.param(
            conversing(multi_turn={"turns": 2, "sharegpt": "nowhere.json"}),
            "workload.multi_turn.sharegpt: must be the path of a local ShareGPT-style .json file:",
            id="missing-file",
        ),
    ],
)
def test_each_multi_turn_rule_has_its_message(document: dict[str, Any], message: str) -> None:
    messages = errors_of(document)
    assert any(found.startswith(message) for found in messages), messages
