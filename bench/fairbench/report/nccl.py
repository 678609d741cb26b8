"""The report's NCCL section: each host's nccl.json (``fairbench nccl``), every variant against ``default``.

A variant is judged at both scales, because they can disagree: on 2x H200 (NVLink, NCCL 2.28.9),
``NCCL_PROTO=LL`` with 8-16 channels kept CUDA-graph decode-sized latency within 10 % of the defaults but cut
64 MB bus bandwidth from 271 to 77 GB/s; eager launches, ~60 us each there, hid the decode-sized differences.

- decode scale: the median latency of each decode-sized message (one token per running request),
  variant / default, summarised as the geometric mean of the ratios over those sizes;
- prefill scale: the bus bandwidth of each prefill-sized message, variant / default, summarised the same
  way, beside the bus bandwidth of the largest message.

Both are shown for eager launches and for CUDA-graph replays (decode usually runs as CUDA graphs in
SGLang, prefill eagerly or in piecewise graphs), since a setting can help in one and not the other.

What of a nccl.json is not well-formed is left out here and named on the first screen (load.py); a figure
that is not finite is shown as such, and a comparison it enters says it is not compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

from fairbench.nccl.runner import DECODE, DEFAULT_VARIANT, PREFILL
from fairbench.report.blocks import Alert, Block, BulletList, Heading, Paragraph, Preformatted, Table
from fairbench.report.figures import non_finite_text
from fairbench.report.load import Run
from fairbench.report.nccl_file import NCCL_MODES as MODES

NOT_COMPARED = "not compared (NaN or inf)"
BOTH_SCALES = (
    "Judge an NCCL variant at both scales: lower latency at decode-sized messages can come with far lower "
    "bus bandwidth at prefill-sized ones, and a gain in eager launches can vanish in CUDA graphs."
)

Figure = Callable[[dict[str, Any]], float]


def size_text(size_bytes: int) -> str:
    """``14 KiB``, ``3.5 MiB``: binary units, at most one decimal."""
    value, unit = float(size_bytes), "B"
    for next_unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, next_unit
    return f"{value:.1f} {unit}".replace(".0 ", " ")


def _number(value: float) -> str:
    return f"{value:,.1f}" if math.isfinite(value) else non_finite_text(value)


def _scale_label(size: dict[str, Any]) -> str:
    if size["scale"] == DECODE:
        return f"decode C={size['tokens']}"
    return f"prefill {size['tokens']} tokens" if size.get("tokens") else "prefill (cap)"


def _latency(mode: str) -> Figure:
    return lambda size: float(size[mode]["median_us"])


def _busbw(mode: str) -> Figure:
    return lambda size: float(size[mode]["busbw_gbps"])


def geometric_ratio(pairs: Sequence[tuple[float, float]]) -> float | None:
    """The geometric mean of a / b over ``pairs`` of positive figures; None for none, NaN (not compared)
    when a figure is not finite."""
    if not pairs:
        return None
    if not all(math.isfinite(figure) for pair in pairs for figure in pair):
        return math.nan
    # By logarithms, so that no ratio of extreme figures overflows or underflows to 0 on the way.
    mean = math.fsum(math.log(a) - math.log(b) for a, b in pairs) / len(pairs)
    try:
        return math.exp(mean)
    except OverflowError:
        return math.inf


def ratio(
    variant: dict[str, Any], default: dict[str, Any], scale: str, figure: Figure, mode: str
) -> float | None:
    """``geometric_ratio`` over the sizes of ``scale`` of figure(variant) and figure(default)."""
    base = {size["bytes"]: size for size in default["sizes"] if size["scale"] == scale and size.get(mode)}
    return geometric_ratio(
        [
            (figure(size), figure(base[size["bytes"]]))
            for size in variant["sizes"]
            if size["scale"] == scale and size.get(mode) and size["bytes"] in base
        ]
    )


def _compared(value: float | None) -> TypeGuard[float]:
    return value is not None and not math.isnan(value)


def _change(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{(value - 1) * 100:+.1f} %" if _compared(value) else NOT_COMPARED


def _changes(
    variant: dict[str, Any], default: dict[str, Any], scale: str, figure: Callable[[str], Figure]
) -> str:
    """``eager / graph`` changes against default, e.g. ``-5.1 % / -4.8 %``."""
    return " / ".join(_change(ratio(variant, default, scale, figure(mode), mode)) for mode in MODES)


def _largest(variant: dict[str, Any]) -> dict[str, Any] | None:
    return max(variant["sizes"], key=lambda size: size["bytes"], default=None)


def _env_text(variant: dict[str, Any]) -> str:
    return " ".join(f"`{key}={value}`" for key, value in variant["env"].items()) or "NCCL's defaults"


def _configs_text(variant: dict[str, Any]) -> str:
    return ", ".join(variant["configs"]) or "none of the campaign's (a reference)"


def _summary_table(variants: Sequence[dict[str, Any]], default: dict[str, Any] | None) -> Table:
    header = [
        "variant",
        "used by configs",
        "environment",
        "decode latency vs default (eager / graph)",
        "prefill bus bandwidth vs default (eager / graph)",
        "bus bandwidth at the largest size, GB/s (eager / graph)",
    ]
    rows = []
    for variant in variants:
        largest = _largest(variant)
        bandwidth = (
            " / ".join(_number(largest[mode]["busbw_gbps"]) if largest.get(mode) else "-" for mode in MODES)
            + f" at {size_text(largest['bytes'])}"
            if largest
            else "-"
        )
        compared = default is not None and variant is not default and not variant.get("error")
        rows.append(
            [
                f"**{variant['name']}**",
                _configs_text(variant),
                _env_text(variant),
                _changes(variant, default, DECODE, _latency) if compared and default else "-",
                _changes(variant, default, PREFILL, _busbw) if compared and default else "-",
                "failed" if variant.get("error") else bandwidth,
            ]
        )
    return Table(header, rows, [False, False, False, True, True, True])


def _trade_offs(variants: Sequence[dict[str, Any]], default: dict[str, Any]) -> list[str]:
    """The variants better than default at one scale and worse at the other, in either launch mode."""
    items = []
    for variant in variants:
        if variant is default or variant.get("error"):
            continue
        for mode in MODES:
            latency = ratio(variant, default, DECODE, _latency(mode), mode)
            bandwidth = ratio(variant, default, PREFILL, _busbw(mode), mode)
            if not _compared(latency) or not _compared(bandwidth):
                continue
            decode_better, prefill_better = latency < 1, bandwidth > 1
            if decode_better != prefill_better:
                items.append(
                    f"**{variant['name']}** ({mode}): decode latency {_change(latency)}, prefill bus "
                    f"bandwidth {_change(bandwidth)} against default"
                )
    return items


def _variant_table(variant: dict[str, Any], default: dict[str, Any] | None) -> Table:
    base = {size["bytes"]: size for size in default["sizes"]} if default and default is not variant else {}
    header = [
        "size",
        "scale",
        "eager p50 us (p10-p90)",
        "graph p50 us (p10-p90)",
        "eager busbw GB/s",
        "graph busbw GB/s",
        "vs default (eager / graph)",
    ]
    rows = []
    for size in variant["sizes"]:
        cells = [size_text(size["bytes"]), _scale_label(size)]
        for mode in MODES:
            timing = size.get(mode)
            cells.append(
                f"{_number(timing['median_us'])} ({_number(timing['p10_us'])}-{_number(timing['p90_us'])})"
                if timing
                else "-"
            )
        cells += [_number(size[mode]["busbw_gbps"]) if size.get(mode) else "-" for mode in MODES]
        reference = base.get(size["bytes"])
        # The figure that matters at the size's scale: latency at decode sizes, bus bandwidth at prefill.
        figure = _latency if size["scale"] == DECODE else _busbw
        what = "latency" if size["scale"] == DECODE else "busbw"
        changes = [
            _change(geometric_ratio([(figure(mode)(size), figure(mode)(reference))]))
            if reference and size.get(mode) and reference.get(mode)
            else "-"
            for mode in MODES
        ]
        cells.append(f"{what} {' / '.join(changes)}" if reference else "-")
        rows.append(cells)
    return Table(header, rows, [False, False, True, True, True, True, True])


def host_blocks(title: str, data: dict[str, Any], heading_level: int) -> list[Block]:
    variants: list[dict[str, Any]] = data["variants"]
    default = next(
        (variant for variant in variants if variant["name"] == DEFAULT_VARIANT and not variant.get("error")),
        None,
    )
    graph = f", and as CUDA graphs of {data['graph_ops']} all-reduces" if data.get("graph_ops") else ""
    blocks: list[Block] = [
        Heading(heading_level, title),
        Paragraph(
            f"{data.get('gpus')}x {data.get('device')}, torch {data.get('torch')}, NCCL {data.get('nccl')}. "
            f"One process per GPU; bf16 messages of hidden size {data.get('hidden_size')} x 2 bytes x "
            f"tokens; {data.get('iters')} timed all-reduces per size, eager{graph}. Latency: median "
            "(p10-p90) per all-reduce. Bus bandwidth = algbw x 2(n-1)/n for n GPUs, as nccl-tests define "
            "it (algbw = bytes / median time). `NCCL_NVLS_ENABLE=0` unless a variant sets it."
        ),
    ]
    trade_offs = _trade_offs(variants, default) if default else []
    blocks.append(Alert("warning" if trade_offs else "note", BOTH_SCALES, trade_offs))
    if default is None:
        blocks.append(Paragraph("No successful `default` variant: nothing to compare the variants with."))
    blocks.append(_summary_table(variants, default))
    for variant in variants:
        blocks += [
            Heading(heading_level + 1, f"Variant {variant['name']}"),
            BulletList([f"used by configs: {_configs_text(variant)}", f"environment: {_env_text(variant)}"]),
        ]
        if variant.get("error"):
            blocks += [Paragraph("The workers failed:"), Preformatted(str(variant["error"]))]
        else:
            blocks.append(_variant_table(variant, default))
    return blocks


def nccl_blocks(run: Run, *, name_run: bool = False, heading_level: int = 2) -> list[Block]:
    """The section for every host of ``run`` with a nccl.json (nothing when none has one); ``name_run``
    adds the run id to the headings, for a report of two runs."""
    suffix = f", run {run.run_id}" if name_run else ""
    return [
        block
        for host, data in run.nccl.items()
        for block in host_blocks(f"NCCL all-reduce on {host}{suffix}", data, heading_level)
    ]
