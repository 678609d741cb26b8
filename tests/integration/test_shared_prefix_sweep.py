"""``fairbench sweep --dataset shared-prefix`` against ``fairbench sim``, whose prefix cache matches a prompt
when its request is admitted and keeps it once its prefill is done, as SGLang's radix cache does: the cached
tokens each response reports, the /metrics counter and the workload's design agree, and each cache state
starts its points where it says."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.support import sweep_process
from tests.support.sim_process import REPO, running_sim

SIM = ("--model-path", "sim/test-model", "--enable-metrics", "--sim-time-scale", "2")
SYSTEM_PROMPT_LEN = 2000
QUESTION_LEN = 16
PROMPTS = 16
"""Two groups of four, twice over."""
GROUPS = (
    *("--dataset", "shared-prefix", "--gsp-num-groups", "2", "--gsp-prompts-per-group", "4"),
    *("--gsp-system-prompt-len", str(SYSTEM_PROMPT_LEN), "--gsp-question-len", str(QUESTION_LEN)),
    *("--output-len", "8", "--prompts-per-level", str(PROMPTS), "--warmup", "2", "--api", "generate"),
)


def sweep(url: str, out: Path, *args: str) -> dict[str, Any]:
    """The one point of the sweep, once it succeeded."""
    command = sweep_process.sweep_args(url, out, *GROUPS, *args)
    swept = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, cwd=REPO)
    assert swept.returncode == 0, swept.stderr
    (point,) = sweep_process.points(out)
    return point


# Timing-sensitive (misses' and hits' TTFT compared): make test runs it alone.
@pytest.mark.timing
def test_each_cache_state_reuses_what_the_shared_prefix_workload_is_designed_to(tmp_path: Path) -> None:
    with running_sim(tmp_path, *SIM) as sim:
        flushed = sweep(sim.url, tmp_path / "flushed", "--concurrency", "1", "--cache-state", "flushed")
        ordered = sweep(sim.url, tmp_path / "ordered", "--concurrency", "1", "--flush-cache", "--gsp-ordered")
        primed = sweep(sim.url, tmp_path / "primed", "--concurrency", "4", "--cache-state", "primed")
        # Another seed: the primed sweep's prompts, still cached, are not this one's.
        carried = sweep(sim.url, tmp_path / "carried", "--concurrency", "4", "--seed", "2")
    for point in (flushed, ordered, primed, carried):
        assert point["dataset_name"] == "generated-shared-prefix" and point["completed"] == PROMPTS, point
        assert point["total_input_tokens"] == PROMPTS * (SYSTEM_PROMPT_LEN + QUESTION_LEN)
        # Each response's cached tokens, summed, are what the server's counter counted over the point.
        assert point["cached_tokens"] == point["server_cached_tokens"], point
        assert "prefix_reuse" not in {flag["flag"] for flag in point["flags"]}, point["flags"]
    # One at a time from an empty cache, every request but each group's first finds its system prompt.
    for point in (flushed, ordered):
        assert point["cache_state"] == "flushed" and "primers_failed" not in point
        assert point["designed_cached_tokens"] == (PROMPTS - 2) * SYSTEM_PROMPT_LEN
        assert point["designed_cached_tokens"] <= point["cached_tokens"] < point["designed_cached_tokens"] + 8
    # Primed: every request does, even four in flight from the start; the primers are not measured.
    assert primed["cache_state"] == "primed" and primed["primers_failed"] == 0
    assert primed["designed_cached_tokens"] == PROMPTS * SYSTEM_PROMPT_LEN <= primed["cached_tokens"]
    assert primed["server_prompt_tokens"] == primed["total_input_tokens"]
    # Carried over, four in flight: the design is a bound (a group's requests prefilled together all miss);
    # the previous sweep's cache holds nothing of this one's.
    assert carried["cache_state"] == "carried"
    assert (
        0 < carried["cached_tokens"] <= carried["designed_cached_tokens"] == flushed["designed_cached_tokens"]
    )
    # What the cache saves, the prefill does not do: one at a time, the misses wait longest for a token.
    records = sweep_process.requests_of(tmp_path / "ordered", "c1-r0")
    ttft: dict[bool, list[int]] = {True: [], False: []}
    for record in records:
        ttft[record["cached_tokens"] > 0].append(record["chunk_ns"][0] - record["start_ns"])
    assert len(ttft[False]) == 2 and statistics.mean(ttft[False]) > 1.5 * statistics.median(ttft[True])


def test_a_primed_sweep_is_not_resumed_with_another_cache_state(tmp_path: Path) -> None:
    with running_sim(tmp_path, *SIM) as sim:
        out = tmp_path / "run"
        sweep(sim.url, out, "--concurrency", "2", "--cache-state", "primed")
        again = subprocess.run(
            sweep_process.sweep_args(sim.url, out, *GROUPS, "--concurrency", "2,4", "--resume"),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            cwd=REPO,
        )
    assert again.returncode != 0
    assert "; flush_cache True -> False; cache_state 'primed' -> unset\n" in again.stderr, again.stderr


def test_the_openai_apis_report_cached_tokens_only_with_enable_cache_report(tmp_path: Path) -> None:
    points = {}
    for flags in ((), ("--enable-cache-report",)):
        with running_sim(tmp_path, *SIM, *flags) as sim:
            name = "reported" if flags else "silent"
            args = ("--concurrency", "1", "--cache-state", "primed", "--api", "completions")
            points[name] = sweep(sim.url, tmp_path / name, *args)
    silent, reported = points["silent"], points["reported"]
    # Without the flag only /metrics counts them; with it every response's usage says as many.
    assert (
        silent["cached_tokens"] is None and silent["server_cached_tokens"] >= silent["designed_cached_tokens"]
    )
    assert reported["cached_tokens"] == reported["server_cached_tokens"] >= reported["designed_cached_tokens"]
    assert reported["designed_cached_tokens"] == PROMPTS * SYSTEM_PROMPT_LEN
