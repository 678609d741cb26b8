"""Settings flattened, the unit's environment parsed, declared keys matched to server fields, hosts' GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairbench.report.differences import Declared, compare_settings, flatten
from fairbench.report.load import ConfigResult, unit_environment


def test_flatten_gives_dotted_names_and_drops_empty_mappings() -> None:
    data = {"a": 1, "cuda_graph_config": {"decode": {"backend": "full"}}, "faults": {}, "list": [1, 2]}
    assert flatten(data) == {"a": 1, "cuda_graph_config.decode.backend": "full", "list": [1, 2]}


def test_unit_environment_reads_quoted_and_plain_assignments() -> None:
    unit = "\n".join(
        [
            "[Service]",
            'Environment="NCCL_PROTO=LL"',
            "Environment=A=1 B=2",
            'Environment="SPACED=a b" "PCT=50%%"',
            "ExecStart=/bin/true",
        ]
    )
    assert unit_environment(unit) == {"NCCL_PROTO": "LL", "A": "1", "B": "2", "SPACED": "a b", "PCT": "50%"}


def test_declared_flags_cover_their_fields_nested_ones_included() -> None:
    declared = Declared(
        args=frozenset({"ep-size", "cuda-graph-config"}),
        env=frozenset({"NCCL_PROTO"}),
        sim=frozenset({"sim-fault"}),
    )
    assert declared.covers("server", "ep_size")
    assert declared.covers("server", "cuda_graph_config.decode.backend")
    assert declared.covers("server", "sim.faults.crash-after")
    assert declared.covers("environment", "NCCL_PROTO")
    assert not declared.covers("server", "ep_size_extra")
    assert not declared.covers("server", "cuda_graph_backend_decode")
    assert not declared.covers("environment", "NCCL_ALGO")
    assert not declared.covers("host", "kernel")
    assert not declared.covers("sweep", "workload.input_len")


def _on_host(host: str, gpus: list[dict[str, Any]]) -> ConfigResult:
    host_info = {"hostname": host, "kernel": "6.1", "gpu": {"driver_version": "580.95", "gpus": gpus}}
    return ConfigResult(
        host=host,
        name="tp8",
        path=Path(host) / "tp8",
        status={"status": "ok"},
        points=[],
        server_info={},
        host_info=host_info,
        environment={},
        sweep_settings={},
        journal_excerpt=[],
    )


def _gpu(index: int, uuid: str, bus: str, name: str = "NVIDIA H200") -> dict[str, Any]:
    return {"index": index, "name": name, "uuid": uuid, "pci_bus_id": bus, "memory_total_mib": 143771}


def test_hosts_compare_gpu_by_gpu_without_the_fields_that_name_one_gpu() -> None:
    first = _on_host("gpu1", [_gpu(0, "GPU-a", "0000:19:00.0"), _gpu(1, "GPU-b", "0000:3B:00.0")])
    same_kind = _on_host("gpu2", [_gpu(0, "GPU-c", "0000:1A:00.0"), _gpu(1, "GPU-d", "0000:3C:00.0")])
    assert compare_settings(first, same_kind, Declared()).with_verdict("threat") == []
    other_kind = _on_host("gpu3", [_gpu(0, "GPU-e", "0000:19:00.0", "NVIDIA H100"), _gpu(1, "GPU-f", "x")])
    threats = compare_settings(first, other_kind, Declared()).with_verdict("threat")
    assert [(d.name, d.value_a, d.value_b) for d in threats] == [
        ("gpu.gpus.0.name", "NVIDIA H200", "NVIDIA H100")
    ]
