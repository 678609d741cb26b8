"""The workload's checks: how every config is driven, the same requests at the same concurrency levels.

Its integers are held to their ranges in ``fairbench.measure.bounds`` (``BOUNDS``, and ``CONCURRENCY``
for each level); a request count is ``N`` (at least ``LEAST_REQUESTS``) or ``Nx``, N times the level, and
either way stays within ``REQUESTS`` at the largest level. ``repeats`` and ``seed`` default to 1
(``STAND_IN_WORKLOAD``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from fairbench.campaign.checks import bound_problem, bounded, choice, mapping
from fairbench.campaign.findings import Findings, describe
from fairbench.campaign.model import (
    DATASET_SUFFIX,
    WORKLOAD_KEYS,
    WORKLOAD_REQUIRED,
    LevelCount,
    Workload,
    is_int,
    within,
)
from fairbench.measure.bounds import (
    CONCURRENCY,
    COUNT_FACTOR,
    REPEATS,
    REQUESTS,
    SEED,
    TOKENS,
    VOCABULARY,
    Bound,
)
from fairbench.measure.workload import APIS, RANDOM_IDS

TIMES_CONCURRENCY = re.compile(r"([1-9][0-9]{0,99})x")
"""``Nx``; N of a hundred digits at most, which ``int`` reads at once (it refuses thousands)."""
BOUNDS: dict[str, Bound] = {
    "input_len": TOKENS,
    "output_len": TOKENS,
    "repeats": REPEATS,
    "seed": SEED,
    "vocab_size": VOCABULARY,
}
"""The workload's plain integers and their ranges."""
LEAST_REQUESTS = {"prompts_per_level": 1, "warmup": 0}
"""The smallest ``N`` of each request count."""


def _dataset(base_dir: Path) -> Callable[[Findings, str, object], str]:
    def check(findings: Findings, path: str, value: object) -> str:
        if value == RANDOM_IDS:
            return RANDOM_IDS
        rule = f"must be {RANDOM_IDS} or the path of a local ShareGPT-style {DATASET_SUFFIX} file"
        if not isinstance(value, str) or not value.endswith(DATASET_SUFFIX):
            findings.error(path, f"{rule}, got {describe(value)}")
            return RANDOM_IDS
        file = base_dir / value
        try:
            found = file.is_file()
        except (OSError, ValueError):
            found = False
        if not found:
            findings.error(path, f"{rule}: {str(file)!r} is not a file")
        return str(file.absolute())

    return check


def _concurrency(findings: Findings, path: str, value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        findings.error(path, f"must be a non-empty list of positive integers, got {describe(value)}")
        return ()
    levels: dict[int, None] = {}  # ordered, and a repeat is found at once
    for index, item in enumerate(value):
        if not within(item, CONCURRENCY):
            findings.error(f"{path}[{index}]", bound_problem(CONCURRENCY, item))
        elif item in levels:
            findings.error(f"{path}[{index}]", f"{item} is listed twice")
        else:
            levels[item] = None
    return tuple(levels)


def _level_count(minimum: int, largest_level: int) -> Callable[[Findings, str, object], LevelCount]:
    """Requests per level, at least ``minimum``, as many as ``REQUESTS`` allows at the largest level."""

    def check(findings: Findings, path: str, value: object) -> LevelCount:
        match = TIMES_CONCURRENCY.fullmatch(value) if isinstance(value, str) else None
        if is_int(value) and value >= minimum:
            count = LevelCount(value, times_concurrency=False)
        elif match:
            count = LevelCount(int(match[1]), times_concurrency=True)
        else:
            rule = f"must be an integer >= {minimum} or Nx (N times the concurrency)"
            findings.error(path, f"{rule}, got {describe(value)}")
            return LevelCount(minimum, times_concurrency=False)
        problem = _request_count_problem(count, largest_level)
        if problem is not None:
            findings.error(path, problem)
        return count

    return check


def _request_count_problem(count: LevelCount, largest_level: int) -> str | None:
    """Why ``count`` is no real run's: N of ``Nx`` beyond ``COUNT_FACTOR``, or too many requests per level."""
    if count.times_concurrency and not within(count.count, COUNT_FACTOR):
        return f"N of {count.to_json()} {bound_problem(COUNT_FACTOR, count.count)}"
    requests = count.at(largest_level)
    if within(requests, REQUESTS):
        return None
    problem = bound_problem(REQUESTS, requests)
    return f"{count.to_json()} at level {largest_level}: {problem}" if count.times_concurrency else problem


def check_workload(findings: Findings, path: str, value: object, base_dir: Path) -> Workload:
    fields = mapping(findings, path, value, WORKLOAD_KEYS, required=WORKLOAD_REQUIRED)
    stand_in = STAND_IN_WORKLOAD
    api = fields.get("api", choice(APIS), stand_in.api)
    dataset = fields.get("dataset", _dataset(base_dir), stand_in.dataset)
    input_len = fields.get("input_len", bounded(BOUNDS["input_len"]), stand_in.input_len)
    output_len = fields.get("output_len", bounded(BOUNDS["output_len"]), stand_in.output_len)
    concurrency = fields.get("concurrency", _concurrency, stand_in.concurrency)
    largest_level = max(concurrency, default=1)
    return Workload(
        api=api,
        dataset=dataset,
        input_len=input_len,
        output_len=output_len,
        concurrency=concurrency,
        prompts_per_level=fields.get(
            "prompts_per_level",
            _level_count(LEAST_REQUESTS["prompts_per_level"], largest_level),
            stand_in.prompts_per_level,
        ),
        warmup=fields.get("warmup", _level_count(LEAST_REQUESTS["warmup"], largest_level), stand_in.warmup),
        repeats=fields.get("repeats", bounded(BOUNDS["repeats"]), stand_in.repeats),
        seed=fields.get("seed", bounded(BOUNDS["seed"]), stand_in.seed),
        vocab_size=fields.get("vocab_size", bounded(BOUNDS["vocab_size"]), stand_in.vocab_size),
    )


STAND_IN_WORKLOAD = Workload(
    api=APIS[0],
    dataset=RANDOM_IDS,
    input_len=1,
    output_len=1,
    concurrency=(),
    prompts_per_level=LevelCount(LEAST_REQUESTS["prompts_per_level"], times_concurrency=False),
    warmup=LevelCount(LEAST_REQUESTS["warmup"], times_concurrency=False),
    repeats=1,
    seed=1,
)
"""Stands in for a missing workload and a missing key; ``repeats`` and ``seed`` are also the defaults."""
