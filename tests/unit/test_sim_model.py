"""Profiles and the performance model: the step and prefill times the simulator schedules by."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairbench.sim.model import (
    LayoutCost,
    PerformanceModel,
    ProfileError,
    Speculation,
    builtin_profile_names,
    layout_key,
    load_profile,
    mean_accept_length,
    parse_profile,
)

COST = LayoutCost(t0_s=0.010, k_s=0.001, prefill_tokens_per_s=1000.0, prefill_forward_s=0.020)


def model(cuda_graph_max_bs: int = 64, speculation: Speculation | None = None) -> PerformanceModel:
    return PerformanceModel(
        layout="test",
        cost=COST,
        cuda_graph_max_bs=cuda_graph_max_bs,
        eager_extra_s=0.005,
        speculation=speculation,
        draft_step_s=0.002,
        verify_token_cost=0.5,
    )


def digit_limit_error(digits: str) -> str:
    """Python's own words for an integer longer than its digit limit (3.10 words it unlike 3.11)."""
    try:
        int(digits)
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"{len(digits)} digits are within Python's limit")


def generic_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        resources.files("fairbench.sim").joinpath("profiles/generic.yaml").read_text()
    )
    return data


def test_both_builtin_profiles_load() -> None:
    assert builtin_profile_names() == ["generic", "kimi-k2.6-8xpro6000"]
    kimi = load_profile("kimi-k2.6-8xpro6000")
    assert set(kimi.layouts) == {"tp8", "tp8-ep4", "tp8-ep8", "tp8-ep8-eplb"}
    assert kimi.layouts["tp8"].t0_s == pytest.approx(0.009415)
    assert load_profile("generic").layout("tp8-ep4")[0] == "default"


def test_a_profile_file_can_be_given_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(generic_data()))
    assert load_profile(str(path)).name == "mine"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["layouts"]["default"].pop("k_ms"),
            "layouts.default.k_ms: a number is required, got None",
        ),
        (lambda d: d["layouts"]["default"].update(t0_ms=0), "layouts.default.t0_ms: must be positive"),
        (
            lambda d: d["layouts"]["default"].update(t0_ms=float("nan")),
            "layouts.default.t0_ms: must be a finite number, got nan",
        ),
        (lambda d: d.update(context_length=float("inf")), "context_length: must be a finite number, got inf"),
        (
            lambda d: d["defaults"].update(max_running_requests=10**400),
            "defaults.max_running_requests: must be a finite number, got an integer too large for a float",
        ),
        (lambda d: d["defaults"].update(max_running_requests=2.5), "max_running_requests: must be a whole"),
        (lambda d: d["speculative"].update(acceptance_rate=1.0), "acceptance_rate: must be below 1"),
        (lambda d: d.update(layouts={}), "layouts: at least one layout is required"),
        (lambda d: d.pop("cuda_graph"), "cuda_graph: a mapping is required"),
    ],
)
def test_a_malformed_profile_names_the_key_and_the_rule(change: Any, message: str) -> None:
    data = generic_data()
    change(data)
    with pytest.raises(ProfileError, match=f"profile broken: .*{message}"):
        parse_profile("broken", data)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (": : not [yaml\n", "not valid YAML: expected <block end>, but found ':' (line 1, column 1)"),
        ("a: \x00\n", "not valid YAML: unacceptable character #x0000: special characters are not allowed"),
        ("context_length: 1" + "0" * 5000, f"not valid YAML: {digit_limit_error('1' + '0' * 5000)}"),
        (b"\xff", "'utf-8' codec can't decode byte 0xff in position 0"),
    ],
)
def test_a_profile_file_that_cannot_be_read_is_refused_in_one_line_naming_it(
    tmp_path: Path, content: str | bytes, problem: str
) -> None:
    path = tmp_path / "broken.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ProfileError) as error:
        load_profile(str(path))
    assert str(error.value).startswith(f"{path}: {problem}")
    assert "\n" not in str(error.value)


def test_a_profile_path_the_system_refuses_is_a_profile_error_naming_it(tmp_path: Path) -> None:
    path = str(tmp_path / ("p" * 300 + ".yaml"))
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    assert str(error.value) == f"{path}: File name too long"


def test_an_unknown_profile_lists_the_builtin_ones() -> None:
    with pytest.raises(ProfileError, match=r"built-in ones are generic, kimi-k2\.6-8xpro6000"):
        load_profile("no-such-profile")


def test_layout_keys() -> None:
    assert [layout_key(8, 1, False), layout_key(8, 4, False), layout_key(8, 8, True)] == [
        "tp8",
        "tp8-ep4",
        "tp8-ep8-eplb",
    ]


def test_decode_step_is_t0_plus_k_per_request_and_eager_above_the_graph_batch_size() -> None:
    assert model().decode_step_seconds(1) == pytest.approx(0.011)
    assert model().decode_step_seconds(64) == pytest.approx(0.074)
    assert model().decode_step_seconds(65) == pytest.approx(0.075 + 0.005)
    assert model(cuda_graph_max_bs=0).decode_step_seconds(1) == pytest.approx(0.016)


def test_prefill_costs_a_fixed_part_per_forward_plus_a_rate_per_token() -> None:
    assert model().prefill_seconds(tokens=500, forwards=2) == pytest.approx(2 * 0.020 + 0.5)


def test_speculation_adds_draft_steps_and_verification_and_yields_the_mean_accepted_length() -> None:
    speculation = Speculation(num_steps=3, num_draft_tokens=4, accept_length=mean_accept_length(0.5, 3))
    speculative = model(speculation=speculation)
    assert speculation.accept_length == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert speculative.tokens_per_step == pytest.approx(1.875)
    # t0 + 3 draft steps + k * b * (1 + 0.5 * 3 extra verified tokens)
    assert speculative.decode_step_seconds(10) == pytest.approx(0.010 + 0.006 + 0.001 * 10 * 2.5)
