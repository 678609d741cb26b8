"""``fairbench sweep`` against real SGLang on the CPU, serving the tiny model (512 ids, far below 30000).

An id the model does not have is not a bad request to SGLang: its embedding lookup raises and the whole
server exits. The sweep must learn the vocabulary from the served model's files and stay inside it, on every
API that sends token ids, and the server must be alive afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from statistics import median

import pytest
from tests.support import sweep_process
from tests.support.real_sglang import RealServer

from fairbench.measure.traces import MOONCAKE_BLOCK_TOKENS

# One pytest worker runs every test of real SGLang, so that one server start serves them all.
pytestmark = pytest.mark.xdist_group("real_sglang")

FAIRBENCH = [sys.executable, "-m", "fairbench"]
WORKLOAD = ("--input-len", "128", "--output-len", "16", "--concurrency", "1,8", "--prompts-per-level", "16")
# The lab's launch arguments include --enable-metrics: scraped often enough for a short point's window.
METRICS = ("--server-metrics-interval", "0.2")


def _sweep(
    url: str, out: Path, *extra: str, workload: tuple[str, ...] = WORKLOAD
) -> subprocess.CompletedProcess[str]:
    command = [*FAIRBENCH, "sweep", "--url", url, "--out", str(out), "--progress", "lines", *workload]
    command += [*METRICS, *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def _healthy(server: RealServer) -> bool:
    with urllib.request.urlopen(f"{server.url}/health_generate", timeout=30) as reply:
        return bool(reply.status == 200)


@pytest.mark.parametrize("api", ["completions", "generate", "chat"])
def test_every_request_completes_and_the_server_lives(
    real_sglang: RealServer, tmp_path: Path, api: str
) -> None:
    out = tmp_path / api
    # A seed per API: the same server serves all three, and the same prompts again would be served from
    # its prefix cache (which the sweep flags as prefix_reuse).
    seed = str(["completions", "generate", "chat"].index(api) + 1)
    done = _sweep(real_sglang.url, out, "--api", api, "--seed", seed)
    assert done.returncode == 0, done.stderr + real_sglang.log_tail()
    points = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    assert [(p["max_concurrency"], p["completed"], p["failed"]) for p in points] == [(1, 16, 0), (8, 16, 0)]
    # What the server says it runs at once, read from its /server_info as the running-request check does.
    with urllib.request.urlopen(f"{real_sglang.url}/server_info", timeout=30) as reply:
        info = json.loads(reply.read())
    limit = sum(state["effective_max_running_requests_per_dp"] for state in info["internal_states"])
    assert limit >= 8 and all(p["server_running_limit"] == limit for p in points), limit
    # The server counted every output token the sweep asked for, and its own counters say the same.
    assert all(p["total_output_tokens"] == 16 * 16 == p["server_generation_tokens"] for p in points)
    if api != "chat":  # the chat template's tokens are the server's, not the sweep's
        assert all(p["server_prompt_tokens"] == p["total_input_tokens"] == 16 * 128 for p in points)
    # No prompt came from the cache. (On two cores, with SGLang's processes beside it, the client may lag:
    # client_bound and a running count below C are its to raise, not this test's to forbid.)
    flagged = {flag["flag"] for p in points for flag in p["flags"]}
    assert not flagged & {"server_tokens_differ", "prefix_reuse"}, [p["flags"] for p in points]
    if api == "generate":  # SGLang stamps the first chunk of each stream with its send time
        assert all(0 <= p["server_send_gap_median_ms"] < 1000 for p in points)
    settings = json.loads((out / "sweep.json").read_text())
    if api == "chat":
        assert settings["vocabulary"] is None  # text prompts: the server's tokenizer makes the ids
    else:
        vocabulary = settings["vocabulary"]
        assert (vocabulary["size"], vocabulary["excluded"]) == (512, [511])
        assert vocabulary["source"].startswith(str(real_sglang.model_dir))
        assert "token ids: 512 less 1 special" in done.stderr
    assert real_sglang.alive() and _healthy(real_sglang)


def test_a_replayed_trace_reaches_sglang_at_its_scheduled_times_and_its_cache_as_designed(
    real_sglang: RealServer, tmp_path: Path
) -> None:
    """SGLang's own clock (``meta_info.request_received_ts``, with the lab's --enable-metrics) against the
    trace's schedule, and its cache against the trace's hash ids: every 300 ms a request opening with one of
    two shared prefixes (two blocks, or one), then tokens of its own."""
    prefixes = ([1, 2], [3])
    trace = tmp_path / "trace.jsonl"
    rows = [
        {
            "timestamp": 300 * index,
            "input_length": len(prefixes[index % 2]) * MOONCAKE_BLOCK_TOKENS + 40 + index,
            "output_length": 8,
            "hash_ids": prefixes[index % 2],
        }
        for index in range(24)
    ]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    # A warmup (the window's first four, blocks of their own): a cold server's first prefill takes a second.
    replay = ("--trace", str(trace), "--trace-speedup", "1.5", "--warmup", "4", "--flush-cache")
    done = _sweep(real_sglang.url, out, "--api", "generate", "--seed", "12", workload=replay)
    assert done.returncode == 0, done.stderr + real_sglang.log_tail()
    (point,) = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    assert (point["completed"], point["failed"], point["dataset_name"]) == (24, 0, "mooncake"), point
    assert point["request_rate"] == pytest.approx(1.5 * 23 / (300 * 23 / 1000))
    # The requests went out at their times in the trace (sped up 1.5 times, 200 ms apart), and most reached
    # SGLang so too. Beside another pytest worker on two cores either side can be held off the CPU for a
    # while: the client's sends by up to 75 ms (CI), SGLang's HTTP process longer (one request by 1.04 s,
    # in another run two by 0.47 s). So the sends' median says the client kept the schedule, none is as
    # late as the next one's time, and the arrivals (from each send) say SGLang's own clock saw it so. The
    # client's send precision alone is measured by tests/perf/replay_timing.py.
    records = sorted(sweep_process.requests_of(out, point["point_id"]), key=lambda r: r["index"])
    timings = [(r["send_delay_ns"] / 1e6, (r["server_received_ns"] - r["start_ns"]) / 1e6) for r in records]
    sends = [send_ms for send_ms, _ in timings]
    assert median(sends) < 20 and max(sends) < 200, timings
    on_time = [arrival for _, arrival in timings if arrival < 250]
    assert point["server_arrival_delay_median_ms"] < 25 and len(on_time) >= 20, timings
    # Every request but each prefix's first may find its blocks (the design, an unbounded cache's): nearly
    # all do, as SGLang's own counts say, 400 ms apart; requests prefilled together (on a machine busy
    # enough to queue them) would all miss.
    designed = 11 * 2 * MOONCAKE_BLOCK_TOKENS + 11 * MOONCAKE_BLOCK_TOKENS
    assert point["designed_cached_tokens"] == designed
    assert 0.75 * designed <= point["cached_tokens"] <= designed + 24, point["cached_tokens"]
    assert point["cached_tokens"] == point["server_cached_tokens"]
    assert real_sglang.alive()


@pytest.mark.ends_real_sglang
def test_ids_the_model_does_not_have_bring_the_whole_server_down(
    real_sglang: RealServer, tmp_path: Path
) -> None:
    """Why the vocabulary is learned: a fixed range (up to 30000), given on purpose, kills SGLang. The
    session's shared server, so this runs after every other test."""
    done = _sweep(real_sglang.url, tmp_path / "out", "--vocab-size", "30000", "--concurrency", "1")
    assert done.returncode != 0
    deadline = time.monotonic() + 60
    while real_sglang.alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not real_sglang.alive(), "SGLang survived ids beyond its vocabulary"
    assert "IndexError: index out of range in self" in real_sglang.log.read_text()


def test_shared_prefixes_are_served_from_sglangs_cache_as_designed(
    real_sglang: RealServer, tmp_path: Path
) -> None:
    """SGLang's own ``meta_info.cached_tokens`` against the design: one at a time from a flushed cache,
    every request but each group's first finds its system prompt; primed, every request does."""
    groups = ("--dataset", "shared-prefix", "--gsp-num-groups", "2", "--gsp-prompts-per-group", "4")
    lengths = ("--gsp-system-prompt-len", "112", "--gsp-question-len", "16")  # WORKLOAD's 128 in all
    shared = (*groups, *lengths, "--api", "generate", "--seed", "11")
    points = {}
    for state, concurrency in (("flushed", "1"), ("primed", "4")):
        out = tmp_path / state
        done = _sweep(real_sglang.url, out, *shared, "--concurrency", concurrency, "--cache-state", state)
        assert done.returncode == 0, done.stderr + real_sglang.log_tail()
        (points[state],) = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    flushed, primed = points["flushed"], points["primed"]
    assert flushed["designed_cached_tokens"] == (16 - 2) * 112
    assert primed["designed_cached_tokens"] == 16 * 112 and primed["primers_failed"] == 0
    for point in (flushed, primed):
        assert point["completed"] == 16 and point["total_input_tokens"] == 16 * 128
        # SGLang's counts, request by request: the system prompts, and now and then a question's first id.
        assert (
            point["designed_cached_tokens"] <= point["cached_tokens"] <= point["designed_cached_tokens"] + 16
        )
        assert point["cached_tokens"] == point["server_cached_tokens"], point
        assert "prefix_reuse" not in {flag["flag"] for flag in point["flags"]}, point["flags"]
    assert real_sglang.alive()


def test_a_conversations_later_turns_find_its_earlier_turns_and_replies_in_sglangs_cache(
    real_sglang: RealServer, tmp_path: Path
) -> None:
    """SGLang's own ``meta_info.cached_tokens`` by turn: each later turn sends the earlier turns with the
    replies SGLang gave (its ``output_ids``), which its radix cache kept, so it reports more cached tokens
    than the first turn, the previous turn's input and reply less one token, as designed."""
    system, user, output = 48, 24, 8
    conversations = (
        *("--dataset", "multi-turn", "--mt-turns", "3", "--mt-user-len", str(user)),
        *("--mt-system-prompt-len", str(system), "--output-len", str(output)),
        *("--concurrency", "2", "--prompts-per-level", "16", "--warmup", "0", "--flush-cache"),
    )
    out = tmp_path / "out"
    done = _sweep(real_sglang.url, out, "--api", "generate", "--seed", "13", workload=conversations)
    assert done.returncode == 0, done.stderr + real_sglang.log_tail()
    (point,) = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    assert (point["completed"], point["failed"], point["conversations"]) == (18, 0, 6), point
    inputs = [system + user + turn * (output + user) for turn in range(3)]
    assert point["mean_input_tokens_by_turn"] == inputs  # SGLang's counts: the replies went back whole
    first, *later = point["mean_cached_tokens_by_turn"]
    assert first <= system + 1 < later[0] < later[1], point["mean_cached_tokens_by_turn"]
    for turn, cached in enumerate(later, start=1):
        designed = inputs[turn - 1] + output - 1
        assert designed - 1 <= cached <= designed + 1, (turn, point["mean_cached_tokens_by_turn"])
    assert point["cached_tokens"] == point["server_cached_tokens"]
    assert "prefix_reuse" not in {flag["flag"] for flag in point["flags"]}, point["flags"]
    assert real_sglang.alive()
