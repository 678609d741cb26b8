"""``fairbench sweep``'s options and the sweep modules' arguments give the same sweep for the same inputs.

Both build it with ``campaign.sweep.sweep_spec``; these tests hold the two ends to it: each case is written
once as ``fairbench sweep`` options and once as the modules' arguments (the campaign's workload, as
fairbench_campaign returns it), validated by Ansible's own argument-spec validator against the modules'
spec, and the two sweeps compared whole, with the settings sweep.json records, which a resume compares.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from fairbench.cli.main import OneLineErrorParser
from fairbench.cli.sweep import configure, spec_from_args
from fairbench.hosts.ansible_support import spec_from_arguments
from fairbench.measure.repeats import AutoRepeats
from fairbench.measure.sweep import SweepSpec
from fairbench.measure.workload import LevelCount

arg_spec = pytest.importorskip("ansible.module_utils.common.arg_spec")

REPO = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:30000"


def _sweep_argument_spec() -> dict[str, Any]:
    """The modules' SWEEP_ARGUMENT_SPEC, read from its file (module_utils import through the collection)."""
    path = REPO / "plugins/module_utils/fairbench_sweep_options.py"
    loaded = importlib.util.spec_from_file_location("fairbench_sweep_options", path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    spec: dict[str, Any] = module.SWEEP_ARGUMENT_SPEC
    return spec


def from_cli(*options: str) -> SweepSpec:
    parser = OneLineErrorParser(prog="fairbench sweep")
    configure(parser)
    return spec_from_args(parser.parse_args(["--url", URL, "--out", "out", *options]))


def from_module(workload: dict[str, Any], **arguments: Any) -> SweepSpec:
    validated = arg_spec.ArgumentSpecValidator(_sweep_argument_spec()).validate(
        {"url": URL, "out": "out", "workload": workload, **arguments}
    )
    assert not validated.error_messages, validated.error_messages
    return spec_from_arguments(validated.validated_parameters)


def assert_same(cli: SweepSpec, module: SweepSpec) -> None:
    assert cli == module
    assert cli.settings(None, None) == module.settings(None, None)


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # --api-key's default is this variable; the modules take none.
    monkeypatch.delenv("FAIRBENCH_API_KEY", raising=False)


def test_the_defaults_are_the_same_sweep() -> None:
    # The campaign requires api, dataset and the request counts; repeats, seed and the rest default.
    workload = {
        "api": "completions",
        "dataset": "random-ids",
        "input_len": 16,
        "output_len": 8,
        "concurrency": [1, 4],
        "prompts_per_level": "10x",
        "warmup": "2x",
    }
    cli = from_cli("--input-len", "16", "--output-len", "8", "--concurrency", "1,4")
    assert_same(cli, from_module(workload))
    # The defaults themselves, as typed values: no text is parsed back on either path.
    assert (cli.prompts_per_level, cli.warmup) == (LevelCount(10, True), LevelCount(2, True))
    assert (cli.repeats, cli.workload.seed, cli.max_error_rate) == (1, 1, 0.5)
    assert (cli.extend_repeats, cli.only_repeats, cli.energy, cli.server_metrics) == (True, None, True, True)
    settings = cli.settings(None, None)
    assert (settings["prompts_per_level"], settings["warmup"]) == ("10x", "2x")


def test_a_closed_loop_with_every_setting_given_is_the_same_sweep(tmp_path: Path) -> None:
    dataset = tmp_path / "conversations.json"
    dataset.write_text('[{"conversations": [{"value": "hello"}, {"value": "hi"}]}]')
    cli = from_cli(
        *("--api", "chat", "--dataset", str(dataset), "--input-len", "64", "--output-len", "32"),
        *("--concurrency", "2,8,32", "--prompts-per-level", "3x", "--warmup", "5"),
        *("--repeats", "auto:2:6:5", "--seed", "7", "--vocab-size", "1000"),
        *("--slo", "ttft_p99_ms=2000", "--slo", "tpot_p50_ms=50", "--search-resolution", "4"),
        *("--model", "m", "--gpus", "8", "--energy-gpus", "0,2", "--client-processes", "3"),
        *("--campaign", "demo", "--run-id", "r1", "--host", "lab1", "--config", "tp8"),
    )
    module = from_module(
        {
            "api": "chat",
            "dataset": str(dataset),
            "input_len": 64,
            "output_len": 32,
            "concurrency": [2, 8, 32],
            "prompts_per_level": "3x",
            "warmup": 5,
            "repeats": {"min": 2, "max": 6, "half_width_pct": 5},
            "seed": 7,
            "vocab_size": 1000,
            "search_resolution": 4,
        },
        slo={"ttft_p99_ms": 2000, "tpot_p50_ms": 50},
        model="m",
        gpus=8,
        # As the bench role passes it: a config's CUDA_VISIBLE_DEVICES.
        energy_gpus="0,2",
        client_processes=3,
        identity={"campaign": "demo", "run_id": "r1", "host": "lab1", "config": "tp8"},
    )
    assert_same(cli, module)
    assert cli.repeats == AutoRepeats(2, 6, 5.0) and cli.workload.as_text
    assert cli.warmup == LevelCount(5, False) and cli.settings(None, None)["warmup"] == "5"


def test_an_open_loop_is_the_same_sweep() -> None:
    cli = from_cli(
        *("--input-len", "128", "--output-len", "16", "--request-rate", "0.5,2", "--max-concurrency", "64"),
        *("--arrival", "gamma", "--burstiness", "0.5", "--prompts-per-level", "20x", "--warmup", "0"),
    )
    module = from_module(
        {
            "api": "completions",
            "dataset": "random-ids",
            "input_len": 128,
            "output_len": 16,
            "request_rate": [0.5, 2],
            "arrival": "gamma",
            "burstiness": 0.5,
            "max_concurrency": 64,
            "prompts_per_level": "20x",
            "warmup": 0,
        }
    )
    assert_same(cli, module)
    assert cli.open_loop and cli.levels() == [0.5, 2.0]


def test_a_jobs_share_of_the_repeats_is_no_setting() -> None:
    workload = {
        "api": "generate",
        "dataset": "random-ids",
        "input_len": 16,
        "output_len": 8,
        "concurrency": [1],
        "prompts_per_level": 16,
        "warmup": 0,
        "repeats": 3,
    }
    whole = from_module(workload)
    assert_same(
        from_cli(
            *("--api", "generate", "--input-len", "16", "--output-len", "8", "--concurrency", "1"),
            *("--prompts-per-level", "16", "--warmup", "0", "--repeats", "3"),
        ),
        whole,
    )
    job = from_module(workload, repeats=[1], extend_repeats=False)
    assert (job.only_repeats, job.extend_repeats) == ([1], False)
    # The jobs of one config, each measuring its own repeats, write one directory.
    assert job.settings(None, None) == whole.settings(None, None)
