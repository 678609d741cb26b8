"""Fault switches: parsing ``--sim-fault`` and deciding which request or event they hit."""

from __future__ import annotations

import argparse

import pytest

from fairbench.sim.faults import FaultAction, FaultSettings, FaultState, combine_fault_specs, parse_fault_spec


def test_a_spec_may_hold_several_faults_and_later_flags_override_earlier_ones() -> None:
    settings = combine_fault_specs(
        [parse_fault_spec("crash-after=3, malformed-every=7"), parse_fault_spec("crash-after=5")]
    )
    assert settings == FaultSettings(crash_after=5, malformed_every=7)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("hang-after=x", "'hang-after=x': not a valid value for hang-after"),
        ("slow-start=", "'slow-start=': not a valid value for slow-start"),
        ("crash-after=-1", "crash-after: must be an integer from 0 to 10,000,000 requests, got -1"),
        (
            "hang-after=99999999999",
            "hang-after: must be an integer from 0 to 10,000,000 requests, got 99999999999",
        ),
        ("http-500-rate=1.5", "http-500-rate: must be a number from 0 to 1 (a share), got 1.5"),
        ("http-500-rate=nan", "http-500-rate: must be a finite number, got nan"),
        ("slow-start=-2", "slow-start: must be a number from 0 to 604800 seconds, got -2"),
        ("slow-start=inf", "slow-start: must be a finite number, got inf"),
        ("malformed-every=0", "malformed-every: must be at least 1, got 0"),
        (
            "diverge-after=-1",
            "diverge-after: must be an integer from 0 to 10,000,000 (an output position, 0-based), got -1",
        ),
        ("diverge-after=2.5", "'diverge-after=2.5': not a valid value for diverge-after"),
    ],
)
def test_a_value_that_is_no_number_or_outside_a_real_runs_range_is_a_usage_error(
    spec: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse_fault_spec(spec)
    assert str(error.value) == message


def test_diverge_after_is_a_position_from_0_and_is_described_as_spelled() -> None:
    settings = combine_fault_specs([parse_fault_spec("diverge-after=0"), parse_fault_spec("slow-start=2")])
    assert settings == FaultSettings(diverge_after=0, slow_start_s=2.0)
    assert settings.describe() == {"slow-start": 2.0, "diverge-after": 0}


def test_crash_after_n_lets_n_requests_through() -> None:
    state = FaultState(FaultSettings(crash_after=2), seed=0)
    assert [state.on_generation_request() for _ in range(3)] == [
        FaultAction.SERVE,
        FaultAction.SERVE,
        FaultAction.CRASH,
    ]


def test_hang_after_zero_hangs_on_the_first_request() -> None:
    assert FaultState(FaultSettings(hang_after=0), seed=0).on_generation_request() is FaultAction.HANG


def test_http_500_rate_hits_about_that_share_of_requests_reproducibly_for_a_seed() -> None:
    def outcomes(seed: int) -> list[FaultAction]:
        state = FaultState(FaultSettings(http_500_rate=0.3), seed=seed)
        return [state.on_generation_request() for _ in range(2000)]

    failed = outcomes(1).count(FaultAction.HTTP_500)
    assert 0.25 < failed / 2000 < 0.35
    assert outcomes(1) == outcomes(1)
    assert outcomes(1) != outcomes(2)


def test_malformed_every_n_breaks_every_nth_event() -> None:
    state = FaultState(FaultSettings(malformed_every=3), seed=0)
    assert [state.next_event_is_malformed() for _ in range(7)] == [
        False,
        False,
        True,
        False,
        False,
        True,
        False,
    ]
    assert not FaultState(FaultSettings(), seed=0).next_event_is_malformed()
