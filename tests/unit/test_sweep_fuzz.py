"""The sweep's inputs, generated: every option's value and every results directory ends in the sweep's
settings or one error line naming the option (or the file and line), never another exception."""

from __future__ import annotations

import io
import json
import math
import re
import tempfile
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from yarl import URL

from fairbench.cli.main import OneLineErrorParser
from fairbench.cli.sweep import configure, spec_from_args, summary_table
from fairbench.cli.usage import UsageError
from fairbench.measure import bounds
from fairbench.measure.repeats import AutoRepeats, Repeats
from fairbench.measure.results import SWEEP_FILE, ResultsDir, ResultsError
from fairbench.measure.results_format import POINTS_FILE
from fairbench.measure.sweep import SweepSpec
from fairbench.measure.workload import parse_count

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROG = "fairbench sweep"

VALID = {
    "--url": "http://127.0.0.1:30000",
    "--input-len": "64",
    "--output-len": "8",
    "--concurrency": "1,2",
    "--out": "results/fuzz",
}
OPTIONS = sorted(
    {*VALID}
    | {"--api", "--model", "--api-key", "--dataset", "--range-ratio", "--prompts-per-level", "--warmup"}
    | {"--repeats", "--seed", "--vocab-size", "--max-error-rate", "--gpus", "--energy-gpus"}
    | {"--connect-timeout", "--read-timeout", "--progress"}
    | {"--slo", "--search-resolution", "--request-rate", "--arrival", "--burstiness", "--max-concurrency"}
)
# Near misses of what each option takes, beside arbitrary text.
TRICKY = ["nan", "-nan", "inf", "-inf", "infx", "nanx", "1e11", "1e308", "1e-400", "-0", "0", "0x10", " 7 "]
TRICKY += ["1_000", "5x", "-1x", "1e9x", "1,2,x", ",", "1,,2", "0,0", "99999999999999999999", "٣", "\x00"]
TRICKY += ["http://", "https://h:99999", "http://[::1", "http://a..b", "http://:1", "file:///x", "", "x\ny"]
TRICKY += ["auto", "auto:3:2:1", "auto:2:5:0", "auto:1:5:2", "auto:3:5", "ttft_p99_ms=2000", "ttft_p0_ms=1"]
TRICKY += ["tpot_p50_ms=nan", "itl_p100_ms=-1", "e2e_latency_p99_ms", "gamma", "0.5,1,2", "1e-9"]
numbers = st.integers(-(2**70), 2**70).map(str) | st.floats().map(repr)
values = (
    st.text(max_size=30) | st.sampled_from(TRICKY) | numbers | st.lists(numbers, max_size=3).map(",".join)
)


def outcome(overrides: dict[str, str]) -> SweepSpec | str:
    """The spec, or the error line that ``fairbench sweep`` prints; any other exception fails the test."""
    parser = OneLineErrorParser(prog=PROG)
    configure(parser)
    argv = [f"{option}={value}" for option, value in {**VALID, **overrides}.items()]
    stderr = io.StringIO()
    try:
        with redirect_stderr(stderr):
            args = parser.parse_args(argv)
    except SystemExit as exit_:
        assert exit_.code == 2
        return stderr.getvalue()
    try:
        return spec_from_args(args)
    except UsageError as error:
        return f"{PROG}: error: {error}\n"


def assert_one_line_naming(result: SweepSpec | str, options: set[str]) -> None:
    if isinstance(result, SweepSpec):
        assert_usable(result)
        return
    assert result.startswith(f"{PROG}: error: ") and result.endswith("\n"), result
    assert len(result.splitlines()) == 1, result
    assert any(option in result for option in options), result


def assert_usable(spec: SweepSpec) -> None:
    """A spec the parser let through is one a sweep can run: each number within its bound, and a URL that
    aiohttp (which reads it with yarl) can connect to."""
    url = URL(spec.url)
    assert url.scheme in ("http", "https") and url.host
    url.host.encode("idna")
    workload = spec.workload
    checked = [
        (bounds.TOKENS, workload.input_len),
        (bounds.TOKENS, workload.output_len),
        (bounds.SHARE, workload.range_ratio),
        (bounds.SEED, workload.seed),
        (bounds.SHARE, spec.max_error_rate),
        *repeat_bounds(spec.repeats),
        (bounds.CONNECT_TIMEOUT_S, spec.connect_timeout),
        (bounds.READ_TIMEOUT_S, spec.read_timeout),
        *((bounds.CONCURRENCY, level) for level in spec.concurrency),
        *((bounds.REQUEST_RATE, rate) for rate in spec.request_rate),
        *((bounds.CONCURRENCY, bound) for bound in [spec.max_concurrency] if bound is not None),
        *((bounds.SEARCH_RESOLUTION, step) for step in [spec.search_resolution] if step is not None),
        *((bounds.GPU_INDEX, gpu) for gpu in spec.energy_gpus or []),
        *((bounds.VOCABULARY, size) for size in [workload.vocab_size] if size is not None),
        *((bounds.GPUS, gpus) for gpus in [spec.gpus] if gpus is not None),
    ]
    assert [(bound, value) for bound, value in checked if bound.problem(value)] == []
    assert all(target.limit_ms > 0 and math.isfinite(target.limit_ms) for target in spec.slo)
    assert spec.open_loop == (spec.max_concurrency is not None) != bool(spec.concurrency)
    assert spec.search_resolution is None or (spec.slo and not spec.open_loop)
    for count in (spec.prompts_per_level, spec.warmup):
        parse_count(count, max(spec.levels()))


def repeat_bounds(repeats: Repeats) -> list[tuple[bounds.Bound, float]]:
    if isinstance(repeats, AutoRepeats):
        assert repeats.minimum <= repeats.maximum
        return [
            (bounds.AUTO_REPEATS, repeats.minimum),
            (bounds.AUTO_REPEATS, repeats.maximum),
            (bounds.HALF_WIDTH_PCT, repeats.half_width_pct),
        ]
    return [(bounds.REPEATS, repeats)]


def test_the_valid_arguments_are_valid() -> None:
    assert isinstance(outcome({}), SweepSpec)


def test_an_open_loop_and_the_objectives_are_valid_and_each_rule_across_options_is_named() -> None:
    parser = OneLineErrorParser(prog=PROG)
    configure(parser)
    base = [f"{option}={value}" for option, value in VALID.items() if option != "--concurrency"]
    spec = spec_from_args(parser.parse_args([*base, "--request-rate=0.5,2", "--max-concurrency=8"]))
    assert (spec.request_rate, spec.max_concurrency, spec.levels()) == ([0.5, 2.0], 8, [0.5, 2.0])
    assert_usable(spec)
    rules = {
        "--max-concurrency: an open loop needs its bound on requests in flight": ["--request-rate=1"],
        "--max-concurrency: bounds an open loop": ["--concurrency=1", "--max-concurrency=4"],
        "--burstiness: shapes gamma arrivals only": ["--concurrency=1", "--burstiness=2"],
        "--search-resolution: searches for the highest level meeting an SLO": [
            "--concurrency=1",
            "--search-resolution=4",
        ],
        "--search-resolution: searches over --concurrency levels": [
            "--request-rate=1",
            "--max-concurrency=4",
            "--slo=ttft_p99_ms=100",
            "--search-resolution=4",
        ],
        "--slo: an objective is given twice": [
            "--concurrency=1",
            "--slo=ttft_p99_ms=1",
            "--slo=ttft_p99_ms=2",
        ],
    }
    for message, extra in rules.items():
        try:
            spec_from_args(parser.parse_args([*base, *extra]))
        except UsageError as error:
            assert str(error).startswith(message), (message, error)
        else:
            raise AssertionError(f"accepted: {extra}")


@FAST
@given(st.sampled_from(OPTIONS), values)
@example("--warmup", "infx")
@example("--prompts-per-level", "1e9x")
@example("--input-len", "1e11")
@example("--read-timeout", "nan")
@example("--connect-timeout", "inf")
@example("--range-ratio", "nan")
@example("--seed", "-1")
@example("--dataset", "\x00")
@example("--url", "http://[::1")
@example("--url", "http://a..b")
@example("--out", "")
def test_any_value_of_one_option(option: str, value: str) -> None:
    result = outcome({option: value})
    assert_one_line_naming(result, {option})
    if option == "--out" and not value:
        assert isinstance(result, str)  # a sweep into the current directory by mistake


@FAST
@given(st.dictionaries(st.sampled_from(OPTIONS), values, min_size=2, max_size=5))
def test_any_values_of_several_options(overrides: dict[str, str]) -> None:
    assert_one_line_naming(outcome(overrides), set(overrides))


# --- a results directory resumed ------------------------------------------------------------------------

SETTINGS: dict[str, Any] = {"api": "completions", "model": "m", "concurrency": [1, 2], "repeats": 1}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
point_ids = st.sampled_from(["c1-r0", "c2-r0"]) | st.text(max_size=4) | st.integers()
points = st.fixed_dictionaries(
    {"point_id": point_ids, "completed": st.integers(-1, 20) | json_values},
    optional={"supersedes": st.fixed_dictionaries({"line": st.integers(0, 4)}) | json_values}
    | {key: json_values for key in ("max_concurrency", "repeat", "failed", "output_throughput")},
)
point_lines = (points | json_values).map(lambda value: json.dumps(value).encode()) | st.binary(max_size=30)
points_files = st.lists(point_lines, max_size=5).map(b"\n".join) | st.binary(max_size=60)
sweep_files = (
    st.just(json.dumps(SETTINGS).encode())
    | st.dictionaries(st.sampled_from(sorted(SETTINGS)), json_values).map(lambda d: json.dumps(d).encode())
    | json_values.map(lambda value: json.dumps(value).encode())
    | st.binary(max_size=40)
    | st.just(b"[" * 100_000)
)


@FAST
@given(sweep_files | st.none(), points_files | st.none())
def test_a_resumed_directory_is_usable_or_names_the_file_and_line(
    sweep: bytes | None, points_file: bytes | None
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        if sweep is not None:
            (root / SWEEP_FILE).write_bytes(sweep)
        if points_file is not None:
            (root / POINTS_FILE).write_bytes(points_file)
        results = ResultsDir(root)
        try:
            results.prepare(SETTINGS, resume=True)
        except ResultsError as error:
            named = (
                rf"^({re.escape(str(root / SWEEP_FILE))}(:\d+)?|{re.escape(str(root / POINTS_FILE))}:\d+): "
            )
            assert re.match(named, str(error)), error
            assert len(str(error).splitlines()) == 1, error
            return
        # What prepare let through, the sweep can use: each point once, and a summary of them.
        found = results.points()
        assert sorted(point["point_id"] for point in found) == sorted(results.completed_ids())
        assert results.failed_ids() <= results.completed_ids()
        summary_table(found)
