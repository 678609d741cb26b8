"""``collect``: what tells which machine a GPU host runs on, so that two inventory hosts on one machine are
found (fairbench.fleet.sharing judges them).

Two inventory hosts may be one machine: containers on one kernel (the lab's systemd-nspawn hosts), two GPU
sets of one 8-GPU box, VMs on one hypervisor. Jobs measured on them at the same time interfere. Each fact
here is one a host shares with another only when both run on one machine; ``MACHINE_FACTS`` names them:

- ``product_uuid``: the DMI system UUID (``/sys/class/dmi/id/product_uuid``, root only), the firmware's
  identity of the box. Containers read their host's; a VM reads the one its hypervisor gave it (one per
  VM), so it tells boxes and containers apart, not VMs of one hypervisor. Boards that leave it unset
  report a placeholder (``PLACEHOLDER_UUIDS``), which is no identity.
- ``board``: the DMI board's vendor, name and serial (``board_serial``, root only), for boxes whose system
  UUID is a placeholder; null when the serial is a placeholder (``is_placeholder_serial``).
- ``kernel_boot``: the instant the running kernel booted, ``CLOCK_REALTIME - CLOCK_BOOTTIME`` in epoch
  seconds. Every process of one kernel reads the same offset, to microseconds, containers included:
  systemd-nspawn gives each container its own ``/proc/sys/kernel/random/boot_id``, but not its own clocks.
  Slewing the wall clock leaves the offset alone; only a step moves it, so two hosts of one kernel read on
  either side of a step are missed. A container in a time namespace of its own (CRIU) is missed too.
  Distinct kernels (VMs, boxes) booted at distinct instants.
- ``gpu_uuids``: the UUIDs of the GPUs nvidia-smi lists, sorted; one GPU seen by two hosts is one
  machine's.

Left out, and why: ``boot_id`` (systemd-nspawn gives each container its own, so a difference says
nothing; where it is equal the kernel boot instant is too), ``/etc/machine-id`` (each container has its
own, and cloned VM images share one), ``/proc/stat``'s ``btime`` (whole seconds: a fleet rebooted at once
shares it; ``kernel_boot`` is its precise form), the network interfaces' addresses (a container on its
host's network, as the lab's are, shares its kernel too, which ``kernel_boot`` tells; one with a network of
its own, or a VM, has addresses of its own on any machine, and locally administered ones such as the lab
machine's 02:fc:00:00:00:01 are set by whoever made the VM, unique or not), and the hostname (each container
has its own).
VMs of one hypervisor that see no common GPU share none of these facts: nothing inside a VM tells its
hypervisor.

Nothing here raises: a fact that cannot be read is null with its reason. The standard library only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from fairbench.campaign.fleet_facts import MACHINE, REASONS

MACHINE_FACTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "product_uuid": "the DMI system UUID, /sys/class/dmi/id/product_uuid (root only)",
        "board": "the DMI board's vendor, name and serial, /sys/class/dmi/id/board_* (the serial root only)",
        "kernel_boot": "when the running kernel booted, CLOCK_REALTIME - CLOCK_BOOTTIME, in epoch seconds",
        "gpu_uuids": "the UUIDs of the GPUs nvidia-smi lists, sorted",
    }
)
"""Each fact that two hosts share only on one machine -> what it is, in one line."""
DMI_DIR = Path("/sys/class/dmi/id")
PLACEHOLDER_UUIDS: Final = frozenset(
    {
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "03000200-0400-0500-0006-000700080009",
        "00020003-0004-0005-0006-000700080009",
    }
)
"""System UUIDs that firmware reports when the vendor set none (dmidecode's "Not Settable" and "Not
Present", and the default of common AMI firmware): shared by unrelated boxes."""
PLACEHOLDER_SERIALS: Final = frozenset(
    {
        "none",
        "n/a",
        "na",
        "not specified",
        "not applicable",
        "not available",
        "to be filled by o.e.m.",
        "default string",
        "system serial number",
        "base board serial number",
        "serial",
        "unknown",
        "empty",
        "0123456789",
        "123456789",
        "1234567890",
    }
)
"""Board serials, lowercased, that firmware reports when the vendor set none."""
CLOCK_READS = 5
"""Reads of the two clocks; the one whose bracketing wall-clock reads lie closest counts."""
NS_PER_S = 1_000_000_000


def is_placeholder_uuid(text: str) -> bool:
    """Whether a system UUID is no identity: not a UUID, or one of ``PLACEHOLDER_UUIDS``."""
    try:
        parsed = uuid.UUID(text.strip())
    except ValueError:
        return True
    return str(parsed) in PLACEHOLDER_UUIDS


def is_placeholder_serial(text: str) -> bool:
    """Whether a board serial is no identity: one of ``PLACEHOLDER_SERIALS``, one character repeated
    (``0000000``, ``........``), or fewer than 4 letters and digits."""
    serial = text.strip().lower()
    return (
        serial in PLACEHOLDER_SERIALS
        or len(set(serial)) <= 1
        or sum(character.isalnum() for character in serial) < 4
    )


def _clock_pair() -> tuple[int, int, int]:
    """Wall clock, boot clock, wall clock again, in ns."""
    before = time.clock_gettime_ns(time.CLOCK_REALTIME)
    boot = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    return before, boot, time.clock_gettime_ns(time.CLOCK_REALTIME)


def kernel_boot_s(read: Callable[[], tuple[int, int, int]] = _clock_pair) -> float:
    """``CLOCK_REALTIME - CLOCK_BOOTTIME`` in seconds (microseconds kept): of ``CLOCK_READS`` reads, the one
    with the narrowest wall-clock bracket, its midpoint less the boot clock, so a preempted read does not
    count."""
    reads = [read() for _ in range(CLOCK_READS)]
    before, boot, after = min(reads, key=lambda each: each[2] - each[0])
    return round(((before + after) // 2 - boot) / NS_PER_S, 6)


def _dmi(name: str) -> tuple[str | None, str]:
    """A DMI attribute's text, or None and why."""
    path = DMI_DIR / name
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip(), ""
    except FileNotFoundError:
        return None, f"no {path}: the kernel has no DMI table (a VM without SMBIOS, or no such board field)"
    except OSError as exc:
        return None, f"{path}: cannot read: {exc.strerror or exc}"


def _product_uuid() -> tuple[str | None, str]:
    text, why = _dmi("product_uuid")
    if text is None:
        return None, why
    if is_placeholder_uuid(text):
        return None, f"{DMI_DIR / 'product_uuid'}: {text!r} is a placeholder, no box's own"
    return str(uuid.UUID(text)), ""


def _board() -> tuple[str | None, str]:
    serial, why = _dmi("board_serial")
    if serial is None:
        return None, why
    if is_placeholder_serial(serial):
        return None, f"{DMI_DIR / 'board_serial'}: {serial!r} is a placeholder, no board's own"
    vendor, _ = _dmi("board_vendor")
    name, _ = _dmi("board_name")
    return " ".join(part for part in (vendor, name, serial) if part), ""


def collect(gpu_uuids: Sequence[str]) -> dict[str, Any]:
    """This host's ``MACHINE_FACTS`` and ``reasons`` (fact -> why it is null); ``gpu_uuids``: the GPUs
    nvidia-smi listed (fairbench.hosts.gpu), none without nvidia-smi."""
    values: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    for fact, (value, why) in (("product_uuid", _product_uuid()), ("board", _board())):
        values[fact] = value
        if value is None:
            reasons[fact] = why
    try:
        values["kernel_boot"] = kernel_boot_s()
    except (AttributeError, OSError) as exc:  # a kernel without CLOCK_BOOTTIME
        values["kernel_boot"] = None
        reasons["kernel_boot"] = f"no boot clock: {exc}"
    values["gpu_uuids"] = sorted(set(gpu_uuids))
    return {**{fact: values[fact] for fact in MACHINE_FACTS}, REASONS: reasons}


def machine_facts(facts: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The machine facts of a host's fleet facts (``MACHINE``); empty where the host reported none (its
    fairbench predates them) or they are no mapping."""
    found = (facts or {}).get(MACHINE)
    return found if isinstance(found, Mapping) else {}
