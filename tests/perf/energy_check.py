"""Does fairbench.measure.energy count the joules the GPUs draw? A real load on every GPU, counted three ways.

Every GPU runs the same schedule at once: idle 2 s, full load 10 s (8192x8192 bf16 matmuls back to back),
half duty 5 s (250 ms of matmuls, 250 ms idle), idle 2 s. The schedule starts and ends idle so that a
power reading that is itself a moving average (NVML documents up to 1 s on recent GPUs) lags in and out
of the load alike. An EnergySampler (fairbench.measure.energy, as a sweep uses it) runs over the schedule;
per GPU the check prints:

  counter J    nvmlDeviceGetTotalEnergyConsumption, end - start (a sweep's energy where the GPU has it)
  integral J   trapezoid over the sampler's nvmlDeviceGetPowerUsage samples (power x time)
  smi J        nvidia-smi's power.draw, polled at 10 Hz by its own process: mean W x the window

with the ratios to the counter (integral J alone where a GPU has no counter), mean power, samples and
the rate achieved, then each phase's mean nvidia-smi power (proof the load was real). It exits 1 when a
ratio is off by more than 5 %, the rate is below 10 Hz, or a GPU's full load draws less than 1.2 x
its idle; 0 when every GPU agrees; 2 when it cannot check (no PyTorch, no CUDA device, the load did not
start). It also prints the sampler's own CPU use. Takes ~30-40 s.

    pip install -e '.[gpu]'    # once, in a Python with PyTorch: fairbench reads its version from its install
    python3 tests/perf/energy_check.py [--hz 20] [--tolerance 0.05]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

# NVML numbers GPUs by PCI bus id; CUDA must too, so that CUDA device i is NVML's GPU i.
os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"

from fairbench.measure.energy import COUNTER, MIN_HZ, EnergySampler, GpuEnergy

MATRIX = 8192
BATCH = 8
"""Matmuls between synchronisations: ~10-20 ms of work on an H200, so a phase ends on time."""
DUTY_PERIOD_S = 0.5
SMI_INTERVAL_MS = 100


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    duty: float
    """Share of the time spent in matmuls: 0 idle, 1 full load."""


SCHEDULE = (Phase("idle", 2, 0.0), Phase("full", 10, 1.0), Phase("half", 5, 0.5), Phase("idle-end", 2, 0.0))


# --- the load --------------------------------------------------------------------------------------------


@dataclass
class Start:
    """The load threads start together: each waits at ``ready``, then for ``go``, then runs from ``t0``."""

    ready: threading.Barrier
    go: threading.Event = field(default_factory=threading.Event)
    t0: float = 0.0
    errors: list[str] = field(default_factory=list)


def load_gpu(torch: Any, device: int, start: Start) -> None:
    try:
        _run_schedule(torch, device, start)
    except Exception as exc:  # a GPU that cannot run the load (out of memory, ...) ends the check
        start.errors.append(f"GPU {device}: {type(exc).__name__}: {exc}")
        start.ready.abort()


def _run_schedule(torch: Any, device: int, start: Start) -> None:
    """SCHEDULE on one GPU, from the instant ``start.t0`` the main thread sets before ``go``."""
    torch.cuda.set_device(device)
    a = torch.randn(MATRIX, MATRIX, device=device, dtype=torch.bfloat16)
    b = torch.randn(MATRIX, MATRIX, device=device, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    torch.mm(a, b, out=c)  # cuBLAS picks its kernel now, not inside the schedule
    torch.cuda.synchronize(device)
    start.ready.wait()
    start.go.wait()
    end = start.t0
    for phase in SCHEDULE:
        begin, end = end, end + phase.seconds
        while (now := time.perf_counter()) < end:
            cycle_start = begin + (now - begin) // DUTY_PERIOD_S * DUTY_PERIOD_S
            busy_until = min(end, cycle_start + phase.duty * DUTY_PERIOD_S)
            if now < busy_until:
                for _ in range(BATCH):
                    torch.mm(a, b, out=c)
                torch.cuda.synchronize(device)
            else:
                time.sleep(min(end, cycle_start + DUTY_PERIOD_S) - now)


# --- nvidia-smi, polled by its own process -----------------------------------------------------------------


@dataclass
class SmiPoller:
    """``nvidia-smi --query-gpu=index,power.draw -lms 100``: (perf_counter_ns, W) per GPU index."""

    samples: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    process: subprocess.Popen[str] | None = None
    problem: str = ""

    def start(self) -> None:
        command = [
            "nvidia-smi",
            "--query-gpu=index,power.draw",
            "--format=csv,noheader,nounits",
            "-lms",
            str(SMI_INTERVAL_MS),
        ]
        try:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, bufsize=1)
        except OSError as exc:
            self.problem = f"nvidia-smi did not start: {exc}"
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            stamp = time.perf_counter_ns()
            index, _, watts = line.partition(",")
            try:
                self.samples.setdefault(int(index), []).append((stamp, float(watts)))
            except ValueError:  # "[N/A]" where a GPU does not report its power
                self.problem = f"nvidia-smi printed {line.strip()!r}"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=5)

    def between(self, index: int, start_ns: int, end_ns: int) -> list[float]:
        return [watts for stamp, watts in self.samples.get(index, []) if start_ns <= stamp <= end_ns]


# --- the verdict -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    row: list[str]
    problems: list[str]


def judge(gpu: GpuEnergy, smi_watts: Sequence[float], tolerance: float) -> Verdict:
    """One GPU's row of the table and what is wrong with it."""
    problems = []
    reference = gpu.energy_j
    has_counter = gpu.source == COUNTER
    integral_ratio = gpu.integral_j / reference if has_counter else None
    smi_j = fmean(smi_watts) * gpu.duration_s if smi_watts else None
    smi_ratio = smi_j / reference if smi_j is not None else None
    for name, ratio in (("integral/counter", integral_ratio), (f"smi/{gpu.source}", smi_ratio)):
        if ratio is not None and abs(ratio - 1) > tolerance:
            problems.append(f"GPU {gpu.index}: {name} = {ratio:.3f}, off by more than {tolerance:.0%}")
    if gpu.sample_hz < MIN_HZ:
        problems.append(f"GPU {gpu.index}: sampled at {gpu.sample_hz:.1f} Hz, below {MIN_HZ:g} Hz")
    row = [
        str(gpu.index),
        f"{reference:,.1f}" if has_counter else "none",
        f"{gpu.integral_j:,.1f}",
        f"{integral_ratio:.4f}" if integral_ratio is not None else "-",
        f"{smi_j:,.1f}" if smi_j is not None else "-",
        f"{smi_ratio:.4f}" if smi_ratio is not None else "-",
        f"{gpu.mean_power_w:,.1f}",
        f"{gpu.sampled_mean_power_w:,.1f}",
        str(gpu.samples),
        f"{gpu.sample_hz:.1f}",
        "ok" if not problems else "FAIL",
    ]
    return Verdict(row, problems)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    )


def phase_table(smi: SmiPoller, indices: Sequence[int], t0_ns: int) -> tuple[str, list[str]]:
    """Mean nvidia-smi W per GPU and phase (the phase's first second left out: the readings average),
    and a problem for each GPU whose full load did not draw more than its idle."""
    rows, problems = [], []
    for index in indices:
        means, start_ns = {}, t0_ns
        for phase in SCHEDULE:
            end_ns = start_ns + round(phase.seconds * 1e9)
            watts = smi.between(index, start_ns + 1_000_000_000, end_ns)
            means[phase.name] = fmean(watts) if watts else None
            start_ns = end_ns
        rows.append([str(index), *(f"{w:,.1f}" if w is not None else "-" for w in means.values())])
        idle, full = means["idle"], means["full"]
        if idle is not None and full is not None and full <= idle * 1.2:
            problems.append(
                f"GPU {index}: full load drew {full:.0f} W against {idle:.0f} W idle: no real load"
            )
    return table(["GPU", *(f"{phase.name} W" for phase in SCHEDULE)], rows), problems


def sampler_cpu_share(sampler: EnergySampler, seconds: float = 1.0) -> float:
    """The sampler's CPU time over a window while nothing else in this process runs, per wall second:
    what it adds to a sweep's client_cpu_s."""
    cpu, wall = time.process_time(), time.perf_counter()
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


# --- main ------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hz", type=float, default=20.0, help="the sampler's rate (default 20)")
    parser.add_argument("--tolerance", type=float, default=0.05, help="largest relative error (default 0.05)")
    args = parser.parse_args(argv)
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        print("unset CUDA_VISIBLE_DEVICES: the check loads every GPU, numbered as NVML numbers them")
        return 2
    try:
        import torch  # noqa: PLC0415 - seconds to import: only once the arguments are known
    except ImportError:
        print("no PyTorch: the load runs on it (pip install torch, built for CUDA)")
        return 2

    count = torch.cuda.device_count()
    if count == 0:
        print("no CUDA device: nothing to check")
        return 2
    smi = SmiPoller()
    smi.start()
    try:
        with EnergySampler.open(hz=args.hz) as sampler:
            if len(sampler.gpus) != count:
                print(f"NVML sees {len(sampler.gpus)} GPUs, CUDA {count}: cannot pair them")
                return 2
            start = Start(threading.Barrier(count + 1))
            threads = [
                threading.Thread(target=load_gpu, args=(torch, device, start), daemon=True)
                for device in range(count)
            ]
            for thread in threads:
                thread.start()
            try:
                start.ready.wait(timeout=120)  # every GPU holds its matrices and has run one matmul
            except threading.BrokenBarrierError:
                print("the load did not start:", "; ".join(start.errors) or "timeout")
                return 2
            share = sampler_cpu_share(sampler)  # the load threads wait for go: the sampler runs alone
            print(f"sampler CPU: {share:.2%} of one core at {args.hz:g} Hz for {count} GPU(s)")
            print(f"{count} GPU(s); schedule: " + ", ".join(f"{p.name} {p.seconds:g} s" for p in SCHEDULE))
            window_start_ns = time.perf_counter_ns()
            sampler.start()
            start.t0 = time.perf_counter()
            t0_ns = time.perf_counter_ns()
            start.go.set()
            for thread in threads:
                thread.join()
            gpus = sampler.stop()
            window_end_ns = time.perf_counter_ns()
    finally:
        smi.stop()
    if start.errors:
        print("the load failed:", "; ".join(start.errors))
        return 2

    verdicts = [
        judge(gpu, smi.between(gpu.index, window_start_ns, window_end_ns), args.tolerance) for gpu in gpus
    ]
    header = [
        "GPU", "counter J", "integral J", "integral/counter", "smi J", "smi/energy",
        "mean W", "sampled W", "samples", "Hz", "verdict",
    ]  # fmt: skip
    print(f"\nEnergy over the {gpus[0].duration_s:.2f} s window (sampler at {args.hz:g} Hz):")
    print(table(header, [verdict.row for verdict in verdicts]))
    problems = [problem for verdict in verdicts for problem in verdict.problems]
    if smi.samples:
        phases, load_problems = phase_table(smi, [gpu.index for gpu in gpus], t0_ns)
        print("\nnvidia-smi power by phase (each phase's first second left out):")
        print(phases)
        problems += load_problems
    if smi.problem or not smi.samples:
        print(f"\nWARNING: no nvidia-smi cross-check: {smi.problem or 'it printed no power readings'}")
    print()
    for problem in problems:
        print(f"FAIL {problem}")
    print("FAIL" if problems else f"OK: every GPU within {args.tolerance:.0%}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
