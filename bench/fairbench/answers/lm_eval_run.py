"""An lm-eval task run against one server's OpenAI-compatible chat endpoint, scored into one figure or one
line that says why not.

lm-eval (EleutherAI's lm-evaluation-harness, ``LM_EVAL_REQUIREMENT``) runs as its own process, from an
interpreter that has it (``python -m lm_eval``; fairbench does not depend on it). The command line
(``command_line``)::

    PYTHON -m lm_eval run --model local-chat-completions
        --model_args '{"base_url": "<server>/v1/chat/completions", "model": "<served name>",
                       "num_concurrent": 8, "max_retries": 3, "max_gen_toks": 256,
                       "tokenized_requests": false, "tokenizer_backend": "none"}'
        --apply_chat_template --tasks TASK --gen_kwargs '{"temperature": 0, "do_sample": false}'
        --output_path OUT --log_samples --seed SEED [--limit N] [--include_path DIR]

- ``local-chat-completions`` sends each document as one chat conversation; ``--apply_chat_template`` makes
  it a list of messages (the server applies its own chat template), which that model requires;
- ``tokenizer_backend: none`` and ``tokenized_requests: false``: no tokenizer is loaded, so nothing is
  downloaded for the model; lm-eval sends text and does not check lengths. Tasks scored by
  log-likelihoods (multiple choice) cannot run this way: the chat API gives none;
- ``max_gen_toks``: each answer's limit where the task sets none of its own;
- ``--gen_kwargs``: greedy whatever the task's YAML says (it overrides the task's keys it names);
- the model arguments are a JSON object, which keeps a served name such as ``123`` a string (lm-eval reads
  ``key=value`` values as Python literals).

The result (``run_lm_eval``): an ``LmEvalScore`` read from lm-eval's results file
(``OUT/<model>/results_<date>.json``, ``score_of``): the metric (``exact_match,strict-match``: name, then
filter), its value and lm-eval's standard error, the documents scored, and, where the metric is a share of
right answers, how many were right, counted from lm-eval's per-document samples file. Or an
``LmEvalFailure``: its kind (``FAILURE_KINDS``) and one line built from lm-eval's own message.

fairbench's own task runs under lm-eval too (``write_arithmetic_task``): its problems as a JSONL file and
a task YAML that reads it (``dataset_path: json``, offline), asks the same prompts and scores the replies
with ``arithmetic.ANSWER_PATTERN``, the pattern ``arithmetic.answer_in`` applies.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fairbench.answers import arithmetic
from fairbench.answers.plan import AccuracyPlan

LM_EVAL_VERSION = "0.4.13"
"""The lm-eval release this module is written against: its ``run`` command's options, the JSON form of
``--model_args``, ``local-chat-completions``' arguments and its results and samples files were read in its
source. The newest release when written; another may change any of them."""
LM_EVAL_REQUIREMENT = f"lm-eval[api]=={LM_EVAL_VERSION}"
"""What to install: ``[api]`` brings what its API models import (aiohttp, requests, tenacity); torch and
transformers are not needed."""
LM_EVAL_PYTHON_ENV = "FAIRBENCH_LM_EVAL_PYTHON"
"""The interpreter that has lm-eval, where ``accuracy_of`` is not told one (default: fairbench's own)."""

CHAT_PATH = "/v1/chat/completions"
GREEDY = {"temperature": 0, "do_sample": False}

ARITHMETIC_TASK = "fairbench_arithmetic"
"""The lm-eval name of fairbench's own task (lm-eval has tasks named ``arithmetic_*`` of its own)."""
ARITHMETIC_FILTER = "answer"
ARITHMETIC_METRIC = f"exact_match,{ARITHMETIC_FILTER}"
NO_ANSWER = "[no answer]"
"""lm-eval's filtered reply where ``ANSWER_PATTERN`` finds no integer; no target equals it."""

NOT_INSTALLED = "not-installed"
UNKNOWN_TASK = "unknown-task"
DATASET_UNREACHABLE = "dataset-unreachable"
UNSUPPORTED_TASK = "unsupported-task"
SERVER_ERROR = "server-error"
TIMEOUT = "timeout"
NO_RESULTS = "no-results"
FAILED = "failed"
FAILURE_KINDS = (
    NOT_INSTALLED,
    UNKNOWN_TASK,
    DATASET_UNREACHABLE,
    UNSUPPORTED_TASK,
    SERVER_ERROR,
    TIMEOUT,
    NO_RESULTS,
    FAILED,
)
MESSAGE_CHARS = 400
"""A failure's line is cut to this length: a server's error body can be a page."""


@dataclass(frozen=True)
class LmEvalRun:
    """One lm-eval run: ``task`` (an lm-eval task or group name) against the server at ``base_url`` (its
    root, ``http://host:port``) serving ``model``, lm-eval's files written under ``output_dir``."""

    task: str
    base_url: str
    model: str
    output_dir: Path
    limit: int | None = None
    """The first ``limit`` documents of the task (each subtask of a group); None: all."""
    include_path: Path | None = None
    """A directory of the caller's own task YAMLs (``write_arithmetic_task``'s)."""
    num_concurrent: int = 8
    max_retries: int = 3
    max_gen_toks: int = 256
    seed: int = 1
    """lm-eval's seeds (which few-shot examples a task draws, its own random choices)."""
    python: str | None = None
    """The interpreter that has lm-eval; None: the ``lm_eval`` command on PATH."""
    timeout_s: float = 1800.0
    offline: bool = False
    """Tell the Hugging Face libraries not to reach the Hub (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE): a task
    whose data is not cached fails at once instead of after half a minute of retries."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Set in lm-eval's environment, over this process's own."""


@dataclass(frozen=True)
class DocumentAnswer:
    """One document's answer, from lm-eval's samples file."""

    id: str
    """The document's ``id`` where it has one (fairbench's own task), else its index in the task."""
    expected: str
    given: str
    """The reply after the metric's filter (the extracted answer)."""
    correct: bool


@dataclass(frozen=True)
class LmEvalScore:
    task: str
    metric: str
    """lm-eval's key: the metric's name, a comma, the filter's (``exact_match,strict-match``)."""
    value: float
    stderr: float | None
    """lm-eval's standard error of the value; None where it gives none (``N/A``)."""
    samples: int
    """Documents scored."""
    correct: int | None
    """Documents scored right, where the metric is a share of right answers (every document 0 or 1);
    else None."""
    lm_eval_version: str | None
    answers: tuple[DocumentAnswer, ...] = ()
    """Each document's answer, where lm-eval's samples file for the task has them."""


@dataclass(frozen=True)
class LmEvalFailure:
    kind: str
    """One of ``FAILURE_KINDS``."""
    message: str
    """One line: what went wrong, in lm-eval's words where it gave any."""


def chat_url(base_url: str) -> str:
    """The server's chat endpoint, from its root (given with ``/v1`` or the endpoint itself, the same)."""
    root = base_url.rstrip("/")
    root = root.removesuffix(CHAT_PATH).removesuffix("/v1")
    return root + CHAT_PATH


def launcher(python: str | None) -> list[str]:
    """How lm-eval is started: ``PYTHON -m lm_eval``, or the ``lm_eval`` command on PATH."""
    return ["lm_eval"] if python is None else [python, "-m", "lm_eval"]


def command_line(job: LmEvalRun) -> list[str]:
    """lm-eval's command line for ``job`` (the module docstring's)."""
    model_args = {
        "base_url": chat_url(job.base_url),
        "model": job.model,
        "num_concurrent": job.num_concurrent,
        "max_retries": job.max_retries,
        "max_gen_toks": job.max_gen_toks,
        "tokenized_requests": False,
        "tokenizer_backend": "none",
    }
    command = [
        *launcher(job.python),
        "run",
        "--model",
        "local-chat-completions",
        "--model_args",
        json.dumps(model_args),
        "--apply_chat_template",
        "--tasks",
        job.task,
        "--gen_kwargs",
        json.dumps(GREEDY),
        "--output_path",
        str(job.output_dir.resolve()),
        "--log_samples",
        "--seed",
        str(job.seed),
    ]
    if job.limit is not None:
        command += ["--limit", str(job.limit)]
    if job.include_path is not None:
        command += ["--include_path", str(job.include_path.resolve())]
    return command


def run_lm_eval(job: LmEvalRun, metric: str | None = None) -> LmEvalScore | LmEvalFailure:
    """Run lm-eval (``command_line``) and read its score of ``metric`` (``score_of``). Its output is kept
    in ``output_dir`` as ``lm_eval.out`` and ``lm_eval.err``; a run past ``timeout_s`` is stopped (its
    process group, terminated then killed)."""
    job.output_dir.mkdir(parents=True, exist_ok=True)
    before = set(_results_files(job.output_dir))
    env = {**os.environ, **job.env}
    if job.offline:
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    out_path, err_path = job.output_dir / "lm_eval.out", job.output_dir / "lm_eval.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        try:
            process = subprocess.Popen(
                command_line(job),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=job.output_dir,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            what = "the lm_eval command" if job.python is None else job.python
            return LmEvalFailure(
                NOT_INSTALLED,
                f"lm-eval is not installed: cannot start {what} ({exc.strerror or exc}); install "
                f"{LM_EVAL_REQUIREMENT}",
            )
        try:
            returncode = process.wait(timeout=job.timeout_s)
        except subprocess.TimeoutExpired:
            _stop(process)
            return LmEvalFailure(TIMEOUT, f"lm-eval did not finish within {job.timeout_s:g} s")
    stderr = err_path.read_text(encoding="utf-8", errors="replace")
    if returncode != 0:
        return failure_of(returncode, stderr, job.python)
    written = [path for path in _results_files(job.output_dir) if path not in before]
    if not written:
        said = _last_warning(stderr)
        return LmEvalFailure(
            NO_RESULTS, "lm-eval exited without writing a results file" + (f": {said}" if said else "")
        )
    return read_score(max(written, key=lambda path: path.name), job.task, metric)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End lm-eval and whatever it started (its own session's process group): asked to stop, then, after
    10 s or once lm-eval is gone, killed, so that no child of it outlives the run."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _results_files(directory: Path) -> Iterator[Path]:
    return directory.rglob("results_*.json")


# A Python exception as a traceback ends with it: ``ValueError: Tasks not found: x``,
# ``aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host ...``.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|NotFound\w*)(?::\s.*)?$")
_HTTP_FAILURE = re.compile(
    r"API request failed! Status code: (\d+), Response text: (.*)\. Retrying\.\.\.$"
    r"|API request failed with error message: (.*)\. Retrying\.\.\.$"
)
_DATASET_SIGNS = (
    "Couldn't reach",
    "OfflineModeIsEnabled",
    "DatasetNotFoundError",
    "doesn't exist on the Hub",
    "Unable to find '",
    "LocalEntryNotFoundError",
)
_CONNECTION_SIGNS = (
    "ClientConnectorError",
    "ClientConnectionError",
    "ServerDisconnectedError",
    "ClientPayloadError",
    "ClientResponseError",
    "requests.exceptions.",
    "TimeoutError",
)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 3] + "..."


def _exception_lines(stderr: str) -> list[str]:
    return [line.strip() for line in stderr.splitlines() if _EXCEPTION_LINE.match(line.strip())]


def _last_warning(stderr: str) -> str | None:
    warnings = [line for line in stderr.splitlines() if " WARNING " in line or " ERROR " in line]
    return _one_line(warnings[-1].split("] ", 1)[-1]) if warnings else None


def _server_said(text: str) -> str:
    """An error body's message (an OpenAI-style ``{"message": ...}`` or ``{"error": {"message": ...}}``),
    else the body."""
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else body.get("message")
        if isinstance(message, str):
            return message
    return text


def failure_of(returncode: int, stderr: str, python: str | None = None) -> LmEvalFailure:
    """Why lm-eval exited with ``returncode``, from what it wrote to stderr: the kind, and one line in its
    own words (its last exception's line, or the server's error it retried on)."""
    exceptions = _exception_lines(stderr)
    last = exceptions[-1] if exceptions else None
    if re.search(r"No module named '?lm_eval'?$", stderr, re.MULTILINE):
        where = "the lm_eval command" if python is None else python
        return LmEvalFailure(
            NOT_INSTALLED, f"lm-eval is not installed in {where}: install {LM_EVAL_REQUIREMENT}"
        )
    # lm-eval without its [api] extra, or missing a package a task imports.
    missing = [line for line in exceptions if line.startswith("ModuleNotFoundError")]
    if missing:
        return LmEvalFailure(NOT_INSTALLED, _one_line(missing[-1]))
    tasks_missing = [line for line in exceptions if "Tasks not found:" in line]
    if tasks_missing:
        return LmEvalFailure(UNKNOWN_TASK, _one_line(tasks_missing[-1]))
    dataset = [line for line in exceptions if any(sign in line for sign in _DATASET_SIGNS)]
    if dataset:
        return LmEvalFailure(DATASET_UNREACHABLE, _one_line(dataset[-1]))
    unsupported = [line for line in exceptions if "Loglikelihood" in line and "not supported" in line]
    if unsupported:
        return LmEvalFailure(UNSUPPORTED_TASK, _one_line(unsupported[-1]))
    http = [match for line in stderr.splitlines() if (match := _HTTP_FAILURE.search(line.strip()))]
    if http:
        status, body, sync_body = http[-1].groups()
        said = _server_said(body if body is not None else sync_body)
        answered = f"HTTP {status}: " if status else ""
        return LmEvalFailure(SERVER_ERROR, _one_line(f"the server answered {answered}{said}"))
    connection = [line for line in exceptions if any(sign in line for sign in _CONNECTION_SIGNS)]
    if connection:
        return LmEvalFailure(SERVER_ERROR, _one_line(f"the server did not answer: {connection[-1]}"))
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = last or (lines[-1] if lines else "nothing on stderr")
    return LmEvalFailure(FAILED, _one_line(f"lm-eval exited with status {returncode}: {said}"))


def read_score(path: Path, task: str, metric: str | None = None) -> LmEvalScore | LmEvalFailure:
    """``score_of`` lm-eval's results file at ``path``, with the answers of the samples file written beside
    it for ``task``, where there is one."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return LmEvalFailure(NO_RESULTS, f"{path}: not a readable results file: {exc}")
    stamp = path.stem.removeprefix("results_")
    samples = path.with_name(f"samples_{task}_{stamp}.jsonl")
    return score_of(document, task, metric, samples if samples.is_file() else None)


def _metric_keys(entry: Mapping[str, Any]) -> list[str]:
    return [key for key in entry if "," in key and "_stderr," not in key]


def _documents(document: Mapping[str, Any], task: str) -> int | None:
    """How many documents lm-eval scored for ``task``: its ``n-samples``, a group's summed over its
    subtasks, else its ``sample_len``."""
    counts = document.get("n-samples") or {}
    if isinstance(counts.get(task), dict) and isinstance(counts[task].get("effective"), int):
        return int(counts[task]["effective"])
    subtasks = (document.get("group_subtasks") or {}).get(task)
    if subtasks:
        found = [_documents(document, subtask) for subtask in subtasks]
        if all(count is not None for count in found):
            return sum(count for count in found if count is not None)
    sample_len = (document.get("results") or {}).get(task, {}).get("sample_len")
    return int(sample_len) if isinstance(sample_len, int) else None


def score_of(
    document: Mapping[str, Any], task: str, metric: str | None = None, samples_path: Path | None = None
) -> LmEvalScore | LmEvalFailure:
    """``task``'s score in lm-eval's results ``document``: ``metric`` as lm-eval keys it
    (``exact_match,strict-match``), or by name alone (``exact_match``: its first filter, in the task's
    order), or None: the task's first metric. ``samples_path``: lm-eval's samples file for the task, read
    for each document's answer and the count right."""
    results = document.get("results")
    if not isinstance(results, dict) or not isinstance(results.get(task), dict):
        listed = ", ".join(results) if isinstance(results, dict) else "none"
        return LmEvalFailure(NO_RESULTS, f"lm-eval's results have no task {task} (tasks: {listed})")
    entry = results[task]
    keys = _metric_keys(entry)
    if metric is None:
        chosen = keys[:1]
    elif "," in metric:
        chosen = [key for key in keys if key == metric]
    else:
        chosen = [key for key in keys if key.split(",", 1)[0] == metric][:1]
    if not chosen:
        wanted = "any metric" if metric is None else f"the metric {metric}"
        listed = ", ".join(keys) or "none"
        return LmEvalFailure(NO_RESULTS, f"lm-eval's results for {task} have no {wanted} (metrics: {listed})")
    key = chosen[0]
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return LmEvalFailure(NO_RESULTS, f"lm-eval's {key} for {task} is not a number: {value!r}")
    name, filter_name = key.split(",", 1)
    stderr = entry.get(f"{name}_stderr,{filter_name}")
    count = _documents(document, task)
    if count is None:
        return LmEvalFailure(NO_RESULTS, f"lm-eval's results do not say how many documents {task} scored")
    answers = _answers(samples_path, name, filter_name) if samples_path is not None else ()
    version = document.get("lm_eval_version")
    return LmEvalScore(
        task=task,
        metric=key,
        value=float(value),
        stderr=float(stderr) if isinstance(stderr, (int, float)) and not isinstance(stderr, bool) else None,
        samples=count,
        correct=_correct(float(value), count, answers),
        lm_eval_version=version if isinstance(version, str) else None,
        answers=answers,
    )


def _answers(path: Path, name: str, filter_name: str) -> tuple[DocumentAnswer, ...]:
    """Each document's answer under ``filter_name``, where every one is scored 0 or 1 by ``name``; none
    where the file cannot be read or a score is anything else."""
    answers = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        for line in lines:
            sample = json.loads(line)
            if sample.get("filter") != filter_name:
                continue
            scored = sample.get(name)
            if scored not in (0, 1) or isinstance(scored, bool):
                return ()
            doc = sample.get("doc")
            doc_id = doc.get("id") if isinstance(doc, dict) else None
            filtered = sample.get("filtered_resps") or [""]
            answers.append(
                DocumentAnswer(
                    id=str(doc_id if doc_id is not None else sample.get("doc_id")),
                    expected=str(sample.get("target")),
                    given=str(filtered[0]),
                    correct=scored == 1,
                )
            )
    except (OSError, ValueError, AttributeError):
        return ()
    return tuple(answers)


def _correct(value: float, count: int, answers: tuple[DocumentAnswer, ...]) -> int | None:
    """The count right: from the documents' answers where they are all there, else value x count where
    that is a whole number of documents (a mean of 0s and 1s); None otherwise."""
    if answers and len(answers) == count:
        return sum(1 for answer in answers if answer.correct)
    right = value * count
    if 0 <= value <= 1 and abs(right - round(right)) < 1e-6:
        return round(right)
    return None


def write_arithmetic_task(directory: Path, seed: int, count: int) -> str:
    """fairbench's own task (``arithmetic.problems(seed, count)``) as an lm-eval task in ``directory``
    (for ``--include_path``); its name, ``ARITHMETIC_TASK``.

    The problems go to ``problems-<digest>.jsonl`` (id, prompt, answer), named by their content: the
    datasets library caches a JSON file's table by its path, so another draw must not take the same one.
    The task asks ``prompt``, lets the reply run to its end or the token limit (``until: []``: lm-eval
    would otherwise cut it at the first blank line), takes the reply's integer with
    ``arithmetic.ANSWER_PATTERN`` and scores it by exact match with the answer, commas (``1,234``) and
    leading zeros aside."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [
        json.dumps({"id": problem.id, "prompt": arithmetic.prompt_of(problem), "answer": problem.answer})
        for problem in arithmetic.problems(seed, count)
    ]
    text = "\n".join(rows) + "\n"
    data = directory.resolve() / f"problems-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    data.write_text(text, encoding="utf-8")
    task = {
        "task": ARITHMETIC_TASK,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "{{answer}}",
        "generation_kwargs": {"until": [], "do_sample": False, "temperature": 0.0},
        "filter_list": [
            {
                "name": ARITHMETIC_FILTER,
                "filter": [
                    {"function": "regex", "regex_pattern": arithmetic.ANSWER_PATTERN, "fallback": NO_ANSWER},
                    {"function": "take_first"},
                ],
            }
        ],
        "metric_list": [
            {
                "metric": "exact_match",
                "aggregation": "mean",
                "higher_is_better": True,
                "regexes_to_ignore": [",", "(?<![0-9])0+(?=[0-9])"],
            }
        ],
        "metadata": {"version": 1.0, "seed": seed, "count": count},
    }
    (directory / f"{ARITHMETIC_TASK}.yaml").write_text(
        yaml.safe_dump(task, sort_keys=False, width=1000), encoding="utf-8"
    )
    return ARITHMETIC_TASK


def lm_eval_python(python: str | None = None) -> str:
    """The interpreter that runs lm-eval: ``python``, else ``$FAIRBENCH_LM_EVAL_PYTHON``, else fairbench's
    own."""
    return python or os.environ.get(LM_EVAL_PYTHON_ENV) or sys.executable


def accuracy_of(
    task: AccuracyPlan,
    base_url: str,
    model: str | None,
    *,
    python: str | None = None,
    work_dir: Path | None = None,
    timeout_s: float = 1800.0,
    offline: bool = False,
    include_path: Path | None = None,
) -> dict[str, Any]:
    """The campaign's lm-eval task (``task.task``, its first ``task.problems`` documents) against the
    server, as a job's answers file keeps it: ``{"task", "correct", "total", "metric", "value", "stderr",
    "lm_eval_version", "answers": [{"id", "expected", "given", "correct"}, ...]}``, or ``{"task",
    "error"}`` with one line (its kind first). lm-eval runs from ``lm_eval_python(python)``; its files go
    to ``work_dir`` (kept), else to a temporary directory (removed); ``include_path``: a directory of task
    YAMLs lm-eval looks in too (``write_arithmetic_task``'s)."""
    if model is None:
        return {"task": task.task, "error": "the server names no model (/v1/models), which lm-eval must send"}
    with tempfile.TemporaryDirectory(prefix="fairbench-lm-eval-") as scratch:
        found = run_lm_eval(
            LmEvalRun(
                task=task.task,
                base_url=base_url,
                model=model,
                output_dir=work_dir if work_dir is not None else Path(scratch),
                limit=task.problems,
                include_path=include_path,
                num_concurrent=task.concurrency,
                max_gen_toks=task.max_tokens,
                seed=task.seed,
                python=lm_eval_python(python),
                timeout_s=timeout_s,
                offline=offline,
            )
        )
    if isinstance(found, LmEvalFailure):
        return {"task": task.task, "error": f"{found.kind}: {found.message}"}
    if found.correct is None:
        return {
            "task": task.task,
            "error": f"failed: lm-eval's {found.metric} is {found.value:g} over {found.samples} documents, "
            "not a share of right answers",
        }
    return {
        "task": task.task,
        "correct": found.correct,
        "total": found.samples,
        "metric": found.metric,
        "value": found.value,
        "stderr": found.stderr,
        "lm_eval_version": found.lm_eval_version,
        "answers": [
            {"id": answer.id, "expected": answer.expected, "given": answer.given, "correct": answer.correct}
            for answer in found.answers
        ],
    }
