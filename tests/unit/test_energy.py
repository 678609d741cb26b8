"""GPU energy (fairbench.measure.energy) against a simulated NVML: counters, integrated power, absence."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import MakeNvml

from fairbench.measure.energy import (
    COUNTER,
    MIN_HZ,
    POWER_INTEGRAL,
    EnergySampler,
    EnergyUnavailable,
    GpuEnergy,
    GpuSelectionError,
    optional_sampler,
    point_fields,
    trapezoid_j,
)
from fairbench.measure.metrics import energy_metrics, mean_power_w, output_tokens_per_joule
from fairbench.report.document import headline_table, level_table
from fairbench.report.summary import headline
from fairbench.report.tree import ConfigResult

NS = 1_000_000_000


def measure(sampler: EnergySampler, seconds: float) -> list[GpuEnergy]:
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


# --- the formulas ---------------------------------------------------------------------------------------


def test_trapezoid_integrates_a_ramp_exactly() -> None:
    # P(t) = 100 + 50 t W, sampled unevenly over 2 s: the integral is 100*2 + 25*4 = 300 J.
    times_s = [0.0, 0.3, 0.35, 1.0, 1.7, 2.0]
    energy = trapezoid_j([round(t * NS) for t in times_s], [100 + 50 * t for t in times_s])
    assert energy == pytest.approx(300.0, rel=1e-12)
    assert trapezoid_j([5], [300.0]) == 0.0


def test_energy_metrics_sum_the_gpus() -> None:
    figures = energy_metrics(6000, {1: (400.0, 2.0), 0: (200.0, 2.0)})
    assert figures == {
        "gpu_energy_j": 600.0,
        "gpu_energy_per_gpu_j": {"0": 200.0, "1": 400.0},
        "gpu_mean_power_w": 300.0,
        "output_tokens_per_j": 10.0,
    }
    assert list(figures["gpu_energy_per_gpu_j"]) == ["0", "1"]  # type: ignore[call-overload]
    assert energy_metrics(6000, {}) == {}
    assert mean_power_w(50.0, 0.5) == 100.0
    assert output_tokens_per_joule(30, 4.0) == 7.5
    with pytest.raises(ValueError, match="duration_s must be positive"):
        mean_power_w(1.0, 0.0)
    with pytest.raises(ValueError, match="energy_j must be positive"):
        output_tokens_per_joule(1, 0.0)


def test_point_fields_name_the_source_and_the_slowest_rate() -> None:
    def gpu(index: int, source: str, hz: float) -> GpuEnergy:
        return GpuEnergy(index, 100.0, source, 1.0, 1.0, 100.0, 100.0, 21, hz)

    fields = point_fields([gpu(0, COUNTER, 20.0), gpu(1, COUNTER, 18.5)], 500)
    assert fields["gpu_energy_source"] == COUNTER
    assert fields["gpu_power_sample_hz"] == 18.5
    assert fields["output_tokens_per_j"] == 2.5
    assert point_fields([gpu(0, COUNTER, 20.0), gpu(1, POWER_INTEGRAL, 20.0)], 1)["gpu_energy_source"] == (
        "mixed"
    )
    assert point_fields([], 500) == {}


# --- the sampler ----------------------------------------------------------------------------------------


def test_counter_where_the_gpu_has_one_else_integrated_power(fake_nvml: MakeNvml) -> None:
    # GPU 0's counter runs at 250 W while its power readings say 300 W: energy_j shows which was used.
    nvml = fake_nvml(gpus=[{"watts": 300.0, "counter_watts": 250.0}, {"watts": 120.0, "counter": False}])
    with EnergySampler.open(nvml=nvml, hz=50) as sampler:
        first, second = measure(sampler, 0.4)
    assert (first.index, first.source, second.index, second.source) == (0, COUNTER, 1, POWER_INTEGRAL)
    for gpu in (first, second):
        assert 0.4 <= gpu.duration_s < 0.6
    # The counter's energy between its two readings (the fake rounds each to 1 mJ), whatever the samples'
    # clock says: on a loaded machine the thread can be late between the two by milliseconds.
    # (The first reading, at open, only asked whether the GPU has the counter.)
    started_ns, stopped_ns = nvml.STATE.gpus[0].counter_reads_ns[1:]
    assert first.energy_j == pytest.approx(250.0 * (stopped_ns - started_ns) / 1e9, abs=2e-3)
    assert first.mean_power_w == first.energy_j / first.duration_s
    assert abs(first.duration_s - (stopped_ns - started_ns) / 1e9) < 0.05
    assert first.integral_j == pytest.approx(300.0 * first.sampled_s, rel=1e-9)
    # The counter's window brackets the samples': its energy over its own window is the counter's power.
    assert first.sampled_s <= first.duration_s and first.mean_power_w == pytest.approx(250.0, rel=1e-3)
    assert first.sampled_mean_power_w == pytest.approx(300.0)
    assert second.energy_j == second.integral_j == pytest.approx(120.0 * second.duration_s, rel=1e-9)
    assert second.duration_s == second.sampled_s  # no counter: the samples' window
    assert second.mean_power_w == pytest.approx(120.0)
    assert nvml.STATE.initialised == 0  # the with block shut NVML down


def test_samples_at_the_requested_rate_and_never_below_the_minimum(fake_nvml: MakeNvml) -> None:
    with EnergySampler.open(nvml=fake_nvml(gpus=[{"watts": 100.0}])) as sampler:
        (gpu,) = measure(sampler, 1.0)
    # 20 Hz by default. Over a window of D s the sampler reads at the start, every 50 ms after it on a
    # grid that a late wake-up does not shift, and at the stop: D * 20 intervals, one more or one less
    # by where the stop falls in a period, so the rate is 20 +- 1/D Hz. Only a wake-up late by a whole
    # period loses a sample; in 80 windows (20 each: idle, running the unit tests, both cores busy,
    # both at once) the latest was 22 ms late, and the rates 19.86-20.996 Hz.
    assert abs(gpu.sample_hz - 20) <= 1 / gpu.sampled_s
    assert gpu.samples == pytest.approx(gpu.sample_hz * gpu.sampled_s + 1)
    with pytest.raises(ValueError, match=r"5 Hz is below the minimum of 10 Hz"):
        EnergySampler.open(nvml=fake_nvml(gpus=[{"watts": 100.0}]), hz=5)
    EnergySampler.open(nvml=fake_nvml(gpus=[{"watts": 100.0}]), hz=MIN_HZ).close()  # the minimum itself


def test_windows_repeat_and_nvml_is_read_only_by_the_sampling_thread(fake_nvml: MakeNvml) -> None:
    nvml = fake_nvml(gpus=[{"watts": 100.0}, {"watts": 200.0}])
    with EnergySampler.open(nvml=nvml, hz=10) as sampler:
        nvml.STATE.calls.clear()
        short = measure(sampler, 0.05)
        started = time.perf_counter()
        sampler.start()
        assert nvml.STATE.calls, "start() returned before the window's first reading"
        long_window = sampler.stop()
        stopped_in_s = time.perf_counter() - started
    assert [gpu.index for gpu in short] == [gpu.index for gpu in long_window] == [0, 1]
    assert threading.get_ident() not in {thread for _, thread in nvml.STATE.calls}
    # stop() wakes the thread at once instead of waiting out the 100 ms period.
    assert stopped_in_s < 0.08


def test_chosen_gpus_only(fake_nvml: MakeNvml) -> None:
    nvml = fake_nvml(gpus=[{"watts": 100.0}, {"watts": 200.0}, {"watts": 300.0}])
    with EnergySampler.open([2, 0], nvml=nvml) as sampler:
        gpus = measure(sampler, 0.1)
    assert [(gpu.index, gpu.sampled_mean_power_w) for gpu in gpus] == [(2, 300.0), (0, 100.0)]
    with pytest.raises(GpuSelectionError, match=r"GPU index\(es\) 3,7 not found: NVML sees 3 GPU\(s\), 0-2"):
        EnergySampler.open([0, 3, 7], nvml=nvml)
    assert nvml.STATE.initialised == 0


def test_a_failed_reading_voids_the_window(fake_nvml: MakeNvml) -> None:
    nvml = fake_nvml(gpus=[{"watts": 100.0, "power_fails_after": 3}])
    with EnergySampler.open(nvml=nvml, hz=50) as sampler:
        sampler.start()
        time.sleep(0.2)
        with pytest.raises(EnergyUnavailable, match="an NVML reading failed: fake NVML error 15"):
            sampler.stop()


# --- no GPUs: no sampler, no fields ---------------------------------------------------------------------


def test_nvml_that_does_not_start_or_sees_no_gpu_gives_no_sampler(fake_nvml: MakeNvml) -> None:
    with pytest.raises(EnergyUnavailable, match="NVML did not start: fake NVML error 12"):
        EnergySampler.open(nvml=fake_nvml(gpus=[{"watts": 1.0}], init_error=True))
    no_gpu = fake_nvml(gpus=[])
    with pytest.raises(EnergyUnavailable, match="NVML sees no GPU"):
        EnergySampler.open(nvml=no_gpu)
    assert no_gpu.STATE.initialised == 0


def test_without_pynvml_the_sweep_gets_no_sampler_and_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    notes: list[str] = []
    with optional_sampler(None, notes.append) as sampler:
        assert sampler is None
    assert notes == ["GPU energy not measured: pynvml is not installed (pip install nvidia-ml-py)"]


def test_optional_sampler_opens_the_real_module_name_and_closes_it(
    fake_nvml: MakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml = fake_nvml(gpus=[{"watts": 100.0}, {"watts": 100.0}])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    notes: list[str] = []
    with optional_sampler([1], notes.append) as sampler:
        assert sampler is not None and sampler.gpus == (1,)
        assert nvml.STATE.initialised == 1
    assert nvml.STATE.initialised == 0
    assert notes == ["GPU energy: sampling GPU(s) 1 at 20 Hz"]
    with optional_sampler(None, notes.append, enabled=False) as disabled:
        assert disabled is None
    assert nvml.STATE.initialised == 0 and len(notes) == 1
    with pytest.raises(GpuSelectionError), optional_sampler([4], notes.append):
        pass


# --- the report -----------------------------------------------------------------------------------------


def config_result(name: str, points: list[dict[str, Any]]) -> ConfigResult:
    return ConfigResult(
        host="gpu1",
        name=name,
        path=Path(name),
        status={"status": "ok"},
        points=points,
        server_info=None,
        host_info=None,
        environment=None,
        sweep_settings=None,
        journal_excerpt=[],
    )


def test_the_report_shows_energy_columns_only_for_points_that_have_them() -> None:
    measured = [
        {"max_concurrency": level, "repeat": 0, "output_throughput": tokens / 10}
        | energy_metrics(tokens, {0: (joules, 10.0)})
        for level, tokens, joules in ((1, 1000, 2000.0), (8, 6000, 4000.0))
    ]
    unmeasured = [{"max_concurrency": 1, "repeat": 0, "output_throughput": 50.0}]
    with_energy, without = headline(config_result("a", measured)), headline(config_result("b", unmeasured))

    table = level_table(with_energy)
    assert table.header[-3:] == ["GPU energy J", "GPU mean W", "out tok/J"]
    assert [row[-3:] for row in table.rows] == [["2,000", "200", "0.50"], ["4,000", "400", "1.50"]]
    assert not {"GPU energy J", "out tok/J"} & set(level_table(without).header)

    both = headline_table([with_energy, without], lambda result: result.name)
    assert both.header[-1] == "out tok/J, peak"
    assert [row[-1] for row in both.rows] == ["1.50", "-"]  # a's peak is C=8
    assert "out tok/J, peak" not in headline_table([without], lambda result: result.name).header
