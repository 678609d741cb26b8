"""The GPUs' state during a point (fairbench.measure.gpu_state): each reading of a simulated NVML through
the energy sampler's thread, the summary of a window, the point's fields, the ``gpu_throttled`` flag and the
``gpu_at_power_limit`` observation; the same summary of a real H100 under load
(tests/fixtures/gpu/gpu-state-h100.json, recorded by tests/gpu/gpu_state_check.py --record); and the client
machine's CPU from /proc/stat (fairbench.measure.machine_load)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import MakeNvml
from tests.perf.energy_check import SCHEDULE

from fairbench.measure.energy import EnergySampler
from fairbench.measure.gpu_state import (
    CLOCK_EVENT_REASONS,
    POWER_CAP,
    GpuState,
    StateSample,
    gpu_state,
    point_fields,
    reason_names,
)
from fairbench.measure.machine_load import CpuTimes, cpu_times, load_fields
from fairbench.measure.point_flags import GPU_LIMIT_SHARE_MAX, gpu_flags, gpu_observations

IDLE, POWER_CAP_BIT, HW_THERMAL = 0x1, 0x4, 0x40
H100 = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "gpu-state-h100.json"


def test_the_reason_bits_are_named_and_an_unknown_one_shown_as_its_bit() -> None:
    assert reason_names(0) == []
    assert reason_names(IDLE | POWER_CAP_BIT | HW_THERMAL) == [
        "gpu_idle",
        "sw_power_cap",
        "hw_thermal_slowdown",
    ]
    assert reason_names(0x800) == ["0x800"]


def test_a_window_sums_up_each_gpus_clocks_temperature_and_reasons() -> None:
    samples = [
        StateSample(1980, 3201, 0, 60),
        StateSample(1755, 3201, POWER_CAP_BIT, 71),
        StateSample(1500, 3201, POWER_CAP_BIT | HW_THERMAL, 84),
        StateSample(None, None, None, None),  # a reading that failed whole is no sample
        StateSample(1980, None, IDLE, None),
    ]
    state = gpu_state(3, samples)
    assert state is not None
    assert (state.index, state.samples) == (3, 4)
    assert (state.sm_clock_mhz_min, state.sm_clock_mhz_mean) == (1500, pytest.approx(1803.75))
    assert (state.mem_clock_mhz_min, state.temperature_c_max) == (3201, 84)
    assert state.clock_events == {"sw_power_cap": 0.5, "hw_thermal_slowdown": 0.25, "gpu_idle": 0.25}
    # Only the thermal slowdown is the machine's doing; the power limit is the GPU's own, and idle its choice.
    assert (state.throttled_share, state.power_capped_share) == (0.25, 0.5)
    assert gpu_state(0, [StateSample(None, None, None, None)]) is None
    steady = gpu_state(4, samples[:1])
    assert steady is not None
    fields = point_fields([state, steady])
    assert (fields["gpu_throttled_share"], fields["gpu_power_capped_share"]) == (0.25, 0.5)
    assert [gpu["index"] for gpu in fields["gpu_state"]] == [3, 4]
    assert point_fields([]) == {}


def test_the_energy_samplers_thread_reads_each_gpus_state_with_its_power(fake_nvml: MakeNvml) -> None:
    nvml = fake_nvml(
        gpus=[
            {"watts": 300},
            {"watts": 700, "sm_clock_mhz": 1410, "clock_events": POWER_CAP_BIT, "temperature_c": 83},
            {"watts": 650, "sm_clock_mhz": 1200, "clock_events": HW_THERMAL, "temperature_c": 92},
            {"watts": 100, "sm_clock_mhz": None, "clock_events": None, "temperature_c": None},
        ]
    )
    with EnergySampler.open(nvml=nvml, hz=50) as sampler:
        sampler.start()
        time.sleep(0.2)
        sampler.stop()
        cool, capped, hot, bare = sampler.states()
    assert cool.samples >= 5 and cool.sm_clock_mhz_min == 1980 and cool.throttled_share == 0.0
    assert capped.clock_events == {"sw_power_cap": 1.0} and capped.temperature_c_max == 83
    assert (capped.power_capped_share, capped.throttled_share) == (1.0, 0.0)
    assert (hot.power_capped_share, hot.throttled_share) == (0.0, 1.0)
    assert bare.sm_clock_mhz_min is None and bare.mem_clock_mhz_min == 3201 and bare.clock_events == {}
    fields = point_fields([cool, capped, hot, bare])
    # The hot GPU is a doubt on the point; the one at its power limit is an observation.
    (flag,) = gpu_flags(fields)
    assert flag["flag"] == "gpu_throttled" and "output_throughput" in flag["on"]
    assert (
        "GPU 2 in 100% of its samples (hw_thermal_slowdown 100%; SM clock 1,200 MHz at its lowest, 92 °C"
        in (flag["reason"])
    )
    assert "GPU 1" not in flag["reason"]
    (seen,) = gpu_observations(fields)
    assert seen["observation"] == "gpu_at_power_limit"
    assert seen["reason"].startswith(
        "the GPUs ran at their board power limit: GPU 1 in 100% of its samples (sw_power_cap 100%; SM clock "
        "1,410 MHz at its lowest, 83 °C at most)"
    )
    assert "GPU 2" not in seen["reason"]


def test_a_limit_touched_for_a_few_samples_is_neither_a_flag_nor_an_observation() -> None:
    samples = [StateSample(1980, 3201, POWER_CAP_BIT | HW_THERMAL if i == 0 else 0, 60) for i in range(40)]
    state = gpu_state(0, samples)
    assert state is not None and 0 < state.throttled_share == state.power_capped_share <= GPU_LIMIT_SHARE_MAX
    assert gpu_flags(point_fields([state])) == [] and gpu_observations(point_fields([state])) == []
    assert gpu_flags({}) == [] and gpu_observations({}) == []  # no GPU sampled: nothing said


# --- a real H100 under load ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def h100() -> dict[str, Any]:
    """The recording: ``readings`` (GPU 0 read through ``read_state`` at 10 Hz, stamped ``t_s`` from the
    schedule's start), ``phases`` (the energy sampler's own summary of each phase at 20 Hz; their
    ``throttled_share`` was written when it still counted the power limit, so only the fields defined as
    today are read) and ``smi`` (``nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE`` half way through the full
    load)."""
    recorded: dict[str, Any] = json.loads(H100.read_text())
    return recorded


def _samples(readings: Sequence[dict[str, Any]]) -> list[StateSample]:
    fields = ("sm_clock_mhz", "mem_clock_mhz", "clock_events", "temperature_c")
    return [StateSample(*(reading[field] for field in fields)) for reading in readings]


def _phases(recorded: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The readings of each phase of tests/perf/energy_check.py's schedule, the one they were recorded on."""
    phases, start = {}, 0.0
    for phase in SCHEDULE:
        phases[phase.name] = [r for r in recorded["readings"] if start <= r["t_s"] < start + phase.seconds]
        start += phase.seconds
    return phases


def _states(recorded: dict[str, Any]) -> dict[str, GpuState]:
    """Each phase summed up as a point of it would be."""
    found = {name: gpu_state(0, _samples(readings)) for name, readings in _phases(recorded).items()}
    assert all(state is not None for state in found.values())
    return {name: state for name, state in found.items() if state is not None}


def test_the_h100_at_its_power_limit_under_load_is_an_observation_not_a_doubt(h100: dict[str, Any]) -> None:
    states = _states(h100)
    idle, full, half = states["idle"], states["full"], states["half"]
    full_readings = _phases(h100)["full"]
    capped = sum(reading["clock_events"] & POWER_CAP_BIT != 0 for reading in full_readings)
    assert full.power_capped_share == capped / len(full_readings) > 1 - GPU_LIMIT_SHARE_MAX
    # No thermal or hardware reason in the whole recording: nothing that is the machine's fault.
    assert all(state.throttled_share == 0.0 for state in states.values())
    assert all(not reading["clock_events"] & ~(POWER_CAP_BIT | IDLE) for reading in h100["readings"])
    # Idle: no reason, the SM clock at its top; loaded: held below it by the power limit, less at half duty.
    assert (idle.clock_events, idle.power_capped_share) == ({}, 0.0)
    assert idle.sm_clock_mhz_min == max(reading["sm_clock_mhz"] for reading in h100["readings"])
    assert full.sm_clock_mhz_min is not None and full.sm_clock_mhz_mean is not None
    assert half.sm_clock_mhz_mean is not None and idle.sm_clock_mhz_min is not None
    assert full.sm_clock_mhz_min < full.sm_clock_mhz_mean < half.sm_clock_mhz_mean < idle.sm_clock_mhz_min
    assert full.temperature_c_max is not None and idle.temperature_c_max is not None
    assert full.temperature_c_max > idle.temperature_c_max
    # The memory clock does not move, loaded or not.
    assert len({reading["mem_clock_mhz"] for reading in h100["readings"]}) == 1
    assert all(state.mem_clock_mhz_min == state.mem_clock_mhz_mean for state in states.values())
    # A point of the full load: the observation, with the share and the lowest clock; no flag.
    fields = point_fields([full])
    assert gpu_flags(fields) == []
    (seen,) = gpu_observations(fields)
    assert seen["observation"] == "gpu_at_power_limit"
    assert (
        f"GPU 0 in {full.power_capped_share:.0%} of its samples ({POWER_CAP} {full.power_capped_share:.0%}; "
        f"SM clock {full.sm_clock_mhz_min:,} MHz at its lowest, {full.temperature_c_max} °C at most)"
    ) in seen["reason"]
    assert gpu_observations(point_fields([idle])) == []


def test_the_h100s_readings_agree_with_the_energy_samplers_own_summary_of_each_phase(
    h100: dict[str, Any],
) -> None:
    """Two threads read the same GPU over the same phases, at 10 Hz and 20 Hz: the same lowest clocks and
    reasons, the same means and shares within a few samples' worth."""
    for name, state in _states(h100).items():
        (sampled,) = h100["phases"][name]
        assert state.clock_events.keys() == sampled["clock_events"].keys(), name
        for reason, share in state.clock_events.items():
            assert share == pytest.approx(sampled["clock_events"][reason], abs=0.05), (name, reason)
        assert state.sm_clock_mhz_min == sampled["sm_clock_mhz_min"], name
        assert state.sm_clock_mhz_mean == pytest.approx(sampled["sm_clock_mhz_mean"], rel=0.02), name
        assert state.mem_clock_mhz_min == sampled["mem_clock_mhz_min"], name
        assert state.temperature_c_max == pytest.approx(sampled["temperature_c_max"], abs=2), name


SMI_REASONS = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake",
    "Display Clock Setting": "display_clocks",
}
"""nvidia-smi's name of each clock-event reason, and NVML's bit's name as a point records it."""


def _smi_section(text: str, title: str) -> dict[str, str]:
    """``key: value`` of each line indented under ``title`` in ``nvidia-smi -q``'s output, nested ones too."""
    lines = text.splitlines()
    start = next(number for number, line in enumerate(lines) if line.strip() == title)
    depth = len(lines[start]) - len(lines[start].lstrip())
    found = {}
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) <= depth:
            break
        key, _, value = line.partition(":")
        found[key.strip()] = value.strip()
    return found


def _mhz(value: str) -> int:
    match = re.fullmatch(r"(\d+) MHz", value)
    assert match, value
    return int(match[1])


def test_nvidia_smi_says_what_the_h100s_nvml_readings_say_under_full_load(h100: dict[str, Any]) -> None:
    readings, smi = _phases(h100)["full"], h100["smi"]
    events = _smi_section(smi, "Clocks Event Reasons")
    # nvidia-smi lists every reason fairbench names, and the active ones are those NVML gave under the load.
    assert {SMI_REASONS[name] for name in events} == set(CLOCK_EVENT_REASONS.values())
    active = {SMI_REASONS[name] for name, state in events.items() if state == "Active"}
    steady = {frozenset(reason_names(reading["clock_events"])) for reading in readings[len(readings) // 4 :]}
    assert steady == {frozenset(active)} and active == {POWER_CAP}
    clocks, most = _smi_section(smi, "Clocks"), _smi_section(smi, "Max Clocks")
    sm = [reading["sm_clock_mhz"] for reading in readings]
    assert min(sm) <= _mhz(clocks["SM"]) <= max(sm)
    assert {_mhz(clocks["Memory"]), _mhz(most["Memory"])} == {
        reading["mem_clock_mhz"] for reading in readings
    }
    # Idle, the GPU runs its top SM clock: the one nvidia-smi gives as its most.
    assert _states(h100)["idle"].sm_clock_mhz_min == _mhz(most["SM"])
    temperature = _smi_section(smi, "Temperature")["GPU Current Temp"]
    assert (
        min(r["temperature_c"] for r in readings)
        <= int(temperature.removesuffix(" C"))
        <= max(r["temperature_c"] for r in readings)
    )


def test_the_client_machines_cpu_is_busy_and_steal_shares_of_its_jiffies(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n")
    before = cpu_times(stat)
    stat.write_text("cpu  400 0 150 1100 50 0 0 300 0 0\n")
    after = cpu_times(stat)
    assert before == CpuTimes(1000, 850, 0) and after == CpuTimes(2000, 1150, 300)
    fields = load_fields(before, after)
    assert fields == {
        "client_cpu_busy_share": pytest.approx(0.7),
        "client_cpu_steal_share": pytest.approx(0.3),
    }
    assert load_fields(after, after)["client_cpu_busy_share"] is None  # the clock did not advance
    stat.write_text("intr 1 2\n")
    assert cpu_times(stat) is None and cpu_times(tmp_path / "missing") is None
    real = cpu_times()
    assert real is not None and real.total > real.idle >= 0
