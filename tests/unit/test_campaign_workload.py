"""The campaign's service-level objectives (``slo``), automatic repeats, the search and the open loop
(``request_rate`` with ``arrival``, ``burstiness`` and ``max_concurrency``): defaults, exact messages,
their place in to_json and the way back, and the schema's agreement on the forms the loader takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.campaign_documents import (
    DELETE,
    VALID,
    VALIDATOR,
    changed,
    errors_of,
    parse,
    warnings_of,
)

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.model import SINGLE_WORKLOAD, TOP_KEYS
from fairbench.campaign.workload import workload_from_json
from fairbench.measure.repeats import AutoRepeats, repeats_to_json
from fairbench.measure.slo import SLO_KEY_RULE, SLO_LIMIT_RULE, SloTarget
from fairbench.measure.trace_replay import load_window, own_rate
from fairbench.measure.workload import TraceWindow

OPEN_LOOP = {"concurrency": DELETE, "request_rate": [0.5, 2, 8], "max_concurrency": 64}
"""The workload's edits that make VALID an open loop."""


def open_loop(**workload: Any) -> dict[str, Any]:
    return changed({**OPEN_LOOP, **workload})


# --- slo -------------------------------------------------------------------------------------------


def test_slo_targets_are_parsed_in_the_files_order_and_written_back() -> None:
    campaign = parse(changed(slo={"ttft_p99_ms": 2000, "tpot_p50_ms": 50.5, "e2e_latency_p100_ms": 9000}))
    assert campaign.slo == (
        SloTarget("ttft", 99, 2000.0),
        SloTarget("tpot", 50, 50.5),
        SloTarget("e2e_latency", 100, 9000.0),
    )
    assert campaign.to_json()["slo"] == {
        "ttft_p99_ms": 2000.0,
        "tpot_p50_ms": 50.5,
        "e2e_latency_p100_ms": 9000.0,
    }


@pytest.mark.parametrize("document", [changed(), changed(slo={})], ids=["absent", "empty"])
def test_no_slo_is_none_and_campaign_json_still_has_the_key(document: dict[str, Any]) -> None:
    campaign = parse(document)
    assert campaign.slo == ()
    assert campaign.to_json()["slo"] == {}
    assert list(campaign.to_json())[-2:] == ["slo", "warnings"]


@pytest.mark.parametrize(
    ("slo", "message"),
    [
        ({"ttft_p99": 2000}, f"slo.ttft_p99: unknown objective: {SLO_KEY_RULE}"),
        ({"ttft_p0_ms": 2000}, f"slo.ttft_p0_ms: unknown objective: {SLO_KEY_RULE}"),
        ({"ttft_p101_ms": 2000}, f"slo.ttft_p101_ms: unknown objective: {SLO_KEY_RULE}"),
        ({"latency_p99_ms": 2000}, f"slo.latency_p99_ms: unknown objective: {SLO_KEY_RULE}"),
        ({"ttft_p99_ms": 0}, f"slo.ttft_p99_ms: {SLO_LIMIT_RULE}, got 0"),
        ({"ttft_p99_ms": -5.5}, f"slo.ttft_p99_ms: {SLO_LIMIT_RULE}, got -5.5"),
        ({"ttft_p99_ms": float("inf")}, f"slo.ttft_p99_ms: {SLO_LIMIT_RULE}, got inf"),
        ({"ttft_p99_ms": 10**400}, f"slo.ttft_p99_ms: {SLO_LIMIT_RULE}, got {10**400}"),
        ({"ttft_p99_ms": True}, f"slo.ttft_p99_ms: {SLO_LIMIT_RULE}, got true"),
        ({"ttft_p99_ms": "2s"}, f"slo.ttft_p99_ms: {SLO_LIMIT_RULE}, got '2s'"),
        ({"ttft_p99_ms": None}, f"slo.ttft_p99_ms: {SLO_LIMIT_RULE}, got null"),
        ({3: 2000}, "slo: key 3 must be a string"),
        (["ttft_p99_ms"], "slo: must be a mapping, got a list"),
    ],
)
def test_each_slo_rule_has_its_exact_message(slo: object, message: str) -> None:
    assert errors_of(changed(slo=slo)) == [message]


def test_every_broken_slo_entry_is_reported_and_the_unknown_top_key_lists_slo() -> None:
    assert errors_of(changed(slo={"ttft_p99": 1, "tpot_p50_ms": 0, "itl_p90_ms": 30})) == [
        f"slo.ttft_p99: unknown objective: {SLO_KEY_RULE}",
        f"slo.tpot_p50_ms: {SLO_LIMIT_RULE}, got 0",
    ]
    assert errors_of(changed(slos={})) == [
        f"slos: unknown key; expected one of {', '.join(TOP_KEYS)} (did you mean 'slo'?)"
    ]


# --- repeats ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("repeats", "expected"),
    [
        (5, 5),
        ("auto", AutoRepeats(3, 10, 2.0)),
        ({}, AutoRepeats(3, 10, 2.0)),
        ({"min": 5}, AutoRepeats(5, 10, 2.0)),
        ({"max": 20, "half_width_pct": 1}, AutoRepeats(3, 20, 1.0)),
        ({"min": 2, "max": 2, "half_width_pct": 0.5}, AutoRepeats(2, 2, 0.5)),
        ({"min": 1000, "max": 1000, "half_width_pct": 100}, AutoRepeats(1000, 1000, 100.0)),
    ],
)
def test_repeats_are_a_count_or_automatic_with_the_defaults_for_what_is_left_out(
    repeats: object, expected: int | AutoRepeats
) -> None:
    workload = parse(changed({"repeats": repeats})).workloads[SINGLE_WORKLOAD]
    assert workload.repeats == expected
    assert workload.to_json()["repeats"] == repeats_to_json(expected)
    assert workload_from_json(workload.to_json(), "sweep") == workload


def test_repeats_default_to_one_fixed_repeat() -> None:
    workload = parse(VALID).workloads[SINGLE_WORKLOAD]
    assert workload.repeats == 1
    assert workload.to_json()["repeats"] == 1


def test_automatic_repeats_are_written_as_the_full_mapping() -> None:
    data = parse(changed({"repeats": "auto"})).to_json()["workload"]
    assert data["repeats"] == {"min": 3, "max": 10, "half_width_pct": 2.0}


@pytest.mark.parametrize(
    ("repeats", "message"),
    [
        ({"max": 2}, "workload.repeats.max: 2 is below min 3"),
        ({"min": 6, "max": 5}, "workload.repeats.max: 5 is below min 6"),
        ({"min": 20}, "workload.repeats.min: 20 is above max 10, the default: set max too"),
        ({"min": 1}, "workload.repeats.min: must be an integer from 2 to 1,000 repeats, got 1"),
        ({"min": 3.0}, "workload.repeats.min: must be an integer from 2 to 1,000 repeats, got 3.0"),
        ({"max": 1001}, "workload.repeats.max: must be an integer from 2 to 1,000 repeats, got 1001"),
        ({"max": "10"}, "workload.repeats.max: must be an integer from 2 to 1,000 repeats, got '10'"),
        (
            {"half_width_pct": 0},
            "workload.repeats.half_width_pct: must be a number from 0.01 to 100 percent of the mean, got 0",
        ),
        (
            {"half_width_pct": 101},
            "workload.repeats.half_width_pct: must be a number from 0.01 to 100 percent of the mean, got 101",
        ),
        (
            {"half_width_pct": float("nan")},
            "workload.repeats.half_width_pct: must be a finite number, got nan",
        ),
        (
            {"half_width_pct": True},
            "workload.repeats.half_width_pct: must be a number from 0.01 to 100 percent of the mean, "
            "got true",
        ),
        (
            {"maxi": 5},
            "workload.repeats.maxi: unknown key; expected one of min, max, half_width_pct "
            "(did you mean 'max'?)",
        ),
        (
            "often",
            "workload.repeats: must be an integer from 1 to 1,000 repeats, auto, or a mapping of any of min, "
            "max, half_width_pct, got 'often'",
        ),
        (
            [3],
            "workload.repeats: must be an integer from 1 to 1,000 repeats, auto, or a mapping of any of min, "
            "max, half_width_pct, got a list",
        ),
        (0, "workload.repeats: must be an integer from 1 to 1,000 repeats, got 0"),
        (2.5, "workload.repeats: must be an integer from 1 to 1,000 repeats, got 2.5"),
    ],
)
def test_each_repeats_rule_has_its_exact_message(repeats: object, message: str) -> None:
    assert errors_of(changed({"repeats": repeats})) == [message]


def test_a_count_out_of_range_is_not_also_compared_with_the_other() -> None:
    assert errors_of(changed({"repeats": {"min": 5, "max": 0}})) == [
        "workload.repeats.max: must be an integer from 2 to 1,000 repeats, got 0"
    ]


# --- search_resolution -----------------------------------------------------------------------------


def test_search_resolution_with_an_slo_is_kept_and_written_back() -> None:
    campaign = parse(changed({"search_resolution": 4}, slo={"ttft_p99_ms": 2000}))
    assert campaign.workloads[SINGLE_WORKLOAD].search_resolution == 4
    assert campaign.to_json()["workload"]["search_resolution"] == 4
    assert (
        workload_from_json(campaign.workloads[SINGLE_WORKLOAD].to_json(), "sweep")
        == campaign.workloads[SINGLE_WORKLOAD]
    )


def test_without_search_resolution_there_is_no_search_and_no_key() -> None:
    workload = parse(changed(slo={"ttft_p99_ms": 2000})).workloads[SINGLE_WORKLOAD]
    assert workload.search_resolution is None
    assert "search_resolution" not in workload.to_json()


@pytest.mark.parametrize("slo", [DELETE, {}], ids=["no-slo", "empty-slo"])
def test_search_resolution_needs_an_slo(slo: object) -> None:
    document = changed({"search_resolution": 4}, **({} if slo is DELETE else {"slo": slo}))
    assert errors_of(document) == [
        "workload.search_resolution: bisects for the highest load meeting the SLO: set slo"
    ]


def test_the_slo_rule_is_the_campaigns_a_workload_alone_may_search() -> None:
    data = (
        parse(changed({"search_resolution": 4}, slo={"ttft_p99_ms": 2000}))
        .workloads[SINGLE_WORKLOAD]
        .to_json()
    )
    assert workload_from_json(data, "sweep").search_resolution == 4


def test_search_resolution_runs_over_concurrency_levels_only() -> None:
    expected = [
        "workload.search_resolution: bisects over concurrency levels: an open loop (request_rate) has none"
    ]
    assert errors_of(open_loop(search_resolution=4) | {"slo": {"ttft_p99_ms": 2000}}) == expected
    assert errors_of(open_loop(search_resolution=4)) == expected  # the SLO is not asked for as well


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "must be an integer from 1 to 100,000 requests in flight, got 0"),
        (100_001, "must be an integer from 1 to 100,000 requests in flight, got 100001"),
        ("4", "must be an integer from 1 to 100,000 requests in flight, got '4'"),
    ],
)
def test_search_resolution_is_an_integer_in_its_range(value: object, message: str) -> None:
    document = changed({"search_resolution": value}, slo={"ttft_p99_ms": 2000})
    assert errors_of(document) == [f"workload.search_resolution: {message}"]


# --- the open loop ---------------------------------------------------------------------------------


def test_an_open_loop_has_rates_and_the_defaults_of_its_arrivals() -> None:
    workload = parse(open_loop()).workloads[SINGLE_WORKLOAD]
    assert workload.concurrency == ()
    assert workload.request_rate == (0.5, 2.0, 8.0)
    assert all(isinstance(rate, float) for rate in workload.request_rate)
    assert (workload.arrival, workload.burstiness, workload.max_concurrency) == ("poisson", 1.0, 64)
    assert workload.open_loop and workload.levels == (0.5, 2.0, 8.0)


def test_a_closed_loop_has_no_rate_and_its_levels_are_the_concurrency() -> None:
    workload = parse(VALID).workloads[SINGLE_WORKLOAD]
    assert workload.request_rate == () and workload.max_concurrency is None
    assert not workload.open_loop and workload.levels == (1, 2, 4)


def test_an_open_loop_is_written_with_its_keys_and_read_back() -> None:
    workload = parse(open_loop(arrival="gamma", burstiness=0.25)).workloads[SINGLE_WORKLOAD]
    data = workload.to_json()
    assert list(data) == [
        "api", "dataset", "input_len", "output_len", "request_rate", "arrival", "burstiness",
        "max_concurrency", "prompts_per_level", "warmup", "repeats", "seed",
    ]  # fmt: skip
    assert (data["request_rate"], data["arrival"], data["burstiness"]) == ([0.5, 2.0, 8.0], "gamma", 0.25)
    assert workload_from_json(data, "sweep") == workload


def test_a_closed_loop_is_written_as_before_open_loops() -> None:
    assert list(parse(VALID).workloads[SINGLE_WORKLOAD].to_json()) == [
        "api", "dataset", "input_len", "output_len", "concurrency", "prompts_per_level", "warmup", "repeats",
        "seed",
    ]  # fmt: skip


def test_nx_at_a_rate_is_n_seconds_of_arrivals_rounded_up() -> None:
    workload = parse(open_loop(request_rate=[0.28, 2.5, 4], prompts_per_level="25x", warmup="25x")).workloads[
        SINGLE_WORKLOAD
    ]
    # 25 x 0.28 is 7.000000000000001 in floats: the rate counts as written, 7 requests, not 8.
    assert [workload.warmup_at(rate) for rate in workload.request_rate] == [7, 63, 100]
    assert [workload.prompts_at(rate) for rate in workload.request_rate] == [16, 63, 100]
    fixed = parse(open_loop(prompts_per_level=40, warmup=0)).workloads[SINGLE_WORKLOAD]
    assert [(fixed.prompts_at(rate), fixed.warmup_at(rate)) for rate in fixed.request_rate] == [(40, 0)] * 3


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(
            changed({"concurrency": DELETE}),
            "workload: needs concurrency (a closed loop), request_rate (an open loop) or trace_speedup (a "
            "replayed trace)",
            id="neither",
        ),
        pytest.param(
            open_loop(concurrency=[1]),
            "workload: has concurrency and request_rate: give one (the levels of one kind of load)",
            id="both",
        ),
        pytest.param(
            open_loop(max_concurrency=DELETE),
            "workload.max_concurrency: required key is missing: an open loop (request_rate) needs its bound "
            "on requests in flight",
            id="rates-without-max-concurrency",
        ),
        pytest.param(
            changed({"max_concurrency": 64}),
            "workload.max_concurrency: is an open loop's bound on requests in flight: with concurrency, the "
            "levels are the bound",
            id="max-concurrency-with-concurrency",
        ),
        pytest.param(
            changed({"arrival": "gamma"}),
            "workload.arrival: is an open loop's (request_rate): with concurrency, a request is sent when "
            "one ends",
            id="arrival-with-concurrency",
        ),
        pytest.param(
            changed({"burstiness": 2}),
            "workload.burstiness: is an open loop's (request_rate): with concurrency, a request is sent when "
            "one ends",
            id="burstiness-with-concurrency",
        ),
        pytest.param(
            open_loop(request_rate=[]),
            "workload.request_rate: must be a non-empty list of positive numbers (requests per second), "
            "got a list",
            id="no-rates",
        ),
        pytest.param(
            open_loop(request_rate=4),
            "workload.request_rate: must be a non-empty list of positive numbers (requests per second), "
            "got 4",
            id="rates-not-a-list",
        ),
        pytest.param(
            open_loop(request_rate=[1, 0]),
            "workload.request_rate[1]: must be a number from 0.001 to 1,000,000 requests per second, got 0",
            id="rate-zero",
        ),
        pytest.param(
            open_loop(request_rate=[1, -2.5]),
            "workload.request_rate[1]: must be a number from 0.001 to 1,000,000 requests per second, "
            "got -2.5",
            id="rate-negative",
        ),
        pytest.param(
            open_loop(request_rate=[1, 2e6]),
            "workload.request_rate[1]: must be a number from 0.001 to 1,000,000 requests per second, "
            "got 2e+06",
            id="rate-beyond-its-bound",
        ),
        pytest.param(
            open_loop(request_rate=[1, float("inf")]),
            "workload.request_rate[1]: must be a finite number, got inf",
            id="rate-infinite",
        ),
        pytest.param(
            open_loop(request_rate=[1, True]),
            "workload.request_rate[1]: must be a number from 0.001 to 1,000,000 requests per second, "
            "got true",
            id="rate-boolean",
        ),
        pytest.param(
            open_loop(request_rate=[1, "2"]),
            "workload.request_rate[1]: must be a number from 0.001 to 1,000,000 requests per second, got '2'",
            id="rate-string",
        ),
        pytest.param(
            open_loop(request_rate=[4, 4.0]),
            "workload.request_rate[1]: 4.0 is listed twice",
            id="rate-twice",
        ),
        pytest.param(
            open_loop(arrival="uniform"),
            "workload.arrival: must be one of poisson, gamma, got 'uniform'",
            id="arrival-choice",
        ),
        pytest.param(
            open_loop(arrival="gamma", burstiness=0),
            "workload.burstiness: must be a number from 0.001 to 1,000 (a gamma shape), got 0",
            id="burstiness-zero",
        ),
        pytest.param(
            open_loop(arrival="gamma", burstiness="high"),
            "workload.burstiness: must be a number from 0.001 to 1,000 (a gamma shape), got 'high'",
            id="burstiness-word",
        ),
        pytest.param(
            open_loop(max_concurrency=0),
            "workload.max_concurrency: must be an integer from 1 to 100,000 requests in flight, got 0",
            id="max-concurrency-bound",
        ),
        pytest.param(
            open_loop(prompts_per_level="x"),
            "workload.prompts_per_level: must be an integer >= 1 or Nx (N times the request rate), got 'x'",
            id="prompts-of-rates",
        ),
        pytest.param(
            open_loop(prompts_per_level="10001x"),
            "workload.prompts_per_level: N of 10001x must be a number from 0 to 10,000 times the request "
            "rate, got 10001",
            id="prompts-factor-of-rates",
        ),
        pytest.param(
            open_loop(request_rate=[1, 1_000_000], warmup="100x"),
            "workload.warmup: 100x at request rate 1000000: must be an integer from 0 to 10,000,000 "
            "requests, got 100000000",
            id="warmup-at-the-largest-rate",
        ),
    ],
)
def test_each_open_loop_rule_has_its_exact_message(document: dict[str, Any], message: str) -> None:
    assert errors_of(document) == [message]


def test_burstiness_with_poisson_arrivals_is_a_warning() -> None:
    expected = [
        "workload.burstiness: has no effect with poisson arrivals (it is gamma's shape): set arrival: gamma, "
        "or leave it out"
    ]
    assert warnings_of(open_loop(burstiness=2)) == expected
    assert warnings_of(open_loop(arrival="poisson", burstiness=0.5)) == expected
    assert warnings_of(open_loop(burstiness=1)) == []
    assert warnings_of(open_loop(arrival="gamma", burstiness=2)) == []


def test_an_open_loop_compares_max_concurrency_not_its_rates_with_max_running_requests() -> None:
    # Rates far above 256 req/s, and prompts below the bound: neither is a level's concurrency.
    assert warnings_of(open_loop(request_rate=[300, 600], max_concurrency=256, prompts_per_level=16)) == []
    assert warnings_of(open_loop(max_concurrency=512)) == [
        "workload.max_concurrency: 512 above max-running-requests 256 of tp8, tp8-ll: the excess requests "
        "queue"
    ]


# --- the schema takes what the loader takes --------------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [
        changed(slo={"ttft_p99_ms": 2000, "itl_p50_ms": 20.5}),
        changed(slo={}),
        changed({"repeats": "auto"}),
        changed({"repeats": {"min": 2, "max": 30, "half_width_pct": 1.5}}),
        changed({"search_resolution": 8}, slo={"e2e_latency_p90_ms": 30000}),
        open_loop(),
        open_loop(arrival="gamma", burstiness=0.5, request_rate=[0.25, 1]),
    ],
)
def test_the_schema_takes_every_form_the_loader_takes(document: dict[str, Any]) -> None:
    assert parse(document).configs
    assert list(VALIDATOR.iter_errors(document)) == []


@pytest.mark.parametrize(
    "document",
    [
        changed(slo={"ttft_p99": 2000}),
        changed(slo={"ttft_p99_ms": 0}),
        changed({"repeats": "often"}),
        changed({"repeats": {"maxi": 3}}),
        changed({"concurrency": DELETE}),
        open_loop(concurrency=[1]),
        open_loop(max_concurrency=DELETE),
        changed({"max_concurrency": 4}),
        changed({"arrival": "gamma"}),
        open_loop(request_rate=[2, 2.0]),
        open_loop(search_resolution=4),
    ],
)
def test_the_schema_refuses_what_the_loader_refuses(document: dict[str, Any]) -> None:
    errors_of(document)
    assert list(VALIDATOR.iter_errors(document)) != []


# --- a replayed trace ------------------------------------------------------------------------------

SAMPLE = "tests/fixtures/traces/sample.jsonl"
"""A trace written by ``fairbench trace sample`` (50 requests at 20 req/s), relative to the repository."""
TRACE = {
    **{key: DELETE for key in ("concurrency", "input_len", "output_len", "prompts_per_level")},
    "dataset": "trace",
    "trace": {"path": SAMPLE, "count": 20},
    "trace_speedup": [1, 4],
}
"""The workload's edits that make VALID a replayed trace."""


def replayed(**workload: Any) -> dict[str, Any]:
    return changed({**TRACE, **workload})


def test_a_trace_is_replayed_at_its_windows_own_rate_times_each_speedup() -> None:
    workload = parse(replayed()).workloads[SINGLE_WORKLOAD]
    window = load_window(TraceWindow(str(Path(SAMPLE).absolute()), count=20))
    assert workload.trace == TraceWindow(str(Path(SAMPLE).absolute()), count=20)
    assert workload.request_rate == pytest.approx([own_rate(window), 4 * own_rate(window)])
    assert workload.open_loop and workload.arrival == "trace" and workload.max_concurrency == 20
    assert workload.input_len == max(request.input_len for request in window)
    assert workload.file == str(Path(SAMPLE).absolute())
    assert parse(replayed(max_concurrency=8)).workloads[SINGLE_WORKLOAD].max_concurrency == 8


def test_a_trace_is_written_as_its_window_and_speedups_and_read_back_on_a_host(tmp_path: Path) -> None:
    workload = parse(replayed(trace={"path": SAMPLE, "start_s": 0.5})).workloads[SINGLE_WORKLOAD]
    data = workload.to_json()
    assert {key for key in data} == {
        "api", "dataset", "trace", "trace_speedup", "max_concurrency", "warmup", "repeats", "seed",
    }  # fmt: skip
    # On a host, the trace is found by its name where the bench role copied it.
    (tmp_path / "sample.jsonl").write_bytes(Path(SAMPLE).read_bytes())
    on_host = workload_from_json(data, "workload argument", tmp_path)
    assert on_host.trace is not None and on_host.trace.path == str(tmp_path / "sample.jsonl")
    assert (
        on_host.request_rate == workload.request_rate and on_host.max_concurrency == workload.max_concurrency
    )
    with pytest.raises(CampaignError, match=r"workload\.trace: .*empty-dir/sample\.jsonl: cannot read"):
        workload_from_json(data, "workload argument", tmp_path / "empty-dir")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(
            replayed(trace=DELETE),
            "workload.trace: required key is missing: dataset trace replays a trace's window (trace) at "
            "speedups (trace_speedup)",
            id="no-window",
        ),
        pytest.param(
            changed({"trace_speedup": [2]}),
            "workload: has concurrency and trace_speedup: give one (the levels of one kind of load)",
            id="two-loads",
        ),
        pytest.param(
            changed({"concurrency": DELETE, "trace_speedup": [2]}),
            "workload.trace_speedup: is a replayed trace's: set dataset: trace, or leave it out",
            id="speedup-without-trace",
        ),
        pytest.param(
            replayed(output_len=64),
            "workload.output_len: is the trace's own (its requests' lengths, its window's count, its "
            "arrivals): leave it out",
            id="a-length",
        ),
        pytest.param(
            replayed(trace={"path": "traces/missing.jsonl"}),
            f"workload.trace: {Path('traces/missing.jsonl').absolute()}: cannot read: No such file or "
            "directory",
            id="missing",
        ),
        pytest.param(
            replayed(trace={"path": SAMPLE, "start_s": 3600}),
            f"workload.trace: {Path(SAMPLE).absolute()}: the window (from 3600 s) holds 0 request(s); the "
            "trace has 50 over",
            id="empty-window",
        ),
        pytest.param(
            replayed(trace={"path": "sample.txt"}),
            "workload.trace.path: must be the path of a trace file ending in .jsonl (mooncake), .csv "
            "(azure), got 'sample.txt'",
            id="suffix",
        ),
        pytest.param(
            replayed(search_resolution=4),
            "workload.search_resolution: bisects over concurrency levels: an open loop (trace_speedup) has "
            "none",
            id="search",
        ),
    ],
)
def test_each_trace_rule_has_its_message(document: dict[str, Any], message: str) -> None:
    messages = errors_of(document)
    assert any(found.startswith(message) for found in messages), messages


def test_a_bad_trace_is_refused_naming_its_line_before_any_host_is_touched(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n')
    (message,) = errors_of(replayed(trace={"path": str(bad)}))
    assert message == f"workload.trace: {bad}:2: input_length: required key is missing"


@pytest.mark.parametrize("document", [replayed(), replayed(max_concurrency=4, cache_state="flushed")])
def test_the_schema_takes_a_trace_the_loader_takes(document: dict[str, Any]) -> None:
    assert parse(document).workloads[SINGLE_WORKLOAD].trace is not None
    assert list(VALIDATOR.iter_errors(document)) == []


@pytest.mark.parametrize(
    "document",
    [
        replayed(trace=DELETE),
        replayed(trace_speedup=DELETE),
        replayed(input_len=64),
        replayed(prompts_per_level=16),
        replayed(arrival="gamma"),
        replayed(cache_state="primed"),
        changed({"trace": {"path": SAMPLE}}),
    ],
)
def test_the_schema_refuses_a_trace_the_loader_refuses(document: dict[str, Any]) -> None:
    errors_of(document)
    assert list(VALIDATOR.iter_errors(document)) != []
