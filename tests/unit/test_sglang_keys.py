"""A point line against sglang.bench_serving's result line: each of SGLang's keys is there, or in the list of
keys fairbench documents as absent (with why); the line is strict JSON; accept_length is read as SGLang
reads it."""

from __future__ import annotations

import asyncio
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from tests.support.sse_server import StartServer

from fairbench.measure.client import StreamClient
from fairbench.measure.metrics import SGLANG_KEYS_ABSENT, accept_length, running_limit
from fairbench.measure.progress import Progress
from fairbench.measure.results import ResultsDir
from fairbench.measure.sweep import Sweep, SweepSpec
from fairbench.measure.workload import WorkloadSpec

REPO = Path(__file__).resolve().parents[2]

# The keys of the result dict that sglang/benchmark/serving.py of SGLang 0.5.23 (the wheel
# sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl; sglang/bench_serving.py only re-exports it) builds in
# benchmark() and writes with json.dumps, in its order. Written out here rather than read from SGLang, so
# the test does not trust the code it checks. Left out: the keys it adds only with --goodput or
# --cache-report, options fairbench does not have.
SGLANG_0_5_23_RESULT_KEYS = """tag backend dataset_name request_rate max_concurrency sharegpt_output_len
random_input_len random_output_len random_range_ratio server_info duration completed total_input_tokens
total_input_text_tokens total_input_vision_tokens total_output_tokens total_output_tokens_retokenized
request_throughput input_throughput output_throughput total_throughput mean_e2e_latency_ms
median_e2e_latency_ms std_e2e_latency_ms p90_e2e_latency_ms p95_e2e_latency_ms p99_e2e_latency_ms
mean_ttft_ms median_ttft_ms std_ttft_ms p90_ttft_ms p95_ttft_ms p99_ttft_ms mean_tpot_ms median_tpot_ms
std_tpot_ms p90_tpot_ms p95_tpot_ms p99_tpot_ms mean_itl_ms median_itl_ms std_itl_ms p90_itl_ms p95_itl_ms
p99_itl_ms concurrency accept_length max_output_tokens_per_s max_concurrent_requests""".split()  # noqa: SIM905


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def point_lines(url: str, out: Path, **spec: Any) -> list[dict[str, Any]]:
    """The lines of a one-level sweep of ``url``, parsed as strict JSON (no NaN, Infinity)."""
    sweep_spec = SweepSpec(
        url=url,
        workload=WorkloadSpec(8, 4, vocab_size=30000),
        concurrency=[1],
        warmup="0",
        energy=False,
        **spec,
    )
    asyncio.run(Sweep(sweep_spec, ResultsDir(out), Progress(io.StringIO(), live=False)).run())
    text = (out / "points.jsonl").read_text()
    return [json.loads(line, parse_constant=_not_json) for line in text.splitlines()]


def test_each_sglang_key_is_in_the_point_line_or_documented_absent(
    sse_server: StartServer, tmp_path: Path
) -> None:
    (line,) = point_lines(sse_server().url, tmp_path / "out")
    missing = [key for key in SGLANG_0_5_23_RESULT_KEYS if key not in line and key not in SGLANG_KEYS_ABSENT]
    assert missing == []
    # The absent list is SGLang's keys, and true: none of them is written after all.
    assert set(SGLANG_KEYS_ABSENT) <= set(SGLANG_0_5_23_RESULT_KEYS)
    assert not set(SGLANG_KEYS_ABSENT) & line.keys()
    # SGLang's spellings of a closed loop without a label, JSON-safe.
    assert (line["tag"], line["request_rate"], line["max_concurrency"]) == (None, "inf", 1)
    assert float(line["request_rate"]) == math.inf
    assert (line["dataset_name"], line["sharegpt_output_len"]) == ("random-ids", None)
    # The test server reports no speculative decoding.
    assert line["accept_length"] is None


def test_the_readme_names_each_absent_key() -> None:
    readme = (REPO / "README.md").read_text()
    assert [key for key in SGLANG_KEYS_ABSENT if f"`{key}`" not in readme] == []


def test_a_sharegpt_workload_records_its_output_length_as_sglangs_override(
    sse_server: StartServer, tmp_path: Path
) -> None:
    dataset = tmp_path / "sharegpt.json"
    conversations = [{"conversations": [{"value": "hello there"}, {"value": "hi"}]}]
    dataset.write_text(json.dumps(conversations))
    spec = SweepSpec(
        url=sse_server().url,
        workload=WorkloadSpec(8, 4, dataset=str(dataset), as_text=True),
        concurrency=[1],
        api="chat",
        warmup="0",
        energy=False,
    )
    asyncio.run(Sweep(spec, ResultsDir(tmp_path / "out"), Progress(io.StringIO(), live=False)).run())
    (line,) = [json.loads(text) for text in (tmp_path / "out" / "points.jsonl").read_text().splitlines()]
    assert (line["dataset_name"], line["sharegpt_output_len"], line["random_output_len"]) == (
        "sharegpt",
        4,
        4,
    )


def test_the_accept_length_the_server_reports_after_the_point_is_recorded(
    sse_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = StreamClient.get_json

    async def with_speculation(client: StreamClient, path: str) -> Any:
        info = await served(client, path)
        if path == "/server_info":
            info["internal_states"][0]["avg_spec_accept_length"] = 2.75
        return info

    monkeypatch.setattr(StreamClient, "get_json", with_speculation)
    (line,) = point_lines(sse_server().url, tmp_path / "out")
    assert line["accept_length"] == 2.75


@pytest.mark.parametrize(
    ("server_info", "expected"),
    [
        pytest.param({"internal_states": [{"avg_spec_accept_length": 3.5}, {}]}, 3.5, id="first-rank"),
        pytest.param({"internal_states": [{"avg_spec_accept_length": 2}]}, 2.0, id="an-integer"),
        pytest.param(
            {"decode": [{"internal_states": [{"avg_spec_accept_length": 1.5}]}], "internal_states": []},
            1.5,
            id="behind-a-prefill-decode-router",
        ),
        pytest.param({"internal_states": [{"last_gen_throughput": 1.0}]}, None, id="no-speculative-decoding"),
        pytest.param({"internal_states": []}, None, id="no-rank"),
        pytest.param({}, None, id="no-states"),
        pytest.param({"internal_states": [{"avg_spec_accept_length": True}]}, None, id="not-a-number"),
        pytest.param({"internal_states": [{"avg_spec_accept_length": math.nan}]}, None, id="not-finite"),
        pytest.param({"internal_states": [{"avg_spec_accept_length": 10**400}]}, None, id="past-any-float"),
        pytest.param({"decode": []}, None, id="a-router-without-decode-servers"),
        pytest.param([], None, id="not-an-object"),
    ],
)
def test_accept_length_is_read_from_server_info_as_sglang_reads_it(
    server_info: object, expected: object
) -> None:
    assert accept_length(server_info) == expected


@pytest.mark.parametrize(
    ("server_info", "expected"),
    [
        pytest.param(
            {"internal_states": [{"effective_max_running_requests_per_dp": 256}]}, 256, id="one-rank"
        ),
        pytest.param(
            {"internal_states": [{"effective_max_running_requests_per_dp": 64}] * 4}, 256, id="four-dp-ranks"
        ),
        pytest.param(
            {"internal_states": [{"effective_max_running_requests_per_dp": 64}, {}]}, None, id="a-rank-silent"
        ),
        pytest.param(
            {"internal_states": [{"effective_max_running_requests_per_dp": True}]}, None, id="boolean"
        ),
        pytest.param({"internal_states": [{"effective_max_running_requests_per_dp": 0}]}, None, id="zero"),
        pytest.param({"internal_states": []}, None, id="no-rank"),
        pytest.param(None, None, id="not-read"),
    ],
)
def test_the_running_limit_is_every_dp_ranks_own_summed(server_info: object, expected: object) -> None:
    assert running_limit(server_info) == expected
