"""The workload's checks: how every config is driven, the same requests at the same levels.

The load is exactly one of ``concurrency`` (a closed loop's levels) and ``request_rate`` (an open loop's,
with ``arrival``, ``burstiness`` and ``max_concurrency``, which a closed loop refuses). Its numbers are held
to their ranges in ``fairbench.measure.bounds``: ``BOUNDS``, ``CONCURRENCY`` for each level,
``REQUEST_RATE`` for each rate, ``BURSTINESS``, and ``AUTO_REPEATS`` and ``HALF_WIDTH_PCT`` for automatic
repeats. A request count is ``N`` (at least ``LEAST_REQUESTS``) or ``Nx``, N times the level rounded up,
and either way stays within ``REQUESTS`` at the largest level. ``repeats`` is a count, ``auto``, or a
mapping of any of ``AUTO_REPEATS_KEYS`` (the others ``AutoRepeats``' defaults). ``search_resolution``
bisects over concurrency levels only; that it needs an SLO is a rule across keys (``rules.check_search``).
``repeats`` and ``seed`` default to 1 (``STAND_IN_WORKLOAD``). ``shared_prefix`` belongs to
``dataset: shared-prefix`` alone, each key absent sglang's default (``DEFAULT_SHARED_PREFIX``), its counts
within ``PREFIX_GROUPS`` and ``PROMPTS_PER_GROUP``, its lengths within ``TOKENS`` and so is their sum,
which ``input_len`` is. ``multi_turn`` belongs to ``dataset: multi-turn`` alone, each key absent
``DEFAULT_MULTI_TURN``'s, ``turns`` within ``TURNS``, ``user_len`` within ``TOKENS``,
``system_prompt_len`` within ``SYSTEM_PROMPT_TOKENS``, ``system_prompts`` within ``SYSTEM_PROMPTS``,
``think_time_s`` within ``THINK_TIME_S``, ``sharegpt`` a ShareGPT-style file; its first turn's lengths are
``input_len``; it runs in a closed loop. ``cache_state: primed`` primes shared system prompts: a
shared-prefix dataset's, or a multi-turn one's with a system prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeGuard

from fairbench.campaign.checks import (
    Fields,
    bound_problem,
    bounded,
    choice,
    mapping,
    named_entries,
    number_in,
)
from fairbench.campaign.findings import Findings, describe, join_path
from fairbench.campaign.model import (
    DATASET_SUFFIX,
    LOADS,
    OPEN_LOOP_KEYS,
    TRACE_SETS,
    WORKLOAD_KEYS,
    WORKLOAD_REQUIRED,
    Workload,
    is_int,
    within,
)
from fairbench.measure.bounds import (
    AUTO_REPEATS,
    BURSTINESS,
    CONCURRENCY,
    COUNT_FACTOR,
    HALF_WIDTH_PCT,
    PREFIX_GROUPS,
    PROMPTS_PER_GROUP,
    REPEATS,
    REQUEST_RATE,
    REQUESTS,
    SEARCH_RESOLUTION,
    SEED,
    SPEEDUP,
    SYSTEM_PROMPT_TOKENS,
    SYSTEM_PROMPTS,
    THINK_TIME_S,
    TOKENS,
    TRACE_DURATION_S,
    TRACE_REQUESTS,
    TRACE_SECONDS,
    TURNS,
    VOCABULARY,
    Bound,
)
from fairbench.measure.repeats import AUTO, DEFAULT_REPEATS, AutoRepeats, Repeats, repeats_to_json
from fairbench.measure.status import RANKS_DIR
from fairbench.measure.trace_replay import load_window, replay_rates
from fairbench.measure.traces import TRACE_FORMATS, TraceRequest
from fairbench.measure.workload import (
    APIS,
    ARRIVALS,
    CACHE_STATES,
    CHAT,
    DEFAULT_API,
    DEFAULT_ARRIVAL,
    DEFAULT_BURSTINESS,
    DEFAULT_CACHE_STATE,
    DEFAULT_MULTI_TURN,
    DEFAULT_SEED,
    DEFAULT_SHARED_PREFIX,
    MULTI_TURN,
    MULTI_TURN_KEYS,
    ORDERS,
    POISSON,
    PRIMED,
    RANDOM_IDS,
    SHARED_PREFIX,
    SHARED_PREFIX_KEYS,
    TRACE,
    TRACE_WINDOW_KEYS,
    LevelCount,
    MultiTurn,
    SharedPrefix,
    TraceWindow,
    WorkloadError,
)

TIMES_CONCURRENCY = re.compile(r"([1-9][0-9]{0,99})x")
"""``Nx``; N of a hundred digits at most, which ``int`` reads at once (it refuses thousands)."""
BOUNDS: dict[str, Bound] = {
    "input_len": TOKENS,
    "output_len": TOKENS,
    "seed": SEED,
    "vocab_size": VOCABULARY,
    "max_concurrency": CONCURRENCY,
    "search_resolution": SEARCH_RESOLUTION,
}
"""The workload's plain integers and their ranges."""
LEAST_REQUESTS = {"prompts_per_level": 1, "warmup": 0}
"""The smallest ``N`` of each request count."""
AUTO_REPEATS_KEYS = ("min", "max", "half_width_pct")
"""The keys of automatic repeats' mapping (``AutoRepeats.to_json``)."""


Locate = Callable[[str], Path]
"""Where a workload's file (a ShareGPT-style dataset, a trace) is, from its path as the workload writes it."""


def _dataset(locate: Locate) -> Callable[[Findings, str, object], str]:
    def check(findings: Findings, path: str, value: object) -> str:
        if value in (RANDOM_IDS, SHARED_PREFIX, TRACE, MULTI_TURN):
            return str(value)
        rule = (
            f"must be {RANDOM_IDS}, {SHARED_PREFIX}, {TRACE}, {MULTI_TURN} or the path of a local "
            "ShareGPT-style"
        )
        return _sharegpt_file(locate, rule)(findings, path, value) or RANDOM_IDS

    return check


def _sharegpt_file(locate: Locate, rule: str) -> Callable[[Findings, str, object], str | None]:
    """The check of a local ShareGPT-style file's path (``rule``: what the key must be, up to the file):
    its absolute path; None where it is no such path (reported)."""

    def check(findings: Findings, path: str, value: object) -> str | None:
        if not isinstance(value, str) or not value.endswith(DATASET_SUFFIX):
            findings.error(path, f"{rule} {DATASET_SUFFIX} file, got {describe(value)}")
            return None
        file = locate(value)
        try:
            found = file.is_file()
        except (OSError, ValueError):
            found = False
        if not found:
            findings.error(path, f"{rule} {DATASET_SUFFIX} file: {str(file)!r} is not a file")
        return str(file.absolute())

    return check


Replay = tuple[TraceWindow, list[TraceRequest]]
"""A trace's window, and its requests."""


def _trace(locate: Locate) -> Callable[[Findings, str, object], Replay | None]:
    """The check of ``trace``: its window (``TRACE_WINDOW_KEYS``), the path relative to the campaign file
    and absolute once read; the window is read (its trace checked) at once, before any host is touched."""

    def check(findings: Findings, path: str, value: object) -> Replay | None:
        fields = mapping(findings, path, value, TRACE_WINDOW_KEYS, required=["path"])
        given = fields.get("path", _trace_path, None)
        start_s = fields.get("start_s", number_in(TRACE_SECONDS, 0.0), 0.0)
        duration_s = fields.get("duration_s", number_in(TRACE_DURATION_S, 1.0), None)
        count = fields.get("count", bounded(TRACE_REQUESTS), None)
        if given is None:
            return None
        try:
            window = TraceWindow(str(locate(given).absolute()), start_s, duration_s, count)
            return window, load_window(window)
        except WorkloadError as exc:  # a TraceError names the file, the line and the rule
            findings.error(path, str(exc))
            return None

    return check


def _trace_path(findings: Findings, path: str, value: object) -> str | None:
    if isinstance(value, str) and Path(value).suffix in TRACE_FORMATS:
        return value
    known = ", ".join(f"{suffix} ({name})" for suffix, name in TRACE_FORMATS.items())
    findings.error(path, f"must be the path of a trace file ending in {known}, got {describe(value)}")
    return None


def _shared_prefix(findings: Findings, path: str, value: object) -> SharedPrefix:
    """The groups of a shared-prefix dataset, each key of ``SHARED_PREFIX_KEYS`` absent its default."""
    fields = mapping(findings, path, value, SHARED_PREFIX_KEYS)
    default = DEFAULT_SHARED_PREFIX
    shared = SharedPrefix(
        groups=fields.get("groups", bounded(PREFIX_GROUPS), default.groups),
        prompts_per_group=fields.get(
            "prompts_per_group", bounded(PROMPTS_PER_GROUP), default.prompts_per_group
        ),
        system_prompt_len=fields.get("system_prompt_len", bounded(TOKENS), default.system_prompt_len),
        question_len=fields.get("question_len", bounded(TOKENS), default.question_len),
        order=fields.get("order", choice(ORDERS), default.order),
    )
    if not within(shared.input_len, TOKENS):
        findings.error(path, f"system_prompt_len + question_len {bound_problem(TOKENS, shared.input_len)}")
    return shared


def _prompt_source(
    findings: Findings, path: str, fields: Fields, dataset: object
) -> tuple[SharedPrefix | None, int]:
    """The workload's shared prefix (``dataset``, as given, is ``shared-prefix``) and its input length:
    the prefix's, where the file may repeat it but not contradict it."""
    shared = fields.get("shared_prefix", _shared_prefix, None)
    if dataset == SHARED_PREFIX and shared is None:
        shared = DEFAULT_SHARED_PREFIX
    if shared is not None and dataset != SHARED_PREFIX:
        findings.error(
            join_path(path, "shared_prefix"),
            f"describes the {SHARED_PREFIX} dataset's groups: set dataset: {SHARED_PREFIX}, or leave it out",
        )
        shared = None
    if shared is None:
        return None, fields.get("input_len", bounded(BOUNDS["input_len"]), STAND_IN_WORKLOAD.input_len)
    given = fields.get("input_len", bounded(BOUNDS["input_len"]), shared.input_len)
    if given != shared.input_len:
        findings.error(
            join_path(path, "input_len"),
            f"{given} is not shared_prefix's system_prompt_len + question_len, {shared.input_len}: leave it "
            "out",
        )
    return shared, shared.input_len


def _multi_turn(locate: Locate) -> Callable[[Findings, str, object], MultiTurn]:
    """The check of a multi-turn dataset's conversations, each key of ``MULTI_TURN_KEYS`` absent its
    default; ``sharegpt`` relative to the campaign file."""

    def check(findings: Findings, path: str, value: object) -> MultiTurn:
        fields = mapping(findings, path, value, MULTI_TURN_KEYS)
        default = DEFAULT_MULTI_TURN
        sharegpt = _sharegpt_file(locate, "must be the path of a local ShareGPT-style")
        return MultiTurn(
            turns=fields.get("turns", bounded(TURNS), default.turns),
            user_len=fields.get("user_len", bounded(TOKENS), default.user_len),
            system_prompt_len=fields.get(
                "system_prompt_len", bounded(SYSTEM_PROMPT_TOKENS), default.system_prompt_len
            ),
            system_prompts=fields.get("system_prompts", bounded(SYSTEM_PROMPTS), default.system_prompts),
            think_time_s=fields.get(
                "think_time_s", number_in(THINK_TIME_S, default.think_time_s), default.think_time_s
            ),
            sharegpt=fields.get("sharegpt", sharegpt, None),
        )

    return check


def _conversations(
    findings: Findings,
    path: str,
    fields: Fields,
    dataset: object,
    locate: Locate,
    *,
    api: str,
    input_len: int,
) -> MultiTurn | None:
    """A multi-turn dataset's conversations (``dataset``, as given, is ``multi-turn``): ``multi_turn`` is
    its alone, its first turn's lengths are ``input_len`` (as read), and it runs in a closed loop with its
    token ids on the generate API."""
    turns = fields.get("multi_turn", _multi_turn(locate), None)
    if dataset != MULTI_TURN:
        if turns is not None:
            findings.error(
                join_path(path, "multi_turn"),
                f"describes the {MULTI_TURN} dataset's conversations: set dataset: {MULTI_TURN}, or leave "
                "it out",
            )
        return None
    turns = turns or DEFAULT_MULTI_TURN
    if "input_len" in fields and input_len != turns.first_input_len:
        findings.error(
            join_path(path, "input_len"),
            f"{input_len} is not multi_turn's system_prompt_len + user_len, {turns.first_input_len}: leave "
            "it out",
        )
    if "concurrency" not in fields and ("request_rate" in fields or "trace_speedup" in fields):
        findings.error(
            path, f"{MULTI_TURN} conversations run in a closed loop: concurrency counts those in flight"
        )
    if turns.sharegpt is None and api not in ("generate", CHAT):
        findings.error(
            join_path(path, "api"),
            f"{MULTI_TURN}'s token ids need api: generate (its replies are token ids; the completions API "
            "answers with text), or chat for text conversations",
        )
    return turns


def _cache_state(
    findings: Findings, path: str, fields: Fields, dataset: object, multi_turn: MultiTurn | None
) -> str:
    cache_state = fields.get("cache_state", choice(CACHE_STATES), DEFAULT_CACHE_STATE)
    has_system_prompts = dataset == SHARED_PREFIX or (multi_turn is not None and multi_turn.system_prompt_len)
    if cache_state == PRIMED and not has_system_prompts:
        findings.error(
            join_path(path, "cache_state"),
            f"{PRIMED} sends each group's system prompt before a point: only dataset {SHARED_PREFIX}, and "
            f"{MULTI_TURN} with a system_prompt_len, have them (flushed starts every point from an empty "
            "cache)",
        )
    return cache_state


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


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers_in(bound: Bound, what: str) -> Callable[[Findings, str, object], tuple[float, ...]]:
    """The check of a non-empty list of distinct numbers inside ``bound`` (``what`` they are)."""

    def check(findings: Findings, path: str, value: object) -> tuple[float, ...]:
        if not isinstance(value, list) or not value:
            findings.error(
                path, f"must be a non-empty list of positive numbers ({what}), got {describe(value)}"
            )
            return ()
        numbers: dict[float, None] = {}  # ordered; 4 and 4.0 are one number
        for index, item in enumerate(value):
            if not _is_number(item) or bound.problem(item) is not None:
                findings.error(f"{path}[{index}]", bound_problem(bound, item))
            elif float(item) in numbers:
                findings.error(f"{path}[{index}]", f"{item} is listed twice")
            else:
                numbers[float(item)] = None
        return tuple(numbers)

    return check


_request_rates = _numbers_in(REQUEST_RATE, "requests per second")
_speedups = _numbers_in(SPEEDUP, "times as fast as recorded")


def _auto_repeats_count(findings: Findings, path: str, value: object) -> int | None:
    """``min`` or ``max`` of automatic repeats; None where it breaks its range (reported)."""
    if within(value, AUTO_REPEATS):
        return value
    findings.error(path, bound_problem(AUTO_REPEATS, value))
    return None


def _auto_repeats(findings: Findings, path: str, value: object) -> AutoRepeats:
    """A mapping of any of ``AUTO_REPEATS_KEYS``, the others ``AutoRepeats``' defaults. ``max`` below
    ``min`` is blamed on the key the file gives: ``max`` where it does, else ``min``."""
    fields = mapping(findings, path, value, AUTO_REPEATS_KEYS)
    default = AutoRepeats()
    given_minimum = fields.get("min", _auto_repeats_count, None)
    given_maximum = fields.get("max", _auto_repeats_count, None)
    half_width_pct = fields.get(
        "half_width_pct", number_in(HALF_WIDTH_PCT, default.half_width_pct), default.half_width_pct
    )
    if ("min" in fields and given_minimum is None) or ("max" in fields and given_maximum is None):
        return default  # a count out of its range, reported: no comparison with it
    minimum = default.minimum if given_minimum is None else given_minimum
    maximum = default.maximum if given_maximum is None else given_maximum
    if maximum < minimum:
        if "max" in fields:
            findings.error(join_path(path, "max"), f"{maximum} is below min {minimum}")
        else:
            findings.error(
                join_path(path, "min"), f"{minimum} is above max {maximum}, the default: set max too"
            )
    return AutoRepeats(minimum, maximum, half_width_pct)


def _repeats(findings: Findings, path: str, value: object) -> Repeats:
    """A fixed count, ``auto`` (``AutoRepeats``' defaults), or the mapping of automatic repeats."""
    if _is_number(value):
        return bounded(REPEATS)(findings, path, value)
    if value == AUTO:
        return AutoRepeats()
    if isinstance(value, dict):
        return _auto_repeats(findings, path, value)
    findings.error(
        path,
        f"must be {REPEATS.describe()}, {AUTO}, or a mapping of any of {', '.join(AUTO_REPEATS_KEYS)}, "
        f"got {describe(value)}",
    )
    return STAND_IN_WORKLOAD.repeats


def _shown_level(level: float) -> str:
    """A level as the file writes it: ``16``, ``0.5``, ``1000000`` (not ``1e+06``)."""
    return str(int(level)) if float(level).is_integer() else repr(level)


def _level_count(
    minimum: int, largest_level: float, per: str
) -> Callable[[Findings, str, object], LevelCount]:
    """Requests per level, at least ``minimum``, as many as ``REQUESTS`` allows at the largest level;
    ``per`` names what ``Nx`` multiplies: ``the concurrency``, ``the request rate``."""

    def check(findings: Findings, path: str, value: object) -> LevelCount:
        match = TIMES_CONCURRENCY.fullmatch(value) if isinstance(value, str) else None
        if is_int(value) and value >= minimum:
            count = LevelCount(value, times_concurrency=False)
        elif match:
            count = LevelCount(int(match[1]), times_concurrency=True)
        else:
            rule = f"must be an integer >= {minimum} or Nx (N times {per})"
            findings.error(path, f"{rule}, got {describe(value)}")
            return LevelCount(minimum, times_concurrency=False)
        problem = _request_count_problem(count, largest_level, per)
        if problem is not None:
            findings.error(path, problem)
        return count

    return check


def _request_count_problem(count: LevelCount, largest_level: float, per: str) -> str | None:
    """Why ``count`` is no real run's: N of ``Nx`` beyond ``COUNT_FACTOR``, or too many requests per level."""
    factor = replace(COUNT_FACTOR, unit=f"times {per}")
    if count.times_concurrency and not within(count.count, factor):
        return f"N of {count.to_json()} {bound_problem(factor, count.count)}"
    requests = count.at(largest_level)
    if within(requests, REQUESTS):
        return None
    problem = bound_problem(REQUESTS, requests)
    if not count.times_concurrency:
        return problem
    level = "level" if per == "the concurrency" else "request rate"
    return f"{count.to_json()} at {level} {_shown_level(largest_level)}: {problem}"


def _check_load(findings: Findings, path: str, fields: Fields) -> None:
    """Exactly one of ``LOADS``; a closed loop takes no open-loop key, an open loop needs its bound on
    requests in flight (a trace's defaults to its window), and neither runs a search."""
    given = [key for key in LOADS if key in fields]
    if not given:
        findings.error(
            path,
            "needs concurrency (a closed loop), request_rate (an open loop) or trace_speedup (a replayed "
            "trace)",
        )
        return
    if len(given) > 1:
        findings.error(path, f"has {' and '.join(given)}: give one (the levels of one kind of load)")
        return
    if "concurrency" in fields:
        for key in (key for key in OPEN_LOOP_KEYS if key in fields):
            rule = (
                "is an open loop's bound on requests in flight: with concurrency, the levels are the bound"
                if key == "max_concurrency"
                else "is an open loop's (request_rate): with concurrency, a request is sent when one ends"
            )
            findings.error(join_path(path, key), rule)
        return
    if "request_rate" in fields and "max_concurrency" not in fields:
        findings.error(
            join_path(path, "max_concurrency"),
            "required key is missing: an open loop (request_rate) needs its bound on requests in flight",
        )
    if "search_resolution" in fields:
        findings.error(
            join_path(path, "search_resolution"),
            f"bisects over concurrency levels: an open loop ({given[0]}) has none",
        )


def _check_trace(findings: Findings, path: str, fields: Fields, dataset: object) -> None:
    """``dataset: trace`` with its ``trace`` and ``trace_speedup``, and nothing the trace sets itself."""
    for key in ("trace", "trace_speedup"):
        if (dataset == TRACE) != (key in fields):
            findings.error(
                join_path(path, key),
                f"required key is missing: dataset {TRACE} replays a trace's window (trace) at speedups "
                "(trace_speedup)"
                if dataset == TRACE
                else f"is a replayed trace's: set dataset: {TRACE}, or leave it out",
            )
    if dataset == TRACE:
        for key in (key for key in TRACE_SETS if key in fields):
            findings.error(
                join_path(path, key),
                "is the trace's own (its requests' lengths, its window's count, its arrivals): leave it out",
            )


def check_workload(
    findings: Findings, path: str, value: object, base_dir: Path, files_dir: Path | None = None
) -> Workload:
    """The workload ``value`` at ``path``; its file (``Workload.file``) relative to ``base_dir`` (the
    campaign file's directory), or, given ``files_dir`` (a host's copy of it), by its name there."""

    def locate(given: str) -> Path:
        return files_dir / Path(given).name if files_dir is not None else base_dir / given

    given_dataset = value.get("dataset") if isinstance(value, dict) else None
    made = {SHARED_PREFIX: ("input_len",), MULTI_TURN: ("input_len",), TRACE: TRACE_SETS}.get(
        str(given_dataset), ()
    )
    required = [key for key in WORKLOAD_REQUIRED if key not in made]
    fields = mapping(findings, path, value, WORKLOAD_KEYS, required=required)
    if isinstance(value, dict):
        _check_load(findings, path, fields)
        _check_trace(findings, path, fields, given_dataset)
    stand_in = STAND_IN_WORKLOAD
    api = fields.get("api", choice(APIS), stand_in.api)
    dataset = fields.get("dataset", _dataset(locate), stand_in.dataset)
    shared_prefix, input_len = _prompt_source(findings, path, fields, given_dataset)
    multi_turn = _conversations(findings, path, fields, given_dataset, locate, api=api, input_len=input_len)
    if multi_turn is not None:
        input_len = multi_turn.first_input_len
    output_len = fields.get("output_len", bounded(BOUNDS["output_len"]), stand_in.output_len)
    concurrency = fields.get("concurrency", _concurrency, stand_in.concurrency)
    request_rate = fields.get("request_rate", _request_rates, stand_in.request_rate)
    speedups: tuple[float, ...] = fields.get("trace_speedup", _speedups, ())
    replay = fields.get("trace", _trace(locate), None) if given_dataset == TRACE else None
    if replay is not None and speedups:
        requests = replay[1]
        request_rate = tuple(replay_rates(requests, list(speedups)))
        input_len = max(request.input_len for request in requests)
        output_len = max(request.output_len for request in requests)
    # With two loads given (an error), the closed loop stands in: the request counts are judged at its levels.
    open_loop = ("request_rate" in fields or replay is not None) and "concurrency" not in fields
    per = "the request rate" if open_loop else "the concurrency"
    largest_level = max(request_rate if open_loop else concurrency, default=1)
    arrival = TRACE if replay is not None else fields.get("arrival", choice(ARRIVALS), DEFAULT_ARRIVAL)
    burstiness = fields.get("burstiness", number_in(BURSTINESS, DEFAULT_BURSTINESS), DEFAULT_BURSTINESS)
    if open_loop and "burstiness" in fields and arrival == POISSON and burstiness != DEFAULT_BURSTINESS:
        findings.warn(
            join_path(path, "burstiness"),
            "has no effect with poisson arrivals (it is gamma's shape): set arrival: gamma, or leave it out",
        )
    return Workload(
        api=api,
        dataset=dataset,
        input_len=input_len,
        output_len=output_len,
        concurrency=concurrency,
        prompts_per_level=fields.get(
            "prompts_per_level",
            _level_count(LEAST_REQUESTS["prompts_per_level"], largest_level, per),
            stand_in.prompts_per_level,
        ),
        warmup=fields.get(
            "warmup", _level_count(LEAST_REQUESTS["warmup"], largest_level, per), stand_in.warmup
        ),
        repeats=fields.get("repeats", _repeats, stand_in.repeats),
        seed=fields.get("seed", bounded(BOUNDS["seed"]), stand_in.seed),
        vocab_size=fields.get("vocab_size", bounded(BOUNDS["vocab_size"]), stand_in.vocab_size),
        request_rate=request_rate if open_loop else (),
        arrival=arrival,
        burstiness=burstiness,
        max_concurrency=fields.get(
            "max_concurrency", bounded(BOUNDS["max_concurrency"]), len(replay[1]) if replay else None
        ),
        search_resolution=fields.get("search_resolution", bounded(BOUNDS["search_resolution"]), None),
        shared_prefix=shared_prefix,
        multi_turn=multi_turn,
        cache_state=_cache_state(findings, path, fields, given_dataset, multi_turn),
        trace=replay[0] if replay else None,
        trace_speedup=speedups,
    )


WORKLOAD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
"""A named workload's: the directory of its sweeps inside each config's (``model.workload_dir``)."""
RESERVED_WORKLOAD_NAMES = (RANKS_DIR,)
"""Directories a config's own holds already."""


def check_workloads(findings: Findings, path: str, value: object, base_dir: Path) -> dict[str, Workload]:
    """``workloads``: at least one named workload, each checked as ``workload`` is; they share their
    ``repeats``, as every job sweeps each of them once per repeat it runs (automatic repeats add one while
    any level of any of them is still wide)."""
    entries = named_entries(findings, path, value, "workload")
    workloads: dict[str, Workload] = {}
    for name, entry in entries.items():
        where = join_path(path, name)
        if not WORKLOAD_NAME.fullmatch(name) or name in RESERVED_WORKLOAD_NAMES:
            findings.error(
                where,
                f"{describe(name)} is not a workload name: letters, digits, '-' and '_', starting with a "
                f"letter, at most 64, not {', '.join(RESERVED_WORKLOAD_NAMES)} (a config's directory has it)",
            )
        workloads[name] = check_workload(findings, where, entry, base_dir)
    files: dict[str, tuple[str, str]] = {}
    for name, workload in workloads.items():
        if workload.file is not None:
            other, other_file = files.setdefault(Path(workload.file).name, (name, workload.file))
            if other_file != workload.file:
                findings.error(
                    join_path(path, name),
                    f"reads {workload.file}, and {other} another file of its name ({other_file}): each "
                    "host keeps one copy of a name",
                )
    first = next(iter(workloads.items()), None)
    for name, workload in workloads.items():
        if first is not None and workload.repeats != first[1].repeats:
            findings.error(
                join_path(join_path(path, name), "repeats"),
                f"{json.dumps(repeats_to_json(workload.repeats))} differs from {first[0]}'s "
                f"{json.dumps(repeats_to_json(first[1].repeats))}: a job sweeps every workload on its "
                "server, so they share their repeats",
            )
    return workloads


def workload_from_json(data: object, source: str, files_dir: Path | None = None) -> Workload:
    """A workload from ``Workload.to_json`` data (e.g. module arguments), its file by its name in
    ``files_dir`` where given (``check_workload``); CampaignError, its messages starting with ``source``,
    when it breaks a rule."""
    findings = Findings(source)
    workload = check_workload(findings, "workload", data, Path(), files_dir)
    findings.raise_errors()
    return workload


STAND_IN_WORKLOAD = Workload(
    api=DEFAULT_API,
    dataset=RANDOM_IDS,
    input_len=1,
    output_len=1,
    concurrency=(),
    prompts_per_level=LevelCount(LEAST_REQUESTS["prompts_per_level"], times_concurrency=False),
    warmup=LevelCount(LEAST_REQUESTS["warmup"], times_concurrency=False),
    repeats=DEFAULT_REPEATS,
    seed=DEFAULT_SEED,
)
"""Stands in for a missing workload and a missing key; ``repeats`` and ``seed`` are also the defaults."""
