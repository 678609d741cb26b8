"""The command line: flags to a ServerConfig, and serving until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence

from tests.support.sse_server.config import ServerConfig
from tests.support.sse_server.faults import FAULT_KINDS, FaultRule
from tests.support.sse_server.server import SSEServer


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.sse_server",
        description="SGLang-compatible streaming test server with timing and fault knobs.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000, help="0 picks a free port (printed when ready)")
    add("--first-token-ms", type=float, default=0.0, help="dispatch to first content chunk")
    add("--chunk-gap-ms", type=float, default=0.0, help="between content chunks")
    add(
        "--tokens-per-chunk",
        "--stream-interval",
        "--num-continuous-decode-steps",
        type=int,
        default=1,
        help="tokens per chunk after the first (which carries one)",
    )
    add("--output-len-override", type=int, default=None, help="send this many tokens, whatever was asked")
    add("--eos-at", type=int, default=None, help="stop after N tokens unless the request sets ignore_eos")
    add(
        "--fault",
        action="append",
        default=[],
        metavar="KIND[:every=N][:fraction=F][:after=K][:status=S][:message=TEXT]",
        help=f"inject a fault; KIND is one of {', '.join(FAULT_KINDS)}; repeatable",
    )
    add("--seed", type=int, default=0, help="for fault fractions")
    add("--api-key", default=None, help="require 'Authorization: Bearer KEY' on the API routes")
    add("--keep-alive-timeout", type=float, default=5.0, help="close idle connections after S seconds")
    add("--model-path", default="fairbench/test-model")
    add("--no-chunk-times", action="store_true", help="record only the first chunk's send time")
    add("--send-times-file", default=None, help="write the send-time records here (JSON) at exit")
    add("--cpu", type=int, default=None, help="pin the server to this CPU")
    add(
        "--reuse-port",
        action="store_true",
        help="bind with SO_REUSEPORT: start several servers on one --port and the kernel spreads connections",
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> ServerConfig:
    parser = build_arg_parser()
    ns = parser.parse_args(argv)
    try:
        return ServerConfig(
            host=ns.host,
            port=ns.port,
            first_token_ms=ns.first_token_ms,
            chunk_gap_ms=ns.chunk_gap_ms,
            tokens_per_chunk=ns.tokens_per_chunk,
            output_len_override=ns.output_len_override,
            eos_at=ns.eos_at,
            faults=tuple(FaultRule.parse(spec) for spec in ns.fault),
            seed=ns.seed,
            api_key=ns.api_key,
            keep_alive_timeout_s=ns.keep_alive_timeout,
            model_path=ns.model_path,
            record_chunk_times=not ns.no_chunk_times,
            send_times_file=ns.send_times_file,
            cpu=ns.cpu,
            reuse_port=ns.reuse_port,
        )
    except ValueError as error:
        parser.error(str(error))


async def serve(config: ServerConfig) -> None:
    """Run until SIGTERM or SIGINT; print the address once listening."""
    server = SSEServer(config)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"listening on {server.host}:{server.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
        if config.send_times_file:
            server.write_send_times(config.send_times_file)


def main(argv: Sequence[str] | None = None) -> None:
    config = parse_args(argv)
    if config.cpu is not None:
        os.sched_setaffinity(0, {config.cpu})
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config))
