"""``fairbench sim``: serve the simulator, or with ``--sim-predict`` print what a sweep would measure."""

from __future__ import annotations

import argparse
import signal

from fairbench.cli import interruptible
from fairbench.cli.usage import UsageError
from fairbench.sim.args import ConfigError, SimConfig, add_sglang_arguments, add_sim_arguments, resolve
from fairbench.sim.predict import format_sweep, predict_sweep
from fairbench.sim.server import serve_forever

DESCRIPTION = (
    "Serve an SGLang-compatible HTTP server without a GPU, for trying fairbench and for its tests: it takes "
    "SGLang's launch flags, answers SGLang's endpoints (/generate, /v1/completions, /v1/chat/completions, "
    "/health_generate, /server_info, /metrics, ...) and times each answer with a performance model of the "
    "parallel layout its flags describe. It serves until stopped (Ctrl-C). With --sim-predict it prints "
    "what a sweep of it would measure instead, and exits."
)
EPILOG = """\
examples:
  fairbench sim --model-path moonshotai/Kimi-K2.6 --tp-size 8 \\
      --sim-profile kimi-k2.6-8xpro6000 --port 30000
  fairbench sim --model-path moonshotai/Kimi-K2.6 --tp-size 8 --ep-size 4 \\
      --sim-profile kimi-k2.6-8xpro6000 --sim-predict 256,128
  # a prefill and a decode server for sglang-router --pd-disaggregation
  #   --prefill http://HOST:30000 8998 --decode http://HOST:30001
  fairbench sim --model-path M --disaggregation-mode prefill --port 30000
  fairbench sim --model-path M --disaggregation-mode decode --port 30001

How closely it answers as SGLang does, and what differs: docs/sim-conformance.md.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    # SGLang's whole flag table would make a usage line of hundreds of lines.
    parser.usage = "%(prog)s --model-path MODEL [SGLang's launch flags] [simulator options]"
    add_sglang_arguments(parser)
    add_sim_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        config = resolve(args)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if config.predict is not None:
        input_len, output_len = config.predict
        print(format_sweep(config, input_len, output_len, predict_sweep(config, input_len, output_len)))
        return 0
    return _serve(config)


def _serve(config: SimConfig) -> int:
    # Ctrl-C is held back while the event loop is built: one in the middle leaves half a loop,
    # whose clean-up then fails with a traceback. Released once the loop runs, it interrupts as anywhere else.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return interruptible.run(_serve_released(config))
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


async def _serve_released(config: SimConfig) -> int:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    return await serve_forever(config)
