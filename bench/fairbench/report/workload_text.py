"""A campaign's workload in words, from its campaign.json form: the report's campaign line and
``fairbench validate``'s line per workload say it alike."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fairbench.measure.repeats import AutoRepeats, repeats_from_json
from fairbench.measure.workload import DEFAULT_ARRIVAL, DEFAULT_BURSTINESS, GAMMA, TRACE
from fairbench.report.summary import CLOSED_LOOP, OPEN_LOOP


def workload_text(workload: Mapping[str, Any], decided_on: float | None = None) -> str:
    r"""``\`completions\`, 256 tokens in, 128 out, concurrency 1, 16, 3 repeat(s)``: its API, its prompts
    (groups, conversations or a trace's window), lengths, levels, repeats and the points' starting cache;
    ``decided_on``: the margin automatic repeats stop by (``fleet.stopping.stopping_margin``)."""
    repeats = _repeats_text(workload.get("repeats", 1), decided_on)
    return (
        f"`{workload.get('api')}`, {_prompts_text(workload)}{_lengths_text(workload)}"
        f"{_load_text(workload)}, {repeats}{_cache_text(workload)}"
    )


def repeats_setting(setting: object) -> int | AutoRepeats | None:
    """campaign.json's ``workload.repeats`` (``measure.repeats``); None when it is neither form."""
    try:
        return repeats_from_json(setting)
    except (KeyError, TypeError, ValueError):
        return None


def _repeats_text(setting: object, decided_on: float | None) -> str:
    repeats = repeats_setting(setting)
    if isinstance(repeats, AutoRepeats):
        until = (
            f"in rounds until decided against ±{decided_on:g} %"
            if decided_on is not None
            else f"until ±{repeats.half_width_pct:g} %"
        )
        return f"automatic repeats ({repeats.minimum} to {repeats.maximum}, {until})"
    return f"{setting} repeat(s)"


def _load_text(workload: Mapping[str, Any]) -> str:
    """``concurrency 1, 8, 64`` (closed loop), ``request rate 1, 2 req/s (poisson, at most 64 in
    flight)`` (open loop; gamma arrivals with their burstiness), or ``replayed at 0.5, 1, 2 times its own
    rate (at most 512 in flight)`` (a trace, whose rates the points hold)."""
    if workload.get("trace_speedup"):
        speedups = ", ".join(f"{speedup:g}" for speedup in workload["trace_speedup"])
        bound = workload.get("max_concurrency")
        return f"replayed at {speedups} times its own rate (at most {bound} in flight)"
    listed = workload.get("request_rate") or workload.get("concurrency") or []
    loop = OPEN_LOOP if workload.get("request_rate") else CLOSED_LOOP
    levels = ", ".join(map(loop.value, listed))
    if not loop.open:
        return f"{loop.noun} {levels}"
    arrival = str(workload.get("arrival", DEFAULT_ARRIVAL))
    if arrival == GAMMA:
        arrival += f", burstiness {workload.get('burstiness', DEFAULT_BURSTINESS):g}"
    return f"{loop.noun} {levels} req/s ({arrival}, at most {workload.get('max_concurrency')} in flight)"


def _lengths_text(workload: Mapping[str, Any]) -> str:
    """The exact lengths of a generated workload; nothing for a trace, whose requests have their own."""
    if workload.get("dataset") == TRACE:
        return ""
    return f"{workload.get('input_len')} tokens in, {workload.get('output_len')} out, "


def _prompts_text(workload: Mapping[str, Any]) -> str:
    """A shared-prefix workload's groups, as campaign.json's ``shared_prefix`` holds them, a multi-turn
    one's conversations, or a replayed trace's file and window; else nothing."""
    trace = workload.get("trace")
    if isinstance(trace, Mapping):
        window = [f"from {trace.get('start_s', 0):g} s"]
        if trace.get("duration_s") is not None:
            window.append(f"for {trace['duration_s']:g} s")
        if trace.get("count") is not None:
            window.append(f"at most {trace['count']} requests")
        name = Path(str(trace.get("path"))).name
        return f"the trace `{name}` ({', '.join(window)}) with its own lengths, "
    turns = workload.get("multi_turn")
    if isinstance(turns, Mapping):
        system = turns.get("system_prompt_len") or 0
        users = (
            f"user turns from `{Path(str(turns['sharegpt'])).name}`"
            if turns.get("sharegpt")
            else f"{turns.get('user_len')}-token user turns"
        )
        think = turns.get("think_time_s") or 0
        return (
            f"conversations of {turns.get('turns')} turns ({users}"
            + (_system_prompts_text(system, turns.get("system_prompts")) if system else "")
            + (f", {think:g} s between a reply and the next turn" if think else "")
            + "), each turn sending the server's earlier replies back, first turn "
        )
    shared = workload.get("shared_prefix")
    if not isinstance(shared, Mapping):
        return ""
    return (
        f"{shared.get('groups')} groups of {shared.get('prompts_per_group')} requests sharing a "
        f"{shared.get('system_prompt_len')}-token system prompt ({shared.get('order')}), "
    )


def _system_prompts_text(tokens: int, count: object) -> str:
    if count == 1:
        return f", a {tokens}-token system prompt shared by all"
    return f", one of {count} {tokens}-token system prompts"


def _cache_text(workload: Mapping[str, Any]) -> str:
    """The points' starting cache, where campaign.json names it (a carried cache it does not)."""
    state = workload.get("cache_state")
    return f", each point's prefix cache {state}" if isinstance(state, str) else ""
