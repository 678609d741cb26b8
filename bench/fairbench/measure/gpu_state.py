"""The GPUs' state during a point, read through NVML beside its energy (``energy.EnergySampler``'s thread,
at each power sample): each GPU's SM and memory clocks, its clock-event reasons (why its clocks are below
their most: idle, an application clock setting, its power limit, a thermal slowdown...) and its temperature.

Per GPU over a point (``GpuState``, from its samples s_1 ... s_n, each field over the samples that read it;
n_e of them read the reasons):

- sm_clock_mhz_min, sm_clock_mhz_mean; mem_clock_mhz_min, mem_clock_mhz_mean;
- temperature_c_max;
- clock_events: for each reason NVML gave in any sample, (samples it was given in) / n_e;
- throttled_share = (samples with any of THROTTLE_REASONS) / n_e: the machine slowed the GPU below what the
  config should get (a thermal limit, the hardware's slowdown or power brake);
- power_capped_share = (samples with POWER_CAP) / n_e: the GPU ran at its board power limit, where a
  saturated GPU normally runs (clock_events' ``sw_power_cap``, 0 without it).

Point fields (``point_fields``): ``gpu_state``, a list of each GPU's ``GpuState.to_json``;
``gpu_throttled_share`` and ``gpu_power_capped_share``, the largest throttled_share and power_capped_share
over the GPUs; none where no GPU was sampled (no NVML, no GPU: the point has no such keys, and nothing is
said of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

CLOCK_EVENT_REASONS: Mapping[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
"""NVML's clock-event reason bits (``nvmlClocksEventReason*``) by the name a point records."""
THROTTLE_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake")
"""The reasons that mean the machine slowed the GPU below what the config should get: a thermal limit (the
driver's or the hardware's), the hardware's slowdown (a signal from the board or the power supply) or its
power brake. The others are the GPU's own choice (idle), a setting (application clocks, sync boost) or
POWER_CAP."""
POWER_CAP = "sw_power_cap"
"""The driver holding the clocks down to keep the GPU at its board power limit: where a saturated GPU runs
(an H100 80GB HBM3 under bf16 matmuls, in 99 % of its samples: tests/fixtures/gpu/gpu-state-h100.json)."""


@dataclass(frozen=True)
class StateSample:
    """One reading of one GPU; a field NVML could not give is None."""

    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    clock_events: int | None
    """The reason bits (``CLOCK_EVENT_REASONS``)."""
    temperature_c: int | None


def read_state(nvml: Any, handle: Any) -> StateSample:
    """One reading of the GPU ``handle``: each field on its own, so a field the GPU does not support (or one
    failed call) costs that field only."""

    def read(call: str, *args: Any) -> int | None:
        try:
            return int(getattr(nvml, call)(handle, *args))
        except (nvml.NVMLError, AttributeError):
            return None

    # Drivers and bindings before 535 name the reasons "throttle" rather than "event" reasons.
    events = read("nvmlDeviceGetCurrentClocksEventReasons")
    if events is None:
        events = read("nvmlDeviceGetCurrentClocksThrottleReasons")
    return StateSample(
        sm_clock_mhz=read("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM),
        mem_clock_mhz=read("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_MEM),
        clock_events=events,
        temperature_c=read("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU),
    )


def reason_names(bits: int) -> list[str]:
    """The names of the reason bits set in ``bits``, in bit order; an unknown bit as ``0x...``."""
    return [
        CLOCK_EVENT_REASONS.get(1 << bit, f"0x{1 << bit:x}")
        for bit in range(bits.bit_length())
        if bits >> bit & 1
    ]


@dataclass(frozen=True)
class GpuState:
    """One GPU over one point (module docstring)."""

    index: int
    samples: int
    sm_clock_mhz_min: int | None
    sm_clock_mhz_mean: float | None
    mem_clock_mhz_min: int | None
    mem_clock_mhz_mean: float | None
    temperature_c_max: int | None
    clock_events: dict[str, float]
    throttled_share: float
    power_capped_share: float

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "samples": self.samples,
            "sm_clock_mhz_min": self.sm_clock_mhz_min,
            "sm_clock_mhz_mean": self.sm_clock_mhz_mean,
            "mem_clock_mhz_min": self.mem_clock_mhz_min,
            "mem_clock_mhz_mean": self.mem_clock_mhz_mean,
            "temperature_c_max": self.temperature_c_max,
            "clock_events": self.clock_events,
            "throttled_share": self.throttled_share,
            "power_capped_share": self.power_capped_share,
        }


def _values(samples: Sequence[StateSample], field: str) -> list[int]:
    return [value for sample in samples if (value := getattr(sample, field)) is not None]


def gpu_state(index: int, samples: Sequence[StateSample]) -> GpuState | None:
    """``index``'s state over ``samples``; None where no sample read anything."""
    read = [sample for sample in samples if sample != StateSample(None, None, None, None)]
    if not read:
        return None
    sm, mem, temperature = (
        _values(read, field) for field in ("sm_clock_mhz", "mem_clock_mhz", "temperature_c")
    )
    events = _values(read, "clock_events")
    counts: dict[str, int] = {}
    throttled = 0
    for bits in events:
        names = reason_names(bits)
        throttled += any(name in THROTTLE_REASONS for name in names)
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return GpuState(
        index=index,
        samples=len(read),
        sm_clock_mhz_min=min(sm) if sm else None,
        sm_clock_mhz_mean=fmean(sm) if sm else None,
        mem_clock_mhz_min=min(mem) if mem else None,
        mem_clock_mhz_mean=fmean(mem) if mem else None,
        temperature_c_max=max(temperature) if temperature else None,
        clock_events={name: count / len(events) for name, count in counts.items()},
        throttled_share=throttled / len(events) if events else 0.0,
        power_capped_share=counts.get(POWER_CAP, 0) / len(events) if events else 0.0,
    )


def point_fields(states: Sequence[GpuState]) -> dict[str, Any]:
    """``gpu_state``, ``gpu_throttled_share`` and ``gpu_power_capped_share`` (module docstring); {} without
    a GPU state."""
    if not states:
        return {}
    return {
        "gpu_state": [state.to_json() for state in states],
        "gpu_throttled_share": max(state.throttled_share for state in states),
        "gpu_power_capped_share": max(state.power_capped_share for state in states),
    }
