"""Writes a report: the plots first, then report.md and report.html that show them. A campaign of several
workloads gets one report per workload (``report.<workload>.md`` and ``.html``, plots under
``plots/<workload>/``) and report.md and report.html that give each workload's verdict and first screen,
linking to its report."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from fairbench.campaign.model import SINGLE_WORKLOAD
from fairbench.report.blocks import Alert, Block, BulletList, Heading, Paragraph
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
REPORT_STEM = "report"
VERDICT_HEADING = "Verdict"


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
        return run.title, blocks
    run_a, run_b = runs
    blocks = comparison_blocks(run_a, run_b, (lines[0], lines[1]), run_differences(run_a, run_b), plots)
    blocks += [block for run in runs for block in nccl_blocks(run, name_run=True)]
    return f"{run_b.title} against run {run_a.run_id}", blocks


def report_stem(workload: str) -> str:
    """``report`` (a campaign of one workload's, or the index of several), ``report.<workload>``."""
    return REPORT_STEM if workload == SINGLE_WORKLOAD else f"{REPORT_STEM}.{workload}"


def _write(blocks: Sequence[Block], title: str, out_dir: Path, stem: str) -> list[Path]:
    markdown_path = out_dir / f"{stem}.md"
    html_path = out_dir / f"{stem}.html"
    markdown_path.write_text(render_markdown(blocks), encoding="utf-8")
    html_path.write_text(render_html(blocks, title, out_dir), encoding="utf-8")
    return [markdown_path, html_path]


def write_report(runs: Sequence[Run], out_dir: Path) -> list[Path]:
    """The report of one run, or of run B against run A, each seen as one workload's (``Run.workload``,
    which names its files); returns their paths, the plots' last."""
    _, paths = _workload_report(runs, out_dir)
    return paths


def _workload_report(runs: Sequence[Run], out_dir: Path) -> tuple[list[Block], list[Path]]:
    workload = runs[-1].workload
    lines = headlines(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    # The objectives of each run, each once (two runs of one campaign usually share them).
    slo = list(dict.fromkeys(target for run in runs for target in campaign_slo(run.campaign)[0]))
    plots = render_plots(_lines(runs, lines), out_dir / PLOTS_DIR / workload, slo)
    title, blocks = report_blocks(runs, lines, [plot.relative_to(out_dir) for plot in plots])
    return blocks, [*_write(blocks, title, out_dir, report_stem(workload)), *plots]


def write_reports(runs_by_workload: Sequence[Sequence[Run]], out_dir: Path) -> list[Path]:
    """The report of one run, or of run B against run A, each given as its workloads' runs
    (``load.load_runs``): with one workload, ``write_report``; with several, one report per workload both
    runs have, and the index (report.md, report.html). Returns the paths, the index's first."""
    if [run.workload for run in runs_by_workload[-1]] == [SINGLE_WORKLOAD]:
        return write_report([runs[0] for runs in runs_by_workload], out_dir)
    by_name = [{run.workload: run for run in runs} for runs in runs_by_workload]
    names = [name for name in by_name[-1] if all(name in runs for runs in by_name)]
    blocks: list[Block] = []
    paths: list[Path] = []
    for name in names:
        workload_blocks, written = _workload_report([runs[name] for runs in by_name], out_dir)
        paths += written
        stem = report_stem(name)
        blocks += [
            Heading(2, f"Workload {name}"),
            Paragraph(f"Its whole report: [{stem}]({stem}.md)."),
            *(_retarget(block, stem) for block in first_screen(workload_blocks)),
        ]
    last = by_name[-1][names[0]] if names else runs_by_workload[-1][0]
    title = (
        last.name
        + f": run {last.run_id}"
        + (f" against run {runs_by_workload[0][0].run_id}" if len(runs_by_workload) == 2 else "")
    )
    missing = [name for runs in by_name for name in runs if name not in names]
    intro = f"{len(names)} workloads, each with its own verdict, each config measured on each."
    if missing:
        intro += f" Not in both runs, so not compared: {', '.join(dict.fromkeys(missing))}."
    index = [Heading(1, title), Paragraph(intro), *blocks]
    return [*_write(index, title, out_dir, REPORT_STEM), *paths]


def first_screen(blocks: Sequence[Block]) -> list[Block]:
    """A report's blocks after its title up to its first section after the verdict, each heading one
    level down (under its workload's)."""
    shown: list[Block] = []
    for block in blocks[1:]:
        if isinstance(block, Heading) and block.level <= 2 and block.text != VERDICT_HEADING:
            break
        shown.append(replace(block, level=block.level + 1) if isinstance(block, Heading) else block)
    return shown


_IN_PAGE_LINK = re.compile(r"\]\(#")


def _retarget(block: Block, stem: str) -> Block:
    """``block`` with its links within its page pointing into ``<stem>.md`` instead."""

    def moved(text: str) -> str:
        return _IN_PAGE_LINK.sub(f"]({stem}.md#", text)

    match block:
        case Paragraph(text):
            return Paragraph(moved(text))
        case Alert(kind, title, items):
            return Alert(kind, moved(title), [moved(item) for item in items])
        case BulletList(items):
            return BulletList([moved(item) for item in items])
    return block
