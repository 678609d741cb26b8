"""fairbench.nccl.runner without GPUs: message sizes, variants, bandwidth math, nccl.json, its report."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fairbench.campaign.load import load_campaign
from fairbench.nccl.runner import (
    PREFILL_LIMIT_BYTES,
    CampaignInputs,
    MessageSize,
    NcclError,
    Runner,
    SweepSpec,
    Variant,
    add_variants,
    algorithm_bandwidth_gbps,
    assemble,
    bus_bandwidth_gbps,
    campaign_variants,
    hidden_size_from_config,
    message_sizes,
    parse_variant,
    timing,
    worker_environment,
    write_result,
)
from fairbench.report.build import write_report
from fairbench.report.load import load_run
from fairbench.report.nccl import BOTH_SCALES, size_text

REPO = Path(__file__).resolve().parents[2]
KIMI = REPO / "campaigns/kimi-k2.6-pcie.yml"


# --- sizes -----------------------------------------------------------------------------------------------


def test_decode_sizes_are_hidden_times_two_bytes_times_each_level() -> None:
    sizes = message_sizes(7168, [4, 1, 256, 4])
    decode = [size for size in sizes if size.scale == "decode"]
    assert [(size.bytes, size.tokens) for size in decode] == [(14336, 1), (57344, 4), (3670016, 256)]


def test_prefill_sizes_double_from_above_the_largest_batch_up_to_64_mib_inclusive() -> None:
    sizes = message_sizes(7168, [1, 256])
    prefill = [size for size in sizes if size.scale == "prefill"]
    assert [size.tokens for size in prefill] == [512, 1024, 2048, 4096, None]
    assert prefill[-1].bytes == PREFILL_LIMIT_BYTES == 64 * 2**20
    assert all(size.bytes == 7168 * 2 * size.tokens for size in prefill[:-1])
    assert [size.bytes for size in sizes] == sorted({size.bytes for size in sizes})


def test_a_hidden_size_dividing_64_mib_ends_on_a_token_count() -> None:
    sizes = message_sizes(4096, [1, 2])
    assert sizes[-1] == MessageSize(PREFILL_LIMIT_BYTES, "prefill", 8192)
    assert [size.tokens for size in sizes if size.scale == "prefill"] == [4, 8, 16, 32, 64, 128] + [
        2**power for power in range(8, 14)
    ]


def test_a_decode_size_past_the_cap_stays_decode() -> None:
    sizes = message_sizes(2**20, [64])  # 128 MiB per decode step
    assert [(size.bytes, size.scale) for size in sizes] == [
        (PREFILL_LIMIT_BYTES, "prefill"),
        (2**27, "decode"),
    ]


@pytest.mark.parametrize(("hidden", "levels"), [(0, [1]), (7168, []), (7168, [0, 1])])
def test_bad_sizes_inputs_are_errors(hidden: int, levels: list[int]) -> None:
    with pytest.raises(NcclError):
        message_sizes(hidden, levels)


# --- variants --------------------------------------------------------------------------------------------


def test_variants_from_the_kimi_campaign() -> None:
    inputs = CampaignInputs.from_json(load_campaign(KIMI).to_json(), str(KIMI))
    variants = campaign_variants(inputs.config_envs)
    assert [variant.name for variant in variants] == ["default", "tp8-nccl"]
    default, tuned = variants
    assert default.env == {} and "tp8" in default.configs and "tp8-nccl" not in default.configs
    assert tuned.configs == ("tp8-nccl",)
    assert tuned.env["NCCL_PROTO"] == "LL" and tuned.env["NCCL_BUFFSIZE"] == "16777216"
    assert inputs.concurrency == (1, 2, 4, 8, 16, 32, 64, 128, 256)


def test_configs_sharing_an_nccl_env_share_a_variant_and_other_variables_do_not_count() -> None:
    variants = campaign_variants(
        {
            "a": {"NCCL_PROTO": "LL", "HF_HOME": "/x"},
            "plain": {"HF_HOME": "/y"},
            "b": {"NCCL_PROTO": "LL"},
            "c": {"NCCL_PROTO": "Simple"},
        }
    )
    assert [(variant.name, variant.env, variant.configs) for variant in variants] == [
        ("default", {}, ("plain",)),
        ("a+b", {"NCCL_PROTO": "LL"}, ("a", "b")),
        ("c", {"NCCL_PROTO": "Simple"}, ("c",)),
    ]


def test_nvls_is_off_unless_the_variant_sets_it() -> None:
    assert Variant("default", {}).launch_env() == {"NCCL_NVLS_ENABLE": "0"}
    assert Variant("nvls", {"NCCL_NVLS_ENABLE": "1"}).launch_env() == {"NCCL_NVLS_ENABLE": "1"}


def test_worker_environment_drops_inherited_nccl_variables() -> None:
    env = worker_environment(
        Variant("v", {"NCCL_PROTO": "LL"}), {"PATH": "/bin", "NCCL_DEBUG": "INFO", "NCCL_PROTO": "Simple"}
    )
    assert env == {"PATH": "/bin", "NCCL_NVLS_ENABLE": "0", "NCCL_PROTO": "LL"}


def test_parse_variant() -> None:
    variant = parse_variant("p2p-off=NCCL_P2P_DISABLE=1,NCCL_ALGO=Ring")
    assert variant == Variant("p2p-off", {"NCCL_P2P_DISABLE": "1", "NCCL_ALGO": "Ring"})
    for bad in ("=NCCL_P2P_DISABLE=1", "x", "x=NCCL_P2P_DISABLE", "x=1BAD=2"):
        with pytest.raises(NcclError, match="--variant"):
            parse_variant(bad)
    with pytest.raises(NcclError, match="exists already"):
        add_variants([Variant("default", {})], [parse_variant("default=NCCL_PROTO=LL")])


def test_campaign_json_errors_name_the_key() -> None:
    with pytest.raises(NcclError, match=r"x.json: workload.concurrency"):
        CampaignInputs.from_json({"workload": {"concurrency": [0]}, "configs": {}}, "x.json")
    with pytest.raises(NcclError, match=r"x.json: configs.tp8.env"):
        CampaignInputs.from_json({"workload": {"concurrency": [1]}, "configs": {"tp8": {}}}, "x.json")
    with pytest.raises(NcclError, match=r"x.json: workloads.chat.concurrency"):
        CampaignInputs.from_json({"workloads": {"chat": {"concurrency": "8"}}, "configs": {}}, "x.json")


def test_the_decode_batches_of_several_workloads_are_those_of_each() -> None:
    workloads = {
        "random": {"concurrency": [1, 4, 16]},
        "replay": {"request_rate": [2.0], "max_concurrency": 32},
        "agentic": {"concurrency": [4, 8]},
    }
    inputs = CampaignInputs.from_json({"workloads": workloads, "configs": {}}, "x.json")
    assert inputs.concurrency == (1, 4, 8, 16, 32)


# --- hidden size -----------------------------------------------------------------------------------------


def _config(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_hidden_size_at_top_level_or_under_text_config(tmp_path: Path) -> None:
    assert hidden_size_from_config(_config(tmp_path, {"hidden_size": 4096})) == 4096
    kimi_k26 = {
        "model_type": "kimi_k25",
        "text_config": {"model_type": "kimi_k2", "hidden_size": 7168},
        "vision_config": {"hidden_size": 1152},
    }
    assert hidden_size_from_config(_config(tmp_path, kimi_k26)) == 7168


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"vision_config": {"hidden_size": 1}}, "no hidden_size"),
        ({"hidden_size": "7168"}, "hidden_size: '7168' is not a positive integer"),
        ({"text_config": {"hidden_size": 0}}, "text_config.hidden_size: 0"),
        ([], "not a JSON object"),
    ],
)
def test_hidden_size_errors_name_the_file_and_key(tmp_path: Path, data: Any, message: str) -> None:
    path = _config(tmp_path, data)
    with pytest.raises(NcclError, match=f"^{path}: .*") as caught:
        hidden_size_from_config(path)
    assert message in str(caught.value)


# --- bandwidth -------------------------------------------------------------------------------------------


def test_bus_bandwidth_is_algbw_times_2_n_minus_1_over_n() -> None:
    algbw = algorithm_bandwidth_gbps(64 * 10**6, 1000.0)  # 64 MB in 1 ms
    assert algbw == pytest.approx(64.0)
    assert bus_bandwidth_gbps(algbw, 2) == pytest.approx(64.0)
    assert bus_bandwidth_gbps(algbw, 8) == pytest.approx(112.0)


def test_timing_uses_the_median_for_bandwidth_and_reports_p10_p90() -> None:
    stats = timing([4.0, 1.0, 2.0, 3.0, 100.0], 2_000_000, 4)
    assert stats["median_us"] == 3.0
    assert stats["p10_us"] == pytest.approx(1.4)
    assert stats["p90_us"] == pytest.approx(61.6)  # 4 + (100 - 4) x 0.6
    assert stats["algbw_gbps"] == pytest.approx(2_000_000 / 3e-6 / 1e9)
    assert stats["busbw_gbps"] == pytest.approx(stats["algbw_gbps"] * 1.5)
    with pytest.raises(NcclError):
        timing([], 10, 2)


# --- nccl.json and the report ----------------------------------------------------------------------------


def _worker_document(sizes: list[MessageSize], us_per_byte: float, world: int) -> dict[str, Any]:
    """Rank 0's answer, as the worker protocol has it: per size, per-iteration microseconds."""
    return {
        "protocol": 1,
        "world_size": world,
        "device": "Test GPU",
        "torch": "2.9.1",
        "nccl": "2.28.9",
        "cuda": "13.0",
        "sizes": [
            {
                "bytes": size.bytes,
                "eager_us": [5 + size.bytes * us_per_byte] * 3,
                "graph_us": [3 + size.bytes * us_per_byte] * 3,
                "graph_error": None,
            }
            for size in sizes
        ],
    }


def _spec(variants: list[Variant]) -> SweepSpec:
    return SweepSpec(
        hidden_size=7168,
        sizes=tuple(message_sizes(7168, [1, 8])),
        variants=tuple(variants),
        gpus=2,
        campaign="kimi-k26-pcie",
    )


def test_assemble_turns_raw_times_into_statistics_per_variant_and_size() -> None:
    spec = _spec([Variant("default", {}, ("tp8",)), Variant("tp8-nccl", {"NCCL_PROTO": "LL"}, ("tp8-nccl",))])
    document = assemble(
        spec,
        {"default": _worker_document(list(spec.sizes), 0.001, 2)},
        {"tp8-nccl": "variant tp8-nccl: worker failed\n  rank 1 (exit 3):\n    NCCL WARN"},
    )
    assert (document["gpus"], document["nccl"], document["torch"]) == (2, "2.28.9", "2.9.1")
    default, failed = document["variants"]
    assert failed["error"].startswith("variant tp8-nccl") and failed["sizes"] == []
    assert failed["launch_env"] == {"NCCL_NVLS_ENABLE": "0", "NCCL_PROTO": "LL"}
    first = default["sizes"][0]
    assert (first["bytes"], first["scale"], first["tokens"]) == (14336, "decode", 1)
    assert first["eager"]["median_us"] == pytest.approx(5 + 14.336)
    assert first["graph"]["busbw_gbps"] == pytest.approx(14336 / ((3 + 14.336) * 1e-6) / 1e9)
    assert [size["bytes"] for size in default["sizes"]] == [size.bytes for size in spec.sizes]


def test_report_section_compares_each_variant_with_default_at_both_scales(tmp_path: Path) -> None:
    run_dir = tmp_path / "results" / "kimi-k26-pcie" / "run1"
    run_dir.mkdir(parents=True)
    (run_dir / "campaign.json").write_text(json.dumps(load_campaign(KIMI).to_json()))
    default = Variant("default", {}, ("tp8",))
    tuned = Variant("tp8-nccl", {"NCCL_PROTO": "LL"}, ("tp8-nccl",))
    spec = _spec([default, tuned])
    base = _worker_document(list(spec.sizes), 0.001, 2)
    # The tuned variant: 10 % faster at every decode size, 4x slower at every prefill size.
    slow = json.loads(json.dumps(base))
    for item, size in zip(slow["sizes"], spec.sizes, strict=True):
        factor = 0.9 if size.scale == "decode" else 4.0
        item["eager_us"] = [value * factor for value in item["eager_us"]]
        item["graph_us"] = [value * factor for value in item["graph_us"]]
    write_result(assemble(spec, {"default": base, "tp8-nccl": slow}, {}), run_dir / "gpu1")

    markdown = Path(write_report([load_run(run_dir, "random")], run_dir)[0]).read_text()
    section = markdown[markdown.index("## NCCL all-reduce on gpu1") :]
    assert BOTH_SCALES in section
    assert "[!WARNING]" in section
    assert (
        "**tp8-nccl** (eager): decode latency -10.0 %, prefill bus bandwidth -75.0 % against default"
        in section
    )
    summary_row = next(line for line in section.splitlines() if line.startswith("| **tp8-nccl**"))
    assert "| tp8-nccl |" in summary_row and "-10.0 % / -10.0 %" in summary_row
    assert "-75.0 % / -75.0 %" in summary_row
    assert "### Variant tp8-nccl" in section and "`NCCL_PROTO=LL`" in section
    largest = spec.sizes[-1].bytes
    busbw = largest / ((3 + largest * 0.001) * 1e-6) / 1e9
    assert "| 64 MiB | prefill (cap) |" in section and f"{busbw:,.1f}" in section
    html = (run_dir / "report.random.html").read_text()
    assert "NCCL all-reduce on gpu1" in html and "<code>NCCL_PROTO=LL</code>" in html


def test_report_without_nccl_json_has_no_section(tmp_path: Path) -> None:
    run_dir = tmp_path / "run1"
    run_dir.mkdir()
    (run_dir / "campaign.json").write_text(json.dumps(load_campaign(KIMI).to_json()))
    markdown = Path(write_report([load_run(run_dir, "random")], run_dir)[0]).read_text()
    assert "NCCL all-reduce" not in markdown


def test_size_text() -> None:
    assert [size_text(value) for value in (512, 14336, 3670016, 64 * 2**20)] == [
        "512 B",
        "14 KiB",
        "3.5 MiB",
        "64 MiB",
    ]


def test_report_section_from_a_real_recording_on_2x_h200(tmp_path: Path) -> None:
    # `fairbench nccl campaigns/kimi-k2.6-pcie.yml --hidden-size 7168 --variant p2p-off=NCCL_P2P_DISABLE=1`
    # on 2x H200 (NVLink): the real worker's output, as the playbook fetches it.
    recorded = REPO / "tests/fixtures/nccl/h200x2-nvlink.json"
    data = json.loads(recorded.read_text())
    run_dir = tmp_path / "kimi-k26-pcie" / "run1"
    (run_dir / "gpu1").mkdir(parents=True)
    (run_dir / "campaign.json").write_text(json.dumps(load_campaign(KIMI).to_json()))
    (run_dir / "gpu1" / "nccl.json").write_text(recorded.read_text())

    markdown = Path(write_report([load_run(run_dir, "random")], run_dir)[0]).read_text()
    section = markdown[markdown.index("## NCCL all-reduce on gpu1") :]
    assert f"{data['gpus']}x {data['device']}" in section and f"NCCL {data['nccl']}" in section
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| **")}
    assert set(rows) == {f"**{variant['name']}**" for variant in data["variants"]}
    for variant in data["variants"]:
        largest = variant["sizes"][-1]
        figures = f"{largest['eager']['busbw_gbps']:.1f} / {largest['graph']['busbw_gbps']:.1f} at 64 MiB"
        assert figures in rows[f"**{variant['name']}**"]
    assert "tp8-nccl |" in rows["**tp8-nccl**"]
    assert "none of the campaign's" in rows["**p2p-off**"]


def _broken(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    document = _worker_document(list(_spec([]).sizes), 0.001, 2)
    change(document)
    return document


SIZES = [size.bytes for size in _spec([]).sizes]
NOT_OBJECTS = "rank 0's sizes are not a list of objects with bytes"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("not json", "rank 0 printed no JSON document"),
        ({**_broken(lambda d: d), "protocol": 2}, "rank 0's document is not protocol 1"),
        (_broken(lambda d: d.update(sizes={"bytes": 1})), NOT_OBJECTS),
        (_broken(lambda d: d["sizes"].append(7)), NOT_OBJECTS),
        (_broken(lambda d: d["sizes"][0].update(bytes=str(SIZES[0]))), NOT_OBJECTS),
        (_broken(lambda d: d["sizes"].pop()), f"and lacks sizes [{SIZES[-1]}]"),
        (_broken(lambda d: d.update(world_size=4)), "reported world size 4 (expected 2)"),
        (
            _broken(lambda d: d["sizes"][0].pop("eager_us")),
            f"rank 0's eager_us of {SIZES[0]} bytes is not a list",
        ),
        (_broken(lambda d: d["sizes"][1].update(eager_us=[])), f"eager_us of {SIZES[1]} bytes is not a list"),
        (_broken(lambda d: d["sizes"][1].update(graph_us=[1.0, "2"])), f"graph_us of {SIZES[1]} bytes"),
        (_broken(lambda d: d["sizes"][0].update(graph_us=[True])), f"graph_us of {SIZES[0]} bytes"),
    ],
)
def test_a_worker_document_off_the_protocol_is_an_error_naming_the_variant_and_key(
    document: object, message: str
) -> None:
    runner = Runner(_spec([]), python="python3")
    text = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(NcclError, match=re.escape(message)) as raised:
        runner.document(Variant("tp8-nccl", {}, ("tp8",)), text.splitlines())
    assert str(raised.value).startswith("variant tp8-nccl: ")


def test_a_worker_document_on_the_protocol_is_taken_whole() -> None:
    document = _worker_document(list(_spec([]).sizes), 0.001, 2)
    document["sizes"][0]["graph_us"] = None  # a size whose graph was not captured
    runner = Runner(_spec([]), python="python3")
    assert (
        runner.document(Variant("default", {}, ()), json.dumps(document, indent=1).splitlines()) == document
    )
