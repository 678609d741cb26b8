"""``fairbench trace``: check a request trace and say what it holds, or write a sample one."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from fairbench.cli.sweep import bounded
from fairbench.cli.usage import UsageError
from fairbench.measure import bounds
from fairbench.measure.trace_samples import write_sample
from fairbench.measure.traces import TraceError, TraceRequest, load_trace, reusable_tokens, trace_format

DESCRIPTION = (
    "Check a request trace as a replay reads it (Mooncake's JSON Lines, .jsonl, or an Azure LLM inference "
    "CSV, .csv) and print what it holds: requests, duration, arrival rate, lengths and the prompt tokens an "
    "unbounded prefix cache could serve. Or write a sample trace in either format, from a seed. A trace "
    "that breaks a rule of its format is refused in one line naming the file, the line and the rule."
)
EPILOG = """\
examples:
  fairbench trace check traces/mooncake_trace.jsonl
  fairbench trace sample /tmp/sample.jsonl --requests 1000 --rate 20
  fairbench trace sample /tmp/sample.csv --requests 1000 --rate 20 --seed 2

Where the public traces are, and their formats: docs/campaign.md.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="check a trace and print what it holds")
    check.add_argument("file", type=Path, help="a .jsonl (Mooncake) or .csv (Azure) trace")
    sample = actions.add_parser("sample", help="write a sample trace")
    sample.add_argument("file", type=Path, help="where: its suffix, .jsonl or .csv, names the format")
    sample.add_argument(
        "--requests", type=bounded(bounds.REQUESTS), default=1000, help="requests (default %(default)s)"
    )
    sample.add_argument(
        "--rate",
        type=bounded(bounds.REQUEST_RATE),
        default=10.0,
        help="Poisson arrivals, requests per second (default %(default)g)",
    )
    sample.add_argument("--seed", type=bounded(bounds.SEED), default=1, help="(default %(default)s)")


def summary_lines(path: Path, requests: list[TraceRequest]) -> list[str]:
    """What a trace holds, one fact per line."""
    duration_s = requests[-1].arrival_ms / 1000
    inputs = [request.input_len for request in requests]
    outputs = [request.output_len for request in requests]
    reusable = sum(reusable_tokens(requests))
    rate = f", {(len(requests) - 1) / duration_s:.2f} req/s" if duration_s > 0 else ""
    return [
        f"{path}: {trace_format(path)} trace, {len(requests):,} requests over {duration_s:,.1f} s{rate}",
        f"  input tokens: median {statistics.median(inputs):,.0f}, max {max(inputs):,}, "
        f"total {sum(inputs):,}",
        f"  output tokens: median {statistics.median(outputs):,.0f}, max {max(outputs):,}, "
        f"total {sum(outputs):,}",
        f"  prompt tokens an unbounded prefix cache could serve: {reusable:,} ({reusable / sum(inputs):.1%})",
    ]


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "sample":
            trace_format(args.file)
            write_sample(args.file, args.requests, args.rate, args.seed)
            print(args.file)
            return 0
        requests = load_trace(args.file)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{args.file}: cannot write: {exc.strerror or exc}") from None
    print("\n".join(summary_lines(args.file, requests)))
    return 0
