"""Cross-checks of a point against the server's own counters and the client's own use: each flag names
the numbers it casts doubt on, and says why; what they see of the server's or its GPUs' own behaviour, which
casts no doubt on what the point measures, is an observation instead.

A flag is ``{"flag": NAME, "on": [point keys], "reason": words}``; a point's ``flags`` lists those raised
(none: ``[]``). An observation is ``{"observation": NAME, "reason": words}``; a point's ``observations``
lists those made. The checks, each with its threshold:

- ``server_tokens_differ``: the server's generation-token delta over the point (server_metrics.py) is
  not the output tokens the client received. Checked only when every request succeeded (a failed one's
  tokens are the client's to lose). Exact: both count the same finished requests.
- ``running_below_concurrency``: in a closed loop, the server ran fewer than RUNNING_SHARE_MIN of the
  requests the client had in flight. Where the server has SGLang's latency histograms, both sides by
  Little's law over the same point: the server's requests past its queue (``server_in_flight_mean`` less
  ``server_queued_mean``) against the client's ``concurrency`` (C, but for the point's ramp and tail).
  When its queue holds at least half of the shortfall, the server held them back. Where it can run
  RUNNING_SHARE_MIN of C at once, it queued requests on their way in (waiting for a prefill, a batch
  slot), which is what a server does at that load and what the point measures: the observation
  ``queued_at_concurrency``, no flag. Where it cannot, it is capped (``max-running-requests``, its KV
  cache): the level measured a lower load than it names, a flag. What it can run: the limit its
  ``/server_info`` states (``server_running_limit``), else the most its running-requests gauge read at a
  sample of the point's steady window (``server_running_max``); with neither, it may be capped: a flag.
  Where the queue does not hold half the shortfall, the time went outside the server: the client was
  late sending or reading, a flag. Without the histograms, the ``num_running_reqs`` gauge's mean over the
  steady window against C, which reads low on real SGLang (refreshed at log points only, and blind to a
  prefill's requests).
- ``prefix_reuse``: the share of the point's prompt tokens the server served from its prefix cache is far
  from the workload's design (``designed_cached_share``, metrics.cache_metrics). Measured per request where
  the server reported it (``cached_share``), else by its /metrics counters (``server_cached_tokens`` of
  ``server_prompt_tokens``). Above the design by more than ``allowed_cache_rate`` allows, prompts were
  served from another point's cache; below it by more than CACHE_RATE_SLACK in a ``primed`` point, whose
  design is exact, the cache lost the primed prefixes (evicted: too small for them) or never matched them.
  Other points' designs are an upper bound (requests of a group in flight together all miss), so only
  the excess is flagged.
- ``server_metrics_failed``: a scrape of the server's ``/metrics`` during the point failed
  (``server_metric_failures``): the checks against its counters are missing or rest on fewer samples. It
  names no figure: what it doubts is the checks.
- ``gpu_throttled``: the machine held a GPU's clocks down (``gpu_state.THROTTLE_REASONS``: a thermal limit,
  the hardware's slowdown or power brake) in more than GPU_LIMIT_SHARE_MAX of the point's samples: it
  measured slower GPUs than the config should get. A GPU at its board power limit (``gpu_state.POWER_CAP``)
  in more than GPU_LIMIT_SHARE_MAX of them is where a saturated GPU runs, and what the point measures: the
  observation ``gpu_at_power_limit``, no flag.
- ``client_bound``: a client process was runnable (running, or waiting for a core) more than
  CLIENT_RUNNABLE_SHARE_MAX of the point, or its event loop woke more than CLIENT_LAG_MEAN_MAX_MS late on
  average: it read its streams late, from its own cost or starved of CPU by other processes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fairbench.measure.gpu_state import POWER_CAP, THROTTLE_REASONS
from fairbench.measure.workload import PRIMED

RUNNING_SHARE_MIN = 0.9
CLIENT_RUNNABLE_SHARE_MAX = 0.9
"""A single-threaded client that has work more than 90 % of the time queues its reads: in a single-server
queue the wait grows as u / (1 - u) service times, 9 at u = 0.9, so every read's timestamp is late by
several reads' handling; below it the wait is a fraction of one. Runnable is its CPU time plus its time
waiting for a core: a client starved by other processes is as late as one busy with its own work."""
CLIENT_LAG_MEAN_MAX_MS = 1.5
"""An idle loop already wakes about 0.5 ms late on average (epoll waits in whole milliseconds, rounded
up); 1 ms more is fairbench's accuracy target for TTFT (tests/support/sweep_accuracy.py): a loop later
than that on average adds more than it to every time it takes."""
CACHE_RATE_SLACK = 0.05
"""Cached share allowed on top of the workload's own: prompts that happen to share their first tokens."""
CHAT_TEMPLATE_TOKENS = 64
"""The prompt tokens a chat template puts before every message (role markers, a default system prompt):
the same for every request, so a chat workload's prompts share them in the cache."""

GPU_LIMIT_SHARE_MAX = 0.05
"""A limit reached for a sample or two of a point is the GPU touching it; held for more than 5 % of the
point's samples it set the speed of a measurable share of the point."""

TOKENS_ON = ["output_throughput", "total_output_tokens"]
RUNNING_ON = ["max_concurrency", "output_throughput", "median_tpot_ms"]
REUSE_ON = ["median_ttft_ms", "mean_ttft_ms", "input_throughput"]
CLIENT_ON = ["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms"]
GPU_ON = CLIENT_ON
"""A slowed GPU slows every token: the same figures as a late client."""


def _flag(name: str, on: list[str], reason: str) -> dict[str, Any]:
    return {"flag": name, "on": on, "reason": reason}


def allowed_cache_rate(api: str, mean_prompt_len: float, designed_share: float = 0.0) -> float:
    """The cached share of prompt tokens a fairbench workload allows: its prompts are drawn afresh for
    every point and phase, so nothing but the designed share (a group's system prompt) and a chat
    template's CHAT_TEMPLATE_TOKENS is shared, plus CACHE_RATE_SLACK."""
    shared = CHAT_TEMPLATE_TOKENS if api == "chat" else 0
    return min(1.0, designed_share + shared / max(mean_prompt_len, 1.0) + CACHE_RATE_SLACK)


def _observation(name: str, reason: str) -> dict[str, Any]:
    return {"observation": name, "reason": reason}


def server_observations(point: Mapping[str, Any], *, closed_loop: bool) -> list[dict[str, Any]]:
    """What the checks against the server's counters saw of its behaviour without doubting the point."""
    found = _running_check(point) if closed_loop else None
    if found is None or found[0]:
        return []
    return [_observation("queued_at_concurrency", found[1])]


def server_flags(point: Mapping[str, Any], *, api: str, closed_loop: bool) -> list[dict[str, Any]]:
    """The checks against the server's counters (``server_*`` fields of server_metrics.point_fields)."""
    flags = []
    failures = point.get("server_metric_failures") or 0
    if failures:
        error = point.get("server_metric_error")
        flags.append(
            _flag(
                "server_metrics_failed",
                [],
                f"{failures} scrape(s) of the server's /metrics failed during the point"
                + (f" (the first: {error})" if error else "")
                + ": the checks against its counters are missing or rest on fewer samples",
            )
        )
    generated = point.get("server_generation_tokens")
    received = point["total_output_tokens"]
    if generated is not None and point["completed"] == point["num_prompts"] and generated != received:
        flags.append(
            _flag(
                "server_tokens_differ",
                TOKENS_ON,
                f"the server counted {generated:,} generation tokens over the point, the client received "
                f"{received:,}: another client used the server, or tokens were lost between them",
            )
        )
    if closed_loop and (found := _running_check(point)) is not None and found[0]:
        flags.append(_flag("running_below_concurrency", RUNNING_ON, found[1]))
    if (flag := _reuse_flag(point, api)) is not None:
        flags.append(flag)
    return flags


def _measured_reuse(point: Mapping[str, Any]) -> tuple[float, str] | None:
    """The point's cached share of prompt tokens, and whose count it is; None when nothing counted it."""
    if point.get("cached_share") is not None:
        return point["cached_share"], "the server reported for the point's requests"
    cached, prompt = point.get("server_cached_tokens"), point.get("server_prompt_tokens")
    if cached is not None and prompt:
        return cached / prompt, "the server's /metrics counted"
    return None


def _reuse_flag(point: Mapping[str, Any], api: str) -> dict[str, Any] | None:
    """``prefix_reuse``, or None."""
    measured = _measured_reuse(point)
    if measured is None:
        return None
    share, counted = measured
    designed = point.get("designed_cached_share") or 0.0
    allowed = allowed_cache_rate(api, point["total_input_tokens"] / max(point["completed"], 1), designed)
    design = f"the {designed:.0%} this workload is designed to reuse" if designed else "none by design"
    if share > allowed:
        reason = (
            f"{share:.0%} of the prompt tokens {counted} came from its prefix cache, above the {allowed:.0%} "
            f"this workload allows ({design}): prompts were served from another point's cache "
            "(cache_state flushed starts each point from an empty one)"
        )
    elif point.get("cache_state") == PRIMED and share < designed - CACHE_RATE_SLACK:
        reason = (
            f"{share:.0%} of the prompt tokens {counted} came from its prefix cache, below {design}: the "
            "primed system prompts were evicted (a cache too small for them) or not matched"
        )
    else:
        return None
    return _flag("prefix_reuse", REUSE_ON, reason)


def _running_check(point: Mapping[str, Any]) -> tuple[bool, str] | None:
    """A closed-loop point whose server ran fewer than RUNNING_SHARE_MIN of C: whether that doubts the
    point (``running_below_concurrency``) or is the server queueing at its load (``queued_at_concurrency``),
    and why; None where it ran them, or nothing counted them."""
    in_server, queued = point.get("server_in_flight_mean"), point.get("server_queued_mean")
    if in_server is not None and queued is not None:
        running, wanted = in_server - queued, point["concurrency"]
        what = (
            f"the server ran {running:.1f} requests on average over the point (its own Little's law, "
            f"time in it less time queued), {running / max(wanted, 1e-9):.0%} of the {wanted:.1f} the "
            f"client had in flight (below {RUNNING_SHARE_MIN:.0%})"
        )
        held = queued >= (wanted - running) / 2
    else:
        running, wanted = point.get("server_running_mean"), point["max_concurrency"]
        if running is None:
            return None
        queued = point.get("server_queue_mean") or 0.0
        what = (
            f"the server's running-requests gauge read {running:.1f} on average, "
            f"{running / wanted:.0%} of C={wanted} (below {RUNNING_SHARE_MIN:.0%})"
        )
        held = running + queued >= RUNNING_SHARE_MIN * wanted
    if running >= RUNNING_SHARE_MIN * wanted:
        return None
    if not held:
        return True, (
            f"{what}; only {queued:.1f} waited in its queue: the time went outside the server, the client "
            "was late sending or reading them"
        )
    level, limit, most = (
        point["max_concurrency"],
        point.get("server_running_limit"),
        point.get("server_running_max"),
    )
    if limit is not None:
        can, said = limit, f"its /server_info says it runs up to {limit} at once"
    elif most is not None:
        can, said = most, f"its running-requests gauge read up to {most:.0f} at once"
    else:
        can, said = (
            None,
            "neither its /server_info nor its running-requests gauge says how many it runs at once",
        )
    if can is not None and can >= RUNNING_SHARE_MIN * level:
        return False, (
            f"{what}; {queued:.1f} waited in its queue on average, and {said}: it queued requests on their "
            "way in (a prefill, a batch slot), as a server does at this load"
        )
    return True, (
        f"{what}; {queued:.1f} waited in its queue on average and {said} (below {RUNNING_SHARE_MIN:.0%} of "
        f"C={level} or not known): it may be capped (max-running-requests, its KV cache), so the level "
        "measured a lower load than it names"
    )


def _held_gpus(point: Mapping[str, Any], share_key: str, reasons: Sequence[str]) -> list[str]:
    """Each GPU of the point (``gpu_state.point_fields``) whose ``share_key`` is above GPU_LIMIT_SHARE_MAX:
    its share of samples, those of ``reasons`` it was given, its lowest SM clock and hottest sample."""
    held = []
    for state in point.get("gpu_state", []):
        share = state.get(share_key) or 0.0
        if share <= GPU_LIMIT_SHARE_MAX:
            continue
        given = ", ".join(
            f"{name} {shown:.0%}" for name, shown in state["clock_events"].items() if name in reasons
        )
        clocks = (
            f"; SM clock {state['sm_clock_mhz_min']:,} MHz at its lowest"
            if state.get("sm_clock_mhz_min") is not None
            else ""
        )
        heat = (
            f", {state['temperature_c_max']} °C at most" if state.get("temperature_c_max") is not None else ""
        )
        held.append(f"GPU {state['index']} in {share:.0%} of its samples ({given}{clocks}{heat})")
    return held


def gpu_flags(point: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The check of the GPUs' clock-event reasons (``gpu_state.point_fields``); none without them."""
    share = point.get("gpu_throttled_share")
    if share is None or share <= GPU_LIMIT_SHARE_MAX:
        return []
    return [
        _flag(
            "gpu_throttled",
            GPU_ON,
            "the machine held the GPU clocks down (a thermal limit, the hardware's slowdown or power brake): "
            + "; ".join(_held_gpus(point, "throttled_share", THROTTLE_REASONS))
            + f" (above {GPU_LIMIT_SHARE_MAX:.0%}): the point measured slower GPUs than the config should "
            "get",
        )
    ]


def gpu_observations(point: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the GPUs' clock-event reasons say of a GPU at its power limit (module docstring)."""
    share = point.get("gpu_power_capped_share")
    if share is None or share <= GPU_LIMIT_SHARE_MAX:
        return []
    return [
        _observation(
            "gpu_at_power_limit",
            "the GPUs ran at their board power limit: "
            + "; ".join(_held_gpus(point, "power_capped_share", (POWER_CAP,)))
            + f" (above {GPU_LIMIT_SHARE_MAX:.0%}): where a saturated GPU runs, its clocks set by the power "
            "it may draw",
        )
    ]


def client_flags(processes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The check of the client's own use (``event_loop.ProcessUse.to_json`` of each process)."""
    reasons = []
    for index, use in enumerate(processes):
        waiting = use.get("runqueue_wait_share") or 0.0
        if (runnable := use["cpu_share"] + waiting) > CLIENT_RUNNABLE_SHARE_MAX:
            reasons.append(
                f"client process {index} was runnable {runnable:.0%} of the point ({use['cpu_share']:.0%} "
                f"running, {waiting:.0%} waiting for a core; above {CLIENT_RUNNABLE_SHARE_MAX:.0%})"
            )
        if use["event_loop_lag_mean_ms"] > CLIENT_LAG_MEAN_MAX_MS:
            reasons.append(
                f"client process {index}'s event loop woke {use['event_loop_lag_mean_ms']:.2f} ms late on "
                f"average (above {CLIENT_LAG_MEAN_MAX_MS:g} ms)"
            )
    if not reasons:
        return []
    advice = "; its times are late by its own delay: give it more cores or processes (--client-processes)"
    return [_flag("client_bound", CLIENT_ON, "; ".join(reasons) + advice)]
