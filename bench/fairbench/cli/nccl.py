"""``fairbench nccl [CAMPAIGN]``: an all-reduce sweep across the host's GPUs, per NCCL variant (nccl.json).

CAMPAIGN is a campaign file or a run's campaign.json: its workload's concurrency levels give the decode
message sizes and its configs' ``NCCL_*`` environments the variants (``fairbench.nccl.runner`` explains both).
The workers run under ``--python``, which must have torch: on a GPU host, the SGLang venv's Python.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import load_campaign
from fairbench.cli.sweep import bounded, concurrency_list
from fairbench.cli.usage import UsageError
from fairbench.measure import bounds
from fairbench.nccl.runner import (
    DEFAULT_CONCURRENCY,
    RESULT_FILE,
    WORKER_SCRIPT,
    CampaignInputs,
    NcclError,
    Runner,
    SweepSpec,
    Variant,
    add_variants,
    campaign_variants,
    count_gpus,
    hidden_size_from_config,
    message_sizes,
    parse_variant,
    write_result,
)

DESCRIPTION = (
    "Measure the interconnect on its own, on a GPU host: an all-reduce sweep across this host's GPUs with "
    "torch.distributed, one process per GPU, eager and as CUDA graphs. It runs once with NCCL's defaults "
    "and once for each distinct set of NCCL_* variables among the campaign's configs (and each --variant), "
    "at decode-sized messages (hidden size x 2 bytes x each concurrency level) and prefill-sized ones up to "
    f"64 MiB. It prints the median latency and bus bandwidth of each and writes OUT/{RESULT_FILE}, which the "
    "report compares with the defaults; the exit status is 1 when a variant failed. The workers need torch: "
    "--python names the Python that has it."
)
EPILOG = """\
examples:
  fairbench nccl campaigns/kimi-k2.6-pcie.yml --hidden-size 7168 --dry-run
  fairbench nccl campaigns/kimi-k2.6-pcie.yml --hidden-size 7168 --out results/nccl \\
      --python /opt/sglang/venv/bin/python

In a campaign run, playbooks/nccl.yml runs it on every GPU host (docs/running.md).
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.add_argument(
        "campaign",
        nargs="?",
        metavar="CAMPAIGN",
        help="a campaign file (YAML) or a run's campaign.json: its levels and NCCL variables",
    )
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument(
        "--hidden-size", type=bounded(bounds.HIDDEN_SIZE), help="the model's hidden size, e.g. 7168"
    )
    model.add_argument(
        "--model-config", type=Path, help="the model's Hugging Face config.json, for its hidden_size"
    )
    parser.add_argument(
        "--concurrency",
        type=concurrency_list,
        help="decode batch sizes, e.g. 1,8,64 (default: the campaign's levels, else 1,2,4,...,256)",
    )
    parser.add_argument(
        "--gpus", type=bounded(bounds.GPUS), help="ranks, one per GPU (default: every visible GPU)"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=KEY=VALUE,...",
        help="one more set of NCCL variables to measure, named, e.g. p2p-off=NCCL_P2P_DISABLE=1 (repeatable)",
    )
    parser.add_argument(
        "--out", type=_out_dir, help=f"the directory to write {RESULT_FILE} into (required unless --dry-run)"
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the Python the workers run under, one with torch (default: this one)",
    )
    collectives = bounded(bounds.COLLECTIVES)
    parser.add_argument(
        "--iters", type=collectives, default=50, help="timed all-reduces per size (default %(default)s)"
    )
    parser.add_argument(
        "--warmup", type=collectives, default=10, help="untimed all-reduces per size (default %(default)s)"
    )
    parser.add_argument(
        "--graph-ops",
        type=collectives,
        default=10,
        help="all-reduces per captured CUDA graph (default %(default)s)",
    )
    parser.add_argument("--no-graph", action="store_true", help="eager launches only, no CUDA graphs")
    parser.add_argument(
        "--timeout",
        type=bounded(bounds.READ_TIMEOUT_S),
        default=300.0,
        help="seconds one variant may take (default %(default)g)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the variants and sizes, and run nothing"
    )
    # The worker script: tests put a fake in (one that speaks the same protocol without torch).
    parser.add_argument("--worker", type=Path, default=WORKER_SCRIPT, help=argparse.SUPPRESS)


def _out_dir(text: str) -> Path:
    if not text:
        raise argparse.ArgumentTypeError("an empty path would write into the current directory: name one")
    return Path(text)


def _campaign_inputs(path: str) -> CampaignInputs:
    try:
        if path.endswith(".json"):
            data: Any = json.loads(Path(path).read_text(encoding="utf-8"))
        else:
            data = load_campaign(path).to_json()
    except CampaignError as exc:
        raise UsageError("\n".join(exc.messages)) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON: {exc}") from None
    return CampaignInputs.from_json(data, path)


def spec_from_args(args: argparse.Namespace, gpus: int) -> SweepSpec:
    campaign = _campaign_inputs(args.campaign) if args.campaign else None
    hidden_size = args.hidden_size or _config_hidden_size(args.model_config)
    concurrency = args.concurrency or (campaign.concurrency if campaign else DEFAULT_CONCURRENCY)
    variants: list[Variant] = (
        campaign_variants(campaign.config_envs) if campaign else [Variant("default", {}, ())]
    )
    variants = add_variants(variants, [parse_variant(text) for text in args.variant])
    return SweepSpec(
        hidden_size=hidden_size,
        sizes=tuple(message_sizes(hidden_size, concurrency)),
        variants=tuple(variants),
        gpus=gpus,
        campaign=campaign.name if campaign else None,
        iters=args.iters,
        warmup=args.warmup,
        graph=not args.no_graph,
        graph_ops=args.graph_ops,
        timeout_s=args.timeout,
    )


def _config_hidden_size(path: Path) -> int:
    try:
        hidden_size = hidden_size_from_config(path)
    except NcclError as exc:
        raise NcclError(f"--model-config: {exc}") from None
    if (problem := bounds.HIDDEN_SIZE.problem(hidden_size)) is not None:
        raise NcclError(f"--model-config: {path}: hidden_size {problem}")
    return hidden_size


def plan_lines(spec: SweepSpec) -> list[str]:
    gpus = f"{spec.gpus} GPUs" if spec.gpus else "every visible GPU"
    lines = [
        f"all-reduce of bf16 messages, hidden size {spec.hidden_size}, one process per GPU ({gpus}); "
        f"{spec.warmup} warmup + {spec.iters} timed per size"
        + (f", and {spec.iters} CUDA graph replays of {spec.graph_ops}" if spec.graph else ", eager only")
    ]
    for variant in spec.variants:
        env = " ".join(f"{key}={value}" for key, value in variant.launch_env().items())
        used_by = f" (configs: {', '.join(variant.configs)})" if variant.configs else ""
        lines.append(f"variant {variant.name}{used_by}: {env}")
    lines += [f"size {size.bytes:>12,} B  {size.scale:<7}  {size.label()}" for size in spec.sizes]
    return lines


def summary_lines(document: dict[str, Any]) -> list[str]:
    """Per variant and size: median latency, eager and graph, and bus bandwidth."""
    rows = [
        ["variant", "bytes", "size", "eager p50 us", "graph p50 us", "eager busbw GB/s", "graph busbw GB/s"]
    ]
    for variant in document["variants"]:
        for size in variant["sizes"]:
            eager, graph = size["eager"], size["graph"]
            rows.append(
                [
                    variant["name"],
                    f"{size['bytes']:,}",
                    size["scale"],
                    f"{eager['median_us']:,.1f}",
                    f"{graph['median_us']:,.1f}" if graph else "-",
                    f"{eager['busbw_gbps']:,.1f}",
                    f"{graph['busbw_gbps']:,.1f}" if graph else "-",
                ]
            )
    widths = [max(len(row[index]) for row in rows) for index in range(len(rows[0]))]
    return ["  ".join(text.rjust(width) for text, width in zip(row, widths, strict=True)) for row in rows]


def run(args: argparse.Namespace) -> int:
    if args.out is None and not args.dry_run:
        raise UsageError("--out: required (the directory nccl.json is written to), unless --dry-run")
    try:
        if args.dry_run:
            print("\n".join(plan_lines(spec_from_args(args, args.gpus or 0))))
            return 0
        gpus = args.gpus or count_gpus(args.python, args.worker)
        if gpus < 1:
            raise NcclError(f"--python {args.python}: torch sees no GPU")
        spec = spec_from_args(args, gpus)
    except NcclError as exc:
        raise UsageError(str(exc)) from None
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # found now, not after the sweep
        raise UsageError(f"--out: cannot create {args.out}: {exc.strerror or exc}") from None
    print("\n".join(plan_lines(spec)), file=sys.stderr)
    document = Runner(spec, args.python, args.worker).run()
    print("\n".join(summary_lines(document)))
    failed = [variant for variant in document["variants"] if variant["error"]]
    for variant in failed:
        print(f"fairbench nccl: error: {variant['error']}", file=sys.stderr)
    try:
        path = write_result(document, args.out)
    except OSError as exc:
        print(
            f"fairbench nccl: error: --out: cannot write {RESULT_FILE}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    print(f"results: {path}")
    return 1 if failed else 0
