"""lm-eval runs against a server: the command line, its results and samples files (recorded by
tests/fixtures/lm_eval/record.py), its failures in one line, fairbench's own task as an lm-eval task, and,
where ``$FAIRBENCH_LM_EVAL_PYTHON`` names an interpreter with lm-eval, real runs against servers on loopback.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.sim_process import free_port, running_sim
from tests.support.summing_chat_server import summing_server

from fairbench.answers import arithmetic
from fairbench.answers.lm_eval_run import (
    ARITHMETIC_METRIC,
    ARITHMETIC_TASK,
    DATASET_UNREACHABLE,
    FAILED,
    LM_EVAL_PYTHON_ENV,
    LM_EVAL_REQUIREMENT,
    LM_EVAL_VERSION,
    MESSAGE_CHARS,
    NO_ANSWER,
    NO_RESULTS,
    NOT_INSTALLED,
    SERVER_ERROR,
    TIMEOUT,
    UNKNOWN_TASK,
    UNSUPPORTED_TASK,
    LmEvalFailure,
    LmEvalRun,
    LmEvalScore,
    accuracy_of,
    chat_url,
    command_line,
    failure_of,
    read_score,
    run_lm_eval,
    score_of,
    write_arithmetic_task,
)
from fairbench.answers.plan import AccuracyPlan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lm_eval"
RECORDED = FIXTURES / "results_recorded.json"
RECORDED_SAMPLES = FIXTURES / "samples_fairbench_arithmetic_recorded.jsonl"
MODEL = "sim/test-model"
LM_EVAL_PYTHON = os.environ.get(LM_EVAL_PYTHON_ENV)
needs_lm_eval = pytest.mark.skipif(
    not LM_EVAL_PYTHON,
    reason=f"{LM_EVAL_PYTHON_ENV} is not set: no interpreter with {LM_EVAL_REQUIREMENT} to run lm-eval with",
)


def _operands(text: str) -> list[int]:
    return [int(number) for number in re.findall(r"[0-9]+", text)]


def _script(path: Path, body: str) -> str:
    """An executable shell script standing in for an interpreter; lm-eval's arguments reach it as $@."""
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _running(pid: int) -> bool:
    """Whether the process is there and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


# --- the command line -------------------------------------------------------------------------------------


def test_the_command_line(tmp_path: Path) -> None:
    job = LmEvalRun(
        task="gsm8k",
        base_url="http://gpu-host:30000/",
        model="moonshotai/Kimi-K2.6",
        output_dir=tmp_path / "out",
        limit=50,
        include_path=tmp_path / "tasks",
        num_concurrent=4,
        max_retries=2,
        max_gen_toks=512,
        seed=3,
        python="/opt/lm-eval/bin/python",
    )
    command = command_line(job)
    assert command == [
        "/opt/lm-eval/bin/python",
        "-m",
        "lm_eval",
        "run",
        "--model",
        "local-chat-completions",
        "--model_args",
        command[7],
        "--apply_chat_template",
        "--tasks",
        "gsm8k",
        "--gen_kwargs",
        '{"temperature": 0, "do_sample": false}',
        "--output_path",
        str(tmp_path / "out"),
        "--log_samples",
        "--seed",
        "3",
        "--limit",
        "50",
        "--include_path",
        str(tmp_path / "tasks"),
    ]
    assert json.loads(command[7]) == {
        "base_url": "http://gpu-host:30000/v1/chat/completions",
        "model": "moonshotai/Kimi-K2.6",
        "num_concurrent": 4,
        "max_retries": 2,
        "max_gen_toks": 512,
        "tokenized_requests": False,
        "tokenizer_backend": "none",
    }


def test_without_an_interpreter_the_lm_eval_command_runs_every_document(tmp_path: Path) -> None:
    command = command_line(LmEvalRun("gsm8k", "http://gpu-host:30000", "m", Path("out")))
    assert command[:2] == ["lm_eval", "run"]
    assert "--limit" not in command and "--include_path" not in command
    # lm-eval runs in its output directory, so the directory is named whole.
    assert command[command.index("--output_path") + 1] == str(Path("out").resolve())


def test_a_numeric_served_name_stays_a_string() -> None:
    command = command_line(LmEvalRun("gsm8k", "http://gpu-host:30000", "123", Path("out")))
    assert json.loads(command[command.index("--model_args") + 1])["model"] == "123"


@pytest.mark.parametrize(
    "given",
    [
        "http://gpu-host:30000",
        "http://gpu-host:30000/",
        "http://gpu-host:30000/v1",
        "http://gpu-host:30000/v1/chat/completions",
    ],
)
def test_the_chat_endpoint_from_the_servers_address(given: str) -> None:
    assert chat_url(given) == "http://gpu-host:30000/v1/chat/completions"


# --- results and samples files ----------------------------------------------------------------------------


def test_reading_a_recorded_run_of_fairbenchs_task() -> None:
    found = read_score(RECORDED, ARITHMETIC_TASK)
    assert isinstance(found, LmEvalScore)
    assert found.metric == ARITHMETIC_METRIC
    assert found.samples == 24
    assert found.lm_eval_version == LM_EVAL_VERSION
    assert found.value == pytest.approx(5 / 24)
    assert found.stderr == pytest.approx(0.0846811, abs=1e-6)
    assert found.correct == 5
    problems = arithmetic.problems(1, 24)
    assert [answer.id for answer in found.answers] == [problem.id for problem in problems]
    assert [answer.expected for answer in found.answers] == [str(problem.answer) for problem in problems]
    # The summing server is right exactly where the problem is a sum of its numbers (re-record the
    # fixture when the problems of seed 1 change).
    assert [answer.correct for answer in found.answers] == [
        sum(_operands(problem.question)) == problem.answer for problem in problems
    ]


def test_lm_evals_filter_read_each_recorded_reply_as_answer_in_does() -> None:
    samples = [json.loads(line) for line in RECORDED_SAMPLES.read_text().splitlines()]
    assert len(samples) == 24
    for sample in samples:
        given = arithmetic.answer_in(sample["resps"][0][0])
        assert sample["filtered_resps"][0].replace(",", "") == (NO_ANSWER if given is None else str(given))
        assert sample["exact_match"] == float(given == sample["doc"]["answer"])


def test_a_metric_named_by_its_name_or_its_key() -> None:
    document = json.loads(RECORDED.read_text())
    by_name = score_of(document, ARITHMETIC_TASK, "exact_match")
    by_key = score_of(document, ARITHMETIC_TASK, ARITHMETIC_METRIC)
    assert isinstance(by_name, LmEvalScore) and isinstance(by_key, LmEvalScore)
    assert by_name.metric == by_key.metric == ARITHMETIC_METRIC
    # Without the samples file the count right comes from the mean: 5/24 of 24 documents.
    assert by_name.correct == 5
    assert by_name.answers == ()


@pytest.mark.parametrize(
    ("task", "metric", "message"),
    [
        ("gsm8k", None, "lm-eval's results have no task gsm8k (tasks: fairbench_arithmetic)"),
        (
            ARITHMETIC_TASK,
            "acc",
            "lm-eval's results for fairbench_arithmetic have no the metric acc (metrics: exact_match,answer)",
        ),
        (ARITHMETIC_TASK, "exact_match,strict-match", "have no the metric exact_match,strict-match"),
    ],
)
def test_a_task_or_metric_the_results_lack(task: str, metric: str | None, message: str) -> None:
    found = score_of(json.loads(RECORDED.read_text()), task, metric)
    assert isinstance(found, LmEvalFailure)
    assert found.kind == NO_RESULTS
    assert message in found.message


def _document(results: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"results": results, "lm_eval_version": LM_EVAL_VERSION, **more}


def test_a_groups_documents_are_its_subtasks() -> None:
    document = _document(
        {
            "group": {"alias": "group", "exact_match,none": 0.5, "exact_match_stderr,none": "N/A"},
            "part_a": {"exact_match,none": 0.25},
            "part_b": {"exact_match,none": 2 / 3},
        },
        group_subtasks={"group": ["part_a", "part_b"]},
        **{
            "n-samples": {
                "part_a": {"original": 4, "effective": 4},
                "part_b": {"original": 9, "effective": 6},
            }
        },
    )
    found = score_of(document, "group")
    assert isinstance(found, LmEvalScore)
    assert (found.metric, found.samples, found.correct, found.stderr) == ("exact_match,none", 10, 5, None)


def test_a_metric_that_is_not_a_share_of_right_answers_has_no_count() -> None:
    document = _document(
        {"bleu_task": {"bleu,none": 37.2, "bleu_stderr,none": 1.5, "sample_len": 10}},
    )
    found = score_of(document, "bleu_task")
    assert isinstance(found, LmEvalScore)
    assert (found.value, found.stderr, found.samples, found.correct) == (37.2, 1.5, 10, None)


@pytest.mark.parametrize("value", [None, "N/A", float("nan"), True])
def test_a_value_that_is_not_a_number(value: object) -> None:
    found = score_of(_document({"task": {"exact_match,none": value, "sample_len": 3}}), "task")
    assert isinstance(found, LmEvalFailure) and found.kind == NO_RESULTS
    assert "is not a number" in found.message


def test_a_damaged_results_file(tmp_path: Path) -> None:
    damaged = tmp_path / "results_x.json"
    damaged.write_text('{"results": ')
    found = read_score(damaged, ARITHMETIC_TASK)
    assert isinstance(found, LmEvalFailure) and found.kind == NO_RESULTS
    assert "not a readable results file" in found.message


# --- failures ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "kind", "message"),
    [
        ("unknown-task", UNKNOWN_TASK, "ValueError: Tasks not found: no_such_task"),
        (
            "dataset-unreachable",
            DATASET_UNREACHABLE,
            "ConnectionError: Couldn't reach 'openai/gsm8k' on the Hub (OfflineModeIsEnabled)",
        ),
        (
            "server-error-refused",
            SERVER_ERROR,
            "the server did not answer: aiohttp.client_exceptions.ClientConnectorError: Cannot connect to "
            "host 127.0.0.1:",
        ),
        (
            "server-error-http-500",
            SERVER_ERROR,
            "the server answered HTTP 500: Internal server error: simulated fault http-500-rate",
        ),
        (
            "unsupported-task",
            UNSUPPORTED_TASK,
            "NotImplementedError: Loglikelihood is not supported for chat completions.",
        ),
    ],
)
def test_a_recorded_failure_in_one_line(recorded: str, kind: str, message: str) -> None:
    found = failure_of(1, (FIXTURES / f"{recorded}.err").read_text())
    assert found.kind == kind
    assert found.message.startswith(message)
    assert "\n" not in found.message and len(found.message) <= MESSAGE_CHARS


def test_failures_in_lm_evals_other_words() -> None:
    # lm-eval 0.4.13 without its [api] extra (models/api_models.py's message).
    missing = (
        "ModuleNotFoundError: Attempted to use an API model, but the required packages ['tenacity'] are not "
        'installed. Please install these via `pip install lm-eval[api]` or `pip install -e ."[api]"`'
    )
    assert failure_of(1, f"Traceback (most recent call last):\n{missing}\n") == LmEvalFailure(
        NOT_INSTALLED, missing
    )
    assert failure_of(1, "ModuleNotFoundError: No module named 'langdetect'\n") == LmEvalFailure(
        NOT_INSTALLED, "ModuleNotFoundError: No module named 'langdetect'"
    )
    # One request at a time goes through requests, whose failure lm-eval words otherwise.
    sync = (
        "2026-12-06:19:19:18 WARNING  [models.api_models:521] API request failed with error message: "
        '{"error": {"message": "context length exceeded"}}. Retrying...\n'
        "requests.exceptions.HTTPError: 400 Client Error: Bad Request for url: http://h/v1/chat/completions\n"
    )
    assert failure_of(1, sync) == LmEvalFailure(SERVER_ERROR, "the server answered context length exceeded")
    assert failure_of(2, "usage: lm-eval\nlm-eval: error: unrecognized arguments: --nope\n") == LmEvalFailure(
        FAILED, "lm-eval exited with status 2: lm-eval: error: unrecognized arguments: --nope"
    )
    assert failure_of(-9, "") == LmEvalFailure(FAILED, "lm-eval exited with status -9: nothing on stderr")
    long = failure_of(1, "RuntimeError: " + "x" * 1000)
    assert len(long.message) == MESSAGE_CHARS and long.message.endswith("...")


def test_an_interpreter_without_lm_eval(tmp_path: Path) -> None:
    # Python without its site directories: no lm_eval, whatever the venv holds, and Python's own message.
    python = _script(tmp_path / "python", f'exec "{sys.executable}" -S "$@"')
    found = run_lm_eval(LmEvalRun("gsm8k", "http://127.0.0.1:9", MODEL, tmp_path / "out", python=python))
    assert found == LmEvalFailure(
        NOT_INSTALLED, f"lm-eval is not installed in {python}: install {LM_EVAL_REQUIREMENT}"
    )
    assert "No module named lm_eval" in (tmp_path / "out" / "lm_eval.err").read_text()


def test_an_interpreter_that_is_not_there(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-python")
    found = run_lm_eval(LmEvalRun("gsm8k", "http://127.0.0.1:9", MODEL, tmp_path / "out", python=missing))
    assert isinstance(found, LmEvalFailure) and found.kind == NOT_INSTALLED
    assert found.message.startswith(f"lm-eval is not installed: cannot start {missing} (No such file")


def test_a_run_past_its_time_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    python = _script(tmp_path / "python", f'sleep 60 &\necho $! > "{pid_file}"\nwait')
    started = time.monotonic()
    found = run_lm_eval(
        LmEvalRun("gsm8k", "http://127.0.0.1:9", MODEL, tmp_path / "out", python=python, timeout_s=1)
    )
    assert found == LmEvalFailure(TIMEOUT, "lm-eval did not finish within 1 s")
    assert time.monotonic() - started < 15
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _running(child):
        assert time.monotonic() < deadline, "the sleep lm-eval started is still running"
        time.sleep(0.05)


def test_a_run_that_writes_no_results_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # A results file from an earlier run in the same directory is not taken for this run's.
    (out / "sim__test-model").mkdir(parents=True)
    (out / "sim__test-model" / RECORDED.name).write_text(RECORDED.read_text())
    python = _script(
        tmp_path / "python", "echo '2026 WARNING  [loggers:1] Could not save results aggregated' >&2"
    )
    found = run_lm_eval(LmEvalRun(ARITHMETIC_TASK, "http://127.0.0.1:9", MODEL, out, python=python))
    assert found == LmEvalFailure(
        NO_RESULTS, "lm-eval exited without writing a results file: Could not save results aggregated"
    )


def test_accuracy_of_says_why_it_has_no_score(tmp_path: Path) -> None:
    plan = AccuracyPlan(task="gsm8k", lm_eval=True, problems=10)
    assert accuracy_of(plan, "http://127.0.0.1:9", None) == {
        "task": "gsm8k",
        "error": "the server names no model (/v1/models), which lm-eval must send",
    }
    python = _script(tmp_path / "python", f'exec "{sys.executable}" -S "$@"')
    assert accuracy_of(plan, "http://127.0.0.1:9", MODEL, python=python) == {
        "task": "gsm8k",
        "error": f"not-installed: lm-eval is not installed in {python}: install {LM_EVAL_REQUIREMENT}",
    }


# --- fairbench's own task for lm-eval ---------------------------------------------------------------------


def test_fairbenchs_task_as_lm_eval_task_files(tmp_path: Path) -> None:
    assert write_arithmetic_task(tmp_path / "task", seed=4, count=30) == ARITHMETIC_TASK
    task = yaml.safe_load((tmp_path / "task" / f"{ARITHMETIC_TASK}.yaml").read_text())
    data = Path(task["dataset_kwargs"]["data_files"]["test"])
    assert data.is_absolute() and data.parent == (tmp_path / "task").resolve()
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert rows == [
        {"id": problem.id, "prompt": arithmetic.prompt_of(problem), "answer": problem.answer}
        for problem in arithmetic.problems(4, 30)
    ]
    assert (task["dataset_path"], task["output_type"], task["test_split"]) == (
        "json",
        "generate_until",
        "test",
    )
    assert (task["doc_to_text"], task["doc_to_target"]) == ("{{prompt}}", "{{answer}}")
    # The reply runs to its end: lm-eval would cut it at the first blank line without `until`.
    assert task["generation_kwargs"] == {"until": [], "do_sample": False, "temperature": 0.0}
    (answer_filter,) = task["filter_list"]
    assert answer_filter["filter"][0] == {
        "function": "regex",
        "regex_pattern": arithmetic.ANSWER_PATTERN,
        "fallback": NO_ANSWER,
    }
    (metric,) = task["metric_list"]
    assert metric["metric"] == "exact_match"


def test_another_draw_gets_another_data_file(tmp_path: Path) -> None:
    write_arithmetic_task(tmp_path, seed=1, count=10)
    write_arithmetic_task(tmp_path, seed=2, count=10)
    write_arithmetic_task(tmp_path, seed=1, count=10)
    assert len(list(tmp_path.glob("problems-*.jsonl"))) == 2


# --- real lm-eval -----------------------------------------------------------------------------------------


@needs_lm_eval
def test_lm_eval_reads_the_command_line_as_meant(tmp_path: Path) -> None:
    job = LmEvalRun(
        ARITHMETIC_TASK, "http://127.0.0.1:9", "123", tmp_path / "out", limit=7, include_path=tmp_path, seed=5
    )
    script = (
        "import json, sys\n"
        "from lm_eval._cli import HarnessCLI\n"
        "from lm_eval.config.evaluate_config import EvaluatorConfig\n"
        "sys.argv = ['lm_eval', *json.loads(sys.stdin.read())]\n"
        "config = EvaluatorConfig.from_cli(HarnessCLI().parse_args())\n"
        "keys = ('model', 'model_args', 'tasks', 'gen_kwargs', 'limit', 'include_path', 'output_path',"
        " 'apply_chat_template', 'log_samples', 'seed')\n"
        "print(json.dumps({key: getattr(config, key) for key in keys}))\n"
    )
    read = subprocess.run(
        [str(LM_EVAL_PYTHON), "-c", script],
        input=json.dumps(command_line(job)[1:]),
        capture_output=True,
        text=True,
        check=True,
    )
    config = json.loads(read.stdout.splitlines()[-1])
    assert config["model"] == "local-chat-completions"
    assert config["model_args"]["model"] == "123"
    assert config["model_args"]["tokenized_requests"] is False
    assert config["tasks"] == [ARITHMETIC_TASK]
    assert config["gen_kwargs"] == {"temperature": 0, "do_sample": False}
    assert (config["limit"], config["seed"]) == (7, [5, 5, 5, 5])
    assert config["include_path"] == str(tmp_path.resolve())
    assert config["apply_chat_template"] is True and config["log_samples"] is True


@needs_lm_eval
def test_lm_evals_own_filter_and_metric_score_replies_as_answer_in_does(tmp_path: Path) -> None:
    write_arithmetic_task(tmp_path, seed=1, count=1)
    replies = [
        "Answer: 42",
        "**Answer:** 1,234.",
        "Answer: $42.",
        "Answer: 007",
        "Answer: -5",
        "Answer: 3\nno wait\nAnswer: 4\nsince 2 + 2",
        "The answer is 12 apples, from 3 boxes",
        "The total is $1,050.",
        "Answer: 3.5",
        "Answer: 1,23 or 5",
        "I do not know.",
        "",
    ]
    cases = []
    for reply in replies:
        given = arithmetic.answer_in(reply)
        cases += [[reply, str(given if given is not None else 0)], [reply, str((given or 0) + 1)]]
    script = (
        "import json, sys, yaml\n"
        "from lm_eval.filters.extraction import RegexFilter\n"
        "from lm_eval.api.metrics import exact_match_hf_evaluate\n"
        f"task = yaml.safe_load(open({str(tmp_path / (ARITHMETIC_TASK + '.yaml'))!r}))\n"
        "regex = dict(task['filter_list'][0]['filter'][0]); regex.pop('function')\n"
        "metric = task['metric_list'][0]\n"
        "cases = json.loads(sys.stdin.read())\n"
        "filtered = RegexFilter(**regex).apply([[reply] for reply, _ in cases], [{}] * len(cases))\n"
        "print(json.dumps([exact_match_hf_evaluate([given[0]], [target],"
        " regexes_to_ignore=metric['regexes_to_ignore'])['exact_match'] for given, (_, target)"
        " in zip(filtered, cases)]))\n"
    )
    scored = subprocess.run(
        [str(LM_EVAL_PYTHON), "-c", script],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
    )
    expected = [float(arithmetic.answer_in(reply) == int(target)) for reply, target in cases]
    assert json.loads(scored.stdout.splitlines()[-1]) == expected


@needs_lm_eval
def test_lm_eval_scores_fairbenchs_task_against_a_server_with_known_answers(tmp_path: Path) -> None:
    write_arithmetic_task(tmp_path / "task", seed=5, count=40)
    plan = AccuracyPlan(
        task=ARITHMETIC_TASK, lm_eval=True, problems=30, seed=5, max_tokens=200, concurrency=4
    )
    with summing_server() as server:
        found = accuracy_of(
            plan,
            server.url,
            MODEL,
            python=LM_EVAL_PYTHON,
            include_path=tmp_path / "task",
            work_dir=tmp_path / "out",
        )
    problems = arithmetic.problems(5, 30)
    right = [sum(_operands(problem.question)) == problem.answer for problem in problems]
    assert {key: found[key] for key in ("task", "correct", "total", "metric", "lm_eval_version")} == {
        "task": ARITHMETIC_TASK,
        "correct": sum(right),
        "total": 30,
        "metric": ARITHMETIC_METRIC,
        "lm_eval_version": LM_EVAL_VERSION,
    }
    assert 0 < sum(right) < 30
    assert found["value"] == pytest.approx(sum(right) / 30)
    assert [(answer["id"], answer["correct"]) for answer in found["answers"]] == [
        (problem.id, ok) for problem, ok in zip(problems, right, strict=True)
    ]
    # What lm-eval sent: each prompt once, alone, through the chat API, greedy, with the plan's limit.
    assert sorted(body["messages"][0]["content"] for body in server.bodies) == sorted(
        arithmetic.prompt_of(problem) for problem in problems
    )
    for body in server.bodies:
        assert len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
        assert (body["model"], body["temperature"], body["max_tokens"], body["stop"]) == (MODEL, 0, 200, [])


@needs_lm_eval
def test_lm_eval_against_the_simulator(tmp_path: Path) -> None:
    task = write_arithmetic_task(tmp_path / "task", seed=2, count=8)
    with running_sim(tmp_path, "--model-path", MODEL, "--sim-time-scale", "0.02") as sim:
        found = run_lm_eval(
            LmEvalRun(
                task, sim.url, MODEL, tmp_path / "out", include_path=tmp_path / "task", python=LM_EVAL_PYTHON
            )
        )
    assert isinstance(found, LmEvalScore), found
    assert (found.task, found.metric, found.samples, len(found.answers)) == (task, ARITHMETIC_METRIC, 8, 8)
    (samples,) = (tmp_path / "out").rglob(f"samples_{task}_*.jsonl")
    replies = [json.loads(line) for line in samples.read_text().splitlines()]
    assert all(sample["resps"][0][0] for sample in replies)
    assert found.correct == sum(
        arithmetic.answer_in(sample["resps"][0][0]) == sample["doc"]["answer"] for sample in replies
    )


@needs_lm_eval
def test_lm_eval_failures_against_real_servers(tmp_path: Path) -> None:
    task = write_arithmetic_task(tmp_path / "task", seed=2, count=2)
    refused = f"http://127.0.0.1:{free_port()}"
    unknown = run_lm_eval(
        LmEvalRun("no_such_task", refused, MODEL, tmp_path / "unknown", python=LM_EVAL_PYTHON)
    )
    assert unknown == LmEvalFailure(UNKNOWN_TASK, "ValueError: Tasks not found: no_such_task")
    flags = ("--model-path", MODEL, "--sim-time-scale", "0.02", "--sim-fault", "http-500-rate=1")
    with running_sim(tmp_path, *flags) as sim:
        failing = run_lm_eval(
            LmEvalRun(
                task,
                sim.url,
                MODEL,
                tmp_path / "500",
                include_path=tmp_path / "task",
                max_retries=1,  # each retry waits a second or more first
                python=LM_EVAL_PYTHON,
            )
        )
    assert failing == LmEvalFailure(
        SERVER_ERROR, "the server answered HTTP 500: Internal server error: simulated fault http-500-rate"
    )
