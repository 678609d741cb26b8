"""Does fairbench.measure.gpu_state read what the GPUs do? The schedule of tests/perf/energy_check.py (idle,
full load of bf16 matmuls, half duty, idle) on every GPU, with an EnergySampler (as a sweep uses it) opening
one window per phase; per GPU and phase it prints the state a point would record: samples, SM and memory
clocks (lowest, mean), the hottest temperature, the clock-event reasons with the share of samples each was
given in, the shares at the power limit and throttled, and whether ``gpu_at_power_limit`` would be observed
and ``gpu_throttled`` raised.

Besides, a thread reads every GPU through ``gpu_state.read_state`` at 10 Hz over the whole schedule; with
``--record FILE`` those readings, each phase's states and nvidia-smi's own view during the full load
(``-q -d PERFORMANCE,CLOCK,TEMPERATURE``) are written as JSON: the fixture tests/unit/test_gpu_state.py
reads (tests/fixtures/gpu/gpu-state-h100.json). It exits 1 when a phase got no sample or no SM clock under
load, 2 when it cannot run (no PyTorch, no CUDA device). It changes no setting of the GPUs. Takes ~25 s.

    pip install -e '.[gpu]'    # once, in a Python with PyTorch: fairbench reads its version from its install
    PYTHONPATH=$PWD python3 tests/gpu/gpu_state_check.py [--record FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA device i is NVML's GPU i

from tests.perf.energy_check import SCHEDULE, Start, load_gpu

from fairbench.measure.energy import EnergySampler, load_nvml
from fairbench.measure.gpu_state import GpuState, point_fields, read_state
from fairbench.measure.point_flags import gpu_flags, gpu_observations

READ_HZ = 10


def reader(sampler: EnergySampler, t0: float, stop: threading.Event, found: list[dict[str, Any]]) -> None:
    """Every GPU through read_state, at READ_HZ, stamped with the seconds since ``t0`` (NVML is started: the
    sampler's)."""
    nvml = load_nvml()
    handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in sampler.gpus]
    while not stop.wait(1 / READ_HZ):
        at = time.perf_counter() - t0
        for index, handle in zip(sampler.gpus, handles, strict=True):
            found.append({"t_s": round(at, 3), "gpu": index, **asdict(read_state(nvml, handle))})


def row(phase: str, state: GpuState) -> str:
    events = ", ".join(f"{name} {share:.0%}" for name, share in state.clock_events.items()) or "none"
    fields = point_fields([state])
    said = [found["flag"] for found in gpu_flags(fields)] + [
        found["observation"] for found in gpu_observations(fields)
    ]
    sm = f"SM {state.sm_clock_mhz_min} / {state.sm_clock_mhz_mean or 0:,.0f} MHz"
    mem = f"mem {state.mem_clock_mhz_min} / {state.mem_clock_mhz_mean or 0:,.0f} MHz"
    return (
        f"{phase:>9}  GPU {state.index}  {state.samples:>4} samples  {sm}  {mem}  "
        f"{state.temperature_c_max} °C  power limit {state.power_capped_share:.0%}  "
        f"throttled {state.throttled_share:.0%}{''.join(f'  ({name})' for name in said)}  events: {events}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, help="write the readings and states as JSON here")
    args = parser.parse_args()
    try:
        import torch  # noqa: PLC0415 - seconds to import: only once the arguments are known
    except ImportError:
        print("cannot check: PyTorch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("cannot check: no CUDA device", file=sys.stderr)
        return 2
    problems: list[str] = []
    phases: dict[str, list[dict[str, Any]]] = {}
    readings: list[dict[str, Any]] = []
    smi = ""
    with EnergySampler.open() as sampler:
        start = Start(threading.Barrier(len(sampler.gpus) + 1))
        threads = [threading.Thread(target=load_gpu, args=(torch, gpu, start)) for gpu in sampler.gpus]
        for thread in threads:
            thread.start()
        start.ready.wait()
        start.t0 = time.perf_counter()
        stop = threading.Event()
        read = threading.Thread(target=reader, args=(sampler, start.t0, stop, readings))
        read.start()
        start.go.set()
        end = start.t0
        for phase in SCHEDULE:
            end += phase.seconds
            sampler.start()
            if phase.duty == 1.0:
                time.sleep(phase.seconds / 2)
                command = ["nvidia-smi", "-q", "-d", "PERFORMANCE,CLOCK,TEMPERATURE"]
                smi = subprocess.run(command, capture_output=True, text=True, check=False).stdout
            time.sleep(max(0.0, end - time.perf_counter()))
            sampler.stop()
            states = sampler.states()
            phases[phase.name] = [state.to_json() for state in states]
            for state in states:
                print(row(phase.name, state))
            if len(states) < len(sampler.gpus):
                problems.append(f"{phase.name}: {len(sampler.gpus) - len(states)} GPU(s) gave no reading")
            if phase.duty == 1.0 and any(state.sm_clock_mhz_min is None for state in states):
                problems.append(f"{phase.name}: no SM clock under load")
        stop.set()
        read.join()
        for thread in threads:
            thread.join()
    problems += start.errors
    if args.record:
        recorded = {"gpus": torch.cuda.get_device_name(0), "phases": phases, "readings": readings, "smi": smi}
        args.record.write_text(json.dumps(recorded, indent=1) + "\n")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
