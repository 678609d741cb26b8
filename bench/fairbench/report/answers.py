"""The Answers section, and the gate it puts on the verdict: each config's greedy answers to the campaign's
probes against the baseline's (or the config it must match), and its accuracy task's score against the
baseline's (``fairbench.answers``).

A config's starts are its jobs' answers files (``answers/start-r<repeat>.json`` in each of its
directories), earliest repeat first; its first start's answers are what others are compared with, and each
of its starts is compared (so a server that answers differently from one start to the next shows too). A
config fails the gate, and the verdict ranks it nowhere, where:

- it must ``match`` another config (a speculative config its base, by default) and a probe differs;
- the campaign sets ``min_identical_share`` and its share identical to the baseline's is below it;
- its accuracy score is below the baseline's by more than ``max_drop_pct`` points.

What could not be checked (no answers file, a probe unanswered, a task that did not run) is said, and
fails nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from fairbench.answers.compare import Equivalence, compare
from fairbench.answers.plan import AnswersPlan, plan_from_json
from fairbench.answers.scores import Score, difference_interval, falls_short
from fairbench.measure.decision import baseline_of
from fairbench.measure.results_format import ANSWERS_DIR
from fairbench.report.blocks import Block, BulletList, Heading, Paragraph, Table
from fairbench.report.formatting import Label
from fairbench.report.load import Run
from fairbench.report.tree import ConfigRun


@dataclass(frozen=True)
class Start:
    """One server start's answers file."""

    host: str
    path: Path
    repeat: int
    found: dict[str, Any]


@dataclass(frozen=True)
class AnswerCheck:
    """One config's answers against what they must hold."""

    config: ConfigRun
    starts: tuple[Start, ...]
    reference: str | None
    """The config its answers are compared with (itself for the baseline: its later starts)."""
    required: str
    """``exact``, ``share`` or ``reported``."""
    equivalence: Equivalence | None
    score: Score | None
    baseline_score: Score | None
    failed: tuple[str, ...]
    """Why it fails the gate, each a phrase; empty: it passes."""
    not_checked: tuple[str, ...]


def _repeat_of(path: Path) -> int:
    digits = "".join(char for char in path.stem.rsplit("-r", 1)[-1] if char.isdigit())
    return int(digits) if digits else 0


def starts(config: ConfigRun) -> tuple[list[Start], list[str]]:
    """Its answers files, earliest repeat first, and what of them cannot be read."""
    found, problems = [], []
    for part in config.parts:
        for path in sorted((part.path / ANSWERS_DIR).glob("*.json")):
            try:
                content = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                problems.append(f"{path}: cannot be read: {exc}")
                continue
            if not isinstance(content, dict):
                problems.append(f"{path}: not a JSON object")
                continue
            found.append(Start(part.host, path, _repeat_of(path), content))
    return sorted(found, key=lambda start: start.repeat), problems


def _pooled(reference: Start, others: Sequence[Start]) -> Equivalence | None:
    if not others:
        return None
    each = [compare(reference.found, other.found) for other in others]
    return Equivalence(
        tuple(probe for found in each for probe in found.compared),
        tuple(probe for found in each for probe in found.unanswered),
    )


def _score(start: Start | None) -> tuple[Score | None, str | None]:
    accuracy = None if start is None else start.found.get("accuracy")
    if not isinstance(accuracy, dict):
        return None, None
    if "error" in accuracy:
        return None, f"{accuracy.get('task')}: {accuracy['error']}"
    return Score(int(accuracy["correct"]), int(accuracy["total"])), None


def run_plan(run: Run) -> tuple[AnswersPlan | None, str | None]:
    """campaign.json's plan of answers, and why it cannot be used where it cannot (then None)."""
    try:
        return plan_from_json(run.campaign.get("answers")), None
    except ValueError as exc:
        return None, f"campaign.json's {exc}: its servers' answers are not compared"


def answer_checks(run: Run) -> list[AnswerCheck]:
    """Every config's check, in the run's order; none where the campaign asked nothing (or its plan cannot
    be used)."""
    plan, _ = run_plan(run)
    if plan is None or (not plan.probes and plan.accuracy is None):
        return []
    configs = {config.name: config for config in run.configs}
    found = {name: starts(config) for name, config in configs.items()}
    baseline = baseline_of(run.campaign)
    base_starts = found.get(baseline or "", ([], []))[0]
    base_score, _ = _score(base_starts[0] if base_starts else None)
    return [_check(config, found, plan, baseline, base_score) for config in run.configs]


def _check(
    config: ConfigRun,
    found: Mapping[str, tuple[list[Start], list[str]]],
    plan: AnswersPlan,
    baseline: str | None,
    base_score: Score | None,
) -> AnswerCheck:
    own, problems = found[config.name]
    not_checked = list(problems)
    if not own:
        not_checked.append(
            "no answers file: its server answered nothing (it did not start, or ran before answers were "
            "checked)"
        )
    reference = plan.match.get(config.name, baseline)
    required = (
        "exact"
        if config.name in plan.match
        else "share"
        if plan.min_identical_share is not None
        else "reported"
    )
    ref_starts = found.get(reference or "", ([], []))[0]
    equivalence = None
    if plan.probes and own and ref_starts:
        others = own[1:] if reference == config.name else own
        equivalence = _pooled(ref_starts[0], others)
    elif plan.probes and own and reference is not None:
        not_checked.append(f"{reference} has no answers to compare with")
    if plan.probes and any(
        probe.get("logprobs") is None
        for start in own
        for probe in start.found.get("probes", [])
        if "error" not in probe
    ):
        not_checked.append("its server returned no log-probabilities: no gap at the first divergence")
    if equivalence is not None and equivalence.unit != "tokens":
        not_checked.append("its server returned no tokens: answers compared by characters")
    if equivalence is not None and equivalence.unanswered:
        not_checked.append(f"{len(equivalence.unanswered)} probe answer(s) missing on one side")
    failed = []
    if equivalence is not None and equivalence.compared and reference != config.name:
        differ = len(equivalence.compared) - equivalence.identical
        if required == "exact" and differ:
            failed.append(
                f"{differ} of {len(equivalence.compared)} probe answers differ from {reference}'s (must "
                "match exactly)"
            )
        share = equivalence.share or 0.0
        if required == "share" and plan.min_identical_share is not None and share < plan.min_identical_share:
            failed.append(
                f"{share:.0%} of its probe answers are identical to {reference}'s (at least "
                f"{plan.min_identical_share:.0%} required)"
            )
    score, score_problem = _score(own[0] if own else None)
    if score_problem:
        not_checked.append(score_problem)
    task = plan.accuracy
    if (
        task is not None
        and score is not None
        and base_score is not None
        and config.name != baseline
        and falls_short(score, base_score, task.max_drop_pct)
    ):
        failed.append(
            f"its {task.task} score {score.share:.1%} is below {baseline}'s {base_score.share:.1%} by "
            f"more than {task.max_drop_pct:g} points"
        )
    return AnswerCheck(
        config,
        tuple(own),
        reference,
        required,
        equivalence,
        score,
        base_score if config.name != baseline else None,
        tuple(failed),
        tuple(not_checked),
    )


def refused(checks: Sequence[AnswerCheck]) -> dict[str, str]:
    """The configs that fail the gate, each with why (its reasons joined)."""
    return {check.config.name: "; ".join(check.failed) for check in checks if check.failed}


def probe_acceptance(own: Sequence[Start]) -> float | None:
    """Speculative decoding's accept length over a config's probe answers: sum(accept length x verify
    steps) / sum(verify steps) = completion tokens / verify steps, SGLang's own per-request figure pooled;
    None where no answer reported one."""
    steps = tokens = 0.0
    for start in own:
        for probe in start.found.get("probes", []):
            meta = probe.get("meta_info") or {}
            if meta.get("spec_verify_ct") and meta.get("spec_accept_length") is not None:
                steps += float(meta["spec_verify_ct"])
                tokens += float(meta["spec_accept_length"]) * float(meta["spec_verify_ct"])
    return tokens / steps if steps else None


def _divergence_cell(equivalence: Equivalence | None) -> str:
    if equivalence is None or not equivalence.divergences:
        return "-"
    positions = equivalence.divergences
    unit = "" if equivalence.unit == "tokens" else " (chars)"
    return f"{positions[0]} / {median(positions):g}{unit}"


def answers_blocks(checks: Sequence[AnswerCheck], run: Run, name: Label) -> list[Block]:
    """The Answers section: the equivalence table, the accuracy table, and what was not checked."""
    plan, problem = run_plan(run)
    if problem:
        return [Heading(2, "Answers"), Paragraph(problem)]
    if not checks or plan is None:
        return []
    blocks: list[Block] = [Heading(2, "Answers")]
    baseline = baseline_of(run.campaign)
    if plan.probes:
        blocks.append(
            Paragraph(
                f"Before its sweep each server start answered {len(plan.probes)} probes greedily (the "
                f"`{plan.api}` API, at most {plan.max_tokens} tokens each, {plan.concurrency} at a time). "
                "Each "
                "config's answers are compared token by token with the first start of the config it is held "
                f"to: the one it must match, else the baseline **{baseline}** (whose own row compares its "
                "later "
                "starts with its first). First divergence: the earliest and the median position where an "
                "answer differs; log-prob gap: the largest difference, at the first divergent token, between "
                "the log-probabilities of the tokens the two servers chose (`docs/metrics.md`)."
            )
        )
        rows = []
        for check in checks:
            found = check.equivalence
            required = (
                "-"
                if check.reference == check.config.name
                else "identical"
                if check.required == "exact"
                else f">= {plan.min_identical_share:.0%} identical"
                if plan.min_identical_share is not None
                else "-"
            )
            rows.append(
                [
                    name(check.config),
                    check.reference or "-",
                    "-"
                    if found is None or not found.compared
                    else f"{found.identical} of {len(found.compared)}",
                    _divergence_cell(found),
                    "-" if found is None or found.largest_gap is None else f"{found.largest_gap:.3f}",
                    required,
                    _result(check, probes=True),
                ]
            )
        blocks.append(
            Table(
                [
                    "Config",
                    "Against",
                    "Identical",
                    "First divergence (min / median)",
                    "Log-prob gap",
                    "Required",
                    "Result",
                ],
                rows,
                [False, False, True, True, True, False, False],
            )
        )
    if plan.accuracy is not None:
        task = plan.accuracy
        blocks.append(
            Paragraph(
                f"Accuracy: {_task_text(plan)}, each through the chat API, greedy, scored by exact match; "
                f"95 % Wilson interval per config; against the baseline, the difference with Newcombe's "
                f"interval. A config more than {task.max_drop_pct:g} points below the baseline is not named "
                "best."
            )
        )
        rows = []
        for check in checks:
            score = check.score
            versus = "-"
            if score is not None and check.baseline_score is not None:
                low, high = difference_interval(score, check.baseline_score)
                change = (score.share - check.baseline_score.share) * 100
                versus = f"{change:+.1f} pts [{low * 100:+.1f}, {high * 100:+.1f}]"
            rows.append(
                [
                    name(check.config),
                    "-" if score is None else f"{score.correct} of {score.total} ({score.share:.1%})",
                    "-" if score is None else "{:.1%} to {:.1%}".format(*score.interval),
                    versus,
                    _result(check, probes=False),
                ]
            )
        blocks.append(
            Table(
                ["Config", "Score", "95 % interval", "Against the baseline", "Result"],
                rows,
                [False, True, True, True, False],
            )
        )
    accepted = [
        f"**{name(check.config)}** {length:.2f} tokens per verify step"
        for check in checks
        if (length := probe_acceptance(check.starts)) is not None
    ]
    if accepted:
        blocks.append(
            Paragraph(
                "Speculative decoding on the probes (real text, greedy; SGLang's per-request counts, "
                "completion tokens over verify steps): " + "; ".join(accepted) + "."
            )
        )
    unchecked = [
        f"**{name(check.config)}**: {'; '.join(check.not_checked)}" for check in checks if check.not_checked
    ]
    if unchecked:
        blocks += [Paragraph("Not checked:"), BulletList(unchecked)]
    return blocks


def _task_text(plan: AnswersPlan) -> str:
    task = plan.accuracy
    assert task is not None
    if task.lm_eval:
        return f"lm-eval's `{task.task}` (its first {task.problems} documents)"
    return f"fairbench's `{task.task}` task ({task.problems} word problems from seed {task.seed})"


def _result(check: AnswerCheck, *, probes: bool) -> str:
    """``**fails**`` where one of its reasons is of this table (probes, or the task), else ``passes``
    where that table checked it, else ``-``."""
    if any(("probe" in reason) == probes for reason in check.failed):
        return "**fails**"
    checked = check.equivalence is not None and check.equivalence.compared if probes else check.score
    return "passes" if checked else "-"
