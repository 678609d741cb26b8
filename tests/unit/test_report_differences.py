"""Settings flattened, the unit's environment parsed, and declared keys matched to server fields."""

from __future__ import annotations

from fairbench.report.differences import Declared, flatten
from fairbench.report.load import unit_environment


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
