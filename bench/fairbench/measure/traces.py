"""Request traces in their publishers' formats: each request's arrival time, lengths and shared content.

- ``mooncake``: JSON Lines, one request per line, as Mooncake's FAST'25 traces: ``timestamp`` (ms since
  the trace's start), ``input_length``, ``output_length`` and ``hash_ids``, one id per block of
  ``MOONCAKE_BLOCK_TOKENS`` prompt tokens (the last block may be shorter); equal ids are equal content, so
  two requests whose lists start alike share that prefix.
- ``azure``: CSV with a header, as the Azure LLM inference traces (2023, 2024): ``TIMESTAMP`` (a date and
  time, ``2023-11-16 18:15:46.6805900``), ``ContextTokens``, ``GeneratedTokens``; other columns are kept
  out. No shared content is recorded.

A trace is read whole before any request is sent, line by line (its requests are small; their prompts are
built when sent), and refused with one line naming the file, the line and the rule it breaks: a missing
field or column, a length out of range, a negative or decreasing time, more hash ids than the input has
blocks, an empty trace, a file larger than ``MAX_TRACE_BYTES``.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fairbench.measure.bounds import TOKENS
from fairbench.measure.json_rules import shown
from fairbench.measure.workload import WorkloadError

MOONCAKE = "mooncake"
AZURE = "azure"
TRACE_FORMATS = {".jsonl": MOONCAKE, ".csv": AZURE}
"""Each format by the suffix its files are published with."""
MOONCAKE_BLOCK_TOKENS = 512
"""The prompt tokens one hash id stands for in Mooncake's traces."""
MAX_TRACE_BYTES = 1 << 30
"""The largest trace read: the public traces are tens of megabytes, and a trace is held in memory whole."""
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
AZURE_TIME = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?")
"""``TIMESTAMP``: seconds with up to nine decimals (the traces write seven, which ``datetime`` cannot
read); read as UTC, only differences count."""


class TraceError(WorkloadError):
    """A trace file that cannot be replayed; the message names the file, the line and the rule."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace."""

    arrival_ms: float
    """Since the trace's first request."""
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()
    """Mooncake's blocks of the prompt, in order; empty where the trace records none."""


def trace_format(path: Path) -> str:
    """The format of ``path`` by its suffix (``TRACE_FORMATS``); TraceError for another."""
    found = TRACE_FORMATS.get(path.suffix)
    if found is None:
        known = ", ".join(f"{suffix} ({name})" for suffix, name in TRACE_FORMATS.items())
        raise TraceError(f"{path}: not a trace file: its name must end in {known}")
    return found


def load_trace(path: Path) -> list[TraceRequest]:
    """Every request of the trace at ``path``, in its order, arrivals from 0; TraceError when it breaks a
    rule of its format."""
    fmt = trace_format(path)
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise TraceError(
                f"{path}: {size:,} bytes, above the {MAX_TRACE_BYTES:,} a trace may have: replay a window "
                "of it (head -n) instead"
            )
        with path.open(encoding="utf-8", newline="") as file:
            rows = _mooncake(path, file) if fmt == MOONCAKE else _azure(path, file)
            requests = _arrivals_from_zero(path, rows)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not requests:
        raise TraceError(f"{path}: no request: an empty trace")
    return requests


Row = tuple[int, float, TraceRequest]
"""A request's line number, its time as the trace writes it (ms), and the request (its arrival unset)."""


def _arrivals_from_zero(path: Path, rows: Iterator[Row]) -> list[TraceRequest]:
    """The requests with arrivals counted from the first; a time below the one before is refused."""
    requests: list[TraceRequest] = []
    first = previous = 0.0
    for line, time_ms, request in rows:
        if not requests:
            first = previous = time_ms
        elif time_ms < previous:
            raise TraceError(
                f"{path}:{line}: the time goes back ({_seconds(time_ms - first)} after "
                f"{_seconds(previous - first)}, counted from the first request): a trace is in arrival order"
            )
        previous = time_ms
        requests.append(
            TraceRequest(time_ms - first, request.input_len, request.output_len, request.hash_ids)
        )
    return requests


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.3f} s"


def _length(path: Path, line: int, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or TOKENS.problem(value) is not None:
        raise TraceError(f"{path}:{line}: {name}: must be {TOKENS.describe()}, got {shown(value)}")
    return value


def _mooncake(path: Path, file: Any) -> Iterator[Row]:
    for line, text in enumerate(file, start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{line}: not a JSON object ({exc.msg})") from None
        except RecursionError:
            raise TraceError(f"{path}:{line}: nested too deeply to be a request") from None
        if not isinstance(record, dict):
            raise TraceError(f"{path}:{line}: must be a JSON object, got {shown(record)}")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in record:
                raise TraceError(f"{path}:{line}: {key}: required key is missing")
        stamp = record["timestamp"]
        if (
            isinstance(stamp, bool)
            or not isinstance(stamp, int | float)
            or not math.isfinite(stamp)
            or stamp < 0
        ):
            raise TraceError(f"{path}:{line}: timestamp: must be a number of ms >= 0, got {shown(stamp)}")
        input_len = _length(path, line, "input_length", record["input_length"])
        output_len = _length(path, line, "output_length", record["output_length"])
        hash_ids = record.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(
            isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in hash_ids
        ):
            raise TraceError(f"{path}:{line}: hash_ids: must be a list of integers >= 0")
        blocks = -(-input_len // MOONCAKE_BLOCK_TOKENS)
        if len(hash_ids) > blocks:
            raise TraceError(
                f"{path}:{line}: hash_ids: {len(hash_ids)} blocks of {MOONCAKE_BLOCK_TOKENS} tokens, more "
                f"than input_length {input_len} holds ({blocks})"
            )
        yield line, float(stamp), TraceRequest(0.0, input_len, output_len, tuple(hash_ids))


def _azure(path: Path, file: Any) -> Iterator[Row]:
    reader = csv.reader(file)
    header = next(reader, None)
    if header is None:
        return
    columns = [name.strip() for name in header]
    missing = [name for name in AZURE_COLUMNS if name not in columns]
    if missing:
        raise TraceError(
            f"{path}:1: the header lacks {', '.join(missing)}: an Azure trace's columns are "
            f"{', '.join(AZURE_COLUMNS)}"
        )
    at = {name: columns.index(name) for name in AZURE_COLUMNS}
    for row in reader:
        line = reader.line_num
        if not row:
            continue
        if len(row) < len(columns):
            raise TraceError(f"{path}:{line}: {len(row)} fields, the header has {len(columns)}")
        stamp = _azure_ms(path, line, row[at["TIMESTAMP"]].strip())
        lengths = []
        for name in AZURE_COLUMNS[1:]:
            text = row[at[name]].strip()
            lengths.append(_length(path, line, name, int(text) if text.isdigit() else text))
        yield line, stamp, TraceRequest(0.0, lengths[0], lengths[1])


def _azure_ms(path: Path, line: int, text: str) -> float:
    """``TIMESTAMP`` in ms since the epoch (UTC)."""
    match = AZURE_TIME.fullmatch(text)
    try:
        if match is None:
            raise ValueError(text)
        whole = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        raise TraceError(
            f"{path}:{line}: TIMESTAMP: must be a date and time such as 2023-11-16 18:15:46.6805900, got "
            f"{shown(text)}"
        ) from None
    fraction = float(f"0.{match[2]}") if match[2] else 0.0
    return (whole.timestamp() + fraction) * 1000.0


def reusable_tokens(requests: list[TraceRequest]) -> list[int]:
    """Each request's prompt tokens an unbounded prefix cache would hold when it arrives: its leading
    blocks whose whole prefix of hash ids an earlier request sent (the last block counts its own length).
    A trace without hash ids reuses nothing."""
    seen: set[tuple[int, ...]] = set()
    reusable = []
    for request in requests:
        ids = request.hash_ids
        hits = 0
        while hits < len(ids) and ids[: hits + 1] in seen:
            hits += 1
        seen.update(ids[: end + 1] for end in range(len(ids)))
        reusable.append(min(hits * MOONCAKE_BLOCK_TOKENS, request.input_len))
    return reusable
