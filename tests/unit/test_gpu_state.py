"""The GPUs' state during a point (fairbench.measure.gpu_state): each reading of a simulated NVML through
the energy sampler's thread, the summary of a window, the point's fields and the ``gpu_throttled`` flag;
and the client machine's CPU from /proc/stat (fairbench.measure.machine_load)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.conftest import MakeNvml

from fairbench.measure.energy import EnergySampler
from fairbench.measure.gpu_state import (
    StateSample,
    gpu_state,
    point_fields,
    reason_names,
)
from fairbench.measure.machine_load import CpuTimes, cpu_times, load_fields
from fairbench.measure.point_flags import GPU_THROTTLED_SHARE_MAX, gpu_flags

IDLE, POWER_CAP, HW_THERMAL = 0x1, 0x4, 0x40


def test_the_reason_bits_are_named_and_an_unknown_one_shown_as_its_bit() -> None:
    assert reason_names(0) == []
    assert reason_names(IDLE | POWER_CAP | HW_THERMAL) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert reason_names(0x800) == ["0x800"]


def test_a_window_sums_up_each_gpus_clocks_temperature_and_reasons() -> None:
    samples = [
        StateSample(1980, 3201, 0, 60),
        StateSample(1755, 3201, POWER_CAP, 71),
        StateSample(1500, 3201, POWER_CAP | HW_THERMAL, 84),
        StateSample(None, None, None, None),  # a reading that failed whole is no sample
        StateSample(1980, None, IDLE, None),
    ]
    state = gpu_state(3, samples)
    assert state is not None
    assert (state.index, state.samples) == (3, 4)
    assert (state.sm_clock_mhz_min, state.sm_clock_mhz_mean) == (1500, pytest.approx(1803.75))
    assert (state.mem_clock_mhz_min, state.temperature_c_max) == (3201, 84)
    assert state.clock_events == {"sw_power_cap": 0.5, "hw_thermal_slowdown": 0.25, "gpu_idle": 0.25}
    assert state.throttled_share == 0.5  # idle is the GPU's own choice, not a limit
    assert gpu_state(0, [StateSample(None, None, None, None)]) is None
    steady = gpu_state(4, samples[:1])
    assert steady is not None
    fields = point_fields([state, steady])
    assert fields["gpu_throttled_share"] == 0.5 and [gpu["index"] for gpu in fields["gpu_state"]] == [3, 4]
    assert point_fields([]) == {}


def test_the_energy_samplers_thread_reads_each_gpus_state_with_its_power(fake_nvml: MakeNvml) -> None:
    nvml = fake_nvml(
        gpus=[
            {"watts": 300},
            {"watts": 700, "sm_clock_mhz": 1410, "clock_events": POWER_CAP, "temperature_c": 83},
            {"watts": 100, "sm_clock_mhz": None, "clock_events": None, "temperature_c": None},
        ]
    )
    with EnergySampler.open(nvml=nvml, hz=50) as sampler:
        sampler.start()
        time.sleep(0.2)
        sampler.stop()
        cool, capped, bare = sampler.states()
    assert cool.samples >= 5 and cool.sm_clock_mhz_min == 1980 and cool.throttled_share == 0.0
    assert capped.clock_events == {"sw_power_cap": 1.0} and capped.temperature_c_max == 83
    assert bare.sm_clock_mhz_min is None and bare.mem_clock_mhz_min == 3201 and bare.clock_events == {}
    flag = gpu_flags(point_fields([cool, capped, bare]))
    assert [found["flag"] for found in flag] == ["gpu_throttled"]
    assert (
        "GPU 1 in 100% of its samples (sw_power_cap 100%; SM clock 1,410 MHz at its lowest, 83 °C"
        in (flag[0]["reason"])
    )
    assert "output_throughput" in flag[0]["on"]


def test_a_limit_touched_for_a_few_samples_is_no_flag() -> None:
    samples = [StateSample(1980, 3201, POWER_CAP if i == 0 else 0, 60) for i in range(40)]
    state = gpu_state(0, samples)
    assert state is not None and 0 < state.throttled_share <= GPU_THROTTLED_SHARE_MAX
    assert gpu_flags(point_fields([state])) == []
    assert gpu_flags({}) == []  # no GPU sampled: nothing said


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
