"""What tells which machine a host runs on (fairbench.hosts.machine): DMI read from a stand-in directory,
the kernel's boot instant from the real clocks, placeholders that are no identity."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairbench.campaign.fleet_facts import REASONS
from fairbench.fleet.sharing import KERNEL_BOOT_TOLERANCE_S
from fairbench.hosts import machine
from fairbench.hosts.machine import (
    MACHINE_FACTS,
    collect,
    is_placeholder_serial,
    is_placeholder_uuid,
    kernel_boot_s,
)

UUID = "4C4C4544-0042-3510-8052-B4C04F5A3433"


def dmi(directory: Path, **fields: str) -> Path:
    """A stand-in /sys/class/dmi/id holding ``fields`` (name -> text, with the kernel's line end)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in fields.items():
        (directory / name).write_text(text + "\n")
    return directory


@pytest.mark.parametrize(
    "text",
    [
        "00000000-0000-0000-0000-000000000000",
        "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
        "03000200-0400-0500-0006-000700080009",
        "Not Settable",
        "",
    ],
)
def test_placeholder_system_uuids_are_no_identity(text: str) -> None:
    assert is_placeholder_uuid(text)


def test_a_real_system_uuid_is_an_identity() -> None:
    assert not is_placeholder_uuid(UUID) and not is_placeholder_uuid(UUID.lower())


@pytest.mark.parametrize(
    "text", ["To Be Filled By O.E.M.", "Default string", "0000000", "........", "N/A", "123", "  none "]
)
def test_placeholder_board_serials_are_no_identity(text: str) -> None:
    assert is_placeholder_serial(text)


@pytest.mark.parametrize("text", ["OM1234567890", "PCBA-88219"])
def test_a_real_board_serial_is_an_identity(text: str) -> None:
    assert not is_placeholder_serial(text)


def test_dmi_gives_the_system_uuid_and_the_board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fields = {"product_uuid": UUID, "board_serial": "OM1234567890"}
    directory = dmi(tmp_path / "id", **fields, board_vendor="Supermicro", board_name="X13DEG-OAD")
    monkeypatch.setattr(machine, "DMI_DIR", directory)
    facts = collect(["GPU-b", "GPU-a", "GPU-b"])
    assert list(facts) == [*MACHINE_FACTS, REASONS]
    assert facts["product_uuid"] == UUID.lower()
    assert facts["board"] == "Supermicro X13DEG-OAD OM1234567890"
    assert facts["gpu_uuids"] == ["GPU-a", "GPU-b"]
    assert facts[REASONS] == {}


def test_placeholders_and_a_missing_dmi_table_are_null_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    placeholder = dmi(tmp_path / "id", product_uuid="03000200-0400-0500-0006-000700080009")
    (placeholder / "board_serial").write_text("Default string\n")
    monkeypatch.setattr(machine, "DMI_DIR", placeholder)
    facts = collect([])
    assert facts["product_uuid"] is None and facts["board"] is None
    assert "is a placeholder, no box's own" in facts[REASONS]["product_uuid"]
    assert "'Default string' is a placeholder" in facts[REASONS]["board"]
    # The lab's containers: a VM without SMBIOS has no /sys/class/dmi at all.
    monkeypatch.setattr(machine, "DMI_DIR", tmp_path / "none")
    facts = collect([])
    assert facts["product_uuid"] is None and facts["board"] is None
    assert facts[REASONS]["product_uuid"].startswith(f"no {tmp_path / 'none' / 'product_uuid'}: the kernel")
    assert isinstance(facts["kernel_boot"], float) and "kernel_boot" not in facts[REASONS]


def test_an_unreadable_dmi_field_is_null_with_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = dmi(tmp_path / "id")
    (directory / "product_uuid").mkdir()  # reading it fails as a root-only file does for others
    monkeypatch.setattr(machine, "DMI_DIR", directory)
    facts = collect([])
    assert facts[REASONS]["product_uuid"].startswith(f"{directory / 'product_uuid'}: cannot read: ")


def test_the_kernel_boot_instant_comes_from_the_read_with_the_narrowest_bracket() -> None:
    microseconds = [(100, 40, 190), (200, 98, 204), (300, 150, 500), (400, 290, 410), (500, 390, 520)]
    reads = iter([(wall * 1000, boot * 1000, again * 1000) for wall, boot, again in microseconds])
    # The second read: bracket 4 µs, midpoint 202 µs, less the boot clock's 98 µs; the others give 105,
    # 250, 115 and 120 µs.
    assert kernel_boot_s(lambda: next(reads)) == 104e-6


def test_two_processes_of_one_kernel_read_one_boot_instant_and_it_is_in_the_past() -> None:
    here = kernel_boot_s()
    script = "from fairbench.hosts.machine import kernel_boot_s; print(kernel_boot_s())"
    there = float(
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    )
    assert abs(here - there) <= KERNEL_BOOT_TOLERANCE_S / 10, (here, there)
    assert 0 < here < time.time()
