"""A server's answers before its sweep, against ``fairbench sim``: the probes through each API, compared
across servers that must answer the same and servers that do not, and the arithmetic task scored
(fairbench.answers.check and fairbench.answers.compare through real HTTP)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.support.sim_process import running_sims

from fairbench.answers.arithmetic import problems
from fairbench.answers.check import summary, write_answers
from fairbench.answers.compare import compare
from fairbench.answers.plan import AccuracyPlan, AnswersPlan
from fairbench.answers.probes import draw, shipped_prompts

BASE = ("--model-path", "sim/test-model", "--sim-time-scale", "0.01")
PROBES = draw(shipped_prompts(), 8, seed=1)


@pytest.mark.parametrize("api", ["chat", "completions", "generate"])
def test_servers_that_differ_only_in_layout_answer_alike_and_other_numerics_or_a_fault_do_not(
    tmp_path: Path, api: str
) -> None:
    plan = AnswersPlan(PROBES, max_tokens=12, api=api)
    flag_sets = [
        BASE,
        (*BASE, "--tp-size", "2", "--chunked-prefill-size", "64"),  # layout and scheduling only
        (*BASE, "--dtype", "float32"),  # another numerics family
        (*BASE, "--sim-fault", "diverge-after=5"),
    ]
    with running_sims(tmp_path, *flag_sets) as sims:
        found = [
            write_answers(plan, sim.url, None, tmp_path / f"{i}" / "start-r0.json")
            for i, sim in enumerate(sims)
        ]
    for answers in found:
        assert [probe["id"] for probe in answers["probes"]] == [probe.id for probe in PROBES]
        for probe in answers["probes"]:
            assert "error" not in probe, probe
            assert len(probe["token_ids"]) == len(probe["logprobs"]) == 12
    base, layout, numerics, fault = found
    same = compare(base, layout)
    assert (same.identical, same.share, same.divergences, same.largest_gap) == (8, 1.0, [], None)
    other = compare(base, numerics)
    assert other.identical < 8 and other.divergences and other.divergences[0] < 8
    assert other.largest_gap is not None and other.largest_gap > 0
    faulty = compare(base, fault)
    assert faulty.identical == 0 and faulty.divergences == [5] * 8
    assert (tmp_path / "0" / "start-r0.json").is_file()


def test_the_arithmetic_task_scores_the_servers_sums_and_a_diverging_server_lower(tmp_path: Path) -> None:
    task = AccuracyPlan("arithmetic", problems=60, max_tokens=8, concurrency=4)
    plan = AnswersPlan((), accuracy=task)
    with running_sims(tmp_path, BASE, (*BASE, "--sim-fault", "diverge-after=0")) as (right, wrong):
        scored = write_answers(plan, right.url, None, tmp_path / "right.json")["accuracy"]
        worse = write_answers(plan, wrong.url, None, tmp_path / "wrong.json")["accuracy"]
    # The simulator's "model" adds up the integers of a question: right on the sums, wrong elsewhere.
    sums = sum(
        1
        for problem in problems(1, 60)
        if sum(map(int, re.findall(r"\d+", problem.question))) == problem.answer
    )
    assert scored["total"] == 60 and scored["correct"] == sums and 0 < sums < 60
    assert worse["correct"] < scored["correct"]
    line = summary({"probes": [], "seconds": 1.0, "accuracy": scored})
    assert line == f"answers: 0 of 0 probes answered in 1.0 s; arithmetic: {sums} of 60 right"


def test_a_server_that_is_gone_is_an_error_per_probe_not_a_failure(tmp_path: Path) -> None:
    plan = AnswersPlan(PROBES[:2], max_tokens=4, api="chat", timeout_s=5)
    found = write_answers(plan, "http://127.0.0.1:9", "m", tmp_path / "a.json")
    assert [set(probe) for probe in found["probes"]] == [{"id", "error"}] * 2
    assert "/v1/chat/completions: ClientConnectorError" in found["probes"][0]["error"]
    assert summary(found).startswith("answers: 0 of 2 probes answered")


def test_a_speculative_server_answers_as_its_base_and_reports_its_acceptance_per_probe(
    tmp_path: Path,
) -> None:
    plan = AnswersPlan(PROBES, max_tokens=24, api="completions")
    with running_sims(tmp_path, BASE, (*BASE, "--speculative-algorithm", "NGRAM")) as (base, speculative):
        plain = write_answers(plan, base.url, None, tmp_path / "base.json")
        drafted = write_answers(plan, speculative.url, None, tmp_path / "spec.json")
    assert compare(plain, drafted).share == 1.0
    assert all("meta_info" not in probe for probe in plain["probes"])
    for probe in drafted["probes"]:
        meta = probe["meta_info"]
        assert meta["spec_verify_ct"] > 0
        assert meta["spec_accept_length"] == pytest.approx(24 / meta["spec_verify_ct"])
