"""A stand-in for pynvml (nvidia-ml-py) with simulated GPUs: what fairbench.measure.energy calls.

Tests hand it to ``EnergySampler.open(nvml=...)`` after :func:`configure`; a sweep in a child process
imports it as ``pynvml`` with this folder on PYTHONPATH and its GPUs in the environment variable
FAKE_PYNVML (JSON, the argument of :func:`configure`). Each GPU draws a constant power, ``watts``; the
energy counter (where ``counter`` is true) advances at ``counter_watts`` (default ``watts``) on the
same clock as the sampler, so a test can tell which of the two an energy figure came from. Its state
(fairbench.measure.gpu_state) is constant too: ``sm_clock_mhz``, ``mem_clock_mhz``, ``clock_events`` (the
reason bits) and ``temperature_c``, each None for a GPU that does not support it.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
COUNTER_ORIGIN_MJ = 5_000_000
"""The counter counts from the driver's load, not from zero."""


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"fake NVML error {self.value}"


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


@dataclass
class FakeGpu:
    watts: float
    counter: bool = True
    counter_watts: float | None = None
    power_fails_after: int | None = None
    """Power readings that succeed before every later one raises GPU_IS_LOST."""
    sm_clock_mhz: int | None = 1980
    mem_clock_mhz: int | None = 3201
    clock_events: int | None = 0
    temperature_c: int | None = 40
    power_reads: int = 0
    born_ns: int = field(default_factory=perf_counter_ns)
    counter_reads_ns: list[int] = field(default_factory=list)
    """The instant of every energy counter reading, which its value follows from exactly."""


@dataclass
class FakeState:
    gpus: list[FakeGpu] = field(default_factory=list)
    init_error: bool = False
    initialised: int = 0
    calls: list[tuple[str, int]] = field(default_factory=list)
    """(reading, thread id) of every device call, to check which thread made them."""


STATE = FakeState()


def configure(config: dict[str, Any]) -> FakeState:
    """``{"gpus": [{"watts": 300, "counter": false, ...}], "init_error": false}``; returns the new state."""
    STATE.gpus = [FakeGpu(**gpu) for gpu in config.get("gpus", [])]
    STATE.init_error = bool(config.get("init_error"))
    STATE.initialised = 0
    STATE.calls = []
    return STATE


if "FAKE_PYNVML" in os.environ:
    configure(json.loads(os.environ["FAKE_PYNVML"]))


def _check_initialised() -> None:
    if not STATE.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _device(handle: int, reading: str) -> FakeGpu:
    _check_initialised()
    STATE.calls.append((reading, threading.get_ident()))
    return STATE.gpus[handle]


def nvmlInit() -> None:
    if STATE.init_error:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    STATE.initialised += 1


def nvmlShutdown() -> None:
    _check_initialised()
    STATE.initialised -= 1


def nvmlDeviceGetCount() -> int:
    _check_initialised()
    return len(STATE.gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    _device(index, "handle")
    return index


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    gpu = _device(handle, "power")
    gpu.power_reads += 1
    if gpu.power_fails_after is not None and gpu.power_reads > gpu.power_fails_after:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return round(gpu.watts * 1000)


def nvmlDeviceGetTotalEnergyConsumption(handle: int) -> int:
    gpu = _device(handle, "energy")
    if not gpu.counter:
        raise NVMLError_NotSupported()
    watts = gpu.watts if gpu.counter_watts is None else gpu.counter_watts
    gpu.counter_reads_ns.append(perf_counter_ns())
    return COUNTER_ORIGIN_MJ + round(watts * (gpu.counter_reads_ns[-1] - gpu.born_ns) / 1e6)


def _supported(value: int | None) -> int:
    if value is None:
        raise NVMLError_NotSupported()
    return value


def nvmlDeviceGetClockInfo(handle: int, clock: int) -> int:
    gpu = _device(handle, "clock")
    return _supported(gpu.sm_clock_mhz if clock == NVML_CLOCK_SM else gpu.mem_clock_mhz)


def nvmlDeviceGetCurrentClocksEventReasons(handle: int) -> int:
    return _supported(_device(handle, "clock events").clock_events)


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    return _supported(_device(handle, "temperature").temperature_c)
