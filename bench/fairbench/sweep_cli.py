"""``fairbench sweep``: a concurrency sweep against one running server."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from fairbench.cli import UsageError
from fairbench.client import APIS, ServerUnreachable
from fairbench.energy import GpuSelectionError
from fairbench.progress import Progress
from fairbench.results import ResultsDir, ResultsError
from fairbench.sweep import Sweep, SweepSpec
from fairbench.vocabulary import VocabularyError
from fairbench.workload import WorkloadError, WorkloadSpec, parse_count


def _int_list(text: str, minimum: int, values_are: str, item: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be a comma-separated list of integers") from None
    if not values or any(value < minimum for value in values):
        raise argparse.ArgumentTypeError(f"{text!r} must list {values_are}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} lists a {item} twice")
    return values


def concurrency_list(text: str) -> list[int]:
    """argparse type of a comma-separated list of concurrency levels (also ``fairbench nccl``'s)."""
    return _int_list(text, 1, "positive integers", "level")


def _gpu_list(text: str) -> list[int]:
    return _int_list(text, 0, "GPU indices (0 or more)", "GPU")


def _count(text: str) -> str:
    try:
        parse_count(text, 1)
    except WorkloadError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def positive(kind: type[int] | type[float]) -> Any:
    """argparse type of a positive ``kind`` (also ``fairbench nccl``'s)."""

    def check(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return value

    return check


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    parser.add_argument(
        "--api", choices=APIS, default="completions", help="generation API (default completions)"
    )
    parser.add_argument(
        "--model", help="model name for the OpenAI APIs (default: the server's, from /v1/models)"
    )
    parser.add_argument(
        "--api-key", default=os.environ.get("FAIRBENCH_API_KEY"), help="bearer token (or FAIRBENCH_API_KEY)"
    )
    parser.add_argument("--dataset", default="random-ids", help="random-ids, or a ShareGPT-style JSON file")
    parser.add_argument("--input-len", type=positive(int), required=True, help="input tokens per request")
    parser.add_argument("--output-len", type=positive(int), required=True, help="output tokens per request")
    parser.add_argument("--range-ratio", type=float, default=1.0, help="draw lengths from [ratio*len, len]")
    parser.add_argument("--concurrency", type=concurrency_list, required=True, help="levels, e.g. 1,2,4,8")
    parser.add_argument(
        "--prompts-per-level", type=_count, default="10x", help="N, or Nx for N times the level (min 16)"
    )
    parser.add_argument("--warmup", type=_count, default="2x", help="warmup requests: N or Nx (default 2x)")
    parser.add_argument(
        "--repeats", type=positive(int), default=1, help="measure every level this many times"
    )
    parser.add_argument("--seed", type=int, default=1, help="prompt seed (default 1)")
    parser.add_argument(
        "--vocab-size",
        type=positive(int),
        help="random token ids from [0, N) (default: the served model's vocabulary, from its files)",
    )
    parser.add_argument("--flush-cache", action="store_true", help="POST /flush_cache before each level")
    parser.add_argument(
        "--max-error-rate", type=float, default=0.5, help="stop a level when more requests fail (default 0.5)"
    )
    parser.add_argument("--gpus", type=positive(int), help="GPUs serving, for per-GPU throughput")
    energy = parser.add_mutually_exclusive_group()
    energy.add_argument(
        "--energy-gpus",
        type=_gpu_list,
        help="GPUs whose energy counts, by NVML index, e.g. 0,1 (default: every GPU NVML sees)",
    )
    energy.add_argument("--no-energy", action="store_true", help="do not sample GPU energy")
    parser.add_argument("--connect-timeout", type=positive(float), default=10.0, help="seconds (default 10)")
    parser.add_argument(
        "--read-timeout",
        type=positive(float),
        default=600.0,
        help="seconds without data before a stream fails",
    )
    parser.add_argument("--out", type=Path, required=True, help="results directory")
    parser.add_argument("--resume", action="store_true", help="skip the points already in --out")
    parser.add_argument(
        "--progress", choices=("auto", "bar", "lines"), default="auto", help="live bar or plain lines"
    )


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    try:
        workload = WorkloadSpec(
            input_len=args.input_len,
            output_len=args.output_len,
            dataset=args.dataset,
            range_ratio=args.range_ratio,
            seed=args.seed,
            as_text=args.api == "chat",
            vocab_size=args.vocab_size,
        )
    except WorkloadError as exc:
        raise UsageError(f"--{str(exc).replace('_', '-')}") from None
    if args.dataset != "random-ids" and not Path(args.dataset).is_file():
        raise UsageError(f"--dataset: {args.dataset} is not 'random-ids' nor a file")
    if not 0.0 <= args.max_error_rate <= 1.0:
        raise UsageError(f"--max-error-rate: {args.max_error_rate} must be between 0 and 1")
    if not args.url.startswith(("http://", "https://")):
        raise UsageError(f"--url: {args.url!r} must start with http:// or https://")
    return SweepSpec(
        url=args.url,
        workload=workload,
        concurrency=args.concurrency,
        api=args.api,
        prompts_per_level=args.prompts_per_level,
        warmup=args.warmup,
        repeats=args.repeats,
        flush_cache=args.flush_cache,
        max_error_rate=args.max_error_rate,
        model=args.model,
        api_key=args.api_key,
        gpus=args.gpus,
        connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
        energy=not args.no_energy,
        energy_gpus=args.energy_gpus,
    )


SUMMARY_COLUMNS = (
    ("C", "max_concurrency", "{:d}"),
    ("rep", "repeat", "{:d}"),
    ("ok", "completed", "{:d}"),
    ("failed", "failed", "{:d}"),
    ("out tok/s", "output_throughput", "{:,.1f}"),
    ("steady tok/s", "steady_output_throughput", "{:,.1f}"),
    ("TTFT p50 ms", "median_ttft_ms", "{:,.1f}"),
    ("TTFT p99 ms", "p99_ttft_ms", "{:,.1f}"),
    ("TPOT p50 ms", "median_tpot_ms", "{:,.2f}"),
    ("ITL p50 ms", "median_itl_ms", "{:,.2f}"),
    ("tok/s/user", "per_user_tps", "{:,.1f}"),
)
# Shown only when a point has GPU energy: a machine without GPUs gets no empty columns.
ENERGY_COLUMNS = (
    ("GPU W", "gpu_mean_power_w", "{:,.0f}"),
    ("tok/J", "output_tokens_per_j", "{:,.2f}"),
)


def summary_table(points: list[dict[str, Any]]) -> str:
    """Per-level summary, one row per point, columns right-aligned."""

    def cell(point: dict[str, Any], key: str, fmt: str) -> str:
        value = point.get(key)
        return "-" if value is None else fmt.format(value)

    columns: tuple[tuple[str, str, str], ...] = SUMMARY_COLUMNS
    if any("gpu_energy_j" in point for point in points):
        columns += ENERGY_COLUMNS
    rows = [[header for header, _, _ in columns]]
    rows += [[cell(point, key, fmt) for _, key, fmt in columns] for point in points]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.rjust(width) for text, width in zip(row, widths, strict=False)) for row in rows
    )


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    results = ResultsDir(args.out)
    live = {"auto": None, "bar": True, "lines": False}[args.progress]
    sweep = Sweep(spec, results, Progress(sys.stderr, live=live))
    try:
        asyncio.run(sweep.run(resume=args.resume))
    except (ResultsError, ServerUnreachable, VocabularyError) as exc:
        print(f"fairbench sweep: error: {exc}", file=sys.stderr)
        return 1
    except GpuSelectionError as exc:
        print(f"fairbench sweep: error: --energy-gpus: {exc}", file=sys.stderr)
        return 1
    points = results.points()
    print(summary_table(points))
    print(f"points:   {results.points_path}")
    print(f"requests: {results.requests_dir}/")
    return 0 if all(point["completed"] for point in points) else 1
