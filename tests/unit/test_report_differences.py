"""Settings flattened, the unit's environment parsed, declared keys matched to server fields, hosts' GPUs,
per-start values ignored (DP ranks' included), derived values told from set ones by the launch command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairbench.report.differences import Declared, compare_settings, flatten, launch_flags
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


def _server(info: dict[str, Any]) -> ConfigResult:
    return ConfigResult(
        host="lab1",
        name="baseline",
        path=Path("lab1") / "baseline",
        status={"status": "ok"},
        points=[],
        server_info=info,
        host_info={},
        environment={},
        sweep_settings={},
        journal_excerpt=[],
    )


def _info(port: int, seed: int, **fields: Any) -> dict[str, Any]:
    """A /server_info of one start: its own port, seed and timings, the fields given, one DP rank."""
    settings = {"schedule_policy": "fcfs", "port": port, "random_seed": seed, **fields}
    rank = {
        **settings,
        "startup_time": {"load_weight": seed / 1e9},
        "last_gen_throughput": seed / 1e6,
        "effective_max_running_requests_per_dp": 16,
        "memory_usage": {"weight": 0.006, "startup_available": seed / 1e8, "token_capacity": 16384},
    }
    return {
        **settings,
        "launch_command": f"--schedule-policy fcfs --port {port}",
        "startup_time": {"tokenizer_e2e": seed / 1e9},
        "internal_states": [rank],
    }


def _verdicts(a: dict[str, Any], b: dict[str, Any], declared: Declared | None = None) -> dict[str, str]:
    pair = compare_settings(_server(a), _server(b), declared or Declared())
    return {difference.name: difference.verdict for difference in pair.differences}


def test_per_start_values_differing_are_not_compared_in_ranks_either() -> None:
    first, second = _info(46051, 419541313), _info(56721, 1717976)
    second["internal_states"][0]["memory_usage"]["weight"] = 0.0
    assert _verdicts(first, second) == {}


def test_a_field_off_the_ignore_list_differing_is_a_threat_once_when_ranks_repeat_it() -> None:
    assert _verdicts(_info(1, 1), _info(2, 2, schedule_policy="lpm")) == {"schedule_policy": "threat"}


def test_a_rank_departing_from_the_top_level_is_compared_against_the_others_top_level() -> None:
    overridden = _info(2, 2)
    overridden["internal_states"][0]["schedule_policy"] = "lpm"
    assert _verdicts(_info(1, 1), overridden) == {"internal_states.0.schedule_policy": "threat"}
    assert _verdicts(_info(1, 1), overridden, Declared(args=frozenset({"schedule-policy"}))) == {
        "internal_states.0.schedule_policy": "intended"
    }


def test_values_sglang_derives_are_derived_unless_their_flag_was_set_differently() -> None:
    assert _verdicts(_info(1, 1, mem_fraction_static=0.719), _info(2, 2, mem_fraction_static=0.88)) == {
        "mem_fraction_static": "derived"
    }
    scheduler = _info(2, 2)
    scheduler["internal_states"][0]["effective_max_running_requests_per_dp"] = 4
    assert _verdicts(_info(1, 1), scheduler) == {
        "internal_states.0.effective_max_running_requests_per_dp": "derived"
    }
    explicit = _info(2, 2, mem_fraction_static=0.5)
    explicit["launch_command"] += " --mem-fraction-static 0.5"
    assert _verdicts(_info(1, 1, mem_fraction_static=0.719), explicit) == {"mem_fraction_static": "threat"}
    declared = Declared(args=frozenset({"mem-fraction-static"}))
    assert _verdicts(_info(1, 1, mem_fraction_static=0.719), explicit, declared) == {
        "mem_fraction_static": "intended"
    }


def test_a_folded_flag_declared_makes_the_field_it_sets_intended() -> None:
    graphs = {"cuda_graph_config": {"decode": {"max_bs": 32}}}
    declared_flag = _info(2, 2, cuda_graph_config={"decode": {"max_bs": 8}})
    declared_flag["launch_command"] += " --cuda-graph-max-bs-decode 8"
    declared = Declared(args=frozenset({"cuda-graph-max-bs-decode"}))
    assert _verdicts(_info(1, 1, **graphs), declared_flag, declared) == {
        "cuda_graph_config.decode.max_bs": "intended"
    }
    assert _verdicts(_info(1, 1, **graphs), declared_flag) == {"cuda_graph_config.decode.max_bs": "threat"}


def test_launch_flags_keep_each_flags_words_together() -> None:
    command = (
        '--model-path /m --json-model-override-args {"vocab_size": 256} --skip-server-warmup --tp-size=8'
    )
    assert launch_flags({"launch_command": command}) == {
        "--model-path": ("/m",),
        "--json-model-override-args": ('{"vocab_size":', "256}"),
        "--skip-server-warmup": (),
        "--tp-size": ("8",),
    }
    assert launch_flags(None) == {}
