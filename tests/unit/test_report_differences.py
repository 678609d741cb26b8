"""Settings flattened, the unit's environment parsed, declared keys matched to server fields, hosts' GPUs,
per-start values ignored (DP ranks' included), derived values told from set ones by the launch command."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.support.report_files import replaced

from fairbench.report.config_files import unit_environment
from fairbench.report.differences import (
    Declared,
    PairDifferences,
    _role_keys,
    compare_settings,
    flatten,
    launch_flags,
    run_differences,
    threats,
)
from fairbench.report.load import Run
from fairbench.report.tree import ConfigResult


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


def _result(name: str = "baseline", host: str = "lab1", /, **files: Any) -> ConfigResult:
    """A config result of ``name`` on ``host`` whose settings files (``server_info``, ``host_info``,
    ``environment``, ``sweep_settings``) hold nothing unless given; one given as None is missing."""
    empty = ConfigResult(
        host=host,
        name=name,
        path=Path(host) / name,
        status={"status": "ok"},
        points=[],
        server_info={},
        host_info={},
        environment={},
        sweep_settings={},
        journal_excerpt=[],
    )
    return replace(empty, **files)


def _on_host(host: str, gpus: list[dict[str, Any]]) -> ConfigResult:
    host_info = {"hostname": host, "kernel": "6.1", "gpu": {"driver_version": "580.95", "gpus": gpus}}
    return _result("tp8", host, host_info=host_info)


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
    pair = compare_settings(_result(server_info=a), _result(server_info=b), declared or Declared())
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


def _rows(pair: PairDifferences) -> list[tuple[str, str, str, str, str]]:
    """Each difference as (source, name, repr of each value, verdict): repr keeps ``1`` and ``True`` apart."""
    return [(d.source, d.name, repr(d.value_a), repr(d.value_b), d.verdict) for d in pair.differences]


# --- sources that could not be compared -------------------------------------------------------------------

FILES_OF = {
    "server": ("server_info", "server_info.json"),
    "environment": ("environment", "unit.service"),
    "host": ("host_info", "host.json"),
    "sweep": ("sweep_settings", "sweep.json"),
}
"""Each source's field of ConfigResult and the file it is read from."""
FIRST_SETTINGS = {
    "server_info": {"schedule_policy": "fcfs"},
    "environment": {"NCCL_ALGO": "Ring"},
    "host_info": {"kernel": "6.8.0-87-generic"},
    "sweep_settings": {"repeats": 1},
}
SECOND_SETTINGS = {
    "server_info": {"schedule_policy": "lpm"},
    "environment": {"NCCL_ALGO": "Tree"},
    "host_info": {"kernel": "6.8.0-90-generic"},
    "sweep_settings": {"repeats": 2},
}
EVERY_SOURCE_DIFFERING = [
    ("server", "schedule_policy", "'fcfs'", "'lpm'", "threat"),
    ("environment", "NCCL_ALGO", "'Ring'", "'Tree'", "threat"),
    ("host", "kernel", "'6.8.0-87-generic'", "'6.8.0-90-generic'", "threat"),
    ("sweep", "repeats", "1", "2", "threat"),
]
"""What FIRST_SETTINGS and SECOND_SETTINGS compare as, with every source present."""


@pytest.mark.parametrize("damage", ["missing", "unreadable"])
@pytest.mark.parametrize("source", FILES_OF)
def test_a_source_one_side_lacks_is_not_compared_and_the_others_are(source: str, damage: str) -> None:
    field, file = FILES_OF[source]
    first = _result("tp8", **FIRST_SETTINGS)
    assert _rows(compare_settings(first, _result("ep4", **SECOND_SETTINGS), Declared())) == (
        EVERY_SOURCE_DIFFERING
    )
    unreadable = frozenset({file}) if damage == "unreadable" else frozenset()
    second = _result("ep4", **{**SECOND_SETTINGS, field: None}, unreadable=unreadable)
    pair = compare_settings(first, second, Declared())
    assert [(item.source, item.result.name, item.why) for item in pair.not_compared] == [
        (source, "ep4", f"{file} {damage}")
    ]
    assert _rows(pair) == [row for row in EVERY_SOURCE_DIFFERING if row[0] != source]


def test_a_source_both_sides_lack_is_named_for_each_and_nothing_of_it_compared() -> None:
    first = _result("tp8", **{**FIRST_SETTINGS, "host_info": None})
    second = _result("ep4", **{**SECOND_SETTINGS, "host_info": None}, unreadable=frozenset({"host.json"}))
    pair = compare_settings(first, second, Declared())
    assert [(item.source, item.result.name, item.why) for item in pair.not_compared] == [
        ("host", "tp8", "host.json missing"),
        ("host", "ep4", "host.json unreadable"),
    ]
    assert [row[:2] for row in _rows(pair)] == [
        ("server", "schedule_policy"),
        ("environment", "NCCL_ALGO"),
        ("sweep", "repeats"),
    ]


# --- derived values ---------------------------------------------------------------------------------------


def test_what_sglang_sizes_from_free_memory_is_derived_in_nested_and_rank_fields() -> None:
    """A server started with less device memory free: a smaller KV cache and fewer, smaller graphs."""
    roomy, tight = _info(1, 1, max_total_tokens=None), _info(2, 2, max_total_tokens=917504)
    for info, tokens, kv_gb, graph_gb, batch_sizes in (
        (roomy, 1048576, 61.24, 0.41, [1, 2, 4, 8]),
        (tight, 917504, 53.59, 0.37, [1, 2, 4]),
    ):
        info["max_total_num_tokens"] = tokens
        rank = info["internal_states"][0]
        rank["memory_usage"] |= {"kvcache": kv_gb, "token_capacity": tokens, "graph": {"decode": graph_gb}}
        rank["decode_cuda_graph_bs"] = batch_sizes
        rank["decode_cuda_graph_memory_gb"] = graph_gb
    assert _verdicts(roomy, tight) == {
        "internal_states.0.decode_cuda_graph_bs": "derived",
        "internal_states.0.decode_cuda_graph_memory_gb": "derived",
        "internal_states.0.memory_usage.graph.decode": "derived",
        "internal_states.0.memory_usage.kvcache": "derived",
        "internal_states.0.memory_usage.token_capacity": "derived",
        "max_total_num_tokens": "derived",
        # The flag a user sets is compared as set: --max-total-tokens, undeclared, on one side (the
        # rank repeats it, so it counts once).
        "max_total_tokens": "threat",
    }


def test_a_derived_value_whose_flags_differ_is_intended_only_if_every_differing_flag_was_declared() -> None:
    graphs = _info(1, 1, cuda_graph_max_bs_decode=None, cuda_graph_bs_decode=None)
    graphs["cuda_graph_config"] = {"decode": {"max_bs": 32, "bs": [1, 2, 4, 8, 16, 32]}}
    fewer = _info(2, 2, cuda_graph_max_bs_decode=8, cuda_graph_bs_decode=[1, 2, 4, 8])
    fewer["cuda_graph_config"] = {"decode": {"max_bs": 8, "bs": [1, 2, 4, 8]}}
    fewer["launch_command"] += " --cuda-graph-max-bs-decode 8 --cuda-graph-bs-decode 1 2 4 8"
    one_declared = Declared(args=frozenset({"cuda-graph-max-bs-decode"}))
    assert _verdicts(graphs, fewer, one_declared) == {
        "cuda_graph_max_bs_decode": "intended",
        "cuda_graph_bs_decode": "threat",
        "cuda_graph_config.decode.max_bs": "threat",
        "cuda_graph_config.decode.bs": "threat",
    }
    both_declared = Declared(args=frozenset({"cuda-graph-max-bs-decode", "cuda-graph-bs-decode"}))
    assert set(_verdicts(graphs, fewer, both_declared).values()) == {"intended"}


# --- fields not compared ----------------------------------------------------------------------------------


def _start(address: str, port: int, seed: int, status: str, *, frontend: str = "python") -> dict[str, Any]:
    """/server_info of one start on one host: its own address, ports, seed, state and live figures."""
    info = _info(port, seed, host=address, nccl_port=port + 11233, frontend=frontend)
    info["status"] = status
    rank = info["internal_states"][0]
    rank["step_time_dict"] = {"1": [seed / 1e10]}
    rank["avg_spec_accept_length"] = seed / 1e8
    rank["dspark_info_record"] = [{"rid": str(seed)}]
    if frontend == "rust":
        info["rust_server_startup_time"] = seed / 1e9
        info["rust_mm_transport"] = {"bytes_sent": seed}
    info["sim"] = {
        "profile": "kimi-k2.6-8xpro6000",
        "profile_description": f"step times measured on {address}",
        "layout": "tp8",
        "performance_model": {"t0_ms": seed / 1e8},
        "scheduler": {"dp_size": 1, "decode_steps_per_round": seed % 8 + 1},
    }
    return info


def _host_json(hostname: str, uuids: tuple[str, str], buses: tuple[str, str]) -> dict[str, Any]:
    """host.json of a host with two H200s, as host_facts writes it."""
    return {
        "hostname": hostname,
        "os": "Ubuntu 24.04.3 LTS",
        "kernel": "6.8.0-87-generic",
        "machine": "x86_64",
        "python": "3.12.3",
        "python_executable": "/opt/fairbench/venv/bin/python",
        "fairbench": "0.1.0",
        "gpu": {
            "gpus": [_gpu(0, uuids[0], buses[0]), _gpu(1, uuids[1], buses[1])],
            "driver_version": "580.159.04",
            "cuda_version": "13.0",
            "links": {"0-1": "NV18"},
            "interconnect": "nvlink",
            "reason": None,
            "sources": {"smi": "nvidia-smi"},
        },
    }


LAB1 = _host_json("lab1", ("GPU-ccf73502", "GPU-fad8c7f9"), ("00000000:19:00.0", "00000000:3B:00.0"))
LAB2 = _host_json("lab2", ("GPU-8c53b78e", "GPU-b29276a1"), ("00000000:1A:00.0", "00000000:3C:00.0"))


def test_two_starts_on_two_hosts_differ_only_in_fields_that_are_not_compared() -> None:
    started = _start("10.0.0.1", 30001, 419541313, "ready")
    first = _result("tp8", "lab1", server_info=started, host_info=LAB1)
    # The Rust frontend's own start-up figures are absent from the Python one's.
    rust = _start("10.0.0.2", 30002, 1717976, "starting", frontend="rust")
    second = _result("tp8", "lab2", server_info=rust, host_info=LAB2)
    assert _rows(compare_settings(first, second, Declared())) == [
        ("server", "frontend", "'python'", "'rust'", "threat")
    ]
    python = _start("10.0.0.2", 30002, 1717976, "starting")
    pair = compare_settings(first, replace(second, server_info=python), Declared())
    assert (pair.differences, pair.not_compared) == ([], [])


def test_the_fields_beside_an_ignored_one_are_compared() -> None:
    first, second = _start("10.0.0.1", 30001, 419541313, "ready"), _start("10.0.0.2", 30002, 1717976, "ready")
    second["sim"]["profile"] = "kimi-k2.6-8xh200"
    second["internal_states"][0]["memory_usage"]["kvcache"] = 53.59
    assert _verdicts(first, second) == {
        "internal_states.0.memory_usage.kvcache": "derived",
        "sim.profile": "threat",
    }


# --- values of another type -------------------------------------------------------------------------------

TYPE_MISMATCHES = {
    "number and text": ("server", "tp_size", 8, "8"),
    "true and 1": ("server", "trust_remote_code", True, 1),
    "false and 0": ("server", "disable_cuda_graph", False, 0),
    "list and text": ("server", "cuda_graph_bs_decode", [1, 2, 4, 8], "1 2 4 8"),
    "integers and floats in a list": ("server", "cuda_graph_bs_decode", [1, 2, 4, 8], [1.0, 2.0, 4.0, 8.0]),
    "sweep number and text": ("sweep", "gpus", 8, "8"),
}


@pytest.mark.parametrize("source, name, value_a, value_b", TYPE_MISMATCHES.values(), ids=TYPE_MISMATCHES)
def test_a_setting_of_another_type_on_each_side_is_a_difference(
    source: str, name: str, value_a: Any, value_b: Any
) -> None:
    field, _ = FILES_OF[source]
    pair = compare_settings(
        _result(**{field: {name: value_a}}), _result(**{field: {name: value_b}}), Declared()
    )
    assert _rows(pair) == [(source, name, repr(value_a), repr(value_b), "threat")]


def test_a_rank_holding_a_value_of_another_type_departs_from_the_top_level() -> None:
    first, second = _info(1, 1, tp_size=8), _info(2, 2, tp_size=8)
    second["internal_states"][0]["tp_size"] = "8"
    pair = compare_settings(_result(server_info=first), _result(server_info=second), Declared())
    assert _rows(pair) == [("server", "internal_states.0.tp_size", "8", "'8'", "threat")]


# --- hosts ------------------------------------------------------------------------------------------------


def test_two_hosts_of_one_kind_have_no_difference() -> None:
    pair = compare_settings(
        _result("tp8", "lab1", host_info=LAB1), _result("tp8", "lab2", host_info=LAB2), Declared()
    )
    assert (pair.differences, pair.not_compared) == ([], [])


HOST_CHANGES = {
    "kernel": ("6.8.0-87-generic", "6.8.0-90-generic"),
    "gpu.driver_version": ("580.159.04", "580.95.05"),
    "gpu.cuda_version": ("13.0", "12.8"),
    "os": ("Ubuntu 24.04.3 LTS", "Ubuntu 22.04.5 LTS"),
    "fairbench": ("0.1.0", "0.2.0"),
    "gpu.interconnect": ("nvlink", "pcie"),
    "gpu.links.0-1": ("NV18", "SYS"),
}
"""Facts of host.json as LAB1 has them and as another host might."""


@pytest.mark.parametrize("name, values", HOST_CHANGES.items(), ids=HOST_CHANGES)
def test_a_host_fact_differing_between_hosts_is_a_threat_with_each_hosts_value(
    name: str, values: tuple[str, str]
) -> None:
    on_lab1, on_lab2 = values
    first = _result("tp8", "lab1", host_info=LAB1)
    second = _result("tp8", "lab2", host_info=replaced(LAB2, name, on_lab2))
    pair = compare_settings(first, second, Declared())
    assert _rows(pair) == [("host", name, repr(on_lab1), repr(on_lab2), "threat")]
    assert [(t.source, t.name, [(r.host, v) for r, v in t.values]) for t in threats([pair])] == [
        ("host", name, [("lab1", on_lab1), ("lab2", on_lab2)])
    ]


def test_a_driver_upgraded_between_two_runs_is_a_threat_to_comparing_them() -> None:
    campaign = {"configs": {"tp8": {"args": {"tp-size": 8}}}, "workload": {"api": "completions"}}

    def run(run_id: str, host_info: dict[str, Any]) -> Run:
        return Run(Path(run_id), campaign, [_result("tp8", "lab1", host_info=host_info)], {})

    before = run("before", replaced(LAB1, "gpu.driver_version", "580.95.05"))
    (pair,) = run_differences(before, run("after", LAB1))
    assert _rows(pair) == [("host", "gpu.driver_version", "'580.95.05'", "'580.159.04'", "threat")]
    (same,) = run_differences(run("again", LAB1), run("after", LAB1))
    assert same.differences == []


def test_a_disaggregated_config_declares_the_fields_its_roles_set_and_only_beside_one() -> None:
    # Its server_info.json is its decode server's: the mode, the transfer settings, SGLang's decode-side
    # radix cache default and the simulator's transfer model follow from its disaggregation key.
    fields = (
        "disaggregation_mode",
        "disaggregation_bootstrap_port",
        "disable_radix_cache",
        "sim.disaggregation",
        "sim.disaggregation.kv_transfer_gb_s",
        "internal_states.0.disaggregation_mode",
    )
    assert all(Declared(disaggregation=True).covers("server", name) for name in fields)
    assert not any(Declared().covers("server", name) for name in fields)
    assert not Declared(disaggregation=True).covers("server", "attention_backend")
    # Its GPUs, which each point's per-GPU figure is divided by, follow from it, as from a declared tp-size.
    assert Declared(disaggregation=True).covers("sweep", "gpus")
    assert Declared(args=frozenset({"tp-size"})).covers("sweep", "gpus")
    assert not Declared(args=frozenset({"ep-size"})).covers("sweep", "gpus")


def test_the_roles_flags_over_the_configs_own_are_declared_by_the_disaggregated_config() -> None:
    entry = {
        "args": {"tp-size": 4, "max-running-requests": 64},
        "disaggregation": {
            "servers": [
                {"args": {"tp-size": 4, "max-running-requests": 64, "base-gpu-id": 0}},
                {"args": {"tp-size": 2, "max-running-requests": 64, "base-gpu-id": 4, "page-size": 64}},
            ]
        },
    }
    assert _role_keys(entry) == {"tp-size", "base-gpu-id", "page-size"}
    assert _role_keys({"args": {"tp-size": 8}}) == frozenset()
