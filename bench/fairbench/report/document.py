"""What the report says, in order, as blocks: the first screen holds the verdict (which config is best in
each regime, by how much, how sure: ``report.verdict``), then what the verdict rests on (threats to
fairness, failed configs, campaign warnings, confidence) and the Pareto plot; the headline table and the
details follow.

One run: ``run_blocks``. Two runs of one campaign side by side: ``comparison_blocks``. What a config is
follows the run's placement (``Run.configs``): under ``spread`` a config merged over its hosts, named by
its name alone, with a hosts column; under ``every-host`` a config on one host, compared with the
configs of that host only, and with itself on the other hosts in the Hardware section.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fairbench.campaign.model import SPREAD
from fairbench.fleet.campaign_record import differences, listed
from fairbench.fleet.stopping import stopping_margin
from fairbench.measure.repeats import AutoRepeats
from fairbench.measure.results import CAMPAIGN_FILE
from fairbench.report.answers import answer_checks, answers_blocks, refused
from fairbench.report.blocks import Alert, Block, BulletList, Figure, Heading, Paragraph, Preformatted, Table
from fairbench.report.checks import checks_blocks
from fairbench.report.differences import (
    IGNORED_FIELDS,
    PairDifferences,
    Threat,
    accepted_threats,
    matched_configs,
    threats,
)
from fairbench.report.disaggregation import disaggregation_blocks
from fairbench.report.figures import (
    ACHIEVED_RATE,
    ENERGY_COLUMNS,
    LEVEL_COLUMNS,
    OPEN_LOOP_COLUMNS,
    PER_GPU,
    SLO_ATTAINMENT,
    SLO_COLUMNS,
    THROUGHPUT,
    TOKENS_PER_JOULE,
)
from fairbench.report.flags import MARK, FlagMarks
from fairbench.report.fleet_blocks import (
    accepted_alert,
    accepted_rows,
    fleet_alerts,
    hardware_blocks,
    hosts_cell,
    judged_note,
    overhead_blocks,
    repeats_note,
)
from fairbench.report.fleet_file import Fleet
from fairbench.report.formatting import Label, change, corrected_change, figure, labeller, setting_values
from fairbench.report.load import Run
from fairbench.report.planned import planned_blocks
from fairbench.report.plots import pareto_flagged
from fairbench.report.rounds import drift_alerts, rounds_blocks
from fairbench.report.spec import spec_blocks
from fairbench.report.summary import (
    BEHIND,
    SLO_MET,
    Headline,
    Level,
    Loop,
    estimate_of,
    loop_of,
    pairwise,
)
from fairbench.report.tree import ConfigResult, ConfigRun, Job
from fairbench.report.turns import turn_blocks
from fairbench.report.verdict import (
    UNDER_SLO,
    campaign_slo,
    objectives_text,
    regime_title,
    run_changes,
    verdict,
    verdict_blocks,
)
from fairbench.report.workload_text import repeats_setting, workload_text

MISSING_FIGURE = (
    "`-`: not measured: the points lack the figure, or it is a latency (or the per-user speed) of a level "
    "where no request completed."
)
FLAGGED_FIGURE = (
    f"`{MARK}N` beside a figure: a measurement check flagged a point of that level, casting doubt on the "
    "figure; the note it links to (Measurement checks) says why."
)
CHECKS_TITLE = "Measurement checks"


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
    undeclared differences only when every setting was compared. Beside it, the host differences the
    campaign accepted that touch a pair: declared, and still threats."""
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
    alerts = alerts or [
        Alert("note", "No undeclared differences: every setting that differs was declared by the campaign.")
    ]
    accepted = accepted_alert(pairs, label)
    return [accepted, *alerts] if accepted else alerts


def _file_alerts(runs: Sequence[Run]) -> list[Alert]:
    """What of the results files could not be used (the rest is shown), and incomplete last lines."""
    problems = [problem for run in runs for result in run.results for problem in result.problems]
    problems += [problem for run in runs for config in run.configs for problem in config.problems]
    notes = [note for run in runs for result in run.results for note in result.notes]
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


def _campaign_change_alerts(run: Run) -> list[Alert]:
    """The campaign changed during the run (a resume allowed to): each earlier campaign against the next,
    the last against campaign.json; none when it never changed."""
    kept = [*run.earlier_campaigns, (CAMPAIGN_FILE, run.campaign)]
    items = []
    for (before_name, before), (after_name, after) in itertools.pairwise(kept):
        found = differences(before, after)
        if found:
            items.append(f"`{before_name}` -> `{after_name}`: " + "; ".join(listed(found, indent="")))
    if not items:
        return []
    title = (
        f"The campaign of run {run.run_id} changed during the run (a resume allowed it): the points measured "
        "before a change were measured under the campaign before it, and this report shows them under "
        f"{CAMPAIGN_FILE}'s."
    )
    return [Alert("threat", title, items)]


def _failures(config: ConfigRun) -> list[tuple[ConfigResult, Job | None]]:
    """Each directory of a config that did not finish, with each of its jobs that failed; a directory
    whose status names no failed job (missing, unreadable, or an older status.json) once, without one."""
    found: list[tuple[ConfigResult, Job | None]] = []
    for part in config.parts:
        if not part.ok:
            failed = [job for job in part.jobs if not job.ok]
            found += [(part, job) for job in failed] or [(part, None)]
    return found


def _stage_and_reason(part: ConfigResult, job: Job | None) -> tuple[object, object]:
    if job is not None:
        return job.stage, job.reason
    return part.status.get("stage"), part.status.get("reason")


def _job_text(config: ConfigRun, job: Job | None) -> str:
    """`` (job `tp8#r1` on lab2)`` where the config ran as several jobs; else nothing."""
    if job is None or not job.recorded or len(config.jobs) < 2:
        return ""
    return f" (job `{job.id}` on {' + '.join(job.hosts)})"


def _failed_alert(configs: Sequence[ConfigRun], label: Label) -> Alert | None:
    failed = [config for config in configs if not config.ok]
    if not failed:
        return None
    items = []
    for config in failed:
        part, job = _failures(config)[0]
        stage, reason = _stage_and_reason(part, job)
        items.append(
            f"**{label(config)}**: {config.state}"
            + (f" at stage `{stage}`" if stage else "")
            + _job_text(config, job)
            + (f": {reason}" if reason else "")
        )
    return Alert("warning", f"{len(failed)} config(s) did not finish: see Failed configs below.", items)


INTERVALS = (
    "figures are mean ± 95 % confidence interval (Student t); comparisons are t-tests at the 5 % level "
    "(Welch's, or paired within the rounds of a spread run)"
)


def _confidence_alert(
    setting: object, headlines: Sequence[Headline], decided_on: float | None = None
) -> Alert:
    """What the intervals and tests rest on: the repeats, fixed or automatic (then what each level got);
    ``decided_on``: the margin a spread run's automatic repeats stopped by (``fleet.stopping``)."""
    repeats = repeats_setting(setting)
    if isinstance(repeats, AutoRepeats):
        counts = [len(level.points) for line in headlines for level in line.levels]
        spread = (
            f"{min(counts)}"
            if counts and min(counts) == max(counts)
            else f"{min(counts or [0])} to {max(counts or [0])}"
        )
        got = (
            f"the {len(counts)} level(s) measured got {spread} repeats each, "
            f"{sum(count >= repeats.maximum for count in counts)} of them the maximum (each level's table "
            "says why its repeats stopped)"
            if counts
            else "no level was measured"
        )
        until = (
            f"in rounds, until the verdict's comparisons were decided against the ±{decided_on:g} % margin"
            if decided_on is not None
            else "until its output throughput's 95 % interval was within "
            f"±{repeats.half_width_pct:g} % of its mean"
        )
        return Alert(
            "note",
            f"Automatic repeats: each level measured {repeats.minimum} to {repeats.maximum} times, {until}; "
            f"{got}. {INTERVALS[0].upper()}{INTERVALS[1:]}.",
        )
    if repeats is None:
        return Alert("warning", f"`workload.repeats` is neither a count nor automatic: {setting!r}.")
    if repeats >= 2:
        return Alert("note", f"{repeats} repeats: {INTERVALS}.")
    return Alert(
        "warning",
        "One repeat: the run-to-run spread was not measured, so a difference smaller than it cannot be "
        "trusted. Set `workload.repeats` to 2 or more (or `auto`) for confidence intervals.",
    )


def _unfair_pointer(pairs: Sequence[PairDifferences], runs: Sequence[Run]) -> str | None:
    """One line for the verdict when the first screen names threats to the comparison; None without."""
    counts = {
        "undeclared setting difference(s)": len(threats(pairs)),
        "accepted host difference(s) touching the comparisons": len(accepted_threats(pairs)),
        "host fact(s) differing within a pool": sum(len(run.fleet.refused) for run in runs if run.fleet),
        "machine(s) whose hosts ran jobs at the same time": sum(
            len(run.fleet.shared_machines) for run in runs if run.fleet and run.fleet.isolated
        ),
    }
    found = [f"{count} {what}" for what, count in counts.items() if count]
    if not found:
        return None
    return (
        f"**Caution**: {', '.join(found)}, named below: the verdict may measure them rather than the configs."
    )


def _first_screen(
    run: Run, pairs: Sequence[PairDifferences], label: Label, headlines: Sequence[Headline]
) -> list[Block]:
    blocks: list[Block] = [
        *_fairness_alerts(
            pairs,
            label,
            "Not a fair comparison: {count} setting(s) differ between configs without the campaign "
            "declaring them.",
        )
    ]
    failed = _failed_alert(run.configs, label)
    if failed:
        blocks.append(failed)
    blocks += fleet_alerts(run)
    blocks += drift_alerts(run, headlines)
    blocks += _campaign_change_alerts(run)
    blocks += _file_alerts([run])
    if run.campaign.get("warnings"):
        blocks.append(Alert("warning", "The campaign's own warnings:", list(run.campaign["warnings"])))
    decided_on = stopping_margin(run.campaign)
    blocks.append(_confidence_alert(run.campaign["workload"].get("repeats", 1), headlines, decided_on))
    return blocks


def _campaign_line(run: Run) -> Paragraph:
    workload = run.campaign["workload"]
    targets, _ = campaign_slo(run.campaign)
    slo = f" SLO: {objectives_text(targets)}." if targets else ""
    resolution = workload.get("search_resolution")
    search = (
        f" Each config's SLO limit searched for between its listed levels, to within {resolution} requests "
        "in flight."
        if resolution
        else ""
    )
    return Paragraph(
        f"Engine `{run.campaign['engine']}`, model `{run.campaign['model']}`. Workload: "
        f"{workload_text(workload, stopping_margin(run.campaign))}.{slo}{search}"
    )


# --- tables ----------------------------------------------------------------------------------------------


def _loop(headlines: Sequence[Headline]) -> Loop:
    """Whether the configs' levels are concurrencies or request rates (``summary.loop_of``)."""
    return loop_of(level for line in headlines for level in line.levels)


def _reach_title(loop: Loop) -> str:
    """The column of the verdict's ``UNDER_SLO`` regime: ``highest load under SLO``, ``highest request
    rate meeting SLO``."""
    return regime_title(UNDER_SLO, loop).replace(" the SLO", " SLO")


def _lowest_prefix(level: Level | None) -> str:
    """What names the lowest level beside its figure: nothing at C=1, else its label (``C=4: ``,
    ``2 req/s: ``)."""
    if level is None or (not level.open_loop and level.load == 1):
        return ""
    return f"{level.label}: "


def headline_table(
    headlines: Sequence[Headline],
    label: Label,
    *,
    hosts: bool = False,
    slo: bool = False,
    marks: FlagMarks | None = None,
) -> Table:
    """One row per config; ``hosts``: with the hosts each ran on (spread), and what that does to its
    intervals; ``slo``: with its highest load under the campaign's SLO. ``marks``: the report's (by
    default numbered over ``headlines`` alone)."""
    marks = FlagMarks(headlines) if marks is None else marks
    loop = _loop(headlines)
    lowest = f"lowest {loop.symbol}"
    header = [
        "config",
        *(["hosts"] if hosts else []),
        "status",
        f"out tok/s at {lowest}",
        "peak out tok/s",
        f"peak at {loop.symbol}",
        "peak tok/s per GPU",
        f"TTFT p50 / p99 ms, {lowest}",
        f"TPOT p50 ms, {lowest}",
        "TTFT p50 / p99 ms, peak",
        "TPOT p50 ms, peak",
        "failed requests",
    ]
    energy = any(_has_energy(line.result.points) for line in headlines)
    if energy:
        header.append("out tok/J, peak")
    if slo:
        header.append(_reach_title(loop))
    rows = []
    for line in headlines:
        first, peak = line.first, line.peak
        per_gpu = line.per_gpu(peak) if peak else []
        energy_cells = [marks.figure(line, peak, TOKENS_PER_JOULE, 2)] if energy else []
        note = repeats_note(line.result)
        rows.append(
            [
                label(line.result),
                *([hosts_cell(line.result) + (f" ({note})" if note else "")] if hosts else []),
                line.result.state,
                _lowest_prefix(first) + marks.figure(line, first, THROUGHPUT),
                marks.figure(line, peak, THROUGHPUT),
                loop.cell(peak) + marks.mark(line, peak, peak.load_key) if peak else "-",
                figure(estimate_of(per_gpu)) + (marks.mark(line, peak, PER_GPU) if per_gpu else ""),
                f"{marks.figure(line, first, 'median_ttft_ms')} / {marks.figure(line, first, 'p99_ttft_ms')}",
                marks.figure(line, first, "median_tpot_ms", 2),
                f"{marks.figure(line, peak, 'median_ttft_ms')} / {marks.figure(line, peak, 'p99_ttft_ms')}",
                marks.figure(line, peak, "median_tpot_ms", 2),
                str(line.errors),
                *energy_cells,
                *([_reach_text(line, marks)] if slo else []),
            ]
        )
    labels = 3 if hosts else 2
    return Table(header, rows, [*[False] * labels, *[True] * (len(header) - labels)])


def _has_energy(points: Sequence[dict[str, Any]]) -> bool:
    return any(TOKENS_PER_JOULE in point for point in points)


def _reach_text(line: Headline, marks: FlagMarks) -> str:
    """The highest load under the SLO (``summary.slo_reach``) and the output throughput there, per GPU
    where known: ``C=32: 4,853.3 ± 1.9 tok/s (606.7 ± 0.2 per GPU)``, ``at least C=64: ...`` (``8 req/s``)
    or ``no level``; ``-`` where the points were not judged against it."""
    reach = line.slo
    if reach is None:
        return "-"
    if reach.level is None:
        return reach.text()
    level = reach.level
    per_gpu = estimate_of(line.per_gpu(level))
    throughput = marks.figure(line, level, THROUGHPUT)
    return f"{reach.text()}: {throughput} tok/s" + (
        f" ({figure(per_gpu)}{marks.mark(line, level, PER_GPU)} per GPU)" if per_gpu else ""
    )


def _slo_met_cell(level: Level) -> str:
    """``yes`` (every repeat met the SLO), ``no`` (none did), ``2 of 3``; ``-`` where none was judged."""
    met = sum(point.get(SLO_MET) is True for point in level.points)
    if level.slo_met is None:
        return "-"
    return "yes" if met == len(level.points) else "no" if not met else f"{met} of {len(level.points)}"


def _slo_cells(level: Level) -> list[str]:
    attainment = estimate_of([100 * value for value in level.values(SLO_ATTAINMENT)])
    return [
        _slo_met_cell(level),
        figure(attainment),
        *(figure(level.estimate(key), digits) for _, key, digits in SLO_COLUMNS),
    ]


SEARCHED = "(search)"
"""After a level's concurrency: the SLO search chose it (``level_source: bisect``)."""
BEHIND_MARK = "(behind)"
"""After an open loop's achieved rate: it fell short of the target (``Level.behind``)."""
BEHIND_NOTE = (
    f"`{BEHIND_MARK}`: the requests went out at less than {BEHIND * 100:g} % of the target rate (on the "
    "repeats counted), so the level measured less load than it names: the client or the server fell behind; "
    "unless the send delays are small, when the requests went out on schedule and the random schedule "
    "itself, over few requests, ran slow."
)


def _open_loop_cells(level: Level) -> list[str]:
    """The achieved rate (marked where it fell behind the target), the send delays."""
    (_, achieved_key, digits), *delays = OPEN_LOOP_COLUMNS
    achieved = figure(level.estimate(achieved_key), digits)
    counted = len(level.values(ACHIEVED_RATE))
    if level.behind:
        every = level.behind == counted
        achieved += f" {BEHIND_MARK}" if every else f" (behind on {level.behind} of {counted})"
    return [achieved, *(figure(level.estimate(key), digits) for _, key, digits in delays)]


def level_table(line: Headline, marks: FlagMarks | None = None) -> Table:
    """Every level of a config; an open loop's with the rate its requests achieved and how late they went
    out; with why its repeats stopped (automatic repeats) and its figures against the SLO, where its points
    have them. ``marks``: the report's (by default numbered over this config alone)."""
    marks = FlagMarks([line]) if marks is None else marks
    loop = loop_of(line.levels)
    columns = LEVEL_COLUMNS + ENERGY_COLUMNS if _has_energy(line.result.points) else LEVEL_COLUMNS
    sending = OPEN_LOOP_COLUMNS if any(level.open_loop for level in line.levels) else ()
    stopped = any(level.repeats_stopped for level in line.levels)
    slo = any(level.slo_met is not None for level in line.levels)
    header = [
        loop.symbol,
        *(title for title, _, _ in sending),
        "repeats, why stopped" if stopped else "repeats",
        *(title for title, _, _ in columns),
        *(["SLO met", "requests within SLO %", *(title for title, _, _ in SLO_COLUMNS)] if slo else []),
    ]
    rows = []
    for level in line.levels:
        reason = level.repeats_stopped
        rows.append(
            [
                loop.cell(level)
                + ("" if level.listed else f" {SEARCHED}")
                + marks.mark(line, level, level.load_key),
                *(_open_loop_cells(level) if sending else []),
                str(len(level.points)) + (f": {reason}" if reason else ""),
                *(marks.figure(line, level, key, digits) for _, key, digits in columns),
                *(_slo_cells(level) if slo else []),
            ]
        )
    numeric = [True] * len(header)
    repeats = 1 + len(sending)
    numeric[repeats] = not stopped
    if slo:
        numeric[repeats + 1 + len(columns)] = False
    return Table(header, rows, numeric)


def _comparison_list(
    headlines: Sequence[Headline], label: Label, marks: FlagMarks, *, same_host: bool
) -> BulletList:
    """Every pair of configs (``same_host``: of configs on one host), output throughput A against B, with
    the marks of the flags that doubt either side's."""
    by_pair: dict[tuple[int, int], list[str]] = {}
    for pair in pairwise(headlines, (lambda line: line.result.host) if same_host else None):
        level_a, level_b = pair.a.level(pair.figure), pair.b.level(pair.figure)
        where = level_a.label if pair.figure == "first" else "peak"
        if pair.figure == "peak":
            where += f" ({level_a.label} vs {level_b.label})"
        doubted = marks.mark(pair.a, level_a, THROUGHPUT) + marks.mark(pair.b, level_b, THROUGHPUT)
        text = f"{where}: {change(pair.comparison)}{doubted}"
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
        if not pair.differences and not pair.not_compared and not pair.accepted:
            identical.append(title)
            continue
        blocks.append(Heading(heading_level, title))
        if pair.not_compared:
            lacking = [f"{item.source} ({item.why} for {label(item.result)})" for item in pair.not_compared]
            blocks.append(Paragraph("Not compared: " + "; ".join(lacking) + "."))
        if pair.differences or pair.accepted:
            rows = accepted_rows(pair.accepted) + [
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


MERGED_NOTE = "A config that ran on several hosts is compared by the files of its first (rank-0) host."
ACCEPTED_NOTE = (
    "**fleet (accepted)**: a host fact the campaign accepted differing between the hosts of a pool "
    "(fleet.json), on which the pair's hosts do not agree."
)


def _differences_intro(between: str, notes: Sequence[str] = ()) -> Paragraph:
    return Paragraph(
        " ".join(
            [
                f"Every effective setting that differs {between}: the server's `/server_info` (defaults "
                "included), the unit's `Environment=` lines, host.json and sweep.json. **intended**: "
                "declared in campaign.json; **derived**: computed by the server from its GPUs' memory; "
                "**THREAT**: anything else.",
                *notes,
            ]
        )
    )


# --- failures --------------------------------------------------------------------------------------------


def _rank_journals(part: ConfigResult, job: Job) -> list[Block]:
    """Each rank >= 1's journal excerpt: status.json's, else the one in its ranks/<host>/ directory."""
    saved = {rank.host: rank.journal_excerpt for rank in part.ranks}
    ranks = [
        (rank.rank, rank.host, list(rank.journal_tail) or saved.get(rank.host, [])) for rank in job.ranks
    ]
    if not ranks:
        ranks = [(index, host, saved.get(host, [])) for index, host in enumerate(job.hosts) if index]
    return [
        block
        for rank, host, lines in ranks
        if lines
        for block in (Paragraph(f"Journal excerpt of rank {rank} ({host}):"), Preformatted("\n".join(lines)))
    ]


def _failure_items(part: ConfigResult, job: Job | None) -> list[str]:
    """What a failure's block lists: the job (where status.json records jobs), its stage and reason, the
    directory, and the points it measured."""
    stage, reason = _stage_and_reason(part, job)
    recorded = job if job is not None and job.recorded else None
    measured = [point for point in part.points if recorded is None or point["repeat"] in recorded.repeats]
    items = []
    if recorded:
        repeats = ", ".join(map(str, recorded.repeats))
        items.append(f"job: `{recorded.id}`, repeats {repeats}, on {' + '.join(recorded.hosts)}")
    return [
        *items,
        f"stage: `{stage or 'unknown'}`",
        f"reason: {reason or 'no reason recorded'}",
        f"results: `{part.path}`",
        f"points: {len(measured)}",
    ]


def failure_blocks(configs: Sequence[ConfigRun], label: Label) -> list[Block]:
    blocks: list[Block] = []
    for config in configs:
        if config.ok:
            continue
        blocks.append(Heading(3, f"{label(config)}: {config.state}"))
        for part, job in _failures(config):
            blocks.append(BulletList(_failure_items(part, job)))
            # A recorded job quotes its own journal; journal.log beside it is the directory's last job's.
            journal = list(job.journal_tail) if job is not None else part.journal_excerpt
            if journal:
                blocks += [Paragraph("Journal excerpt:"), Preformatted("\n".join(journal))]
            else:
                blocks.append(Paragraph("No journal excerpt was saved."))
            if job is not None:
                blocks += _rank_journals(part, job)
    return blocks


# --- the reports -----------------------------------------------------------------------------------------


def _level_blocks(
    headlines: Sequence[Headline], label: Label, fleet: Fleet | None, marks: FlagMarks
) -> list[Block]:
    """Every level of each config, with where its repeats ran and, where the run's queue judged them
    (automatic repeats under spread), why it added no more."""
    behind = any(level.behind for line in headlines for level in line.levels)
    notes = [MISSING_FIGURE, *([BEHIND_NOTE] if behind else []), *([FLAGGED_FIGURE] if marks.notes else [])]
    blocks: list[Block] = [Heading(2, f"Every {_loop(headlines).noun} level"), Paragraph(" ".join(notes))]
    for line in headlines:
        note = repeats_note(line.result)
        judged = judged_note(fleet, line.result.name)
        blocks += [
            Heading(3, label(line.result)),
            *([Paragraph(f"{hosts_cell(line.result)}: {note}.")] if note else []),
            level_table(line, marks) if line.levels else Paragraph("No points."),
            *([Paragraph(judged)] if judged else []),
        ]
    return blocks


COMPARISONS_NOTE = (
    "Output tok/s of each pair of configs that finished, at the lowest level and at each one's peak: each "
    "pair's own Welch test at the 5 % level, not corrected for the number of pairs (the verdict is)."
)
PARETO = "pareto.png"


def _plot_figures(plots: Sequence[Path], loop: Loop, *, pareto: bool, flagged: bool) -> list[Block]:
    """The Pareto plot (``pareto``), or every other plot, their x axes ``loop``'s levels; ``flagged``:
    whether a level is flagged (the Pareto plot's caption then says what its mark means)."""
    captions = _plot_captions(loop, flagged=flagged)
    return [
        Figure(path, captions.get(path.name, path.stem)) for path in plots if (path.name == PARETO) == pareto
    ]


def run_blocks(
    run: Run, headlines: Sequence[Headline], pairs: Sequence[PairDifferences], plots: Sequence[Path]
) -> list[Block]:
    label = labeller([run])
    spread = run.placement == SPREAD
    hardware = not spread and len({config.host for config in run.configs}) > 1
    blocks: list[Block] = [Heading(1, run.title), _campaign_line(run)]
    checks = answer_checks(run)
    found = verdict(run, headlines, refused=refused(checks))
    marks = FlagMarks(headlines)
    # Per host, the host is said once for all its configs.
    name: Label = (lambda result: result.name) if found.hosts else label
    blocks += verdict_blocks(found, name, marks, unfair=_unfair_pointer(pairs, [run]))
    blocks += _first_screen(run, pairs, label, headlines)
    loop = _loop(headlines)
    flagged = any(pareto_flagged(level) for line in headlines for level in line.levels)
    blocks += _plot_figures(plots, loop, pareto=True, flagged=flagged)
    headline = headline_table(headlines, label, hosts=spread, slo=bool(found.slo), marks=marks)
    blocks += [Heading(2, "Headline"), headline, *([Paragraph(FLAGGED_FIGURE)] if marks.notes else [])]
    blocks += [
        Heading(3, "Comparisons"),
        Paragraph(COMPARISONS_NOTE),
        _comparison_list(headlines, label, marks, same_host=not spread),
    ]
    blocks += answers_blocks(checks, run, label)
    if hardware:
        blocks += hardware_blocks(headlines, label, marks)
    blocks += [Heading(2, "Plots"), *_plot_figures(plots, loop, pareto=False, flagged=flagged)]
    between = (
        "between the configs of each host, and between the hosts of each config"
        if hardware
        else "between each pair of configs"
        if spread
        else "between each pair of configs (and hosts)"
    )
    notes = ([MERGED_NOTE] if spread else []) + ([ACCEPTED_NOTE] if run.fleet and run.fleet.accepted else [])
    blocks += [Heading(2, "What differed"), _differences_intro(between, notes)]
    blocks += difference_blocks(pairs, label, 3)
    blocks += [Heading(3, "Not compared, and why"), ignored_fields_table()]
    blocks += _level_blocks(headlines, label, run.fleet, marks)
    blocks += turn_blocks(headlines, label)
    blocks += disaggregation_blocks(headlines, label)
    blocks += spec_blocks(headlines, label)
    blocks += checks_blocks(headlines, label, marks, CHECKS_TITLE)
    blocks += rounds_blocks(run, headlines)
    blocks += overhead_blocks(run)
    blocks += planned_blocks(run)
    failures = failure_blocks(run.configs, label)
    if failures:
        blocks += [Heading(2, "Failed configs"), *failures]
    return blocks


PARETO_FLAGGED = (
    f"; `{MARK}` after a level: a measurement check doubts its throughput or its per-user speed (Measurement "
    "checks)"
)


def _plot_captions(loop: Loop, *, flagged: bool) -> dict[str, str]:
    return {
        "throughput.png": f"Aggregate output throughput against {loop.noun}",
        PARETO: (
            "Per-user decode speed against output throughput per GPU (aggregate where a config's GPUs are "
            "unknown), each point one level, with the Pareto frontier; with an SLO, hollow points missed it"
            + (PARETO_FLAGGED if flagged else "")
        ),
        "latency.png": f"TTFT p50, TTFT p99 and TPOT p50 against {loop.noun}",
    }


def _side_by_side(
    run_a: Run,
    run_b: Run,
    headlines: tuple[Sequence[Headline], Sequence[Headline]],
    label: Label,
    marks: FlagMarks,
) -> list[Block]:
    """Each config in run A and in run B, at its lowest level and at its peak, whether B differs from A
    (Holm over every change tested), and its highest load under the SLO where both runs have one."""
    line_of = {id(line.result): line for lines in headlines for line in lines}
    matched = [
        (line_of[id(config_a)], line_of[id(config_b)])
        for config_a, config_b in matched_configs(run_a, run_b)
        if id(config_a) in line_of and id(config_b) in line_of
    ]
    changes, tested = run_changes(matched)
    change_of = {(id(item.a), item.figure): item for item in changes}
    objectives = [campaign_slo(run.campaign)[0] for run in (run_a, run_b)]
    slo = all(objectives)
    rows = []
    for line_a, line_b in matched:
        row = [label(line_a.result), f"{line_a.result.state} / {line_b.result.state}"]
        for figure_name in ("first", "peak"):
            found = change_of.get((id(line_a), figure_name))
            if found is None:
                row += ["-", "-", "-"]
                continue
            level_a, level_b = line_a.level(figure_name), line_b.level(figure_name)
            row += [
                f"{marks.figure(line_a, level_a, THROUGHPUT)} ({level_a.label})",
                f"{marks.figure(line_b, level_b, THROUGHPUT)} ({level_b.label})",
                corrected_change(found.comparison, found.significant),
            ]
        if slo:
            row += [_reach_text(line_a, marks), _reach_text(line_b, marks)]
        rows.append(row)
    loop = _loop([*headlines[0], *headlines[1]])
    header = ["config", "status A / B"]
    for where in (f"lowest {loop.symbol}", "peak"):
        header += [
            f"out tok/s {where}, {run_a.run_id}",
            f"out tok/s {where}, {run_b.run_id}",
            f"B vs A, {where}",
        ]
    if slo:
        header += [f"{_reach_title(loop)}, {run.run_id}" for run in (run_a, run_b)]
    note = (
        f"B vs A: each config's output tok/s in run {run_b.run_id} against run {run_a.run_id}, Welch's "
        f"two-sided t-test, Holm-corrected over the {tested} change(s) tested (each config at its lowest "
        f"{loop.symbol} and at its peak): `significant` is more than noise, with at most a 5 % chance that "
        "any of them is a false alarm."
    )
    if slo and objectives[0] != objectives[1]:
        note += " The runs' SLOs differ: " + "; ".join(
            f"{run.run_id}: {objectives_text(targets)}"
            for run, targets in zip((run_a, run_b), objectives, strict=True)
        )
        note += "."
    return [
        Heading(2, "Side by side"),
        Paragraph(note),
        Table(header, rows, [False, False, *[True] * (len(header) - 2)]),
        *([Paragraph(FLAGGED_FIGURE)] if marks.notes else []),
    ]


def comparison_blocks(
    run_a: Run,
    run_b: Run,
    headlines: tuple[Sequence[Headline], Sequence[Headline]],
    pairs: Sequence[PairDifferences],
    plots: Sequence[Path],
) -> list[Block]:
    """Run B against run A: the same config (on the same host, where both ran every config on every
    host), side by side, and what differed between them."""
    label = labeller([run_a, run_b])

    def in_run(run: Run) -> Label:
        return lambda result: f"{label(result)} ({run.run_id})"

    def owner(result: ConfigRun | ConfigResult) -> str:
        mine = [*run_a.results, *run_a.configs]
        return in_run(run_a if any(result is other for other in mine) else run_b)(result)

    blocks: list[Block] = [Heading(1, f"{run_b.title} against run {run_a.run_id}")]
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
        failed = _failed_alert(run.configs, in_run(run))
        if failed:
            blocks.append(failed)
        blocks += fleet_alerts(run)
        blocks += _campaign_change_alerts(run)
    blocks += _file_alerts([run_a, run_b])
    settings = [run.campaign["workload"].get("repeats", 1) for run in (run_a, run_b)]
    if settings[0] == settings[1]:
        blocks.append(_confidence_alert(settings[0], [*headlines[0], *headlines[1]]))
    else:
        for run, setting, lines in zip((run_a, run_b), settings, headlines, strict=True):
            alert = _confidence_alert(setting, lines)
            blocks.append(Alert(alert.kind, f"Run {run.run_id}: {alert.title}", alert.items))
    marks = FlagMarks([*headlines[0], *headlines[1]])
    blocks += _side_by_side(run_a, run_b, headlines, label, marks)
    loop = _loop([*headlines[0], *headlines[1]])
    flagged = any(pareto_flagged(level) for lines in headlines for line in lines for level in line.levels)
    blocks += [
        Heading(2, "Plots"),
        *_plot_figures(plots, loop, pareto=True, flagged=flagged),
        *_plot_figures(plots, loop, pareto=False, flagged=flagged),
    ]
    blocks += [
        Heading(2, "What differed between the runs"),
        _differences_intro("between the two runs of each config"),
    ]
    blocks += difference_blocks(pairs, owner, 3)
    blocks += [Heading(3, "Not compared, and why"), ignored_fields_table()]
    for run, lines in zip((run_a, run_b), headlines, strict=True):
        spread = run.placement == SPREAD
        slo = bool(campaign_slo(run.campaign)[0])
        blocks += [
            Heading(2, f"Headline of run {run.run_id}"),
            headline_table(lines, label, hosts=spread, slo=slo, marks=marks),
        ]
        blocks += checks_blocks(lines, label, marks, f"{CHECKS_TITLE} of run {run.run_id}", 3)
        failures = failure_blocks(run.configs, label)
        if failures:
            blocks += [Heading(3, f"Failed configs of run {run.run_id}"), *failures]
    return blocks
