"""The shapes of a sweep's ``points.jsonl`` and of a config's ``status.json``: their names, their keys, the
line format, and what a usable line or entry is. Their writers (``measure.results.ResultsDir``,
``measure.status.record_status``) and their readers (a resumed sweep, ``fairbench run``, the report) all go
by what is defined here; docs/results.md describes both files.

points.jsonl holds one JSON object per line, each ended by ``\\n``, appended as each point ends. A last line
without its ``\\n`` is what an interrupted append leaves: not a line yet. A point measured again is a later
line naming the one it replaces (``SUPERSEDES``); each point's current line is its first, or the line that
supersedes it, and any other line of the same point does not count.

status.json is one JSON object: ``OUTCOME_KEYS`` (``status``: ``ok`` or ``failed``; ``stage`` and ``reason``,
where and why it failed, both null when it did not; ``journal_tail``, the journal lines that say why), then
``host``, ``config``, ``unit``, ``run_id``, ``hosts`` (every host a job of the directory ran on, rank 0
first) and ``jobs`` (one entry per job of the run that wrote into the directory: ``job``, ``repeats``,
``hosts``, the outcome keys, ``ranks`` and ``timeline``, ``TIMELINE_KEYS``). ``measure.status`` composes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fairbench.measure.json_rules import (
    Rule,
    is_finite,
    is_host_list,
    is_list,
    is_mapping,
    is_text,
    list_of,
    or_null,
    parse_object,
    rule_errors,
    shown,
    whole,
)

POINTS_FILE = "points.jsonl"
SUPERSEDES = "supersedes"
"""The key of a point measured again: ``{"line": N, "requests": PATH}``, the line of points.jsonl it
replaces and where that point's request records were moved."""
LISTED = "listed"
"""``level_source`` of a point at one of the sweep's levels (a line without the key is one)."""
BISECT = "bisect"
"""``level_source`` of a point the SLO search added between two levels (``Sweep.search_probe``)."""


def level_tag(level: float, *, open_loop: bool = False) -> str:
    """A level as point ids and prompt seeds spell it: ``c16`` (concurrency 16), ``rps2.5`` (2.5 requests
    per second, open loop)."""
    return f"rps{level:g}" if open_loop else f"c{level}"


def point_id(level: float, repeat: int, *, open_loop: bool = False) -> str:
    """``c16-r0``: the level (:func:`level_tag`) and the repeat."""
    return f"{level_tag(level, open_loop=open_loop)}-r{repeat}"


def is_open_loop(point: Mapping[str, Any]) -> bool:
    """Whether a point line was measured in an open loop: its ``request_rate`` is a number (a closed loop's
    is the string ``"inf"``)."""
    rate = point.get("request_rate")
    return isinstance(rate, int | float) and not isinstance(rate, bool)


def has_failed_requests(point: Mapping[str, Any]) -> bool:
    """Whether a point is not to be trusted: a request of it failed, it stopped early at the error-rate
    limit, or it completed none. Such a point fails a campaign's job, and is what ``remeasure_failed``
    (``--remeasure-failed``) measures again."""
    return bool(point.get("failed") or point.get("stopped_early") or not point.get("completed"))


def load_of(point: Mapping[str, Any]) -> float:
    """The level a point line was measured at: its target request rate in an open loop, else its
    concurrency."""
    return float(point["request_rate"]) if is_open_loop(point) else int(point["max_concurrency"])


# --- the line format ----------------------------------------------------------------------------------


def encode_line(point: Mapping[str, Any]) -> str:
    """``point`` as its line of points.jsonl, ``\\n`` included."""
    return json.dumps(point) + "\n"


def whole_lines(data: bytes) -> int:
    """How many bytes of points.jsonl's ``data`` are whole lines: what a torn last line is cut back to."""
    return data.rfind(b"\n") + 1


def split_lines(data: bytes) -> tuple[list[tuple[int, bytes]], int | None]:
    """points.jsonl's whole lines that hold anything, each with its number (from 1), and the number of an
    incomplete last line (None when there is none)."""
    *lines, tail = data.split(b"\n")
    numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
    return numbered, len(lines) + 1 if tail.strip() else None


_COUNTS = {"max_concurrency": 1, "repeat": 0, "completed": 0, "failed": 0}
POINT_RULES: tuple[Rule, ...] = (
    Rule("point_id", "a string", is_text, True),
    *(Rule(key, f"a whole number of at least {least}", whole(least), True) for key, least in _COUNTS.items()),
)
"""What places and counts a point: its id, its level and repeat, its requests that completed and failed."""
LINE_RULES: tuple[Rule, ...] = tuple(rule for rule in POINT_RULES if rule.key in ("point_id", "completed"))
"""What every line must hold to be a point at all: a sweep resumes by its id, and measures it again when
nothing completed."""
LINE_NEEDS = "a point needs a point_id (text) and completed (a count)"
"""``LINE_RULES`` as a sweep refusing a line says them."""
SUPERSEDES_RULES: tuple[Rule, ...] = (
    Rule(SUPERSEDES, "an object", is_mapping, False),
    Rule(f"{SUPERSEDES}.line", "a whole number of at least 1", whole(1), True),
)


def point_errors(point: Mapping[str, Any], figure_rules: Sequence[Rule] = ()) -> list[str]:
    """What keeps ``point`` from being placed and counted: each broken rule (``POINT_RULES``, the reader's
    ``figure_rules``, ``SUPERSEDES_RULES``); else a point_id that its level and repeat do not make."""
    errors = rule_errors(point, (*POINT_RULES, *figure_rules, *SUPERSEDES_RULES))
    if errors:
        return errors
    open_loop = is_open_loop(point)
    expected = point_id(load_of(point), point["repeat"], open_loop=open_loop)
    if point["point_id"] == expected:
        return []
    level = (
        f"request_rate {point['request_rate']}"
        if open_loop
        else f"max_concurrency {point['max_concurrency']}"
    )
    mismatch = f"point_id {shown(point['point_id'])} is not {expected}"
    return [f"{mismatch}, as {level} and repeat {point['repeat']} make it"]


def _superseded_line(point: Mapping[str, Any]) -> object:
    """The number of the line ``point`` supersedes; None for a point measured once."""
    supersedes = point.get(SUPERSEDES)
    return supersedes.get("line") if isinstance(supersedes, dict) else None


Numbered = tuple[int, dict[str, Any]]
"""A point line and its number."""


def current_lines(lines: Iterable[Numbered]) -> tuple[dict[str, Numbered], list[tuple[int, str, int]]]:
    """Each point's current line (the module docstring), by point_id in the order the points were first
    measured; and each other line of a point (two writers at once, before the directory had a lock), which
    does not count: its number, its point_id and the number of the line that counted then."""
    current: dict[str, Numbered] = {}
    again: list[tuple[int, str, int]] = []
    for number, point in lines:
        pid = point["point_id"]
        if pid in current and _superseded_line(point) != current[pid][0]:
            again.append((number, pid, current[pid][0]))
        else:
            current[pid] = (number, point)
    return current, again


# --- status.json ----------------------------------------------------------------------------------------

STATUS_FILE = "status.json"
SERVER_INFO_FILE = "server_info.json"
"""A config's server's /server_info, as its job read it once the server was healthy."""
HOST_FILE = "host.json"
"""The facts of the host a config's job ran on."""
CLOCK_LOCK = "gpu_clock_lock"
"""host.json's record of the GPU clocks the bench role locked for the job (``bench_gpu_clock_lock``):
``{"sm_mhz": MHz or null, "mem_mhz": MHz or null}``; null where it locked none."""
UNIT_FILE = "unit.service"
ANSWERS_DIR = "answers"
"""What each of a config's server starts answered before its sweep (``fairbench.answers.check``): one
file per job, ``answers/<ANSWERS_FILE>``."""
ANSWERS_FILE = "start-r{repeat}.json"
"""A job's answers, named by the first repeat it measures (``{repeat}``): a resumed job's start replaces
its file, another job's start keeps its own."""
"""A copy of the systemd unit the config's server ran as."""
OK = "ok"
FAILED = "failed"
OUTCOME_KEYS = ("status", "stage", "reason", "journal_tail")
"""How a config, or one of its jobs, ended."""
TIMELINE_KEYS = ("unit_started_at", "healthy_at", "first_request_at", "last_point_ended_at")
"""A job's ``timeline``: epoch seconds on its rank 0's host (``fairbench.hosts.config_run`` records them,
``fairbench.fleet.timeline`` measures the campaign's overhead from them)."""

STATUS_RULES: tuple[Rule, ...] = (
    Rule("status", "a string", is_text, True),
    Rule("jobs", "a list", is_list, False),
    Rule("hosts", "a list of strings", list_of(is_text), False),
)
JOB_RULES: tuple[Rule, ...] = (
    Rule("job", "a string", is_text, True),
    Rule("repeats", "a list of whole numbers", list_of(whole(0)), True),
    Rule("hosts", "a list of strings, at least one", is_host_list, True),
    Rule("status", "a string", is_text, True),
    *(Rule(key, "null or a string", or_null(is_text), False) for key in ("stage", "reason")),
    Rule("journal_tail", "a list of strings", list_of(is_text), False),
    Rule("ranks", "a list", is_list, False),
    Rule("timeline", "null or an object", or_null(is_mapping), False),
    *(Rule(f"timeline.{key}", "null or a finite number", or_null(is_finite), False) for key in TIMELINE_KEYS),
)
"""Each entry of status.json's ``jobs``: one breaking a required rule is left out; a broken optional key
counts as absent."""
RANK_RULES: tuple[Rule, ...] = (
    Rule("rank", "a whole number of at least 1", whole(1), True),
    Rule("host", "a string", is_text, True),
    Rule("journal_tail", "a list of strings", list_of(is_text), False),
)
"""Each entry of a job's ``ranks``: a rank >= 1 of a server over several hosts."""


def read_status(config_dir: Path) -> dict[str, Any] | None:
    """``config_dir``'s status.json as written, unchecked; None when it is missing or not a JSON object."""
    try:
        return parse_object((config_dir / STATUS_FILE).read_bytes())
    except (OSError, ValueError):
        return None
