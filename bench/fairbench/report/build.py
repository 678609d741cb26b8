"""Writes a report: the plots first, then report.md and report.html that show them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fairbench.report.blocks import Block
from fairbench.report.differences import config_differences, run_differences
from fairbench.report.document import comparison_blocks, run_blocks
from fairbench.report.html import render_html
from fairbench.report.load import Run
from fairbench.report.markdown import render_markdown
from fairbench.report.nccl import nccl_blocks
from fairbench.report.plots import LINE_STYLES, Line, color_of, render_plots
from fairbench.report.summary import Headline, headline

PLOTS_DIR = "plots"


def _lines(runs: Sequence[Run], headlines: Sequence[Sequence[Headline]]) -> list[Line]:
    """One plot line per config, host and run: colour by config, line style by host and run."""
    configs = list(dict.fromkeys(name for run in runs for name in run.campaign["configs"]))
    hosts = list(dict.fromkeys(result.host for run in runs for result in run.results))
    lines = []
    for run_index, (run, run_lines) in enumerate(zip(runs, headlines, strict=True)):
        for line in run_lines:
            result = line.result
            label = result.name if len(hosts) == 1 else f"{result.name}@{result.host}"
            style_index = run_index * len(hosts) + hosts.index(result.host)
            lines.append(
                Line(
                    label=label if len(runs) == 1 else f"{label} ({run.run_id})",
                    color=color_of(result.name, configs),
                    style=LINE_STYLES[style_index % len(LINE_STYLES)],
                    levels=line.levels,
                )
            )
    return lines


def write_report(runs: Sequence[Run], out_dir: Path) -> list[Path]:
    """report.md, report.html and plots/*.png of one run, or of run B against run A; returns their paths."""
    headlines = [[headline(result) for result in run.results] for run in runs]
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = render_plots(_lines(runs, headlines), out_dir / PLOTS_DIR)
    relative_plots = [plot.relative_to(out_dir) for plot in plots]
    blocks: list[Block]
    if len(runs) == 1:
        (run,) = runs
        blocks = run_blocks(run, headlines[0], config_differences(run), relative_plots)
        blocks += nccl_blocks(run)
        title = f"{run.name}: run {run.run_id}"
    else:
        run_a, run_b = runs
        pairs = run_differences(run_a, run_b)
        blocks = comparison_blocks(run_a, run_b, (headlines[0], headlines[1]), pairs, relative_plots)
        blocks += [block for run in runs for block in nccl_blocks(run, name_run=True)]
        title = f"{run_b.name}: run {run_b.run_id} against run {run_a.run_id}"
    markdown_path = out_dir / "report.md"
    html_path = out_dir / "report.html"
    markdown_path.write_text(render_markdown(blocks), encoding="utf-8")
    html_path.write_text(render_html(blocks, title, out_dir), encoding="utf-8")
    return [markdown_path, html_path, *plots]
