"""Sample traces in each format of ``measure.traces``, written from a seed: a trace to replay without a
download, with the features a public one has.

Arrivals are Poisson at ``rate`` requests per second. Lengths are drawn log-uniformly, prompts between
``INPUT_RANGE`` and outputs between ``OUTPUT_RANGE`` tokens, as chat and agent traffic spans them. In the
Mooncake format, each request opens with one of ``PREFIXES`` shared prefixes (a system prompt of 1 to 8
blocks, the commoner the shorter), then blocks of its own: the trace's prefix sharing, as its hash ids
record it.
"""

from __future__ import annotations

import csv
import json
import math
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

from fairbench.measure.traces import AZURE_COLUMNS, MOONCAKE, MOONCAKE_BLOCK_TOKENS, trace_format

INPUT_RANGE = (128, 16_384)
OUTPUT_RANGE = (16, 1_024)
PREFIXES = 8
AZURE_START = datetime(2023, 11, 16, 18, 15, 46, tzinfo=timezone.utc)
"""The first request's time in an Azure sample: the 2023 trace's first day."""


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def write_sample(path: Path, requests: int, rate: float, seed: int) -> None:
    """A trace of ``requests`` at ``rate`` per second, in the format ``path``'s suffix names."""
    rng = random.Random(f"fairbench-trace/{seed}")
    prefixes = [list(range(group * 8, group * 8 + 1 + group % 8)) for group in range(PREFIXES)]
    next_id = PREFIXES * 8
    rows = []
    arrival_s = 0.0
    for _ in range(requests):
        input_len = _log_uniform(rng, *INPUT_RANGE)
        output_len = _log_uniform(rng, *OUTPUT_RANGE)
        blocks = -(-input_len // MOONCAKE_BLOCK_TOKENS)
        # The shorter prefixes the commoner: weights 1/1 .. 1/PREFIXES.
        shared = rng.choices(prefixes, weights=[1 / (index + 1) for index in range(PREFIXES)])[0][:blocks]
        own = list(range(next_id, next_id + blocks - len(shared)))
        next_id += len(own)
        rows.append((arrival_s, input_len, output_len, shared + own))
        arrival_s += rng.expovariate(rate)
    with path.open("w", encoding="utf-8", newline="") as file:
        if trace_format(path) == MOONCAKE:
            for arrival, input_len, output_len, hash_ids in rows:
                record = {
                    "timestamp": round(arrival * 1000),
                    "input_length": input_len,
                    "output_length": output_len,
                    "hash_ids": hash_ids,
                }
                file.write(json.dumps(record) + "\n")
            return
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(AZURE_COLUMNS)
        for arrival, input_len, output_len, _ in rows:
            stamp = AZURE_START + timedelta(seconds=arrival)
            # Seven decimals, as the Azure traces write them.
            writer.writerow([f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}0", input_len, output_len])
