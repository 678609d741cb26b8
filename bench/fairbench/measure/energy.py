"""GPU energy over a measured interval, from NVML: each GPU's energy counter, else its integrated power.

A background thread does every NVML call of a window, so the sweep's event loop makes none while a point
runs. ``start()`` returns once the thread has taken the window's first reading; ``stop()`` wakes it, lets
it take the last one, and joins it. Per GPU, the thread reads:

- at the start and at the stop, ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta
  and newer) where the GPU has that counter, and a power sample;
- in between, every 1/hz seconds, ``nvmlDeviceGetPowerUsage`` (mW), stamped with ``perf_counter_ns`` (the
  clock the sweep's ``duration_s`` is measured on), and with each power sample the GPU's clocks, clock-event
  reasons and temperature (``gpu_state.read_state``; :meth:`EnergySampler.states` after the window).

Per GPU, with its samples (t_i, P_i) from the first (t_0) to the last (t_n):

- energy_j = (counter at stop - counter at start) / 1000 where the GPU has the counter (source
  ``counter``), else :func:`trapezoid_j` of the samples (source ``power-integral``);
- duration_s = the window of that source: between the two counter readings (each stamped as it is read),
  else t_n - t_0; mean_power_w = energy_j / duration_s (``metrics.mean_power_w``). The counter readings
  bracket the power samples, and on a busy machine the thread can be held between them for milliseconds:
  dividing by the samples' window would overstate a short point's power by that share;
- sampled_s = t_n - t_0; sampled_mean_power_w = mean of the P_i; sample_hz = n / sampled_s, the rate
  achieved.

The counter is preferred: NVML documents that on recent GPUs a power reading is itself an average over up
to a second, so an integral of readings lags every change of load by a fraction of a second.

pynvml comes from the nvidia-ml-py package (fairbench's ``gpu`` extra) and is optional: without the module,
without a driver (``nvmlInit`` fails) or without a GPU, :meth:`EnergySampler.open` raises
:class:`EnergyUnavailable` and a sweep writes no energy fields at all.
"""

from __future__ import annotations

import importlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter_ns
from types import TracebackType
from typing import Any

from fairbench.measure.gpu_state import GpuState, StateSample, gpu_state, read_state
from fairbench.measure.metrics import energy_metrics, mean_power_w

DEFAULT_HZ = 20.0
MIN_HZ = 10.0
"""Slower sampling misses the short load changes of a point (one decode step is milliseconds)."""
COUNTER = "counter"
POWER_INTEGRAL = "power-integral"
NS_PER_S = 1_000_000_000


class EnergyUnavailable(Exception):
    """No energy can be measured: no pynvml, no driver, no GPU, or a reading failed. Not an error of the
    benchmark: its points are written without energy fields."""


class GpuSelectionError(ValueError):
    """The GPUs asked for do not exist: the message names them and the GPUs NVML sees."""


@dataclass(frozen=True)
class GpuEnergy:
    """One GPU over one window."""

    index: int
    """NVML's index (as nvidia-smi numbers the GPUs)."""
    energy_j: float
    source: str
    """``counter`` or ``power-integral``: where energy_j comes from."""
    duration_s: float
    """The window energy_j covers: between the counter readings, else the samples' (``sampled_s``)."""
    sampled_s: float
    """From the first power sample to the last."""
    integral_j: float
    """:func:`trapezoid_j` of the power samples, whatever the source: a cross-check of the counter."""
    sampled_mean_power_w: float
    samples: int
    sample_hz: float

    @property
    def mean_power_w(self) -> float:
        return mean_power_w(self.energy_j, self.duration_s)


def trapezoid_j(times_ns: Sequence[int], watts: Sequence[float]) -> float:
    """Energy in joules of power samples: sum over i >= 1 of (P_i + P_(i-1)) / 2 * (t_i - t_(i-1)),
    with t in nanoseconds converted to seconds; 0.0 for fewer than two samples."""
    return math.fsum(
        (watts[i] + watts[i - 1]) / 2 * (times_ns[i] - times_ns[i - 1]) / NS_PER_S
        for i in range(1, len(times_ns))
    )


def point_fields(gpus: Sequence[GpuEnergy], total_output_tokens: int) -> dict[str, object]:
    """The energy fields of a point (see ``metrics.energy_metrics``), plus how they were measured:
    gpu_energy_source (``counter``, ``power-integral``, or ``mixed`` when the GPUs differ) and
    gpu_power_sample_hz (the slowest GPU's achieved rate)."""
    fields = energy_metrics(total_output_tokens, {gpu.index: (gpu.energy_j, gpu.duration_s) for gpu in gpus})
    if fields:
        sources = {gpu.source for gpu in gpus}
        fields["gpu_energy_source"] = sources.pop() if len(sources) == 1 else "mixed"
        fields["gpu_power_sample_hz"] = min(gpu.sample_hz for gpu in gpus)
    return fields


def load_nvml() -> Any:
    """The pynvml module; EnergyUnavailable without it."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise EnergyUnavailable("pynvml is not installed (pip install nvidia-ml-py)") from exc


class EnergySampler:
    """Samples a set of GPUs over windows (``start()`` ... ``stop()``); NVML stays initialised from
    :meth:`open` to :meth:`close` (or the end of a ``with`` block)."""

    def __init__(self, nvml: Any, gpus: Sequence[int], hz: float = DEFAULT_HZ) -> None:
        """``nvml``: pynvml, or a stand-in, already initialised (use :meth:`open`)."""
        if not hz >= MIN_HZ:
            raise ValueError(f"power sample rate {hz:g} Hz is below the minimum of {MIN_HZ:g} Hz")
        self.gpus = tuple(gpus)
        self.hz = hz
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in self.gpus]
        self._has_counter = [self._counter_supported(handle) for handle in self._handles]
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._first_taken = threading.Event()
        self._samples: list[list[tuple[int, int]]] = []
        self._states: list[list[StateSample]] = []
        self._counters: list[list[tuple[int, int]]] = []
        self._error: Exception | None = None
        self._closed = False

    @classmethod
    def open(
        cls, gpus: Sequence[int] | None = None, *, hz: float = DEFAULT_HZ, nvml: Any = None
    ) -> EnergySampler:
        """Initialise NVML and choose the GPUs: ``gpus`` by NVML index, or every GPU NVML sees.

        Raises EnergyUnavailable (no pynvml, NVML fails to start, no GPU) and GpuSelectionError.
        """
        nvml = load_nvml() if nvml is None else nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise EnergyUnavailable(f"NVML did not start: {exc}") from exc
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count == 0:
                raise EnergyUnavailable("NVML sees no GPU")
            chosen = list(range(count)) if gpus is None else list(dict.fromkeys(gpus))
            unknown = [index for index in chosen if not 0 <= index < count]
            if unknown or not chosen:
                raise GpuSelectionError(
                    f"GPU index(es) {','.join(map(str, unknown)) or '(none)'} not found: "
                    f"NVML sees {count} GPU(s), 0-{count - 1}"
                )
            return cls(nvml, chosen, hz)
        except nvml.NVMLError as exc:
            nvml.nvmlShutdown()
            raise EnergyUnavailable(f"NVML failed: {exc}") from exc
        except BaseException:
            nvml.nvmlShutdown()
            raise

    def _counter_supported(self, handle: Any) -> bool:
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except self._nvml.NVMLError_NotSupported:
            return False
        return True

    # --- a window ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Open a window: returns once the sampling thread has taken its first reading."""
        if self._thread is not None:
            raise RuntimeError("the energy sampler is already running")
        self._stopping.clear()
        self._first_taken.clear()
        self._samples = [[] for _ in self.gpus]
        self._states = [[] for _ in self.gpus]
        self._counters = [[] for _ in self.gpus]
        self._error = None
        self._thread = threading.Thread(target=self._sample, name="fairbench-energy", daemon=True)
        self._thread.start()
        self._first_taken.wait()

    def stop(self) -> list[GpuEnergy]:
        """Close the window (one last reading) and return each GPU's energy; EnergyUnavailable when an
        NVML reading failed during it."""
        thread = self._thread
        if thread is None:
            raise RuntimeError("the energy sampler was not started")
        self._stopping.set()
        thread.join()
        self._thread = None
        if self._error is not None:
            raise EnergyUnavailable(f"an NVML reading failed: {self._error}") from self._error
        return [self._gpu_energy(slot) for slot in range(len(self.gpus))]

    def states(self) -> list[GpuState]:
        """Each GPU's state over the last window (``gpu_state.gpu_state``), those that read anything."""
        found = (gpu_state(index, samples) for index, samples in zip(self.gpus, self._states, strict=True))
        return [state for state in found if state is not None]

    def _sample(self) -> None:
        """The thread: counters and power at the start, power every period, power and counters at the stop."""
        period_ns = round(NS_PER_S / self.hz)
        try:
            self._read_counters()
            self._read_power()
            self._first_taken.set()
            due_ns = perf_counter_ns() + period_ns
            while not self._stopping.wait(max(0, due_ns - perf_counter_ns()) / NS_PER_S):
                self._read_power()
                # After a stall (a busy machine), continue from now rather than catch up in a burst.
                due_ns = max(due_ns + period_ns, perf_counter_ns())
            self._read_power()
            self._read_counters()
        except Exception as exc:  # pynvml raises its own NVMLError subclasses; any failure voids the window
            self._error = exc
        finally:
            self._first_taken.set()

    def _read_counters(self) -> None:
        for slot, handle in enumerate(self._handles):
            if self._has_counter[slot]:
                millijoules = int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
                self._counters[slot].append((perf_counter_ns(), millijoules))

    def _read_power(self) -> None:
        for slot, handle in enumerate(self._handles):
            milliwatts = int(self._nvml.nvmlDeviceGetPowerUsage(handle))
            self._samples[slot].append((perf_counter_ns(), milliwatts))
            self._states[slot].append(read_state(self._nvml, handle))

    def _gpu_energy(self, slot: int) -> GpuEnergy:
        times_ns = [time_ns for time_ns, _ in self._samples[slot]]
        watts = [milliwatts / 1000 for _, milliwatts in self._samples[slot]]
        sampled_s = (times_ns[-1] - times_ns[0]) / NS_PER_S
        if not sampled_s > 0:
            raise EnergyUnavailable("the window was too short to measure (its clock did not advance)")
        integral_j = trapezoid_j(times_ns, watts)
        counters = self._counters[slot]
        # A counter that went backwards was reset (driver reload): the integral is all there is.
        if len(counters) == 2 and counters[1][1] >= counters[0][1]:
            energy_j, source = (counters[1][1] - counters[0][1]) / 1000, COUNTER
            duration_s = (counters[1][0] - counters[0][0]) / NS_PER_S
        else:
            energy_j, source, duration_s = integral_j, POWER_INTEGRAL, sampled_s
        return GpuEnergy(
            index=self.gpus[slot],
            energy_j=energy_j,
            source=source,
            duration_s=duration_s,
            sampled_s=sampled_s,
            integral_j=integral_j,
            sampled_mean_power_w=math.fsum(watts) / len(watts),
            samples=len(watts),
            sample_hz=(len(watts) - 1) / sampled_s,
        )

    # --- NVML's lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop a window still open and shut NVML down; a second call does nothing."""
        if self._closed:
            return
        if self._thread is not None:
            self._stopping.set()
            self._thread.join()
            self._thread = None
        self._closed = True
        self._nvml.nvmlShutdown()

    def __enter__(self) -> EnergySampler:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


@contextmanager
def optional_sampler(
    gpus: Sequence[int] | None, note: Callable[[str], None], *, enabled: bool = True
) -> Iterator[EnergySampler | None]:
    """A sampler of ``gpus`` (None: all) for the block, or None (with a note saying why) where energy
    cannot be measured or ``enabled`` is false. GpuSelectionError passes: GPUs named that do not exist
    are a mistake to fix, not a machine without GPUs."""
    if not enabled:
        yield None
        return
    try:
        sampler = EnergySampler.open(gpus)
    except EnergyUnavailable as exc:
        note(f"GPU energy not measured: {exc}")
        yield None
        return
    note(f"GPU energy: sampling GPU(s) {','.join(map(str, sampler.gpus))} at {sampler.hz:g} Hz")
    with sampler:
        yield sampler
