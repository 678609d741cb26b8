"""Which hosts share a machine (fairbench.fleet.sharing), from machine facts as hosts report them: the lab's
containers as observed, GPU sets of one box from a recorded nvidia-smi, DMI identities."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fairbench.campaign.fleet_facts import MACHINE, REASONS
from fairbench.fleet.sharing import (
    KERNEL_BOOT_TOLERANCE_S,
    machines_json,
    serialised,
    shared_machines,
)

REPO = Path(__file__).resolve().parents[2]
H200X2 = REPO / "tests/fixtures/gpu/h200x2"
LAB_BOOT = 1796524073.175671
"""The kernel boot instant the lab's three systemd-nspawn containers each read (fairbench.hosts.machine):
one kernel. Their boot_id and machine-id differ, and they have no DMI table."""


def facts(
    *,
    kernel_boot: float | None = None,
    gpu_uuids: list[str] | None = None,
    product_uuid: str | None = None,
    board: str | None = None,
) -> dict[str, Any]:
    """A host's fleet facts holding only its machine facts (the rest plays no part here)."""
    machine = {
        "product_uuid": product_uuid,
        "board": board,
        "kernel_boot": kernel_boot,
        "gpu_uuids": gpu_uuids or [],
        REASONS: {},
    }
    return {"sglang": "0.5.23", REASONS: {}, MACHINE: machine}


def test_the_labs_containers_share_one_kernel() -> None:
    hosts = ["lab1", "lab2", "lab3"]
    found = shared_machines({host: facts(kernel_boot=LAB_BOOT) for host in hosts}, hosts)
    (machine,) = found
    assert machine.hosts == ("lab1", "lab2", "lab3")
    assert [item.fact for item in machine.evidence] == ["kernel_boot"]
    assert machine.describe() == "lab1, lab2, lab3: one kernel, booted at 2026-12-06 02:27:53.175 UTC"


def test_kernels_booted_apart_by_more_than_the_tolerance_are_two_machines() -> None:
    near = {"a": facts(kernel_boot=LAB_BOOT), "b": facts(kernel_boot=LAB_BOOT + KERNEL_BOOT_TOLERANCE_S / 2)}
    assert [machine.hosts for machine in shared_machines(near, ["a", "b"])] == [("a", "b")]
    far = {"a": facts(kernel_boot=LAB_BOOT), "b": facts(kernel_boot=LAB_BOOT + 2 * KERNEL_BOOT_TOLERANCE_S)}
    assert shared_machines(far, ["a", "b"]) == []


def _recorded_gpus() -> list[str]:
    return re.findall(r"GPU-[0-9a-f-]{36}", (H200X2 / "nvidia-smi-query.csv").read_text())


def test_two_gpu_sets_of_one_box_that_see_a_gpu_in_common_share_it() -> None:
    first, second = _recorded_gpus()
    # VMs of other kernels: only the GPU tells; c sees a GPU of its own.
    by_host = {
        "a": facts(kernel_boot=1.0, gpu_uuids=[first]),
        "b": facts(kernel_boot=2.0, gpu_uuids=[first, second]),
        "c": facts(kernel_boot=3.0, gpu_uuids=["GPU-00000000-1111-2222-3333-444444444444"]),
    }
    (machine,) = shared_machines(by_host, ["a", "b", "c"])
    assert machine.hosts == ("a", "b")
    assert machine.describe() == f"a, b: the same GPU(s): {first}"


def test_sharing_is_transitive_and_each_fact_names_the_hosts_it_links() -> None:
    (gpu,) = _recorded_gpus()[:1]
    by_host = {
        "a": facts(kernel_boot=10.0, gpu_uuids=[gpu]),
        "b": facts(kernel_boot=20.0, gpu_uuids=[gpu]),
        "c": facts(kernel_boot=20.0),
        "d": facts(kernel_boot=30.0),
    }
    (machine,) = shared_machines(by_host, ["a", "b", "c", "d"])
    assert machine.hosts == ("a", "b", "c")
    assert [(item.fact, item.hosts) for item in machine.evidence] == [
        ("kernel_boot", ("b", "c")),
        ("gpu_uuids", ("a", "b")),
    ]
    assert machine.describe() == (
        "a, b, c: one kernel, booted at 1970-01-01 00:00:20.000 UTC (b, c); the same GPU(s): "
        + gpu
        + " (a, b)"
    )


def test_one_dmi_identity_is_one_box_and_nulls_link_nothing() -> None:
    uuid = "4c4c4544-0042-3510-8052-b4c04f5a3433"
    by_host = {
        "a": facts(kernel_boot=1.0, product_uuid=uuid),
        "b": facts(kernel_boot=2.0, product_uuid=uuid),
        "c": facts(kernel_boot=3.0, board="Supermicro X13DEG-OAD OM1"),
        "d": facts(kernel_boot=4.0, board="Supermicro X13DEG-OAD OM1"),
        "e": facts(kernel_boot=5.0),
        "f": facts(kernel_boot=6.0),
    }
    found = shared_machines(by_host, list(by_host))
    assert [(machine.hosts, machine.evidence[0].fact) for machine in found] == [
        (("a", "b"), "product_uuid"),
        (("c", "d"), "board"),
    ]
    assert found[0].describe() == f"a, b: the same DMI system UUID, {uuid}"


def test_a_host_without_machine_facts_is_not_judged() -> None:
    old = {"sglang": "0.5.23", REASONS: {}}  # its fairbench predates the machine facts
    by_host = {"a": facts(kernel_boot=LAB_BOOT), "b": old, "c": {MACHINE: "broken"}}
    assert shared_machines(by_host, ["a", "b", "c", "gone"]) == []


def test_the_queue_serialises_each_shared_machine_unless_the_campaign_says_isolated() -> None:
    by_host = {host: facts(kernel_boot=LAB_BOOT) for host in ("lab1", "lab2")}
    found = shared_machines(by_host, ["lab1", "lab2"])
    recorded = machines_json(found, isolated=False)
    assert recorded["shared"][0]["hosts"] == ["lab1", "lab2"]
    assert recorded["shared"][0]["text"] == found[0].describe()
    assert recorded["shared"][0]["evidence"][0]["fact"] == "kernel_boot"
    assert serialised(recorded) == [["lab1", "lab2"]]
    assert serialised(machines_json(found, isolated=True)) == []
    assert serialised(None) == []  # a queue from before machines were judged
