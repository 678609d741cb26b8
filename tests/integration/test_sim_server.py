"""``fairbench sim`` as a real process on loopback, checked with a small raw aiohttp client.

The client here is written against SGLang's formats directly; it shares nothing with the simulator
or with fairbench's own client.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fairbench.sim.args import flag_table
from fairbench.sim.model import load_profile

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Sim:
    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sim_command(*flags: str) -> list[str]:
    return [sys.executable, "-m", "fairbench", "sim", "--model-path", "sim/test-model", *flags]


@contextmanager
def running_sim(*flags: str, env: dict[str, str] | None = None) -> Iterator[Sim]:
    """The simulator on a free loopback port, listening; stopped (and reaped) afterwards."""
    port = free_port()
    process = subprocess.Popen(
        sim_command("--host", "127.0.0.1", "--port", str(port), *flags),
        cwd=REPO,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
                assert time.monotonic() < deadline, "the simulator did not start listening"
                time.sleep(0.02)
        yield Sim(f"http://127.0.0.1:{port}", process)
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


@dataclass
class Streamed:
    """One streamed response as the client saw it."""

    status: int
    sent_ns: int
    events: list[Any] = field(default_factory=list)
    """Each ``data:`` payload parsed as JSON (``"[DONE]"`` as that string, a broken line as raw text)."""
    arrival_ns: list[int] = field(default_factory=list)


@asynccontextmanager
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as client:
        yield client


async def stream(client: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str) -> Streamed:
    sent = time.perf_counter_ns()
    async with client.post(url, json=body, headers=headers) as response:
        result = Streamed(response.status, sent)
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip().decode()
            result.arrival_ns.append(time.perf_counter_ns())
            try:
                result.events.append(json.loads(payload))
            except ValueError:
                result.events.append(payload)
        return result


async def get(client: aiohttp.ClientSession, url: str, **headers: str) -> tuple[int, bytes]:
    async with client.get(url, headers=headers) as response:
        return response.status, await response.read()


# SGLang's /flush_cache answer when nothing runs (sglang/srt/entrypoints/http_server.py, 0.5.23).
SGLANG_CACHE_FLUSHED = (
    b"Cache flushed.\nPlease check backend logs for more details. "
    b"(When there are running or waiting requests, the operation will not be performed.)\n"
)
# The labels SGLang's scheduler puts on its gauges with TP 1 and no DP (SchedulerMetricsCollector).
SCHEDULER_LABELS = {
    "model_name": "sim/test-model",
    "engine_type": "unified",
    "tp_rank": "0",
    "pp_rank": "0",
    "moe_ep_rank": "0",
}
Labels = frozenset[tuple[str, str]]


def prometheus_samples(text: str) -> dict[str, dict[Labels, float]]:
    """Prometheus text exposition (format 0.0.4) read by prometheus_client's parser into sample name ->
    label set -> value (a histogram's as ``_bucket`` with its ``le``, ``_count`` and ``_sum``); a sample
    outside a family of its TYPE, or a series twice, fails the test."""
    samples: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type in ("gauge", "counter", "histogram"), f"{family.name}: no TYPE line of its own"
        for sample in family.samples:
            series = samples.setdefault(sample.name, {})
            labels = frozenset(sample.labels.items())
            assert labels not in series, f"a repeated series: {sample}"
            series[labels] = sample.value
    return samples


def sample_value(metrics: bytes, name: str, labels: dict[str, str]) -> float:
    """The value of the one series ``name{labels}`` (exactly these labels) in a /metrics answer."""
    series = prometheus_samples(metrics.decode()).get(name, {})
    key = frozenset(labels.items())
    assert key in series, f"no {name} with labels {labels}: {sorted(map(sorted, series))}"
    return series[key]


def completion_body(**extra: Any) -> dict[str, Any]:
    return {"prompt": list(range(12)), "max_tokens": 5, "ignore_eos": True, "stream": True, **extra}


USAGE_KEYS = [
    *("prompt_tokens", "total_tokens", "completion_tokens"),
    *("prompt_tokens_details", "reasoning_tokens", "completion_tokens_details"),
]


@pytest.fixture(scope="module")
def generic_sim() -> Iterator[Sim]:
    with running_sim("--enable-metrics", "--mem-fraction-static", "0.88", "--trust-remote-code") as sim:
        yield sim


# --- command line -----------------------------------------------------------------------------------------


def test_an_unknown_flag_is_rejected_as_sglang_rejects_it() -> None:
    result = subprocess.run(
        sim_command("--tp-size", "8", "--enable-magic"), cwd=REPO, capture_output=True, check=False
    )
    assert result.returncode == 2
    assert (
        result.stderr.decode().splitlines()[-1]
        == "fairbench sim: error: unrecognized arguments: --enable-magic"
    )


def test_a_campaigns_sglang_flags_are_accepted_and_predict_prints_the_sweep() -> None:
    flags = [
        *("--trust-remote-code", "--mem-fraction-static", "0.88", "--max-running-requests", "4"),
        *("--num-continuous-decode-steps", "8", "--attention-backend", "triton", "--tp-size", "8"),
    ]
    result = subprocess.run(
        sim_command(*flags, "--sim-predict", "64,16"), cwd=REPO, capture_output=True, text=True, check=True
    )
    assert [line.split()[0] for line in result.stdout.splitlines()[2:5]] == ["1", "2", "4"]
    assert result.stdout.splitlines()[-1].startswith("peak ")


# --- formats ----------------------------------------------------------------------------------------------


def test_completions_stream_carries_cumulative_usage_and_a_final_usage_chunk(generic_sim: Sim) -> None:
    options = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}

    async def scenario() -> Streamed:
        async with session() as client:
            return await stream(client, f"{generic_sim.url}/v1/completions", completion_body(**options))

    result = asyncio.run(scenario())
    assert result.status == 200
    *chunks, usage_chunk, done = result.events
    assert done == "[DONE]"
    assert [chunk["usage"]["completion_tokens"] for chunk in chunks] == [1, 2, 3, 4, 5]
    for chunk in chunks:
        assert list(chunk) == ["id", "object", "created", "model", "choices", "usage"]
        assert chunk["object"] == "text_completion" and chunk["id"] == chunks[0]["id"]
        assert list(chunk["usage"]) == USAGE_KEYS
        assert chunk["usage"]["prompt_tokens"] == 12
        assert chunk["choices"][0]["text"].startswith(" ")
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks] == [None] * 4 + ["length"]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": 12,
        "total_tokens": 17,
        "completion_tokens": 5,
        "reasoning_tokens": 0,
    }


def test_chat_stream_sends_role_content_finish_and_usage_chunks(generic_sim: Sim) -> None:
    body = {
        "messages": [{"role": "user", "content": "four words of prompt"}],
        "max_tokens": 3,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    async def scenario() -> Streamed:
        async with session() as client:
            return await stream(client, f"{generic_sim.url}/v1/chat/completions", body)

    role, *content, finish, usage, done = asyncio.run(scenario()).events
    assert role["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    assert [len(chunk["choices"][0]["delta"]["content"].split()) for chunk in content] == [1, 1, 1]
    assert all("usage" not in chunk for chunk in content)
    assert finish["choices"][0] == {
        "index": 0,
        "delta": {"reasoning_content": None},
        "logprobs": None,
        "finish_reason": "length",
        "matched_stop": None,
    }
    assert usage["object"] == "chat.completion.chunk" and usage["choices"] == []
    assert (usage["usage"]["prompt_tokens"], usage["usage"]["completion_tokens"]) == (4, 3)
    assert done == "[DONE]"


def test_generate_stream_has_cumulative_text_ids_and_meta_info(generic_sim: Sim) -> None:
    body = {
        "input_ids": [5] * 7,
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": True},
        "stream": True,
    }

    async def scenario() -> Streamed:
        async with session() as client:
            return await stream(client, f"{generic_sim.url}/generate", body)

    *outputs, done = asyncio.run(scenario()).events
    assert done == "[DONE]"
    assert [len(output["output_ids"]) for output in outputs] == [1, 2, 3, 4]
    assert [len(output["text"].split()) for output in outputs] == [1, 2, 3, 4]
    assert outputs[-1]["text"].startswith(outputs[0]["text"])
    meta = outputs[-1]["meta_info"]
    # With --enable-metrics, as in SGLang: the scheduler's time stats on every output, the tokenizer's on
    # the last.
    scheduler_time_stats = [
        *("storage_prefetch_wait", "storage_staging_wait", "forward_entry_time", "prefill_finished_time"),
        "queue_time",
    ]
    assert list(meta) == [
        *("id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions"),
        *scheduler_time_stats,
        *("reasoning_tokens", "completion_tokens", "cached_tokens", "weight_versions"),
        *("cached_tokens_details", "dp_rank", "e2e_latency", "request_received_ts", "first_token_latency"),
        *("api_server_dispatch_finish_ts", "response_sent_to_client_ts", "request_finished_ts"),
        "decode_throughput",
    ]
    assert (
        meta["request_received_ts"]
        <= meta["forward_entry_time"]
        <= meta["prefill_finished_time"]
        <= meta["response_sent_to_client_ts"]
        <= meta["request_finished_ts"]
    )
    assert meta["queue_time"] >= 0.0 and meta["storage_prefetch_wait"] == meta["storage_staging_wait"] == 0.0
    assert 0.0 < meta["first_token_latency"] < meta["e2e_latency"]
    assert meta["request_finished_ts"] - meta["request_received_ts"] == pytest.approx(
        meta["e2e_latency"], abs=1e-3
    )
    decode_s = meta["request_finished_ts"] - meta["prefill_finished_time"]
    assert meta["decode_throughput"] == pytest.approx(3 / decode_s, rel=0.05)
    assert all(set(scheduler_time_stats) <= set(output["meta_info"]) for output in outputs)
    assert meta["finish_reason"] == {"type": "length", "length": 4}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (7, 4)
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": 4}]
    first = outputs[0]["meta_info"]
    assert first["finish_reason"] is None and "e2e_latency" not in first
    # Set once, when the first event goes out; with --enable-metrics the last event repeats it among the
    # request's time stats.
    assert meta["response_sent_to_client_ts"] == first["response_sent_to_client_ts"]
    assert all("response_sent_to_client_ts" not in output["meta_info"] for output in outputs[1:-1])


def test_non_streaming_responses_and_the_simulated_eos(generic_sim: Sim) -> None:
    async def scenario() -> list[dict[str, Any]]:
        async with session() as client:
            replies = []
            for path, body in [
                ("/generate", {"text": "a b c", "sampling_params": {"max_new_tokens": 3}}),
                ("/v1/completions", {"prompt": "a b", "max_tokens": 2}),
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
            ]:
                async with client.post(generic_sim.url + path, json=body) as response:
                    assert response.status == 200
                    replies.append(await response.json())
            return replies

    generated, completion, chat = asyncio.run(scenario())
    assert generated["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert len(generated["output_ids"]) == 3 and len(generated["text"].split()) == 3
    assert completion["object"] == "text_completion" and completion["metadata"] == {
        "weight_version": "default",
        "weight_versions": [{"version": "default", "start": 0, "end": 2}],
    }
    assert (
        completion["usage"]["completion_tokens"] == 2
        and completion["choices"][0]["finish_reason"] == "length"
    )
    # No max_tokens and no ignore_eos: the generic profile's model "meets EOS" after 256 tokens.
    assert chat["choices"][0]["finish_reason"] == "stop" and chat["choices"][0]["matched_stop"] == 2
    assert chat["usage"]["completion_tokens"] == 256 and chat["choices"][0]["message"]["role"] == "assistant"


def test_requests_beyond_the_context_length_are_refused_as_sglang_refuses_them(generic_sim: Sim) -> None:
    too_long = {"max_tokens": 40000}

    async def scenario() -> tuple[int, dict[str, Any], Streamed]:
        async with session() as client:
            async with client.post(
                f"{generic_sim.url}/v1/completions", json=completion_body(**too_long)
            ) as reply:
                status, body = reply.status, await reply.json()
            generate = {"input_ids": [1], "sampling_params": {"max_new_tokens": 40000}, "stream": True}
            return status, body, await stream(client, f"{generic_sim.url}/generate", generate)

    status, body, generated = asyncio.run(scenario())
    assert status == 400
    assert body["object"] == "error" and body["code"] == 400 and body["type"] == "BadRequestError"
    assert body["message"].startswith(
        "Requested token count exceeds the model's maximum context length of 32768"
    )
    # /generate has already started its stream: the error arrives as an event, then [DONE].
    assert generated.status == 200
    assert generated.events[0]["error"]["code"] == 400 and generated.events[1] == "[DONE]"


def test_server_info_lists_every_argument_and_the_flags_not_modelled(generic_sim: Sim) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with session() as client:
            _, info = await get(client, f"{generic_sim.url}/server_info")
            _, deprecated = await get(client, f"{generic_sim.url}/get_server_info")
            return json.loads(info), json.loads(deprecated)

    info, deprecated = asyncio.run(scenario())
    assert set(flag_table()["fields"]) <= set(info)
    assert info["mem_fraction_static"] == 0.88 and info["max_running_requests"] == 256
    assert info["version"] == "0.5.23" and info["internal_states"][0]["tp_size"] == 1
    assert info["sim"]["not_modelled_flags"] == ["--trust-remote-code", "--mem-fraction-static"]
    assert "--num-continuous-decode-steps" in info["sim"]["modelled_flags"]
    assert info["sim"]["performance_model"]["t0_ms"] == 2.0
    assert deprecated.keys() == info.keys()


def test_model_endpoints_flush_cache_and_metrics(generic_sim: Sim) -> None:
    async def scenario() -> dict[str, tuple[int, bytes]]:
        async with session() as client:
            paths = [
                *("/v1/models", "/v1/models/sim/test-model", "/v1/models/other", "/model_info"),
                *("/flush_cache", "/metrics", "/no/such/route"),
            ]
            return {path: await get(client, generic_sim.url + path) for path in paths}

    replies = asyncio.run(scenario())
    models = json.loads(replies["/v1/models"][1])
    assert models["data"][0]["id"] == "sim/test-model" and models["data"][0]["owned_by"] == "sglang"
    assert json.loads(replies["/v1/models/sim/test-model"][1])["max_model_len"] == 32768
    assert replies["/v1/models/other"][0] == 404
    assert json.loads(replies["/v1/models/other"][1])["error"]["code"] == "model_not_found"
    assert json.loads(replies["/model_info"][1])["served_model_name"] == "sim/test-model"
    assert replies["/flush_cache"] == (200, SGLANG_CACHE_FLUSHED)
    metrics_status, metrics = replies["/metrics"]
    assert metrics_status == 200
    # Nothing runs or waits between this module's requests, and no KV cache is held.
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"):
        assert sample_value(metrics, name, SCHEDULER_LABELS) == 0.0
    assert sample_value(metrics, "sglang:spec_accept_length", SCHEDULER_LABELS) == 0.0
    lag = sample_value(metrics, "fairbench_sim_schedule_lag_max_seconds", {"model_name": "sim/test-model"})
    assert lag >= 0.0
    assert replies["/no/such/route"][0] == 404


def test_metrics_exist_only_with_enable_metrics_and_the_api_key_guards_all_but_health() -> None:
    with running_sim("--api-key", "sekret") as sim:

        async def scenario() -> list[int]:
            async with session() as client:
                unauthorized = await stream(client, f"{sim.url}/v1/completions", completion_body())
                authorized = await stream(
                    client, f"{sim.url}/v1/completions", completion_body(), Authorization="Bearer sekret"
                )
                health, _ = await get(client, f"{sim.url}/health")
                metrics, _ = await get(client, f"{sim.url}/metrics", Authorization="Bearer sekret")
                info, body = await get(client, f"{sim.url}/server_info")
                assert json.loads(body) == {"error": "Unauthorized"}
                unknown, _ = await get(client, f"{sim.url}/no/such/route")
                return [unauthorized.status, authorized.status, health, metrics, info, unknown]

        assert asyncio.run(scenario()) == [401, 200, 200, 404, 401, 401]


# --- timing -----------------------------------------------------------------------------------------------


def slow_profile(tmp_path: Path) -> str:
    """Steps long enough to measure over loopback: t(b) = 30 ms + 10 ms * b, prefill 20 ms + 1 ms/token."""
    profile = yaml.safe_load(REPO.joinpath("bench/fairbench/sim/profiles/generic.yaml").read_text())
    profile["layouts"] = {
        "default": {"t0_ms": 30, "k_ms": 10, "prefill_tokens_per_s": 1000, "prefill_forward_ms": 20}
    }
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(profile))
    return str(path)


def test_continuous_batching_timing_follows_the_model_and_the_trace_records_send_times(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    # The requests are sent while the model "loads", so all three are queued when the engine starts.
    flags = [
        *("--sim-profile", slow_profile(tmp_path), "--max-running-requests", "2"),
        *("--num-continuous-decode-steps", "2", "--sim-trace", str(trace), "--sim-load-seconds", "0.5"),
    ]
    # Prompts that differ from their first token on: the prefix cache serves none of them.
    bodies = [completion_body(prompt=[n, *range(9)], max_tokens=5) for n in range(3)]
    with running_sim(*flags) as sim:

        async def scenario() -> list[Streamed]:
            async with session() as client:
                return await asyncio.gather(
                    *(stream(client, f"{sim.url}/v1/completions", body) for body in bodies)
                )

        results = asyncio.run(scenario())
    prefill_one = 0.020 + 0.010
    round_two, round_one = 2 * 0.050, 2 * 0.040  # two steps at b = 2 and at b = 1
    # Two run together: first token from their shared prefill, then 2 + 2 tokens in two rounds. The third
    # waits for a slot, is prefilled when they finish and runs alone. Times are from the pair's first token.
    pair_done = 2 * round_two
    expected = [
        [0.0, round_two, pair_done],
        [0.0, round_two, pair_done],
        [
            pair_done + prefill_one,
            pair_done + prefill_one + round_one,
            pair_done + prefill_one + 2 * round_one,
        ],
    ]
    first_token = min(result.arrival_ns[0] for result in results)
    observed = sorted([(ns - first_token) / 1e9 for ns in result.arrival_ns[:-1]] for result in results)
    for seen, wanted in zip(observed, expected, strict=True):
        assert seen == pytest.approx(wanted, abs=0.015)
    tokens = [[event["choices"][0]["text"].count(" ") for event in result.events[:-1]] for result in results]
    assert tokens == [[1, 2, 2]] * 3
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [record["event_tokens"] for record in records] == [[1, 2, 2]] * 3
    # The server's send times and the client's arrival times share the host's monotonic clock.
    arrivals = sorted(ns for result in results for ns in result.arrival_ns[:-1])
    sends = sorted(ns for record in records for ns in record["event_ns"])
    assert all(0 <= arrival - send < 10_000_000 for arrival, send in zip(arrivals, sends, strict=True))


@pytest.mark.timing  # it holds the simulator's wall-clock step times to its model within 15 ms
def test_the_k26_profile_keeps_its_modelled_times_in_real_time() -> None:
    """TP8, output 64, four times faster: 32 requests queued while loading, then one at a time.

    Queueing them during loading makes all 32 arrive "at once", as the model's closed loop assumes; a
    client that sends them one after another spreads their arrival and the first prefill starts early.
    """
    scale = 0.25
    tp8 = load_profile("kimi-k2.6-8xpro6000").layouts["tp8"]

    def step(batch: int) -> float:
        return tp8.t0_s + tp8.k_s * batch

    def prefill(requests: int) -> float:
        return tp8.prefill_forward_s + requests * 1024 / tp8.prefill_tokens_per_s

    flags = [
        *("--sim-profile", "kimi-k2.6-8xpro6000", "--tp-size", "8", "--max-running-requests", "256"),
        *("--num-continuous-decode-steps", "8", "--sim-time-scale", str(scale), "--sim-load-seconds", "1"),
    ]

    def body(first_token: int) -> dict[str, Any]:
        # Prompts that differ from their first token on: the prefix cache serves none of them.
        return completion_body(prompt=[first_token, *range(1023)], max_tokens=64)

    with running_sim(*flags) as sim:

        async def scenario() -> tuple[list[Streamed], list[Streamed]]:
            async with session() as client:
                url = f"{sim.url}/v1/completions"
                queued = await asyncio.gather(*(stream(client, url, body(n)) for n in range(32)))
                return queued, [await stream(client, url, body(32 + n)) for n in range(3)]

        queued, one_by_one = asyncio.run(scenario())
    # 32 x 1024 tokens are four 8192-token prefill forwards; then 64 tokens in 8 rounds of 8 steps at b = 32.
    first_tokens = sorted(result.arrival_ns[0] for result in queued)
    gaps = [(first_tokens[i + 8] - first_tokens[i]) / 1e9 for i in range(0, 24, 8)]
    assert gaps == pytest.approx([prefill(8) * scale] * 3, abs=0.015)
    wave_after_first_token = (max(result.arrival_ns[-1] for result in queued) - first_tokens[0]) / 1e9
    assert wave_after_first_token == pytest.approx((3 * prefill(8) + 64 * step(32)) * scale, rel=0.02)
    # Alone, with what the client adds to send a request and read its events (a few ms on loopback).
    for result in one_by_one:
        latency = (result.arrival_ns[-1] - result.sent_ns) / 1e9
        assert latency == pytest.approx((prefill(1) + 64 * step(1)) * scale, rel=0.05)


# --- start-up, disconnects and faults ---------------------------------------------------------------------


def test_health_is_503_while_loading_and_requests_wait_for_the_model() -> None:
    with running_sim("--sim-load-seconds", "1") as sim:

        async def scenario() -> tuple[list[int], float, int]:
            async with session() as client:
                loading = [
                    (await get(client, f"{sim.url}{path}"))[0] for path in ("/health", "/health_generate")
                ]
                started = time.perf_counter()
                result = await stream(client, f"{sim.url}/v1/completions", completion_body())
                waited = time.perf_counter() - started
                assert result.events[-1] == "[DONE]"
                return loading, waited, (await get(client, f"{sim.url}/health_generate"))[0]

        loading, waited, loaded = asyncio.run(scenario())
    assert loading == [503, 503]
    assert 0.7 < waited < 1.5
    assert loaded == 200


def test_slow_start_keeps_health_503_while_requests_are_already_served() -> None:
    with running_sim("--sim-fault", "slow-start=1") as sim:

        async def scenario() -> tuple[int, int, int]:
            async with session() as client:
                early, _ = await get(client, f"{sim.url}/health")
                served = await stream(client, f"{sim.url}/v1/completions", completion_body())
                await asyncio.sleep(1)
                return early, served.status, (await get(client, f"{sim.url}/health"))[0]

        assert asyncio.run(scenario()) == (503, 200, 200)


def test_crash_after_n_serves_n_requests_then_the_process_dies_with_a_failure_status() -> None:
    with running_sim("--sim-fault", "crash-after=2") as sim:

        async def scenario() -> None:
            async with session() as client:
                for _ in range(2):
                    assert (
                        await stream(client, f"{sim.url}/v1/completions", completion_body())
                    ).status == 200
                with pytest.raises(aiohttp.ClientError):
                    await stream(client, f"{sim.url}/v1/completions", completion_body())

        asyncio.run(scenario())
        assert sim.process.wait(timeout=5) == 1


def test_hang_after_n_keeps_connections_open_without_tokens_and_fails_the_health_check() -> None:
    with running_sim("--sim-fault", "hang-after=1", env={"SGLANG_HEALTH_CHECK_TIMEOUT": "1"}) as sim:
        body = {
            "input_ids": [1, 2],
            "sampling_params": {"max_new_tokens": 5, "ignore_eos": True},
            "stream": True,
        }

        async def scenario() -> tuple[int, int, float]:
            async with session() as client:
                assert (await stream(client, f"{sim.url}/generate", body)).events[-1] == "[DONE]"
                async with client.post(f"{sim.url}/generate", json=body) as hung:
                    with pytest.raises(asyncio.TimeoutError):
                        await asyncio.wait_for(hung.content.readline(), timeout=0.5)
                    started = time.perf_counter()
                    health, _ = await get(client, f"{sim.url}/health_generate")
                    return hung.status, health, time.perf_counter() - started

        hung_status, health, health_took = asyncio.run(scenario())
        assert sim.process.poll() is None
    assert (hung_status, health) == (200, 503)
    assert 0.9 < health_took < 2


def test_http_500_rate_answers_with_sglangs_internal_error_body() -> None:
    with running_sim("--sim-fault", "http-500-rate=1") as sim:

        async def scenario() -> tuple[int, dict[str, Any], int]:
            async with session() as client:
                async with client.post(f"{sim.url}/v1/completions", json=completion_body()) as reply:
                    status, body = reply.status, await reply.json()
                return status, body, (await get(client, f"{sim.url}/health"))[0]

        status, body, health = asyncio.run(scenario())
    assert status == 500 and health == 200
    assert body == {
        "object": "error",
        "message": "Internal server error: simulated fault http-500-rate",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }


def test_malformed_every_n_breaks_every_nth_streamed_event() -> None:
    with running_sim("--sim-fault", "malformed-every=3") as sim:

        async def scenario() -> Streamed:
            async with session() as client:
                return await stream(client, f"{sim.url}/v1/completions", completion_body())

        events = asyncio.run(scenario()).events
    assert [isinstance(event, dict) for event in events[:5]] == [True, True, False, True, True]
    assert isinstance(events[2], str) and events[2].startswith('{"id":')
    assert events[-1] == "[DONE]"


def test_a_client_that_goes_away_leaves_the_batch() -> None:
    with running_sim("--enable-metrics") as sim:

        async def scenario() -> bytes:
            async with session() as client:
                async with client.post(
                    f"{sim.url}/v1/completions", json=completion_body(max_tokens=5000)
                ) as reply:
                    await reply.content.readline()
                    _, metrics = await get(client, f"{sim.url}/metrics")
                    assert sample_value(metrics, "sglang:num_running_reqs", SCHEDULER_LABELS) == 1.0
                    assert sample_value(metrics, "sglang:num_queue_reqs", SCHEDULER_LABELS) == 0.0
                await asyncio.sleep(0.1)
                return (await get(client, f"{sim.url}/metrics"))[1]

        metrics = asyncio.run(scenario())
    assert sample_value(metrics, "sglang:num_running_reqs", SCHEDULER_LABELS) == 0.0


# --- metrics and time stamps ------------------------------------------------------------------------------

TOKENIZER_LABELS = {"model_name": "sim/test-model", "engine_type": "unified"}


def counter_value(metrics: bytes, name: str, labels: dict[str, str]) -> float:
    """A counter's (or a histogram's ``_count`` or ``_sum``) series, 0 while it has none: SGLang's registry
    shows a series once something counted."""
    return prometheus_samples(metrics.decode()).get(name, {}).get(frozenset(labels.items()), 0.0)


def counter_delta(before: bytes, after: bytes, name: str, labels: dict[str, str]) -> float:
    return counter_value(after, name, labels) - counter_value(before, name, labels)


async def metrics_when(
    client: aiohttp.ClientSession, url: str, condition: Callable[[bytes], bool], timeout_s: float = 5.0
) -> bytes:
    """``/metrics`` polled every 10 ms until ``condition`` holds of it; the test fails if it never does."""
    deadline = time.monotonic() + timeout_s
    while True:
        _, metrics = await get(client, f"{url}/metrics")
        if condition(metrics):
            return metrics
        assert time.monotonic() < deadline, f"/metrics never showed what was waited for: {metrics.decode()}"
        await asyncio.sleep(0.01)


def gauge_is(name: str, wanted: float) -> Callable[[bytes], bool]:
    return lambda metrics: sample_value(metrics, name, SCHEDULER_LABELS) == wanted


def streaming(flag: bool) -> dict[str, str]:
    return {**TOKENIZER_LABELS, "is_streaming": "true" if flag else "false"}


GENERATION_PATHS = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}


async def generation(
    client: aiohttp.ClientSession, url: str, api: str, streamed: bool, n: int
) -> tuple[int, int, int]:
    """One request of ``api`` with a prompt of its own (its first token or word is ``n``'s); returns
    (prompt tokens, completion tokens, cached tokens) as its response reports them (the OpenAI routes
    report no cached tokens: these prompts share no prefix)."""
    ids = [100 + n, *range(20 + 5 * n)]
    max_tokens = 4 + n
    body: dict[str, Any] = {"stream": streamed}
    if api == "generate":
        body.update(input_ids=ids, sampling_params={"max_new_tokens": max_tokens, "ignore_eos": True})
    else:
        body.update(max_tokens=max_tokens, ignore_eos=True)
        if streamed:
            body.update(stream_options={"include_usage": True})
        if api == "completions":
            body.update(prompt=ids)
        else:
            body.update(messages=[{"role": "user", "content": " ".join(f"w{token}" for token in ids)}])
    if streamed:
        *_, last, done = (await stream(client, url + GENERATION_PATHS[api], body)).events
        assert done == "[DONE]"
    else:
        async with client.post(url + GENERATION_PATHS[api], json=body) as reply:
            last = await reply.json()
    if api == "generate":
        meta = last["meta_info"]
        return meta["prompt_tokens"], meta["completion_tokens"], meta["cached_tokens"]
    return last["usage"]["prompt_tokens"], last["usage"]["completion_tokens"], 0


def test_metrics_count_each_finished_request_once_and_read_the_batch_the_queue_and_the_kv_pool(
    tmp_path: Path,
) -> None:
    """Six requests of every API, streamed and not, in flight at once on a server that runs two at a time."""
    kinds = [(api, streamed) for api in GENERATION_PATHS for streamed in (True, False)]
    flags = ["--enable-metrics", "--sim-profile", slow_profile(tmp_path), "--max-running-requests", "2"]
    with running_sim(*flags, "--max-total-tokens", "400") as sim:

        async def scenario() -> tuple[bytes, bytes, list[tuple[int, int, int]], bytes]:
            async with session() as client:
                _, before = await get(client, f"{sim.url}/metrics")
                requests = [
                    asyncio.ensure_future(generation(client, sim.url, api, streamed, n))
                    for n, (api, streamed) in enumerate(kinds)
                ]
                # Two are prefilled (20 ms + 1 ms a token) and decode at 50 ms a step while four wait.
                loaded = await metrics_when(
                    client,
                    sim.url,
                    lambda metrics: (
                        gauge_is("sglang:num_running_reqs", 2)(metrics)
                        and gauge_is("sglang:num_queue_reqs", 4)(metrics)
                    ),
                )
                reported = await asyncio.gather(*requests)
                # The health check's probe request stays out of the counters.
                assert (await get(client, f"{sim.url}/health_generate"))[0] == 200
                return before, loaded, reported, (await get(client, f"{sim.url}/metrics"))[1]

        before, loaded, reported, after = asyncio.run(scenario())
    usage = sample_value(loaded, "sglang:token_usage", SCHEDULER_LABELS)
    assert 0.0 < usage <= 1.0
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"):
        assert sample_value(after, name, SCHEDULER_LABELS) == 0.0
    for flag in (True, False):
        mine = [counts for counts, (_, streamed) in zip(reported, kinds, strict=True) if streamed is flag]
        labels = streaming(flag)
        assert counter_delta(before, after, "sglang:num_requests_total", labels) == len(mine) == 3
        prompt_tokens = counter_delta(before, after, "sglang:prompt_tokens_total", labels)
        assert prompt_tokens == sum(prompt for prompt, _, _ in mine)
        generation_tokens = counter_delta(before, after, "sglang:generation_tokens_total", labels)
        assert generation_tokens == sum(completion for _, completion, _ in mine)
    assert sum(cached for _, _, cached in reported) == 0
    device = {**TOKENIZER_LABELS, "cache_source": "device"}
    assert counter_delta(before, after, "sglang:cached_tokens_total", device) == 0


@pytest.mark.timing  # it compares the server's seconds with the client's wall clock
def test_the_latency_and_queue_time_sums_are_the_seconds_requests_spent_in_the_server_and_its_queue(
    tmp_path: Path,
) -> None:
    """Three requests one after another, then three at once on a server that runs one at a time, four times
    faster than the model: the histograms' sums are in the seconds the client sees."""
    scale = 0.25
    flags = ["--enable-metrics", "--sim-profile", slow_profile(tmp_path), "--max-running-requests", "1"]
    # Alone, a request takes a 12-token prefill (20 ms + 12 ms) and 4 decode steps at b = 1 (40 ms).
    service_s = (0.032 + 4 * 0.040) * scale
    e2e = "sglang:e2e_request_latency_seconds"
    queue = "sglang:queue_time_seconds"

    def latency(result: Streamed) -> float:
        assert result.events[-1] == "[DONE]"
        return (result.arrival_ns[-1] - result.sent_ns) / 1e9

    with running_sim(*flags, "--sim-time-scale", str(scale)) as sim:

        async def scenario() -> tuple[list[bytes], list[Streamed], list[Streamed]]:
            async with session() as client:
                url = f"{sim.url}/v1/completions"
                readings = [(await get(client, f"{sim.url}/metrics"))[1]]
                alone = [await stream(client, url, completion_body(prompt=[n, *range(11)])) for n in range(3)]
                readings.append((await get(client, f"{sim.url}/metrics"))[1])
                together = await asyncio.gather(
                    *(stream(client, url, completion_body(prompt=[10 + n, *range(11)])) for n in range(3))
                )
                readings.append((await get(client, f"{sim.url}/metrics"))[1])
                assert (await get(client, f"{sim.url}/health_generate"))[0] == 200
                readings.append((await get(client, f"{sim.url}/metrics"))[1])
                return readings, alone, together

        (before, after_alone, after_together, after_health), alone, together = asyncio.run(scenario())

    for first, then, results in ((before, after_alone, alone), (after_alone, after_together, together)):
        assert counter_delta(first, then, f"{e2e}_count", streaming(True)) == len(results) == 3
        # The server's latency runs from the request's arrival to its end: the client's, less a few ms.
        client_total = sum(map(latency, results))
        assert counter_delta(first, then, f"{e2e}_sum", streaming(True)) == pytest.approx(
            client_total, abs=3 * 0.005
        )
        assert counter_delta(first, then, f"{queue}_count", SCHEDULER_LABELS) == 3
    # One after another, each finds the engine idle and waits for nothing.
    assert counter_delta(before, after_alone, f"{queue}_sum", SCHEDULER_LABELS) == 0.0
    # At once: the second waits for the first, the third for both (less the few ms between arrivals), and
    # every request's time in the server is its wait plus its own service.
    waited = counter_delta(after_alone, after_together, f"{queue}_sum", SCHEDULER_LABELS)
    assert waited == pytest.approx(3 * service_s, abs=0.015)
    in_server = counter_delta(after_alone, after_together, f"{e2e}_sum", streaming(True))
    assert in_server - waited == pytest.approx(3 * service_s, abs=3 * 0.005)
    # The health check's probe stays out of the latency, as in SGLang; its scheduler times its queue (0 s,
    # on an idle engine) as any other request's.
    assert counter_delta(after_together, after_health, f"{e2e}_count", streaming(True)) == 0
    assert counter_delta(after_together, after_health, f"{queue}_count", SCHEDULER_LABELS) == 1
    assert counter_delta(after_together, after_health, f"{queue}_sum", SCHEDULER_LABELS) == 0.0


def test_a_repeated_prompt_adds_its_cached_prefix_to_cached_tokens_total(generic_sim: Sim) -> None:
    body = {"input_ids": list(range(900, 930)), "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}}
    device = {**TOKENIZER_LABELS, "cache_source": "device"}

    async def scenario() -> tuple[bytes, list[int], bytes]:
        async with session() as client:
            _, before = await get(client, f"{generic_sim.url}/metrics")
            cached = []
            for _ in range(2):
                async with client.post(f"{generic_sim.url}/generate", json=body) as reply:
                    cached.append((await reply.json())["meta_info"]["cached_tokens"])
            return before, cached, (await get(client, f"{generic_sim.url}/metrics"))[1]

    before, cached, after = asyncio.run(scenario())
    # The second is served from the cache but for its last token.
    assert cached == [0, 29]
    assert counter_delta(before, after, "sglang:cached_tokens_total", device) == 29
    assert sample_value(after, "sglang:cache_hit_rate", SCHEDULER_LABELS) == pytest.approx(29 / 30)


def test_aborts_count_as_sglang_counts_them() -> None:
    """An aborted request counts as finished if it had left the queue; every abort counts once."""

    def body(rid: str) -> dict[str, Any]:
        return {
            "rid": rid,
            "input_ids": list(range(10)),
            "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True},
            "stream": True,
        }

    with running_sim("--enable-metrics", "--max-running-requests", "1") as sim:

        async def scenario() -> tuple[Streamed, Streamed, bytes]:
            async with session() as client:
                generate = f"{sim.url}/generate"
                running = asyncio.ensure_future(stream(client, generate, body("running")))
                await metrics_when(client, sim.url, gauge_is("sglang:num_running_reqs", 1))
                waiting = asyncio.ensure_future(stream(client, generate, body("waiting")))
                await metrics_when(client, sim.url, gauge_is("sglang:num_queue_reqs", 1))
                for rid in ("waiting", "no-such-request", "running"):
                    async with client.post(f"{sim.url}/abort_request", json={"rid": rid}) as reply:
                        assert reply.status == 200
                aborted_waiting, aborted_running = await waiting, await running
                async with client.post(generate, json=body("gone")) as reply:
                    await reply.content.readline()
                return (
                    aborted_running,
                    aborted_waiting,
                    await metrics_when(client, sim.url, gauge_is("sglang:num_running_reqs", 0)),
                )

        aborted_running, aborted_waiting, metrics = asyncio.run(scenario())
    for result in (aborted_running, aborted_waiting):
        assert result.events[-2]["meta_info"]["finish_reason"]["type"] == "abort"
    running_tokens = aborted_running.events[-2]["meta_info"]["completion_tokens"]
    # The queued one ends at once; the running one after one more forward, with its token (to_finish).
    assert aborted_waiting.events[-2]["meta_info"]["completion_tokens"] == 0
    assert running_tokens == aborted_running.events[-3]["meta_info"]["completion_tokens"] + 1
    # The running one and the one whose client left count; the waiting one does not.
    assert counter_value(metrics, "sglang:num_requests_total", streaming(True)) == 2
    assert counter_value(metrics, "sglang:prompt_tokens_total", streaming(True)) == 20
    assert counter_value(metrics, "sglang:generation_tokens_total", streaming(True)) > running_tokens
    # /abort_request of the waiting and of the running one, and the client that left; not the unknown rid.
    assert counter_value(metrics, "sglang:num_aborted_requests_total", TOKENIZER_LABELS) == 3


def test_generate_marks_the_moment_its_response_first_left_and_the_openai_routes_do_not() -> None:
    body = {"input_ids": [7] * 5, "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    with running_sim() as sim:

        async def scenario() -> tuple[Streamed, dict[str, Any], float, Streamed]:
            async with session() as client:
                streamed = await stream(client, f"{sim.url}/generate", {**body, "stream": True})
                async with client.post(f"{sim.url}/generate", json=body) as reply:
                    whole = await reply.json()
                    whole_arrival_ns = time.perf_counter_ns()
                completions = await stream(client, f"{sim.url}/v1/completions", completion_body())
                return streamed, whole, whole_arrival_ns, completions

        streamed, whole, whole_arrival_ns, completions = asyncio.run(scenario())
    epoch_offset_s = time.time() - time.perf_counter()

    def left_before_arrival(ts: float, arrival_ns: float) -> bool:
        """The server's epoch time stamp against the client's arrival on the same host's clock."""
        return -0.001 < arrival_ns / 1e9 + epoch_offset_s - ts < 0.010

    *outputs, done = streamed.events
    assert done == "[DONE]" and len(outputs) == 4
    # Without --enable-metrics only the first event carries it.
    assert [("response_sent_to_client_ts" in output["meta_info"]) for output in outputs] == [
        True,
        False,
        False,
        False,
    ]
    assert left_before_arrival(outputs[0]["meta_info"]["response_sent_to_client_ts"], streamed.arrival_ns[0])
    assert left_before_arrival(whole["meta_info"]["response_sent_to_client_ts"], whole_arrival_ns)
    assert all("response_sent_to_client_ts" not in json.dumps(event) for event in completions.events)
