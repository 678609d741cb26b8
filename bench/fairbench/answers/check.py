"""A server start's answers, on its host, between its health and its sweep: the campaign's probes, then its
accuracy task, each request greedy; written to ``answers/start-r<repeat>.json`` in the job's directory.

Nothing here fails a job: a probe the server did not answer, a task that could not run, is kept in the
file as its one-line ``error``, and the sweep runs as it would have. The file::

    {"api": "chat", "max_tokens": 48, "started_at": <epoch s>, "seconds": 3.2,
     "probes": [{"id": "p07", "text": "...", "token_ids": [...], "tokens": [...], "logprobs": [...],
                 "finish_reason": "length"} | {"id": "p07", "error": "..."}, ...],
     "accuracy": {"task": "arithmetic", "correct": 61, "total": 100, "answers": [...]} | {"task": ...,
                  "error": "..."} | null}
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from fairbench.answers import arithmetic, lm_eval_run
from fairbench.answers.plan import AccuracyPlan, AnswersPlan
from fairbench.answers.requests import AnswerError, Reply, ask
from fairbench.measure.results_format import ANSWERS_DIR, ANSWERS_FILE
from fairbench.measure.workload import CHAT


def answers_path(out: Path, repeat: int) -> Path:
    return out / ANSWERS_DIR / ANSWERS_FILE.format(repeat=repeat)


async def _served_model(session: aiohttp.ClientSession, base_url: str) -> str | None:
    """The first model ``/v1/models`` lists, which the OpenAI APIs ask for; None where it lists none."""
    try:
        async with session.get(base_url.rstrip("/") + "/v1/models") as response:
            listed = await response.json(content_type=None)
        return str(listed["data"][0]["id"])
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError):
        return None


async def _each(
    items: list[Any], concurrency: int, answer: Callable[[Any], Awaitable[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """``answer`` of every item, at most ``concurrency`` at once, in the items' order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(item: Any) -> dict[str, Any]:
        async with gate:
            return await answer(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def check(plan: AnswersPlan, base_url: str, model: str | None) -> dict[str, Any]:
    """What the server answered to the plan's probes and accuracy task (the module docstring's file)."""
    started = time.time()
    timeout = aiohttp.ClientTimeout(total=plan.timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        if model is None and (plan.api != "generate" or plan.accuracy is not None):
            model = await _served_model(session, base_url)

        async def probe(entry: Any) -> dict[str, Any]:
            try:
                reply = await ask(
                    session, base_url, plan.api, entry.prompt, max_tokens=plan.max_tokens, model=model
                )
            except AnswerError as exc:
                return {"id": entry.id, "error": str(exc)}
            return {"id": entry.id, **reply.to_json()}

        probes = await _each(list(plan.probes), plan.concurrency, probe)
        accuracy = None
        if plan.accuracy is not None:
            accuracy = await _accuracy(plan.accuracy, session, base_url, model)
    return {
        "api": plan.api,
        "max_tokens": plan.max_tokens,
        "started_at": started,
        "seconds": round(time.time() - started, 3),
        "probes": probes,
        "accuracy": accuracy,
    }


async def _accuracy(
    task: AccuracyPlan, session: aiohttp.ClientSession, base_url: str, model: str | None
) -> dict[str, Any]:
    if task.lm_eval:
        return await asyncio.to_thread(lm_eval_run.accuracy_of, task, base_url, model)
    problems = arithmetic.problems(task.seed, task.problems)

    async def solve(problem: arithmetic.Problem) -> dict[str, Any]:
        try:
            reply: Reply = await ask(
                session,
                base_url,
                CHAT,
                arithmetic.prompt_of(problem),
                max_tokens=task.max_tokens,
                model=model,
            )
        except AnswerError as exc:
            return {"id": problem.id, "expected": problem.answer, "error": str(exc)}
        given = arithmetic.answer_in(reply.text)
        return {
            "id": problem.id,
            "expected": problem.answer,
            "given": given,
            "correct": given == problem.answer,
        }

    answers = await _each(problems, task.concurrency, solve)
    errors = [entry["error"] for entry in answers if "error" in entry]
    found: dict[str, Any] = {
        "task": task.task,
        "correct": sum(1 for entry in answers if entry.get("correct")),
        "total": len(answers) - len(errors),
        "answers": answers,
    }
    if errors and len(errors) == len(answers):
        found["error"] = f"no problem answered: {errors[0]}"
    return found


def write_answers(plan: AnswersPlan, base_url: str, model: str | None, path: Path) -> dict[str, Any]:
    """Check the server's answers and write them to ``path`` (replacing an earlier start's of the job)."""
    found = asyncio.run(check(plan, base_url, model))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    partial.replace(path)
    return found


def summary(found: dict[str, Any]) -> str:
    """One line of what a start answered: for the job's progress."""
    answered = [entry for entry in found["probes"] if "error" not in entry]
    line = f"answers: {len(answered)} of {len(found['probes'])} probes answered in {found['seconds']:.1f} s"
    accuracy = found.get("accuracy")
    if accuracy:
        line += (
            f"; {accuracy['task']}: {accuracy['error']}"
            if "error" in accuracy
            else f"; {accuracy['task']}: {accuracy['correct']} of {accuracy['total']} right"
        )
    errors = [entry["error"] for entry in found["probes"] if "error" in entry]
    if errors:
        line += f"; first error: {errors[0]}"
    return line
