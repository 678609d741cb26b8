"""A campaign's answers and accuracy keys: defaults, the probe draw, the speculative default match, and
each rule's one-line message (fairbench.campaign.answers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.test_campaign import SOURCE, VALID, changed, only_error, parse

from fairbench.answers.plan import plan_from_json
from fairbench.answers.probes import shipped_prompts


def test_every_campaign_asks_the_default_probes_drawn_from_the_seed_through_the_first_workloads_api() -> None:
    plan = parse(VALID).answers
    assert plan is not None
    assert len(plan.probes) == 16 and plan.max_tokens == 32 and plan.api == "completions"
    assert len({probe.id for probe in plan.probes}) == 16
    prompts = shipped_prompts()
    assert all(prompts[int(probe.id[1:])] == probe.prompt for probe in plan.probes)
    other = parse(changed(("answers", {"seed": 2}))).answers
    assert other is not None and [p.id for p in other.probes] != [p.id for p in plan.probes]
    # campaign.json's answers read back as they were written: the host and the report see one plan.
    assert plan_from_json(parse(VALID).to_json()["answers"]) == plan


def test_no_probes_asked_with_probes_zero() -> None:
    plan = parse(changed(("answers", {"probes": 0}))).answers
    assert plan is not None and plan.probes == ()


def test_a_speculative_config_must_match_the_config_it_extends_by_default() -> None:
    document = changed(
        ("configs.ep4-ngram", {"extends": "ep4", "args": {"speculative-algorithm": "NGRAM"}}),
    )
    plan = parse(document).answers
    assert plan is not None and plan.match == {"ep4-ngram": "ep4"}
    explicit = parse(changed(("answers", {"match": {"tp8-nccl": "tp8"}}))).answers
    assert explicit is not None and explicit.match == {"tp8-nccl": "tp8"}


def test_a_probe_file_of_the_campaigns_own(tmp_path: Path) -> None:
    (tmp_path / "probes.yaml").write_text("prompts:\n  - Say hello.\n  - Name a colour.\n")
    plan = parse(changed(("answers", {"probe_file": "probes.yaml", "probes": 5})), tmp_path).answers
    assert plan is not None and sorted(probe.prompt for probe in plan.probes) == [
        "Name a colour.",
        "Say hello.",
    ]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("answers", {"probez": 3}),
            "answers.probez: unknown key; expected one of probes, probe_file, seed, "
            "max_tokens, api, concurrency, min_identical_share, match (did you mean 'probes'?)",
        ),
        (
            ("answers", {"min_identical_share": 1.5}),
            "answers.min_identical_share: must be a number from 0 to 1 (a share), got 1.5",
        ),
        (
            ("answers", {"match": {"ep4": "ep9"}}),
            "answers.match.ep4: 'ep9' is not a config of the campaign (tp8, tp8-nccl, ep4, ep8-eplb)",
        ),
        (
            ("answers", {"match": {"ep4": "ep4"}}),
            "answers.match.ep4: a config matched against itself checks nothing",
        ),
        (("answers", {"api": "grpc"}), "answers.api: must be one of completions, chat, generate, got 'grpc'"),
        (
            ("accuracy", {"problems": 10}),
            "accuracy: give one of task (arithmetic) or lm_eval (an lm-eval task's name)",
        ),
        (
            ("accuracy", {"lm_eval": "gsm8k", "problems": 10}),
            "accuracy.problems: the count of fairbench's own task: lm_eval takes limit",
        ),
        (("accuracy", {"task": "trivia"}), "accuracy.task: must be one of arithmetic, got 'trivia'"),
    ],
)
def test_each_rule_has_its_message(edit: tuple[str, object], message: str) -> None:
    assert only_error(changed(edit)) == f"{SOURCE}: {message}"


def test_a_probe_file_that_does_not_parse_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "probes.yaml").write_text("prompts: [unclosed\n")
    with pytest.raises(Exception) as caught:
        parse(changed(("answers", {"probe_file": "probes.yaml"})), tmp_path)
    (message,) = caught.value.messages  # type: ignore[attr-defined]
    assert message.startswith(f"{SOURCE}: answers.probe_file: {tmp_path / 'probes.yaml'}: not YAML: ")
    (tmp_path / "empty.yaml").write_text("prompts: [hello, 3]\n")
    with pytest.raises(Exception) as caught:
        parse(changed(("answers", {"probe_file": "empty.yaml"})), tmp_path)
    assert caught.value.messages == [  # type: ignore[attr-defined]
        f"{SOURCE}: answers.probe_file: {tmp_path / 'empty.yaml'}: prompts[1]: must be a non-empty string, "
        "got 3"
    ]


def test_a_probe_file_that_is_missing_or_not_text_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "binary.yaml").write_bytes(b"prompts: [\xff\xfe]\n")
    for name, rule in (
        ("missing.yaml", "cannot read: No such file or directory"),
        ("binary.yaml", "not UTF-8 text"),
    ):
        with pytest.raises(Exception) as caught:
            parse(changed(("answers", {"probe_file": name})), tmp_path)
        (message,) = caught.value.messages  # type: ignore[attr-defined]
        assert message.startswith(f"{SOURCE}: answers.probe_file: {tmp_path / name}: {rule}"), message
