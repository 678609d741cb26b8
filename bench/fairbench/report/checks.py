"""The Measurement checks section: per config and level, what the server's own counters (its
``/metrics``) and the client's own use say of the points (docs/metrics.md, "Measurement checks"), and the
note of every flag raised (report/flags.py).

Each figure is over the level's repeats that have it: the tokens and the server's running and queued
requests a mean, the cache hit rate over their summed tokens, the client's figures the worst repeat's (a
point's own are its worst client process's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean
from typing import Any

from fairbench.measure.results_format import CLOCK_LOCK
from fairbench.report.blocks import Block, BulletList, Heading, Paragraph, Table
from fairbench.report.figures import (
    CLIENT_CPU_BUSY,
    CLIENT_CPU_STEAL,
    CLIENT_PROCESSES,
    CLIENT_USE,
    FLAGS,
    GPU_POWER_CAPPED,
    GPU_STATE,
    GPU_THROTTLED,
    LOOP_LAGS,
    OBSERVATIONS,
    OUTPUT_TOKENS,
    SEND_GAPS,
    SERVER_CACHED_TOKENS,
    SERVER_ERROR,
    SERVER_FAILURES,
    SERVER_GENERATION_TOKENS,
    SERVER_PROMPT_TOKENS,
    SERVER_SAMPLES,
)
from fairbench.report.flags import MARK, FlagMarks, checked
from fairbench.report.formatting import Label
from fairbench.report.summary import Headline, Level, loop_of
from fairbench.report.tree import ConfigRun

NOT_SCRAPED = "server metrics not scraped (start SGLang with --enable-metrics)"
NOT_CHECKED = "no point records the checks (measured before fairbench made them)"
CHECKS_NOTE = (
    "What the server's own counters (its `/metrics`, over each point) and the client's own use say of the "
    "points, each level over its repeats. **tokens**: the output tokens the client received / those the "
    "server generated (means), and whether each repeat's agree; **running**: the requests the server ran "
    "on average, by its own Little's law over the point (its latency histograms: time in it less time "
    "queued) and their share of what the client had in flight, or where it has no histograms its running "
    "gauge's mean over the steady window and its share of C; **queued**: the same of its queue; "
    "**cache hit**: the server's cached prompt tokens / its prompt tokens; **client runnable**: the "
    "largest share of a point that a client process ran or waited for a core; **loop lag**: how late its "
    "event loop woke, mean / p99; **send gap**: the client's read of a `/generate` stream's first chunk "
    "after the server's own send time, median (client figures: the worst repeat's). "
    f"`{MARK}N`: a flag that a check raised on a point of the level, beside every figure it casts doubt on; "
    "its note says why "
    "(`bench/fairbench/measure/point_flags.py` defines each check)."
)
HEADER = [
    "queued",
    "cache hit %",
    "client processes",
    "client runnable",
    "loop lag mean / p99 ms",
    "send gap p50 ms",
    "flags",
]
"""The columns after a level's tokens and running requests."""


def _values(level: Level, key: str) -> list[Any]:
    return [point[key] for point in level.points if point.get(key) is not None]


def _tokens(line: Headline, level: Level, marks: FlagMarks) -> str:
    """``12,345 / 12,345: agree``, or ``... differ on 1 of 3 (server +55, +0.4 %)``, the largest
    difference; the marks of the client's count (``total_output_tokens``)."""
    pairs = [
        (point[OUTPUT_TOKENS], point[SERVER_GENERATION_TOKENS])
        for point in level.points
        if point.get(OUTPUT_TOKENS) is not None and point.get(SERVER_GENERATION_TOKENS) is not None
    ]
    if not pairs:
        return "-"
    text = f"{mean(c for c, _ in pairs):,.0f} / {mean(s for _, s in pairs):,.0f}"
    differ = [(server - client, client) for client, server in pairs if server != client]
    if not differ:
        text += ": agree"
    else:
        gap, client = max(differ, key=lambda item: abs(item[0]))
        share = f", {100 * gap / client:+.1f} %" if client else ""
        text += f": differ on {len(differ)} of {len(pairs)} (server {gap:+,.0f}{share})"
    return text + marks.mark(line, level, OUTPUT_TOKENS)


def _running_of(point: dict[str, Any]) -> tuple[float, float, float] | None:
    """(running, its share, queued) of one point: by the server's own Little's law against what the client
    had in flight where the server has the histograms, else the gauges' means against C; None without
    either (the same figures as ``measure.point_flags``' running check)."""
    in_server, queued = point.get("server_in_flight_mean"), point.get("server_queued_mean")
    if in_server is not None and queued is not None and point.get("concurrency"):
        return in_server - queued, (in_server - queued) / point["concurrency"], queued
    if point.get("server_running_mean") is None:
        return None
    running = point["server_running_mean"]
    return running, running / point["max_concurrency"], point.get("server_queue_mean") or 0.0


def _running(level: Level) -> tuple[str, str]:
    """``61.2 (96 %)`` and ``0.3``: the means over the repeats of running, its share, and queued."""
    found = [figures for point in level.points if (figures := _running_of(point)) is not None]
    if not found:
        return "-", "-"
    running = f"{mean(f[0] for f in found):.1f} ({100 * mean(f[1] for f in found):.0f} %)"
    return running, f"{mean(f[2] for f in found):.1f}"


def _cache_hit(level: Level) -> str:
    """Cached over prompt tokens, summed over the repeats that have both."""
    pairs = [
        (point[SERVER_CACHED_TOKENS], point[SERVER_PROMPT_TOKENS])
        for point in level.points
        if point.get(SERVER_CACHED_TOKENS) is not None and point.get(SERVER_PROMPT_TOKENS) is not None
    ]
    prompt = sum(prompt for _, prompt in pairs)
    return f"{100 * sum(cached for cached, _ in pairs) / prompt:.1f}" if prompt > 0 else "-"


def _processes(level: Level) -> str:
    counts = _values(level, CLIENT_PROCESSES)
    if not counts:
        return "-"
    return str(min(counts)) if min(counts) == max(counts) else f"{min(counts)} to {max(counts)}"


def _runnable(level: Level) -> str:
    """``85 % (80 % CPU, 5 % waiting)``: the client process of the level's points that was runnable the
    largest share of its point (running, or waiting for a core)."""
    uses = [
        use for point in level.points for use in point.get(CLIENT_USE, []) if use.get("cpu_share") is not None
    ]
    if not uses:
        return "-"
    worst = max(uses, key=lambda use: use["cpu_share"] + (use.get("runqueue_wait_share") or 0.0))
    cpu, waiting = worst["cpu_share"], worst.get("runqueue_wait_share")
    if waiting is None:
        return f"{100 * cpu:.0f} % CPU (waiting not known)"
    return f"{100 * (cpu + waiting):.0f} % ({100 * cpu:.0f} % CPU, {100 * waiting:.0f} % waiting)"


def _worst(level: Level, key: str) -> str:
    values = _values(level, key)
    return f"{max(values):,.2f}" if values else "-"


def _flags(line: Headline, level: Level, marks: FlagMarks) -> str:
    """Every flag at the level; ``none`` where its points were checked and none was raised."""
    found = marks.mark(line, level, None).strip()
    return found or ("none" if checked(level) else "-")


def _gpu(level: Level) -> str:
    """``1,140 MHz, 99 / 0 %``: the lowest SM clock of any GPU in any repeat, the largest share of a
    repeat's samples a GPU ran at its power limit (``gpu_power_capped_share``) and the largest the machine
    held one down (``gpu_throttled_share``); ``-`` for a share no repeat has."""
    lowest = [
        gpu["sm_clock_mhz_min"]
        for point in level.points
        for gpu in point.get(GPU_STATE, [])
        if gpu.get("sm_clock_mhz_min") is not None
    ]
    shares = [_values(level, key) for key in (GPU_POWER_CAPPED, GPU_THROTTLED)]
    if not lowest and not any(shares):
        return "-"
    clock = f"{min(lowest):,} MHz" if lowest else "-"
    if not any(shares):
        return clock
    return f"{clock}, " + " / ".join(f"{100 * max(share):.0f}" if share else "-" for share in shares) + " %"


def _locked(host_info: Mapping[str, Any] | None) -> str:
    """``SM 1,500 MHz, memory 2,619 MHz``: the clocks host.json's ``gpu_clock_lock`` says the bench role
    locked; empty where it locked none."""
    lock = (host_info or {}).get(CLOCK_LOCK)
    if not isinstance(lock, Mapping):
        return ""
    return ", ".join(
        f"{name} {mhz:,} MHz"
        for name, mhz in (("SM", lock.get("sm_mhz")), ("memory", lock.get("mem_mhz")))
        if isinstance(mhz, int) and not isinstance(mhz, bool)
    )


def _clock_lock(config: ConfigRun) -> list[str]:
    """That the bench role locked the GPU clocks for the config's jobs, at which MHz (by host, where its
    hosts differ); nothing where it locked none."""
    locks = {part.host: _locked(part.host_info) for part in config.parts}
    if not any(locks.values()):
        return []
    said = f"GPU clocks locked for its jobs (host.json `{CLOCK_LOCK}`)"
    if len(set(locks.values())) == 1:
        return [f"{said}: {next(iter(locks.values()))}"]
    return [f"{said}, by host: " + "; ".join(f"{host}: {text or 'none'}" for host, text in locks.items())]


def _client_cpu(level: Level) -> str:
    """``62 / 0``: the client machine's busiest repeat's CPU busy share and its largest steal share, %."""
    busy, steal = _values(level, CLIENT_CPU_BUSY), _values(level, CLIENT_CPU_STEAL)
    if not busy:
        return "-"
    return f"{100 * max(busy):.0f} / {100 * max(steal):.0f}" if steal else f"{100 * max(busy):.0f} / -"


MACHINE_COLUMNS = (
    ("GPU SM clock lowest, power-capped / throttled %", (GPU_STATE, GPU_POWER_CAPPED, GPU_THROTTLED), _gpu),
    ("client machine CPU busy / steal %", (CLIENT_CPU_BUSY,), _client_cpu),
)
"""The machines' state, shown where a point of the config has it (a GPU host sampled through NVML; a
client that read /proc/stat): its title, the keys that hold it, its cell."""


def check_table(line: Headline, marks: FlagMarks) -> Table:
    """One row per level of a config (the module docstring)."""
    loop = loop_of(line.levels)
    machine = [
        (title, cell)
        for title, keys, cell in MACHINE_COLUMNS
        if any(point.get(key) is not None for point in line.result.points for key in keys)
    ]
    rows = [
        [
            loop.cell(level) + marks.mark(line, level, level.load_key),
            _tokens(line, level, marks),
            *_running(level),
            _cache_hit(level),
            _processes(level),
            _runnable(level),
            f"{_worst(level, LOOP_LAGS[0])} / {_worst(level, LOOP_LAGS[1])}",
            _worst(level, SEND_GAPS[0]),
            *(cell(level) for _, cell in machine),
            _flags(line, level, marks),
        ]
        for level in line.levels
    ]
    running = "running (share of max in flight)" if loop.open else "running (share of C)"
    header = [loop.symbol, "tokens client / server", running, *HEADER[:-1], *(title for title, _ in machine)]
    header.append(HEADER[-1])
    return Table(header, rows, [True] * (len(header) - 1) + [False])


def _server_notes(points: Sequence[dict[str, Any]]) -> list[str]:
    """That the server's ``/metrics`` was not scraped, or how many of its scrapes failed."""
    if not any(SERVER_SAMPLES in point for point in points):
        return [NOT_SCRAPED]
    failures = sum(point.get(SERVER_FAILURES, 0) for point in points)
    errors = [point[SERVER_ERROR] for point in points if point.get(SERVER_ERROR)]
    if not failures:
        return []
    first = f"; the first: {errors[0]}" if errors else ""
    return [f"{failures} scrape(s) of the server's `/metrics` failed{first}"]


def _recorded(points: Sequence[dict[str, Any]]) -> bool:
    """Whether any point records a check: its flags, its server's counters, or its client processes."""
    return any(key in point for point in points for key in (FLAGS, SERVER_SAMPLES, CLIENT_PROCESSES))


def checks_blocks(
    headlines: Sequence[Headline], label: Label, marks: FlagMarks, title: str, heading_level: int = 2
) -> list[Block]:
    """The section: what its tables show (where any config has one), each config's table (or why it has
    none), the notes of the flags raised."""
    blocks: list[Block] = [Heading(heading_level, title)]
    if any(_recorded(line.result.points) for line in headlines):
        blocks.append(Paragraph(CHECKS_NOTE))
    for line in headlines:
        points = line.result.points
        blocks.append(Heading(heading_level + 1, label(line.result)))
        if not points:
            blocks.append(Paragraph("No points."))
            continue
        recorded = _recorded(points)
        notes = _server_notes(points) + ([] if recorded else [NOT_CHECKED]) + _clock_lock(line.result)
        if notes:
            text = "; ".join(notes)
            blocks.append(Paragraph(f"{text[0].upper()}{text[1:]}."))
        if recorded:
            blocks.append(check_table(line, marks))
    found = marks.notes_block(headlines, label)
    if found is not None:
        blocks += [Heading(heading_level + 1, "Flags raised"), found]
    elif any(checked(level) for line in headlines for level in line.levels):
        blocks.append(Paragraph("No check raised a flag on any point."))
    seen = _observations(headlines, label)
    if seen:
        blocks += [Heading(heading_level + 1, "Observations"), Paragraph(OBSERVATIONS_NOTE), BulletList(seen)]
    return blocks


OBSERVATIONS_NOTE = (
    "What the checks saw of the servers' and their GPUs' own behaviour that casts no doubt on what the "
    "points measure "
    "(`bench/fairbench/measure/point_flags.py`): no figure is marked for it."
)


def _observations(headlines: Sequence[Headline], label: Label) -> list[str]:
    """Each observation made at a level of a config: on how many of its repeats, and the first's reason."""
    items = []
    for line in headlines:
        for level in line.levels:
            found: dict[str, list[str]] = {}
            for point in level.points:
                for seen in point.get(OBSERVATIONS, []):
                    found.setdefault(seen["observation"], []).append(seen["reason"])
            repeats = len(level.points)
            items += [
                f"**{label(line.result)}** at {level.label}: `{name}` on {len(reasons)} of {repeats} "
                f"repeats; the first: {reasons[0]}"
                for name, reasons in found.items()
            ]
    return items
