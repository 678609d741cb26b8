"""``fairbench sweep --dataset multi-turn`` against ``fairbench sim``: every turn sends the conversation so
far with the server's own replies, so the simulator's radix cache (which keeps a finished request's prompt
and output) serves each later turn its previous turn and reply; C counts conversations in flight."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

import pytest
from tests.support import sweep_process
from tests.support.sim_process import REPO, running_sim

SIM = (
    "--model-path",
    "sim/test-model",
    "--enable-metrics",
    "--enable-cache-report",
    "--sim-time-scale",
    "0.05",
)
SYSTEM, USER, OUTPUT, TURNS = 24, 10, 6, 3


@pytest.mark.parametrize("api", ["generate", "chat"])
def test_each_turn_sends_back_the_servers_replies_which_its_cache_then_serves(
    tmp_path: Path, api: str
) -> None:
    out = tmp_path / "out"
    conversations = (
        *("--dataset", "multi-turn", "--mt-turns", str(TURNS), "--mt-user-len", str(USER)),
        *("--mt-system-prompt-len", str(SYSTEM), "--output-len", str(OUTPUT)),
    )
    with running_sim(tmp_path, *SIM) as sim:
        done = sweep_process.run_sweep(
            sim.url,
            out,
            *conversations,
            *("--api", api, "--concurrency", "1,3", "--prompts-per-level", "16", "--warmup", "3"),
            "--flush-cache",
            cwd=REPO,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr
    for point in sweep_process.points(out):
        # 16 turns asked: six whole conversations of three, and the warmup's one whole conversation.
        assert (point["num_prompts"], point["completed"], point["failed"]) == (18, 18, 0), point
        assert (point["conversations"], point["conversations_cut"], point["warmup_requests"]) == (6, 0, 3)
        assert point["dataset_name"] == "multi-turn" and point["turns"] == TURNS
        by_turn: dict[int, list[dict[str, int]]] = defaultdict(list)
        for record in sweep_process.requests_of(out, point["point_id"]):
            by_turn[record["turn"]].append(record)
        # Turn k's input, as the server counted it: the system prompt, k user turns and k replies, its turn.
        inputs = [SYSTEM + USER + k * (OUTPUT + USER) for k in range(TURNS)]
        assert point["mean_input_tokens_by_turn"] == inputs
        assert all(record["prompt_len"] == inputs[k] for k, records in by_turn.items() for record in records)
        # The cache holds the previous turn and the reply the client sent back, less the reply's last
        # token: only a reply sent back as the server wrote it is found there.
        for k in range(1, TURNS):
            assert {record["cached_tokens"] for record in by_turn[k]} == {inputs[k - 1] + OUTPUT - 1}, k
        # A first turn finds the shared system prompt once another conversation's prefill has put it there
        # (on chat, now and then a word more: the random words' list is short).
        firsts = [record["cached_tokens"] for record in by_turn[0]]
        assert all(cached == 0 or SYSTEM <= cached <= SYSTEM + 2 for cached in firsts), firsts
        assert firsts.count(0) < len(firsts)
        chance = sum(max(0, cached - SYSTEM) for cached in firsts)
        assert (
            point["cached_tokens"]
            == point["server_cached_tokens"]
            <= point["designed_cached_tokens"] + chance
        )
        assert point["mean_cached_tokens_by_turn"][1:] == [
            inputs[k - 1] + OUTPUT - 1 for k in range(1, TURNS)
        ]
        assert len(point["median_ttft_ms_by_turn"]) == TURNS
        assert "prefix_reuse" not in {flag["flag"] for flag in point["flags"]}, point["flags"]
    one, three = sweep_process.points(out)
    # Conversations in flight, not requests: at C = 1 one conversation's turns follow each other.
    records = sorted(sweep_process.requests_of(out, one["point_id"]), key=lambda record: record["start_ns"])
    assert [record["turn"] for record in records] == [0, 1, 2] * 6
    assert all(a["end_ns"] <= b["start_ns"] for a, b in itertools.pairwise(records))
    assert three["max_concurrency"] == 3
