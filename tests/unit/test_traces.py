"""Request traces in their publishers' formats (Mooncake's JSON Lines, Azure's CSV): read exactly, refused
in one line naming the file, the line and the rule, and written as samples that read back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fairbench.cli.main import main
from fairbench.measure.trace_samples import write_sample
from fairbench.measure.traces import (
    MAX_TRACE_BYTES,
    TraceError,
    TraceRequest,
    load_trace,
    reusable_tokens,
)

# The first lines of the example in Mooncake's trace documentation, and of the Azure 2023 code trace.
MOONCAKE_LINES = (
    '{"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}\n'
    '{"timestamp": 10535, "input_length": 672, "output_length": 26, "hash_ids": [46, 47]}\n'
    '{"timestamp": 27482, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}\n'
)
AZURE_LINES = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:50.9951690,879,49\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_both_formats_are_read_as_their_publishers_write_them(tmp_path: Path) -> None:
    mooncake = load_trace(write(tmp_path, "t.jsonl", MOONCAKE_LINES))
    assert mooncake == [
        TraceRequest(0.0, 655, 52, (46, 47)),
        TraceRequest(10535.0, 672, 26, (46, 47)),
        TraceRequest(27482.0, 655, 52, (46, 47)),
    ]
    azure = load_trace(write(tmp_path, "t.csv", AZURE_LINES))
    assert [(request.input_len, request.output_len, request.hash_ids) for request in azure] == [
        (374, 44, ()),
        (396, 109, ()),
        (879, 49, ()),
    ]
    assert azure[0].arrival_ms == 0.0
    assert azure[1].arrival_ms == pytest.approx(4314.579) == azure[2].arrival_ms


def test_an_unbounded_cache_could_serve_the_blocks_an_earlier_request_sent_with_the_same_prefix() -> None:
    requests = [
        TraceRequest(0, 1500, 1, (1, 2, 3)),
        TraceRequest(1, 1100, 1, (1, 2, 9)),  # 1, 2 again: 1024 tokens
        TraceRequest(2, 600, 1, (2, 1)),  # 2 alone never opened a prompt
        TraceRequest(3, 700, 1, (1, 2)),  # its last block is short: 700 tokens, not 1024
    ]
    assert reusable_tokens(requests) == [0, 1024, 0, 700]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.jsonl", "", "t.jsonl: no request: an empty trace"),
        ("t.csv", "", "t.csv: no request: an empty trace"),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 8}\n',
            "t.jsonl:1: output_length: required key is missing",
        ),
        (
            "t.jsonl",
            '{"timestamp": -5, "input_length": 8, "output_length": 1}\n',
            "t.jsonl:1: timestamp: must be a number of ms >= 0, got -5",
        ),
        (
            "t.jsonl",
            MOONCAKE_LINES + '\n{"timestamp": 100, "input_length": 8, "output_length": 1}\n',
            "t.jsonl:5: the time goes back (0.100 s after 27.482 s, counted from the first request): a trace "
            "is in arrival order",
        ),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2, 3]}\n',
            "t.jsonl:1: hash_ids: 3 blocks of 512 tokens, more than input_length 600 holds (2)",
        ),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 0, "output_length": 1}\n',
            "t.jsonl:1: input_length: must be an integer from 1 to 10,000,000 tokens, got 0",
        ),
        ("t.jsonl", "[1, 2]\n", "t.jsonl:1: must be a JSON object, got [1, 2]"),
        ("t.jsonl", "{timestamp: 0}\n", "t.jsonl:1: not a JSON object (Expecting property name"),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n",
            "t.csv:1: the header lacks GeneratedTokens: an Azure trace's columns are TIMESTAMP, "
            "ContextTokens, GeneratedTokens",
        ),
        (
            "t.csv",
            AZURE_LINES + "2023-11-16 18:15:49.0000000,10,10\n",
            "t.csv:5: the time goes back (2.319 s after 4.315 s, counted from the first request)",
        ),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n",
            "t.csv:2: TIMESTAMP: must be a date and time such as 2023-11-16 18:15:46.6805900, got "
            '"yesterday"',
        ),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,1\n",
            't.csv:2: ContextTokens: must be an integer from 1 to 10,000,000 tokens, got "-3"',
        ),
        ("t.txt", "x", "t.txt: not a trace file: its name must end in .jsonl (mooncake), .csv (azure)"),
    ],
    ids=[
        "empty-jsonl",
        "empty-csv",
        "missing-key",
        "negative-time",
        "unsorted",
        "too-many-hash-ids",
        "length-out-of-range",
        "not-an-object",
        "not-json",
        "missing-column",
        "unsorted-csv",
        "bad-time",
        "negative-length",
        "other-suffix",
    ],
)
def test_a_trace_that_breaks_a_rule_is_refused_in_one_line_naming_it(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    with pytest.raises(TraceError) as caught:
        load_trace(write(tmp_path, name, text))
    assert str(caught.value).startswith(f"{tmp_path}/{message}"), caught.value
    assert len(str(caught.value).splitlines()) == 1


def test_a_trace_too_large_to_hold_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as file:
        file.truncate(2 * 1024**3)  # 2 GiB, sparse: nothing written
    with pytest.raises(TraceError, match=f"2,147,483,648 bytes, above the {MAX_TRACE_BYTES:,}"):
        load_trace(huge)
    os.unlink(huge)


def test_samples_in_both_formats_read_back_as_one_trace(tmp_path: Path) -> None:
    write_sample(tmp_path / "s.jsonl", 300, 20.0, seed=3)
    write_sample(tmp_path / "s.csv", 300, 20.0, seed=3)
    mooncake, azure = load_trace(tmp_path / "s.jsonl"), load_trace(tmp_path / "s.csv")
    assert len(mooncake) == len(azure) == 300
    for one, other in zip(mooncake, azure, strict=True):
        assert (one.input_len, one.output_len) == (other.input_len, other.output_len)
        assert one.arrival_ms == pytest.approx(other.arrival_ms, abs=1.0)  # Mooncake's whole ms
    # About 20 per second, and a fifth to a half of the prompt tokens reusable by design.
    assert 10 < 299 / (mooncake[-1].arrival_ms / 1000) < 40
    assert 0.1 < sum(reusable_tokens(mooncake)) / sum(request.input_len for request in mooncake) < 0.6
    write_sample(tmp_path / "again.jsonl", 300, 20.0, seed=3)
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "s.jsonl").read_bytes()


def test_fairbench_trace_writes_a_sample_and_checks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = tmp_path / "s.jsonl"
    assert main(["trace", "sample", str(sample), "--requests", "50", "--rate", "5"]) == 0
    assert main(["trace", "check", str(sample)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(sample)
    assert out[1].startswith(f"{sample}: mooncake trace, 50 requests over ")
    assert "prompt tokens an unbounded prefix cache could serve: " in out[4]
    bad = write(tmp_path, "bad.csv", "TIMESTAMP\n")
    assert main(["trace", "check", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"fairbench trace: error: {bad}:1: the header lacks ContextTokens, GeneratedTokens: an Azure trace's "
        "columns are TIMESTAMP, ContextTokens, GeneratedTokens\n"
    )
