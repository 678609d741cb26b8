"""A trace's window replayed: which requests, at which times, with which shared content, and what the
design says a prefix cache can serve of them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import SINGLE_WORKLOAD
from fairbench.cli.sweep import configure, spec_from_args
from fairbench.cli.usage import UsageError
from fairbench.measure.trace_replay import TraceReplay, load_window, own_rate, replay_rates, window_of
from fairbench.measure.traces import MOONCAKE_BLOCK_TOKENS, TraceError, TraceRequest, reusable_tokens
from fairbench.measure.vocabulary import explicit
from fairbench.measure.workload import FLUSHED, PRIMED, TRACE, TraceWindow, WorkloadError, WorkloadSpec
from fairbench.report.workload_text import _lengths_text, _load_text, _prompts_text

BLOCK = MOONCAKE_BLOCK_TOKENS
# Arrivals in ms; requests 1 and 2 open with request 0's two blocks, request 3 with its first only.
ROWS = [
    (0, 2 * BLOCK, 8, [1, 2]),
    (500, 2 * BLOCK + 100, 4, [1, 2, 3]),
    (1500, BLOCK + 7, 4, [1, 2]),
    (2000, 3 * BLOCK, 16, [1, 9, 10]),
    (4000, 50, 2, []),
]


def write_trace(tmp_path: Path, rows: list[tuple[int, int, int, list[int]]] = ROWS) -> Path:
    path = tmp_path / "trace.jsonl"
    lines = [
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
        for t, i, o, h in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def spec(path: Path, *, as_text: bool = False, **window: float | int) -> WorkloadSpec:
    return WorkloadSpec(
        input_len=1,
        output_len=1,
        dataset=TRACE,
        trace=TraceWindow(str(path), **window),
        as_text=as_text,
        vocab_size=None if as_text else 5000,
    )


def replay(path: Path, *, as_text: bool = False, **window: float | int) -> TraceReplay:
    vocabulary = None if as_text else explicit(5000, "test")
    return TraceReplay(spec(path, as_text=as_text, **window), vocabulary)


def test_a_window_is_its_requests_from_start_for_duration_at_most_count_timed_from_its_first() -> None:
    requests = [TraceRequest(float(t), i, o, tuple(h)) for t, i, o, h in ROWS]
    chosen = window_of(requests, TraceWindow("t.jsonl", start_s=0.4, duration_s=1.5))
    assert [(r.arrival_ms, r.input_len) for r in chosen] == [(0.0, 2 * BLOCK + 100), (1000.0, BLOCK + 7)]
    assert [r.arrival_ms for r in window_of(requests, TraceWindow("t.jsonl", count=3))] == [0, 500, 1500]
    assert len(window_of(requests, TraceWindow("t.jsonl"))) == 5
    # The window's own rate: n - 1 gaps over its span, as achieved_rate counts sends.
    assert own_rate(chosen) == pytest.approx(1.0)
    assert replay_rates(requests, [0.5, 2]) == pytest.approx([0.5, 2.0])


def test_a_windows_digest_changes_with_its_requests_and_not_with_the_rest_of_the_trace(
    tmp_path: Path,
) -> None:
    digest = replay(write_trace(tmp_path), count=3).sha256
    assert replay(write_trace(tmp_path), count=3).sha256 == digest
    # A request after the window changed: the same window.
    assert replay(write_trace(tmp_path, [*ROWS[:4], (4000, 60, 2, [])]), count=3).sha256 == digest
    # One hash id, one length or one arrival within it changed: another.
    for row in [(1500, BLOCK + 7, 4, [1, 5]), (1500, BLOCK + 8, 4, [1, 2]), (1400, BLOCK + 7, 4, [1, 2])]:
        assert replay(write_trace(tmp_path, [*ROWS[:2], row, *ROWS[3:]]), count=3).sha256 != digest


@pytest.mark.parametrize(
    ("window", "said"),
    [
        ({"start_s": 10.0}, "holds 0 request(s); the trace has 5 over 4.000 s"),
        ({"start_s": 1.0, "duration_s": 0.6}, "holds 1 request(s)"),
    ],
)
def test_a_window_without_two_requests_at_different_times_is_refused_naming_the_file(
    tmp_path: Path, window: dict[str, float], said: str
) -> None:
    path = write_trace(tmp_path)
    with pytest.raises(TraceError, match=str(path)) as caught:
        load_window(TraceWindow(str(path), **window))
    assert said in str(caught.value) and "a replay needs two at different times" in str(caught.value)
    same_instant = write_trace(tmp_path, [(5, 10, 1, []), (5, 10, 1, [])])
    with pytest.raises(TraceError, match="holds 2 request"):
        load_window(TraceWindow(str(same_instant)))


def test_requests_that_share_hash_ids_share_exactly_those_blocks_and_have_their_lengths(
    tmp_path: Path,
) -> None:
    prompts = replay(write_trace(tmp_path)).prompts(5, level="rps1", repeat=0)
    ids = [prompt.prompt for prompt in prompts]
    assert all(isinstance(tokens, list) for tokens in ids)
    assert [len(tokens) for tokens in ids] == [row[1] for row in ROWS]
    assert [prompt.output_len for prompt in prompts] == [row[2] for row in ROWS]

    def common(a: list[int], b: list[int]) -> int:
        return next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    first, second, third, fourth, fifth = ids
    assert isinstance(first, list) and isinstance(second, list) and isinstance(third, list)
    assert isinstance(fourth, list) and isinstance(fifth, list)
    assert second[: 2 * BLOCK] == first  # both blocks, whole
    assert third == first[: BLOCK + 7]  # block 2 cut to the request's length
    assert common(first, fourth) == BLOCK  # block 1 only: ids 9 and 10 are its own
    assert common(first, fifth) < 5  # no hash ids: nothing shared but by chance


def test_each_point_and_phase_draws_its_own_blocks(tmp_path: Path) -> None:
    source = replay(write_trace(tmp_path))
    drawn = {
        key: source.prompts(2, level=level, repeat=repeat, phase=phase)[0].prompt
        for key, (level, repeat, phase) in {
            "a": ("rps1", 0, "measure"),
            "b": ("rps2", 0, "measure"),
            "c": ("rps1", 1, "measure"),
            "d": ("rps1", 0, "warmup"),
        }.items()
    }
    assert len({tuple(prompt) for prompt in drawn.values()}) == 4
    assert source.prompts(2, level="rps1", repeat=0)[0].prompt == drawn["a"]  # reproducible


def test_text_prompts_share_their_blocks_words(tmp_path: Path) -> None:
    prompts = replay(write_trace(tmp_path), as_text=True).prompts(3, level="rps1", repeat=0)
    words = [str(prompt.prompt).split() for prompt in prompts]
    assert [len(text) for text in words] == [row[1] for row in ROWS[:3]]
    assert words[1][: 2 * BLOCK] == words[0] and words[2] == words[0][: BLOCK + 7]


def test_the_design_is_what_an_unbounded_cache_serves_within_the_window(tmp_path: Path) -> None:
    source = replay(write_trace(tmp_path), start_s=0.5)
    prompts = source.prompts(4, level="rps1", repeat=0)
    designed = source.designed_cached_tokens(prompts, FLUSHED)
    assert designed == dict(enumerate(reusable_tokens(source.requests)))
    # From 0.5 s, request 1 opens the window: its blocks are new; request 2 finds [1, 2] of it.
    assert designed == {0: 0, 1: BLOCK + 7, 2: BLOCK, 3: 0}


def test_offsets_are_the_windows_arrivals_divided_by_the_speedup(tmp_path: Path) -> None:
    source = replay(write_trace(tmp_path))
    assert source.rate == pytest.approx(1.0)
    assert source.offsets_s(source.rate, 5) == pytest.approx([0, 0.5, 1.5, 2.0, 4.0])
    assert source.offsets_s(2 * source.rate, 3) == pytest.approx([0, 0.25, 0.75])
    assert source.speedup(0.5 * source.rate) == pytest.approx(0.5)


def test_a_trace_has_no_prefix_to_prime(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="primes shared system prompts"):
        WorkloadSpec(1, 1, dataset=TRACE, trace=TraceWindow(str(write_trace(tmp_path))), cache_state=PRIMED)
    with pytest.raises(WorkloadError, match="trace: given exactly when the dataset is trace"):
        WorkloadSpec(1, 1, trace=TraceWindow("t.jsonl"))
    with pytest.raises(WorkloadError, match=r"trace\.count: 1 must be at least 2"):
        TraceWindow("t.jsonl", count=1)


def sweep_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(["--url", "http://127.0.0.1:1", "--out", "out", *argv])


def test_fairbench_sweep_replays_a_trace_at_its_own_rate_times_each_speedup(tmp_path: Path) -> None:
    path = write_trace(tmp_path)
    spec = spec_from_args(sweep_args("--trace", str(path), "--trace-speedup", "1,3", "--trace-count", "4"))
    assert spec.request_rate == pytest.approx([1.5, 4.5])  # 3 gaps over 2 s
    assert spec.max_concurrency == 4 and spec.arrival == TRACE and not spec.concurrency
    assert spec.workload.trace == TraceWindow(str(path), count=4)
    capped = spec_from_args(sweep_args("--trace", str(path), "--max-concurrency", "2"))
    assert capped.max_concurrency == 2 and capped.request_rate == pytest.approx([1.0])


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--input-len", "64"), "--input-len: a trace sets its own"),
        (("--output-len", "64"), "--output-len: a trace sets its own"),
        (("--arrival", "gamma"), "--arrival: a trace sets its own"),
        (("--cache-state", "primed"), "--cache-state primed: a trace sets its own"),
        (("--trace-start", "60"), "--trace: "),
    ],
)
def test_fairbench_sweep_refuses_what_a_trace_sets_itself_naming_the_option(
    tmp_path: Path, extra: tuple[str, ...], said: str
) -> None:
    with pytest.raises(UsageError, match=said):
        spec_from_args(sweep_args("--trace", str(write_trace(tmp_path)), *extra))


def test_a_bad_trace_is_refused_before_any_request_naming_its_line(tmp_path: Path) -> None:
    path = write_trace(tmp_path, [(0, 10, 1, []), (-5, 10, 1, [])])
    with pytest.raises(UsageError, match=rf"--trace: {path}:2: timestamp: must be a number of ms >= 0"):
        spec_from_args(sweep_args("--trace", str(path)))


def test_the_report_describes_a_replayed_trace_by_its_file_window_and_speedups(tmp_path: Path) -> None:
    """campaign.json's workload of a trace holds no lengths (its requests have their own) and its levels
    as speedups: the report's workload line says so, from a campaign loaded as any."""
    path = write_trace(tmp_path)
    document = {
        "name": "replay",
        "engine": "sim",
        "model": "org/m",
        "configs": {"a": {}},
        "workload": {
            "api": "generate",
            "dataset": "trace",
            "trace": {"path": str(path), "start_s": 0.5, "count": 3},
            "trace_speedup": [0.5, 2],
            "warmup": 0,
        },
    }
    workload = (
        parse_campaign(yaml.safe_dump(document), "replay.yml", tmp_path).workloads[SINGLE_WORKLOAD].to_json()
    )
    described = _prompts_text(workload) + _lengths_text(workload) + _load_text(workload)
    assert described == (
        "the trace `trace.jsonl` (from 0.5 s, at most 3 requests) with its own lengths, "
        "replayed at 0.5, 2 times its own rate (at most 3 in flight)"
    )
