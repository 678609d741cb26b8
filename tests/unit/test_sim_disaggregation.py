"""Prefill/decode disaggregation in the simulator (``fairbench.sim.kv_transfer``, ``sim.disaggregation``).

A prefill and a decode simulator run in this process on loopback ports, with a plain one beside them;
``dispatch`` does what sglang-router does per request (the same body to both at once, ``bootstrap_host``,
``bootstrap_port`` and a random ``bootstrap_room`` added; the prefill's answer read whole, the decode's
returned). The last test puts the real ``sglang-router`` 0.3.2 in front of simulator processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.support.sim_process import free_port, running_sims

from fairbench.cli.sim import configure
from fairbench.sim.args import ConfigError, resolve
from fairbench.sim.checkpoint import read_checkpoint
from fairbench.sim.http import serve
from fairbench.sim.kv_transfer import PrefillRole
from fairbench.sim.server import SimServer

IDS = [17, 4023, 9, 311, 77, 1500, 2, 64, 9001, 12]
VOLATILE = {
    *("id", "created", "e2e_latency", "first_token_latency", "decode_throughput", "queue_time"),
    *("forward_entry_time", "prefill_finished_time", "request_received_ts", "request_finished_ts"),
    *("api_server_dispatch_finish_ts", "response_sent_to_client_ts"),
}
"""What differs between two servers' answers to one request: ids, clock readings, rates."""


@dataclass
class Server:
    url: str
    server: SimServer


@dataclass
class Reply:
    status: int
    body: Any
    """The JSON body, or for a stream every ``data:`` payload parsed (``[DONE]`` as that string)."""
    first_event_s: float
    """Seconds from sending the request to its first body bytes."""


@dataclass
class Pair:
    prefill: Server
    decode: Server
    plain: Server
    """A server that does both phases, with the same flags otherwise: what the pair must answer."""
    bootstrap_port: int
    client: aiohttp.ClientSession

    async def call(self, url: str, body: dict[str, Any]) -> Reply:
        started = time.perf_counter()
        async with self.client.post(url, json=body) as response:
            if not body.get("stream"):
                data = await response.read()
                return Reply(response.status, json.loads(data), time.perf_counter() - started)
            events: list[Any] = []
            first = 0.0
            async for line in response.content:
                first = first or time.perf_counter() - started
                if line.startswith(b"data: "):
                    payload = line[6:].strip().decode()
                    events.append(payload if payload == "[DONE]" else json.loads(payload))
            return Reply(response.status, events, first)

    async def dispatch(self, path: str, body: dict[str, Any], room: int | None = None) -> tuple[Reply, Reply]:
        """What sglang-router does: (prefill's reply, decode's reply) to the same body sent at once."""
        routed = {
            **body,
            "bootstrap_host": "127.0.0.1",
            "bootstrap_port": self.bootstrap_port,
            "bootstrap_room": random.randrange(2**63) if room is None else room,
        }
        prefill, decode = await asyncio.gather(
            self.call(self.prefill.url + path, routed), self.call(self.decode.url + path, routed)
        )
        return prefill, decode

    async def metrics(self, server: Server) -> str:
        async with self.client.get(server.url + "/metrics") as response:
            return await response.text()


@asynccontextmanager
async def started(*flags: str) -> AsyncIterator[Server]:
    """A loaded simulator on a free port (a prefill one with its bootstrap server too)."""
    parser = argparse.ArgumentParser()
    configure(parser)
    argv = ["--model-path", "sim/test-model", "--enable-metrics", *flags]
    server = SimServer(resolve(parser.parse_args(argv)), asyncio.get_running_loop())
    listener = await serve(server.handle, "127.0.0.1", 0)
    role = server.disaggregation
    if isinstance(role, PrefillRole):
        await role.listen("127.0.0.1")
    server.finish_loading()
    try:
        yield Server(f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}", server)
    finally:
        if isinstance(role, PrefillRole):
            role.close()
        listener.close()
        await listener.wait_closed()


@asynccontextmanager
async def pair(
    *flags: str, prefill_flags: tuple[str, ...] = (), time_scale: str = "0.001"
) -> AsyncIterator[Pair]:
    bootstrap_port = free_port()
    common = ("--sim-time-scale", time_scale, *flags)
    prefill_args = (
        "--disaggregation-mode",
        "prefill",
        "--disaggregation-bootstrap-port",
        str(bootstrap_port),
    )
    async with (
        started(*common, *prefill_args, *prefill_flags) as prefill,
        started(*common, "--disaggregation-mode", "decode") as decode,
        started(*common) as plain,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client,
    ):
        yield Pair(prefill, decode, plain, bootstrap_port, client)


def run(scenario: Callable[[Pair], Awaitable[Any]], *flags: str, **options: Any) -> Any:
    async def main() -> Any:
        async with pair(*flags, **options) as servers:
            return await scenario(servers)

    return asyncio.run(main())


def stable(value: Any) -> Any:
    """``value`` without what legitimately differs between two servers (``VOLATILE``)."""
    if isinstance(value, dict):
        return {key: stable(item) for key, item in value.items() if key not in VOLATILE}
    if isinstance(value, list):
        return [stable(item) for item in value]
    return value


def generate(prompt: str | list[int], tokens: int = 8, **extra: Any) -> dict[str, Any]:
    key = "text" if isinstance(prompt, str) else "input_ids"
    return {key: prompt, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}, **extra}


def chat(content: str, tokens: int = 8, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": content}]
    return {"model": "m", "messages": messages, "max_tokens": tokens, "ignore_eos": True, **extra}


def completion(prompt: str | list[int], tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": prompt, "max_tokens": tokens, "ignore_eos": True, **extra}


def sample(text: str, name: str) -> float:
    """The value of the one sample ``name`` (with its labels) in a Prometheus text."""
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]
    assert len(values) == 1, f"{name}: {values}"
    return values[0]


# --- the answer ----------------------------------------------------------------------------------------


CASES = [
    ("/generate", generate("add 20 and 22 please", 8)),
    ("/generate", generate(IDS, 6, stream=True)),
    ("/generate", generate(IDS, 5, return_logprob=True, top_logprobs_num=2, return_text_in_logprobs=True)),
    ("/v1/completions", completion(IDS, 6, stream=True, stream_options={"include_usage": True})),
    ("/v1/completions", completion("tell me about the sea", 4, logprobs=2)),
    ("/v1/chat/completions", chat("what is 3 + 4", 6, stream=True, stream_options={"include_usage": True})),
    ("/v1/chat/completions", chat("what is 3 + 4", 6, logprobs=True, top_logprobs=2)),
]


def test_the_decode_servers_answer_is_the_plain_servers_whatever_the_api_and_streaming() -> None:
    async def scenario(servers: Pair) -> None:
        for path, body in CASES:
            prefill, decode = await servers.dispatch(path, body)
            plain = await servers.call(servers.plain.url + path, body)
            assert prefill.status == decode.status == plain.status == 200, (path, body)
            assert stable(decode.body) == stable(plain.body), (path, body)
        # The same prompt again: the prefill's prefix cache served it, and the decode server says so.
        _, decode = await servers.dispatch("/generate", generate(IDS, 6, stream=True))
        plain = await servers.call(servers.plain.url + "/generate", generate(IDS, 6, stream=True))
        assert decode.body[-2]["meta_info"]["cached_tokens"] == len(IDS) - 1
        assert stable(decode.body) == stable(plain.body)

    run(scenario)


def test_the_prefill_answers_one_token_finished_by_length_zero_in_each_apis_shape() -> None:
    async def scenario(servers: Pair) -> dict[str, Any]:
        replies = {}
        for name, path, body in (
            ("generate", "/generate", generate(IDS, 8)),
            ("generate_stream", "/generate", generate(IDS, 8, stream=True)),
            ("completions", "/v1/completions", completion(IDS, 8)),
            ("chat_stream", "/v1/chat/completions", chat("hello there", 8, stream=True)),
        ):
            prefill, decode = await servers.dispatch(path, body)
            assert decode.status == 200
            replies[name] = prefill.body
        return replies

    replies = run(scenario)
    whole = replies["generate"]
    assert len(whole["output_ids"]) == 1 and whole["meta_info"]["completion_tokens"] == 1
    assert whole["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    *events, done = replies["generate_stream"]
    assert done == "[DONE]" and events[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    choice = replies["completions"]["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["text"].split()) == 1
    assert replies["completions"]["usage"]["completion_tokens"] == 1
    chunks = [event["choices"][0] for event in replies["chat_stream"][:-1]]
    assert [chunk["finish_reason"] for chunk in chunks] == [None, None, "length"]


@pytest.mark.timing
def test_the_first_token_waits_for_the_prefill_and_the_kv_transfer_as_modelled() -> None:
    # 64 prompt tokens of 1 MiB each over 1 GB/s (2^30 B/s): 62.5 ms on the link, plus 100 ms latency.
    prefill_flags = (
        *("--sim-kv-bytes-per-token", str(1 << 20)),
        *("--sim-kv-transfer-gbps", "1", "--sim-kv-transfer-latency-ms", "100"),
    )
    prompt = list(range(1000, 1064))
    transfer_s = 0.0625 + 0.100
    prefill_s = 0.0005 + 64 / 1_000_000  # the generic profile's prefill forward

    async def scenario(servers: Pair) -> tuple[Reply, Reply, str]:
        prefill, decode = await servers.dispatch("/v1/completions", completion(prompt, 4, stream=True))
        return prefill, decode, await servers.metrics(servers.prefill)

    prefill, decode, metrics = run(scenario, prefill_flags=prefill_flags, time_scale="1")
    assert decode.first_event_s >= prefill_s + transfer_s
    assert prefill.first_event_s >= prefill_s + transfer_s
    assert decode.first_event_s < prefill_s + transfer_s + 1.0
    labels = '{engine_type="prefill",model_name="sim/test-model",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
    assert sample(metrics, f"sglang:kv_transfer_latency_ms_sum{labels}") == pytest.approx(162.5, abs=0.5)
    assert sample(metrics, f"sglang:kv_transfer_total_mb_sum{labels}") == 64.0
    assert sample(metrics, f"sglang:kv_transfer_speed_gb_s_sum{labels}") == pytest.approx(
        64 / 1024 / 0.1625, rel=0.01
    )
    assert sample(metrics, f"sglang:kv_transfer_latency_ms_count{labels}") == 1


# --- failures ------------------------------------------------------------------------------------------


def test_a_room_nobody_serves_fails_after_sglangs_timeouts_with_sglangs_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "1")
    monkeypatch.setenv("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "1")

    async def scenario(servers: Pair) -> tuple[list[Reply], str, str]:
        def room(number: int, body: dict[str, Any]) -> dict[str, Any]:
            bootstrap = {"bootstrap_host": "127.0.0.1", "bootstrap_port": servers.bootstrap_port}
            return {**body, **bootstrap, "bootstrap_room": number}

        replies = await asyncio.gather(
            # A decode request whose prefill never comes, whole and streamed ...
            servers.call(servers.decode.url + "/generate", room(7, generate(IDS, rid="d7"))),
            servers.call(servers.decode.url + "/v1/completions", room(8, completion(IDS, stream=True))),
            # ... and a prefill request no decode server asks for.
            servers.call(servers.prefill.url + "/generate", room(9, generate(IDS))),
        )
        return list(replies), await servers.metrics(servers.decode), await servers.metrics(servers.prefill)

    (decode, decode_stream, prefill), decode_metrics, prefill_metrics = run(scenario)
    assert decode.status == 500
    assert decode.first_event_s >= 1.0
    assert decode.body == {
        "object": "error",
        "message": "Decode transfer failed for request rank=0 decode_req.req.rid='d7' "
        "decode_req.req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): "
        "Request 7 timed out after 1.0s in KVPoll.WaitingForInput",
        "type": "500",
        "param": None,
        "code": 500,
    }
    error, done = decode_stream.body
    assert decode_stream.status == 200 and done == "[DONE]"
    assert error["error"]["type"] == "INTERNAL_SERVER_ERROR" and error["error"]["code"] == 500
    assert error["error"]["message"].endswith("Request 8 timed out after 1.0s in KVPoll.WaitingForInput")
    assert prefill.status == 500 and prefill.first_event_s >= 1.0
    assert prefill.body["message"].startswith("Prefill bootstrap failed for request rank=0 req.rid=")
    assert prefill.body["message"].endswith(
        "req.bootstrap_room=9 with exception KVTransferError(bootstrap_room=9): "
        "Request 9 timed out after 1.0s in KVPoll.Bootstrapping"
    )
    assert sample(decode_metrics, "sglang:num_transfer_failed_reqs_total") == 2
    assert sample(prefill_metrics, "sglang:num_bootstrap_failed_reqs_total") == 1


def test_a_request_without_a_room_is_refused_as_sglangs_scheduler_refuses_it() -> None:
    async def scenario(servers: Pair) -> list[Reply]:
        return [
            await servers.call(server.url + path, body)
            for server in (servers.prefill, servers.decode)
            for path, body in (
                ("/generate", generate(IDS, rid="r1")),
                ("/generate", generate(IDS, rid="r2", stream=True)),
                ("/v1/chat/completions", chat("hi", rid="r3")),
            )
        ]

    replies = run(scenario)
    for whole, stream, chat_reply in (replies[:3], replies[3:]):
        message = "Invalid request: Disaggregated request received without bootstrap room id. req.rid='{}'"
        assert (whole.status, whole.body) == (400, {"error": {"message": message.format("r1")}})
        assert stream.status == 200 and stream.body[-1] == "[DONE]"
        assert stream.body[0]["meta_info"]["finish_reason"] == {
            "type": "abort",
            "message": message.format("r2"),
            "status_code": 400,
            "err_type": None,
        }
        assert chat_reply.status == 400
        assert chat_reply.body["type"] == "BadRequestError" and chat_reply.body["message"] == message.format(
            "r3"
        )


def test_a_decode_server_that_cannot_reach_the_prefill_fails_the_handshake_at_once() -> None:
    async def scenario(servers: Pair) -> tuple[Reply, str]:
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
            port = unused.getsockname()[1]
            body = {
                **generate(IDS),
                "bootstrap_host": "127.0.0.1",
                "bootstrap_port": port,
                "bootstrap_room": 3,
            }
            reply = await servers.call(servers.decode.url + "/generate", body)
        return reply, await servers.metrics(servers.decode)

    reply, metrics = run(scenario)
    assert reply.status == 500 and reply.first_event_s < 1
    assert reply.body["message"].startswith("Decode handshake failed for request rank=0")
    assert reply.body["message"].endswith(
        "KVTransferError(bootstrap_room=3): Could not fetch prefill parallel info from bootstrap_addr: "
        f"127.0.0.1:{reply.body['message'].rsplit(':', 1)[1]}"
    )
    assert sample(metrics, "sglang:num_bootstrap_failed_reqs_total") == 1


def test_a_decode_side_that_gives_the_room_up_fails_the_prefills_transfer() -> None:
    async def scenario(servers: Pair) -> tuple[Reply, str]:
        body = {
            **generate(IDS, 4),
            "bootstrap_host": "127.0.0.1",
            "bootstrap_port": servers.bootstrap_port,
            "bootstrap_room": 11,
        }
        prefill = asyncio.ensure_future(servers.call(servers.prefill.url + "/generate", body))
        leaving = asyncio.ensure_future(servers.call(servers.decode.url + "/generate", body))
        await asyncio.sleep(0.2)
        leaving.cancel()  # the decode's client leaves while the KV is on its way
        return await prefill, await servers.metrics(servers.prefill)

    # A 500 ms transfer: the decode side is gone before it ends.
    prefill, metrics = run(scenario, prefill_flags=("--sim-kv-transfer-latency-ms", "500"), time_scale="1")
    assert prefill.status == 500
    assert prefill.body["message"].startswith("Prefill transfer failed for request rank=0 req.rid=")
    assert prefill.body["message"].endswith(
        "req.bootstrap_room=11 with exception KVTransferError(bootstrap_room=11): "
        "Failed due to an unknown reason from another rank"
    )
    assert sample(metrics, "sglang:num_transfer_failed_reqs_total") == 1
    assert "sglang:kv_transfer_latency_ms_count" not in metrics


# --- the server around it -------------------------------------------------------------------------------


def test_health_server_info_and_metrics_as_sglangs_pd_servers_give_them() -> None:
    async def scenario(servers: Pair) -> list[Any]:
        await servers.dispatch("/generate", generate(IDS, 3))
        seen = []
        for server in (servers.prefill, servers.decode):
            for path in ("/health", "/health_generate"):
                async with servers.client.get(server.url + path) as response:
                    seen.append(response.status)
            async with servers.client.get(server.url + "/server_info") as response:
                seen.append(await response.json())
            seen.append(await servers.metrics(server))
        async with servers.client.get(f"http://127.0.0.1:{servers.bootstrap_port}/health") as response:
            seen.append((response.status, await response.text()))
        return seen

    seen = run(scenario)
    prefill, decode = seen[:4], seen[4:8]
    for (health, health_generate, info, metrics), role in ((prefill, "prefill"), (decode, "decode")):
        assert health == health_generate == 200
        assert info["disaggregation_mode"] == role
        assert info["sim"]["disaggregation"]["mode"] == role
        for gauge in (
            "sglang:num_prefill_bootstrap_queue_reqs",
            "sglang:num_prefill_inflight_queue_reqs",
            "sglang:num_decode_prealloc_queue_reqs",
            "sglang:num_decode_transfer_queue_reqs",
        ):
            assert sample(metrics, f'{gauge}{{engine_type="{role}"') == 0
        assert f'sglang:num_requests_total{{engine_type="{role}"' in metrics
        assert ("sglang:kv_transfer_latency_ms_count" in metrics) == (role == "prefill")
    assert decode[2]["disable_radix_cache"] is True
    assert prefill[2]["sim"]["disaggregation"]["kv_bytes_per_token"] == 131072


def test_the_fields_the_router_adds_are_accepted_and_an_http2_probe_gets_a_400() -> None:
    router_defaults = {
        "model": None,
        "return_text_in_logprobs": False,
        "log_metrics": True,
        "return_hidden_states": False,
        "background": False,
        "no_logs": False,
        "return_bytes": False,
        "return_entropy": False,
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": None,
        "bootstrap_room": 5,
    }

    async def scenario(servers: Pair) -> tuple[Reply, bytes]:
        plain = await servers.call(servers.plain.url + "/generate", {**generate(IDS, 2), **router_defaults})
        host, port = servers.plain.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        answer = await asyncio.wait_for(reader.read(), 5)  # to the end: the server closes
        writer.close()
        return plain, answer

    plain, answer = run(scenario)
    assert plain.status == 200 and len(plain.body["output_ids"]) == 2
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_the_kv_size_comes_from_the_flag_the_model_directory_or_the_profile(tmp_path: Path) -> None:
    def prefill(*flags: str) -> int:
        parser = argparse.ArgumentParser()
        configure(parser)
        args = parser.parse_args(["--disaggregation-mode", "prefill", *flags])
        transfer = resolve(args).disaggregation
        assert transfer is not None and transfer.transfer is not None
        return transfer.transfer.bytes_per_token

    gpt2 = {"n_layer": 2, "n_head": 4, "n_embd": 128, "torch_dtype": "float32"}
    (tmp_path / "config.json").write_text(json.dumps(gpt2))
    mla = tmp_path / "mla"
    mla.mkdir()
    (mla / "config.json").write_text(
        json.dumps(
            {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "hidden_size": 7168}
        )
    )
    assert read_checkpoint(str(tmp_path)).kv_elements_per_token == 2 * 2 * 4 * 32
    # --dtype auto serves a float32 checkpoint in 2-byte precision; --kv-cache-dtype fp8 halves it.
    assert prefill("--model-path", str(tmp_path)) == 1024
    assert prefill("--model-path", str(tmp_path), "--kv-cache-dtype", "fp8_e4m3") == 512
    assert prefill("--model-path", str(tmp_path), "--dtype", "float32") == 2048
    assert prefill("--model-path", str(mla)) == 61 * 576 * 2
    assert prefill("--model-path", "any/model") == 131072  # the generic profile's
    assert prefill("--model-path", str(tmp_path), "--sim-kv-bytes-per-token", "77") == 77
    profile = tmp_path / "bare.yaml"
    generic = Path(__file__).parents[2] / "bench/fairbench/sim/profiles/generic.yaml"
    profile.write_text(generic.read_text().replace("kv_bytes_per_token:", "# kv_bytes_per_token:"))
    with pytest.raises(ConfigError, match="--sim-kv-bytes-per-token"):
        prefill("--model-path", "any/model", "--sim-profile", str(profile))
    with pytest.raises(ConfigError, match="Prefill server does not support 'fake'"):
        prefill("--model-path", "any/model", "--disaggregation-transfer-backend", "fake")


# --- the real router -----------------------------------------------------------------------------------


def router_python() -> str:
    """An interpreter that has ``sglang_router``: ``FAIRBENCH_ROUTER_PYTHON``, else this one."""
    python = os.environ.get("FAIRBENCH_ROUTER_PYTHON", sys.executable)
    found = subprocess.run([python, "-c", "import sglang_router"], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.skip(f"sglang_router is not importable by {python} (set FAIRBENCH_ROUTER_PYTHON)")
    return python


@contextmanager
def running_router(log: Path, prefill: str, bootstrap_port: int, decode: str) -> Iterator[str]:
    port = free_port()
    command = [
        router_python(),
        *("-m", "sglang_router.launch_router", "--pd-disaggregation"),
        *("--prefill", prefill, str(bootstrap_port), "--decode", decode),
        *("--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port())),
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def ready(client: aiohttp.ClientSession, url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            async with client.get(url + "/readiness") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        assert time.monotonic() < deadline, f"the router was not ready within {timeout} s"
        await asyncio.sleep(0.1)


async def events(client: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[Any]:
    async with client.post(url, json=body) as response:
        assert response.status == 200, await response.text()
        text = await response.text()
    return [
        payload if payload == "[DONE]" else json.loads(payload)
        for payload in (line[6:] for line in text.splitlines() if line.startswith("data: "))
    ]


def test_the_real_sglang_router_in_front_of_a_prefill_and_a_decode_simulator(tmp_path: Path) -> None:
    bootstrap_port = free_port()
    flags = ("--model-path", "sim/test-model", "--sim-time-scale", "0.01")
    prefill_flags = (*flags, "--disaggregation-mode", "prefill")
    prefill_flags += ("--disaggregation-bootstrap-port", str(bootstrap_port))
    with (
        running_sims(tmp_path, prefill_flags, (*flags, "--disaggregation-mode", "decode"), flags) as sims,
        running_router(tmp_path / "router.log", sims[0].url, bootstrap_port, sims[1].url) as router,
    ):

        async def scenario() -> None:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
                await ready(client, router)
                for path, body in (
                    # The router's CompletionRequest takes text prompts only (token ids are a 422).
                    ("/v1/completions", completion("tell me about the sea", 5, stream=True)),
                    ("/generate", generate("add 20 and 22", 5, stream=True)),
                    ("/v1/chat/completions", chat("what is 1 + 2", 5, stream=True)),
                ):
                    routed = await events(client, router + path, body)
                    plain = await events(client, sims[2].url + path, body)
                    assert stable(routed) == stable(plain), path
                async with client.post(router + "/generate", json=generate(IDS, 3)) as response:
                    whole = await response.json()
                async with client.post(sims[2].url + "/generate", json=generate(IDS, 3)) as response:
                    assert stable(whole) == stable(await response.json())

        asyncio.run(scenario())
        for sim in sims:
            assert "Traceback" not in sim.log_text(), sim.log_text()
