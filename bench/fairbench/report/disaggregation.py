"""The Disaggregated servers section: per disaggregated config and level, each prefill and decode server's own
figures (its points' ``server_roles``, the mean over the level's repeats), and where TTFT went.

A request's first token reaches the client once its prefill server has answered the router (SGLang's prefill
server answers once the KV cache has reached the decode server) and the decode server's first chunk has
come back through the router. So the client's mean TTFT less the prefill servers' own mean request time
(``request_latency_ms``: queue, forward and transfer, by the server's own clock) is what the router, the
network and the decode server's first step add: the "router overhead" users ask about, visible per level.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean
from typing import Any

from fairbench.report.blocks import Block, Heading, Paragraph, Table
from fairbench.report.formatting import Label
from fairbench.report.summary import Headline, Level, loop_of

ROLES_KEY = "server_roles"
"""The point's per-server fields of a disaggregated config (``measure.server_metrics.role_fields``)."""
FIGURES = (
    ("running", "running_mean"),
    ("queued", "queue_mean"),
    ("bootstrap queue", "prefill_bootstrap_queue_mean"),
    ("transfer queue", "decode_transfer_queue_mean"),
    ("KV transfer ms", "kv_transfer_latency_ms"),
    ("request ms", "request_latency_ms"),
)
"""Each server column's title and the role field it shows (the mean over the level's repeats)."""
NOTE = (
    "Each disaggregated config's prefill and decode servers, by their own `/metrics` around each point "
    "(the mean over the level's repeats): requests running and queued, the disaggregation queues (a "
    "prefill server's waiting for its decode server's handshake, a decode server's waiting for the KV "
    "cache), the mean KV transfer, and the mean time a request spent in the server (a prefill server "
    "answers once its KV cache has reached the decode server). TTFT split: the client's mean TTFT, the "
    "prefill servers' mean request time within it, and the rest, which the router, the network and the "
    "decode server's first step add. `-`: the server exports no such figure."
)


def _role_mean(level: Level, server: str, key: str) -> float | None:
    values = [
        float(value)
        for point in level.points
        if isinstance(value := ((point.get(ROLES_KEY) or {}).get(server) or {}).get(key), int | float)
        and not isinstance(value, bool)
    ]
    return mean(values) if values else None


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _servers(levels: Sequence[Level]) -> list[str]:
    """The servers named in the levels' points, prefill first, in their order."""
    names: dict[str, None] = {}
    for level in levels:
        for point in level.points:
            names.update(dict.fromkeys(point.get(ROLES_KEY) or {}))
    return sorted(names, key=lambda name: (not name.startswith("prefill"), name))


def ttft_split(level: Level, servers: Sequence[str]) -> tuple[float | None, float | None, float | None]:
    """The client's mean TTFT (ms, over the repeats), the prefill servers' mean request time, and the rest;
    None where a figure is missing."""
    ttfts = [float(point["mean_ttft_ms"]) for point in level.points if _number(point.get("mean_ttft_ms"))]
    ttft = mean(ttfts) if ttfts else None
    prefills = [
        found
        for server in servers
        if server.startswith("prefill")
        and (found := _role_mean(level, server, "request_latency_ms")) is not None
    ]
    prefill = mean(prefills) if prefills else None
    rest = ttft - prefill if ttft is not None and prefill is not None else None
    return ttft, prefill, rest


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def disaggregation_blocks(headlines: Sequence[Headline], label: Label) -> list[Block]:
    """The section: per disaggregated config, its TTFT split by level, then a table per server, a row per
    level; nothing without such a config."""
    tables: list[Block] = []
    for line in headlines:
        servers = _servers(line.levels)
        if not servers:
            continue
        loop = loop_of(line.levels)
        name = label(line.result)
        split = [[loop.cell(level), *map(_cell, ttft_split(level, servers))] for level in line.levels]
        header = [loop.symbol, "TTFT ms", "prefill ms", "rest ms"]
        tables += [Heading(3, f"{name}: TTFT split"), Table(header, split, [True] * len(header))]
        for server in servers:
            rows = [
                [loop.cell(level), *(_cell(_role_mean(level, server, key)) for _, key in FIGURES)]
                for level in line.levels
            ]
            header = [loop.symbol, *(title for title, _ in FIGURES)]
            tables += [Heading(3, f"{name}: {server}"), Table(header, rows, [True] * len(header))]
    return [Heading(2, "Disaggregated servers"), Paragraph(NOTE), *tables] if tables else []
