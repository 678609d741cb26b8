"""What the report says, in order, as blocks: the first screen holds the verdict on fairness (threats,
failed configs, campaign warnings, confidence), then the headline table; details follow.

One run: ``run_blocks``. Two runs of one campaign side by side: ``comparison_blocks``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fairbench.report.blocks import Alert, Block, BulletList, Figure, Heading, Paragraph, Preformatted, Table
from fairbench.report.differences import IGNORED_FIELDS, PairDifferences, Threat, threats
from fairbench.report.figures import (
    ENERGY_COLUMNS,
    LEVEL_COLUMNS,
    THROUGHPUT,
    TOKENS_PER_JOULE,
    non_finite_text,
)
from fairbench.report.load import ConfigResult, Run
from fairbench.report.stats import Comparison, Estimate
from fairbench.report.summary import Headline, Level, compare_of, estimate_of, pairwise

Label = Callable[[ConfigResult], str]


# --- formatting ------------------------------------------------------------------------------------------


MISSING_FIGURE = (
    "`-`: not measured: the points lack the figure, or it is a latency (or the per-user speed) of a level "
    "where no request completed."
)


def figure(value: Estimate | None, digits: int = 1) -> str:
    """``1,234.5``, or ``1,234.5 ± 6.7`` (95 % CI) with repeats; ``-`` for no value; ``NaN`` or ``inf``
    for a value that is not finite (the first screen names its point)."""
    if value is None:
        return "-"
    if not math.isfinite(value.mean):
        return non_finite_text(value.mean)
    text = f"{value.mean:,.{digits}f}"
    return text if value.half_width is None else f"{text} ± {value.half_width:,.{digits}f}"


def setting_value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def setting_values(values: Sequence[Any]) -> list[str]:
    """Each value as :func:`setting_value` shows it, unless two that differ would look alike (``8`` and
    ``"8"``, ``none`` and ``"none"``): then each as JSON, where a string has its quotes."""
    shown = [setting_value(value) for value in values]
    typed = [json.dumps(value, separators=(",", ":"), default=str) for value in values]
    return shown if len(set(shown)) == len(set(typed)) else typed


def change(comparison: Comparison | None) -> str:
    """``+12.3 % (significant)``, ``-0.4 % (within noise)``, or untested with one repeat; not compared
    where a value is not finite."""
    if comparison is None:
        return "not compared (a value is NaN or infinite)"
    amount = "from 0" if math.isinf(comparison.relative_pct) else f"{comparison.relative_pct:+.1f} %"
    if comparison.significant is None:
        return f"{amount} (one repeat: not tested)"
    return f"{amount} ({'significant' if comparison.significant else 'within noise'})"


def _labeller(results: Sequence[ConfigResult]) -> Label:
    """Configs by name alone when one host ran them all, else ``config@host``."""
    if len({result.host for result in results}) <= 1:
        return lambda result: result.name
    return lambda result: f"{result.name}@{result.host}"


# --- the first screen ------------------------------------------------------------------------------------


def _threat_alert(found: Sequence[Threat], label: Label, title: str) -> Alert:
    items = []
    for threat in found:
        by_value: dict[str, list[str]] = {}
        shown = setting_values([value for _, value in threat.values])
        for (result, _), value in zip(threat.values, shown, strict=True):
            by_value.setdefault(value, []).append(label(result))
        values = "; ".join(f"{', '.join(names)}: `{value}`" for value, names in by_value.items())
        items.append(f"{threat.source} `{threat.name}`: {values}")
    return Alert("threat", title.format(count=len(found)), items)


def _unchecked(pairs: Sequence[PairDifferences], label: Label) -> list[str]:
    """Each config with a source that could not be compared, and why: ``**ep4**: server (... missing)``."""
    lacking: dict[int, tuple[ConfigResult, dict[str, str]]] = {}
    for pair in pairs:
        for item in pair.not_compared:
            lacking.setdefault(id(item.result), (item.result, {}))[1][item.source] = item.why
    return [
        f"**{label(result)}**: " + ", ".join(f"{source} ({why})" for source, why in sources.items())
        for result, sources in lacking.values()
    ]


def _fairness_alerts(pairs: Sequence[PairDifferences], label: Label, title: str) -> list[Alert]:
    """The verdict: the undeclared differences, and the settings that could not be compared at all; no
    undeclared differences only when every setting was compared."""
    found, unchecked = threats(pairs), _unchecked(pairs, label)
    alerts = [_threat_alert(found, label, title)] if found else []
    if unchecked:
        alerts.append(
            Alert(
                "warning",
                f"Not fully checked: {len(unchecked)} config(s) lack settings that the comparison reads, "
                "so an undeclared difference in them would go unseen.",
                unchecked,
            )
        )
    return alerts or [
        Alert("note", "No undeclared differences: every setting that differs was declared by the campaign.")
    ]


def _file_alerts(results: Sequence[ConfigResult]) -> list[Alert]:
    """What of the results files could not be used (the rest is shown), and incomplete last lines."""
    problems = [problem for result in results for problem in result.problems]
    notes = [note for result in results for note in result.notes]
    alerts = []
    if problems:
        alerts.append(
            Alert(
                "warning",
                "Problems in the results files (the report shows everything else they hold):",
                problems,
            )
        )
    if notes:
        alerts.append(Alert("note", "Interrupted writes:", notes))
    return alerts


def _failed_alert(results: Sequence[ConfigResult], label: Label) -> Alert | None:
    failed = [result for result in results if not result.ok]
    if not failed:
        return None
    items = [
        f"**{label(result)}**: {result.state}"
        + (f" at stage `{result.status['stage']}`" if result.status.get("stage") else "")
        + (f": {result.status['reason']}" if result.status.get("reason") else "")
        for result in failed
    ]
    return Alert("warning", f"{len(failed)} config(s) did not finish: see Failed configs below.", items)


def _confidence_alert(repeats: int) -> Alert:
    if repeats >= 2:
        return Alert(
            "note",
            f"{repeats} repeats: figures are mean ± 95 % confidence interval (Student t); comparisons are "
            "Welch's t-test at the 5 % level.",
        )
    return Alert(
        "warning",
        "One repeat: the run-to-run spread was not measured, so a difference smaller than it cannot be "
        "trusted. Set `workload.repeats` to 2 or more for confidence intervals.",
    )


def _first_screen(run: Run, pairs: Sequence[PairDifferences], label: Label) -> list[Block]:
    blocks: list[Block] = [
        *_fairness_alerts(
            pairs,
            label,
            "Not a fair comparison: {count} setting(s) differ between configs without the campaign "
            "declaring them.",
        )
    ]
    failed = _failed_alert(run.results, label)
    if failed:
        blocks.append(failed)
    blocks += _file_alerts(run.results)
    if run.campaign.get("warnings"):
        blocks.append(Alert("warning", "The campaign's own warnings:", list(run.campaign["warnings"])))
    blocks.append(_confidence_alert(int(run.campaign["workload"].get("repeats", 1))))
    return blocks


def _campaign_line(run: Run) -> Paragraph:
    workload = run.campaign["workload"]
    return Paragraph(
        f"Engine `{run.campaign['engine']}`, model `{run.campaign['model']}`. Workload: `{workload['api']}`, "
        f"{workload['input_len']} tokens in, {workload['output_len']} out, concurrency "
        f"{', '.join(map(str, workload['concurrency']))}, {workload.get('repeats', 1)} repeat(s)."
    )


# --- tables ----------------------------------------------------------------------------------------------


def _at(line: Headline, level: Level | None, key: str, digits: int = 1) -> str:
    return figure(level.estimate(key) if level else None, digits)


def headline_table(headlines: Sequence[Headline], label: Label) -> Table:
    header = [
        "config",
        "status",
        "out tok/s at lowest C",
        "peak out tok/s",
        "peak at C",
        "peak tok/s per GPU",
        "TTFT p50 / p99 ms, lowest C",
        "TPOT p50 ms, lowest C",
        "TTFT p50 / p99 ms, peak",
        "TPOT p50 ms, peak",
        "failed requests",
    ]
    energy = any(_has_energy(line.result.points) for line in headlines)
    if energy:
        header.append("out tok/J, peak")
    rows = []
    for line in headlines:
        first, peak = line.first, line.peak
        per_gpu = line.per_gpu(peak) if peak else []
        energy_cells = [_at(line, peak, TOKENS_PER_JOULE, 2)] if energy else []
        rows.append(
            [
                label(line.result),
                line.result.state,
                (f"C={first.concurrency}: " if first and first.concurrency != 1 else "")
                + _at(line, first, THROUGHPUT),
                _at(line, peak, THROUGHPUT),
                str(peak.concurrency) if peak else "-",
                figure(estimate_of(per_gpu)),
                f"{_at(line, first, 'median_ttft_ms')} / {_at(line, first, 'p99_ttft_ms')}",
                _at(line, first, "median_tpot_ms", 2),
                f"{_at(line, peak, 'median_ttft_ms')} / {_at(line, peak, 'p99_ttft_ms')}",
                _at(line, peak, "median_tpot_ms", 2),
                str(line.errors),
                *energy_cells,
            ]
        )
    return Table(header, rows, [False, False, *[True] * (len(header) - 2)])


def _has_energy(points: Sequence[dict[str, Any]]) -> bool:
    return any(TOKENS_PER_JOULE in point for point in points)


def level_table(line: Headline) -> Table:
    columns = LEVEL_COLUMNS + ENERGY_COLUMNS if _has_energy(line.result.points) else LEVEL_COLUMNS
    header = ["C", "repeats", *(title for title, _, _ in columns)]
    rows = [
        [str(level.concurrency), str(len(level.points))]
        + [figure(level.estimate(key), digits) for _, key, digits in columns]
        for level in line.levels
    ]
    return Table(header, rows, [True] * len(header))


def _comparison_list(headlines: Sequence[Headline], label: Label) -> BulletList:
    by_pair: dict[tuple[int, int], list[str]] = {}
    for pair in pairwise(headlines):
        level_a, level_b = pair.a.level(pair.figure), pair.b.level(pair.figure)
        where = f"C={level_a.concurrency}" if pair.figure == "first" else "peak"
        if pair.figure == "peak":
            where += f" (C={level_a.concurrency} vs C={level_b.concurrency})"
        text = f"{where}: {change(pair.comparison)}"
        by_pair.setdefault(
            (id(pair.a), id(pair.b)), [f"**{label(pair.a.result)}** vs **{label(pair.b.result)}**"]
        )
        by_pair[(id(pair.a), id(pair.b))].append(text)
    return BulletList([f"{parts[0]}: output tok/s {'; '.join(parts[1:])}" for parts in by_pair.values()])


# --- what differed ---------------------------------------------------------------------------------------


def difference_blocks(pairs: Sequence[PairDifferences], label: Label, heading_level: int) -> list[Block]:
    blocks: list[Block] = []
    identical = []
    for pair in pairs:
        title = f"{label(pair.a)} vs {label(pair.b)}"
        if not pair.differences and not pair.not_compared:
            identical.append(title)
            continue
        blocks.append(Heading(heading_level, title))
        if pair.not_compared:
            lacking = [f"{item.source} ({item.why} for {label(item.result)})" for item in pair.not_compared]
            blocks.append(Paragraph("Not compared: " + "; ".join(lacking) + "."))
        if pair.differences:
            rows = [
                [
                    difference.verdict.upper() if difference.verdict == "threat" else difference.verdict,
                    difference.source,
                    f"`{difference.name}`",
                    *setting_values([difference.value_a, difference.value_b]),
                ]
                for difference in sorted(pair.differences, key=lambda item: item.verdict != "threat")
            ]
            header = ["verdict", "source", "setting", label(pair.a), label(pair.b)]
            blocks.append(Table(header, rows, [False] * 5))
    if identical:
        blocks.append(Paragraph("Identical in every compared setting: " + "; ".join(identical) + "."))
    return blocks


def ignored_fields_table() -> Table:
    rows = [
        [source, f"`{name}`", reason]
        for source, fields in IGNORED_FIELDS.items()
        for name, reason in fields.items()
    ]
    return Table(["source", "field", "why it is not compared"], rows, [False, False, False])


def _differences_intro(between: str) -> Paragraph:
    return Paragraph(
        f"Every effective setting that differs {between}: the server's `/server_info` (defaults included), "
        "the unit's `Environment=` lines, host.json and sweep.json. **intended**: declared in campaign.json; "
        "**derived**: computed by the server from its GPUs' memory; **THREAT**: anything else."
    )


# --- failures --------------------------------------------------------------------------------------------


def failure_blocks(results: Sequence[ConfigResult], label: Label) -> list[Block]:
    blocks: list[Block] = []
    for result in results:
        if result.ok:
            continue
        blocks.append(Heading(3, f"{label(result)}: {result.state}"))
        stage = result.status.get("stage") or "unknown"
        reason = result.status.get("reason") or "no reason recorded"
        blocks.append(
            BulletList(
                [
                    f"stage: `{stage}`",
                    f"reason: {reason}",
                    f"results: `{result.path}`",
                    f"points: {len(result.points)}",
                ]
            )
        )
        if result.journal_excerpt:
            blocks += [Paragraph("Journal excerpt:"), Preformatted("\n".join(result.journal_excerpt))]
        else:
            blocks.append(Paragraph("No journal excerpt was saved."))
    return blocks


# --- the reports -----------------------------------------------------------------------------------------


def run_blocks(
    run: Run, headlines: Sequence[Headline], pairs: Sequence[PairDifferences], plots: Sequence[Path]
) -> list[Block]:
    label = _labeller(run.results)
    blocks: list[Block] = [Heading(1, f"{run.name}: run {run.run_id}"), _campaign_line(run)]
    blocks += _first_screen(run, pairs, label)
    blocks += [Heading(2, "Headline"), headline_table(headlines, label)]
    blocks += [Heading(3, "Comparisons"), _comparison_list(headlines, label)]
    blocks += [
        Heading(2, "Plots"),
        *(Figure(path, _PLOT_CAPTIONS.get(path.name, path.stem)) for path in plots),
    ]
    blocks += [Heading(2, "What differed"), _differences_intro("between each pair of configs (and hosts)")]
    blocks += difference_blocks(pairs, label, 3)
    blocks += [Heading(3, "Not compared, and why"), ignored_fields_table()]
    blocks += [Heading(2, "Every concurrency level"), Paragraph(MISSING_FIGURE)]
    for line in headlines:
        blocks += [
            Heading(3, label(line.result)),
            level_table(line) if line.levels else Paragraph("No points."),
        ]
    failures = failure_blocks(run.results, label)
    if failures:
        blocks += [Heading(2, "Failed configs"), *failures]
    return blocks


_PLOT_CAPTIONS = {
    "throughput.png": "Aggregate output throughput against concurrency",
    "pareto.png": "Per-user decode speed against aggregate throughput, with the Pareto frontier",
    "latency.png": "TTFT p50, TTFT p99 and TPOT p50 against concurrency",
}


def comparison_blocks(
    run_a: Run,
    run_b: Run,
    headlines: tuple[Sequence[Headline], Sequence[Headline]],
    pairs: Sequence[PairDifferences],
    plots: Sequence[Path],
) -> list[Block]:
    """Run B against run A: the same config on the same host, side by side, and what differed between them."""
    label = _labeller([*run_a.results, *run_b.results])

    def in_run(run: Run) -> Label:
        return lambda result: f"{label(result)} ({run.run_id})"

    def owner(result: ConfigResult) -> str:
        return in_run(run_a if any(result is other for other in run_a.results) else run_b)(result)

    blocks: list[Block] = [Heading(1, f"{run_b.name}: run {run_b.run_id} against run {run_a.run_id}")]
    blocks += (
        [_campaign_line(run_a), _campaign_line(run_b)]
        if run_a.campaign != run_b.campaign
        else [_campaign_line(run_b)]
    )
    blocks += _fairness_alerts(
        pairs,
        owner,
        "{count} setting(s) differ between the runs without campaign.json saying so: if one is the "
        "change under test, the comparison measures it; any other is a threat.",
    )
    for run in (run_a, run_b):
        failed = _failed_alert(run.results, in_run(run))
        if failed:
            blocks.append(failed)
    blocks += _file_alerts([*run_a.results, *run_b.results])
    repeats = min(int(run.campaign["workload"].get("repeats", 1)) for run in (run_a, run_b))
    blocks.append(_confidence_alert(repeats))
    in_b = {(line.result.host, line.result.name): line for line in headlines[1]}
    rows = []
    for line_a in headlines[0]:
        line_b = in_b.get((line_a.result.host, line_a.result.name))
        if line_b is None:
            continue
        row = [label(line_a.result), f"{line_a.result.state} / {line_b.result.state}"]
        for figure_name in ("first", "peak"):
            if line_a.peak is None or line_b.peak is None:
                row += ["-", "-", "-"]
                continue
            level_a, level_b = line_a.level(figure_name), line_b.level(figure_name)
            row += [
                f"{figure(level_a.estimate(THROUGHPUT))} (C={level_a.concurrency})",
                f"{figure(level_b.estimate(THROUGHPUT))} (C={level_b.concurrency})",
                change(compare_of(level_b.values(THROUGHPUT), level_a.values(THROUGHPUT))),
            ]
        rows.append(row)
    header = ["config", "status A / B"]
    for where in ("lowest C", "peak"):
        header += [
            f"out tok/s {where}, {run_a.run_id}",
            f"out tok/s {where}, {run_b.run_id}",
            f"B vs A, {where}",
        ]
    blocks += [Heading(2, "Side by side"), Table(header, rows, [False, False, *[True] * 6])]
    blocks += [
        Heading(2, "Plots"),
        *(Figure(path, _PLOT_CAPTIONS.get(path.name, path.stem)) for path in plots),
    ]
    blocks += [
        Heading(2, "What differed between the runs"),
        _differences_intro("between the two runs of each config"),
    ]
    blocks += difference_blocks(pairs, owner, 3)
    blocks += [Heading(3, "Not compared, and why"), ignored_fields_table()]
    for run, lines in zip((run_a, run_b), headlines, strict=True):
        blocks += [Heading(2, f"Headline of run {run.run_id}"), headline_table(lines, label)]
        failures = failure_blocks(run.results, label)
        if failures:
            blocks += [Heading(3, f"Failed configs of run {run.run_id}"), *failures]
    return blocks
