"""Writes a report: the plots first, then report.md and report.html that show them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fairbench.report.blocks import Block
from fairbench.report.differences import config_differences, run_differences
from fairbench.report.document import comparison_blocks, run_blocks
from fairbench.report.formatting import labeller
from fairbench.report.html import render_html
from fairbench.report.load import Run
from fairbench.report.markdown import render_markdown
from fairbench.report.nccl import nccl_blocks
from fairbench.report.plots import LINE_STYLES, Line, color_of, render_plots
from fairbench.report.summary import Headline, headline
from fairbench.report.verdict import campaign_slo

PLOTS_DIR = "plots"


def _lines(runs: Sequence[Run], headlines: Sequence[Sequence[Headline]]) -> list[Line]:
    """One plot line per config (per host, where a run compares hosts) and run: colour by config, line
    style by host and run."""
    configs = list(dict.fromkeys(config for run in runs for config in run.campaign["configs"]))
    name = labeller(runs)

    def host_of(line: Headline) -> str:
        """The host a line's label names; "" where it names none (a config merged over its hosts)."""
        return line.result.host if name(line.result) != line.result.name else ""

    hosts = list(dict.fromkeys(host_of(line) for run_lines in headlines for line in run_lines))
    lines = []
    for run_index, (run, run_lines) in enumerate(zip(runs, headlines, strict=True)):
        for line in run_lines:
            result = line.result
            label = name(result)
            style_index = run_index * len(hosts) + hosts.index(host_of(line))
            lines.append(
                Line(
                    label=label if len(runs) == 1 else f"{label} ({run.run_id})",
                    color=color_of(result.name, configs),
                    style=LINE_STYLES[style_index % len(LINE_STYLES)],
                    levels=line.levels,
                    gpus=line.gpus,
                )
            )
    return lines


def headlines(runs: Sequence[Run]) -> list[list[Headline]]:
    """Each run's configs' headlines (``Run.configs``)."""
    return [[headline(config) for config in run.configs] for run in runs]


def report_blocks(
    runs: Sequence[Run], lines: Sequence[Sequence[Headline]], plots: Sequence[Path]
) -> tuple[str, list[Block]]:
    """The title and blocks of one run's report, or of run B against run A; ``plots`` relative to it."""
    if len(runs) == 1:
        (run,) = runs
        blocks = run_blocks(run, lines[0], config_differences(run), plots) + nccl_blocks(run)
        return f"{run.name}: run {run.run_id}", blocks
    run_a, run_b = runs
    blocks = comparison_blocks(run_a, run_b, (lines[0], lines[1]), run_differences(run_a, run_b), plots)
    blocks += [block for run in runs for block in nccl_blocks(run, name_run=True)]
    return f"{run_b.name}: run {run_b.run_id} against run {run_a.run_id}", blocks


def write_report(runs: Sequence[Run], out_dir: Path) -> list[Path]:
    """report.md, report.html and plots/*.png of one run, or of run B against run A; returns their paths."""
    lines = headlines(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    # The objectives of each run, each once (two runs of one campaign usually share them).
    slo = list(dict.fromkeys(target for run in runs for target in campaign_slo(run.campaign)[0]))
    plots = render_plots(_lines(runs, lines), out_dir / PLOTS_DIR, slo)
    title, blocks = report_blocks(runs, lines, [plot.relative_to(out_dir) for plot in plots])
    markdown_path = out_dir / "report.md"
    html_path = out_dir / "report.html"
    markdown_path.write_text(render_markdown(blocks), encoding="utf-8")
    html_path.write_text(render_html(blocks, title, out_dir), encoding="utf-8")
    return [markdown_path, html_path, *plots]
