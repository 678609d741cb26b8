"""The Answers section and its gate on the verdict (fairbench.report.answers): each config's probe answers
against the baseline's or the config it must match, its task score against the baseline's, and a config
that fails ranked nowhere, said on the first screen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.report_files import markdown, section, write_run
from tests.unit.test_report_verdict import level_points, spread

from fairbench.answers.plan import AccuracyPlan, AnswersPlan, Probe
from fairbench.report.answers import answer_checks, refused
from fairbench.report.build import headlines
from fairbench.report.load import Run, load_run
from fairbench.report.verdict import verdict

PROBES = tuple(Probe(f"p{index:02d}", f"prompt {index}") for index in range(4))
BASE_IDS = [[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33], [40, 41, 42, 43]]


def answers_file(
    ids: list[list[int]], *, correct: int | None = None, drop: frozenset[int] = frozenset()
) -> dict[str, Any]:
    probes = [
        {"id": probe.id, "error": "HTTP 500"}
        if index in drop
        else {
            "id": probe.id,
            "text": "",
            "token_ids": seq,
            "tokens": None,
            "logprobs": [-0.5 - 0.1 * p for p in range(len(seq))],
        }
        for index, (probe, seq) in enumerate(zip(PROBES, ids, strict=True))
    ]
    accuracy = (
        None if correct is None else {"task": "arithmetic", "correct": correct, "total": 100, "answers": []}
    )
    return {
        "api": "chat",
        "max_tokens": 4,
        "started_at": 0.0,
        "seconds": 0.1,
        "probes": probes,
        "accuracy": accuracy,
    }


def run_with(tmp_path: Path, files: dict[str, dict[str, Any] | None], plan: AnswersPlan) -> Run:
    points = {
        name: level_points({1: spread(100.0 + 5 * index, 0.002, 3)}) for index, name in enumerate(files)
    }
    path = write_run(tmp_path, points, workload={"concurrency": [1]}, margin_pct=1.0)
    campaign = json.loads((path / "campaign.json").read_text())
    campaign["answers"] = plan.to_json()
    (path / "campaign.json").write_text(json.dumps(campaign))
    for name, found in files.items():
        if found is not None:
            (path / "lab1" / name / "answers").mkdir()
            (path / "lab1" / name / "answers" / "start-r0.json").write_text(json.dumps(found))
    return load_run(path)


def test_identical_answers_pass_and_the_table_says_so(tmp_path: Path) -> None:
    run = run_with(
        tmp_path,
        {"tp8": answers_file(BASE_IDS), "ep4": answers_file(BASE_IDS)},
        AnswersPlan(PROBES, min_identical_share=1.0),
    )
    checks = answer_checks(run)
    assert refused(checks) == {}
    text = section(markdown(run), "## Answers")
    row = next(line for line in text.splitlines() if line.startswith("| ep4"))
    assert "| tp8 |" in row and "| 4 of 4 |" in row and "passes" in row


def test_a_config_that_must_match_and_does_not_is_ranked_nowhere_and_the_first_screen_says_why(
    tmp_path: Path,
) -> None:
    changed = [BASE_IDS[0], [20, 21, 99, 23], BASE_IDS[2], [40, 41, 42]]
    run = run_with(
        tmp_path,
        {"tp8": answers_file(BASE_IDS), "ep4": answers_file(BASE_IDS), "ep8": answers_file(changed)},
        AnswersPlan(PROBES, match={"ep8": "ep4"}),
    )
    assert refused(answer_checks(run)) == {
        "ep8": "2 of 4 probe answers differ from ep4's (must match exactly)"
    }
    found = verdict(run, headlines([run])[0], refused=refused(answer_checks(run)))
    assert all(standing.line.result.name != "ep8" for regime in found.regimes for standing in regime.ranked)
    report = markdown(run)
    first_screen = section(report, "## Verdict")
    assert "**Answers**: **ep8** is ranked nowhere: 2 of 4 probe answers differ from ep4's" in first_screen
    row = next(line for line in section(report, "## Answers").splitlines() if line.startswith("| ep8"))
    # First divergences at 2 (a changed token) and 3 (an answer one token short): min 2, median 2.5.
    assert "| ep4 |" in row and "| 2 of 4 |" in row and "| 2 / 2.5 |" in row and "**fails**" in row
    # Both chose their token at -0.7 where they part (a gap of 0); where one ended there is no gap.
    assert "| 0.000 |" in row


def test_a_score_below_the_baseline_by_more_than_the_margin_fails_and_one_within_passes(
    tmp_path: Path,
) -> None:
    plan = AnswersPlan(PROBES, accuracy=AccuracyPlan("arithmetic", max_drop_pct=2.0))
    run = run_with(
        tmp_path,
        {
            "tp8": answers_file(BASE_IDS, correct=80),
            "ep4": answers_file(BASE_IDS, correct=79),
            "ep8": answers_file(BASE_IDS, correct=70),
        },
        plan,
    )
    assert refused(answer_checks(run)) == {
        "ep8": "its arithmetic score 70.0% is below tp8's 80.0% by more than 2 points"
    }
    text = section(markdown(run), "## Answers")
    ep4 = next(line for line in text.splitlines() if line.startswith("| ep4") and "79 of 100" in line)
    assert "-1.0 pts" in ep4 and "passes" in ep4


def test_what_was_not_checked_is_said_and_fails_nothing(tmp_path: Path) -> None:
    run = run_with(
        tmp_path,
        {"tp8": answers_file(BASE_IDS), "ep4": answers_file(BASE_IDS, drop=frozenset({1})), "ep8": None},
        AnswersPlan(PROBES, min_identical_share=1.0),
    )
    assert refused(answer_checks(run)) == {}
    text = section(markdown(run), "## Answers")
    assert "**ep4**: 1 probe answer(s) missing on one side" in text
    assert "**ep8**: no answers file" in text


def test_a_server_without_log_probabilities_or_tokens_is_compared_by_characters_and_says_so(
    tmp_path: Path,
) -> None:
    plain = answers_file(BASE_IDS)
    bare = {
        **plain,
        "probes": [
            {"id": p["id"], "text": f"answer {p['id']}", "token_ids": None, "tokens": None, "logprobs": None}
            for p in plain["probes"]
        ],
    }
    run = run_with(tmp_path, {"tp8": bare, "ep4": bare}, AnswersPlan(PROBES))
    text = section(markdown(run), "## Answers")
    assert (
        "**ep4**: its server returned no log-probabilities: no gap at the first divergence; its server "
        "returned no tokens: answers compared by characters" in text
    )
    row = next(line for line in text.splitlines() if line.startswith("| ep4"))
    assert "| 4 of 4 |" in row and "passes" in row


def test_speculative_acceptance_on_the_probes_pools_sglangs_per_request_counts(tmp_path: Path) -> None:
    found = answers_file(BASE_IDS)
    for probe, (length, steps) in zip(found["probes"], [(2.0, 2), (4.0, 1), (2.0, 2), (1.0, 4)], strict=True):
        probe["meta_info"] = {"spec_accept_length": length, "spec_verify_ct": steps}
    run = run_with(tmp_path, {"tp8": answers_file(BASE_IDS), "ep4": found}, AnswersPlan(PROBES))
    # (4 + 4 + 4 + 4) tokens over (2 + 1 + 2 + 4) verify steps.
    assert f"**ep4** {16 / 9:.2f} tokens per verify step" in section(markdown(run), "## Answers")
