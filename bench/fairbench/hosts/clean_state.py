"""Whether a GPU host is clean for the next config's server, and waiting until it is.

A config's numbers are only its own when nothing of an earlier server is left: no warm process holding GPU
memory, no socket on the serving port, no stop still in progress. A host is clean when all of these hold:

- no fairbench server unit (``SERVER_UNIT_GLOB``) is in any ACTIVE state but ``inactive`` or ``failed``
  (``systemctl list-units --type=service --all --plain --no-legend PATTERN``; columns UNIT LOAD ACTIVE SUB
  DESCRIPTION): ``deactivating`` is a stop still under way;
- nothing LISTENs (state ``0A``) on the serving TCP port in /proc/net/tcp or /proc/net/tcp6 (this network
  namespace's sockets); the owners are found through the ``socket:[INODE]`` links of /proc/PID/fd;
- the serving user (the serving role's ``serving_user``) runs no process (real uid, /proc/PID/status);
- nvidia-smi lists no compute process (``COMPUTE_APPS_ARGS``), and every GPU's ``memory.used``
  (``MEMORY_ARGS``) is at most its idle baseline plus a tolerance (``DEFAULT_TOLERANCE_MIB``). A host
  without nvidia-smi has no GPU to check.

Both nvidia-smi queries are read without header or units (``csv,noheader,nounits``), one row per GPU or
process: ``0, GPU-2cf0..., 2667`` and ``445, /opt/venv/bin/python3, 2658, GPU-2cf0...`` (a recording of
each, busy and idle, is in tests/fixtures/gpu/). Bracketed values (``[N/A]``, ``[Insufficient
Permissions]``) are unknown; a query with no process prints nothing (older drivers: ``No running processes
found``). Output of any other shape raises ``GpuFactsError`` naming the command and the line.

The idle baseline is what ``idle_baseline`` reads when no fairbench server runs (the campaign's
preflight): GPU index -> MiB. ``check`` lists everything not clean, each finding one sentence;
``wait_clean`` stops fairbench's own leftover servers and polls until the host is clean or the time is up.
Reading every process's fds and status needs root for processes of other users.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fairbench.campaign.model import UNIT_PREFIX
from fairbench.hosts.gpu import GpuFactsError, run_nvidia_smi

SERVER_UNIT_GLOB = f"{UNIT_PREFIX}*.service"
"""The systemctl pattern matching every fairbench server unit (plugins/modules/fairbench_clean_state.py
states it as its literal default)."""
STOPPED_STATES = ("inactive", "failed")
"""systemd ACTIVE states of a unit that runs nothing; any other (``deactivating`` too) is not clean."""
DEFAULT_TOLERANCE_MIB = 1024
"""How far above its idle baseline a GPU's memory.used may be on a clean host.

Memory that stays after a server is what the check is for, and a server leaves GiBs: a weight shard,
a KV-cache pool, CUDA graphs. What may differ from the baseline without any server is far smaller: a CUDA
context of another tenant that the compute-apps query cannot name (another container's: its PID namespace
hides the process) costs about 0.6 GiB on an H200 (tests/fixtures/gpu/compute-apps-busy.txt: a 2048 MiB
tensor shows as 2658 MiB), and memory.used beyond its processes' own moved by 9 MiB in the same recording
(query-memory-busy.txt: 2667 MiB). 1024 MiB forgives one such context and catches any server's remains.
A share of the GPU's memory (2 % of an H200 is 2.8 GiB) would not fit better: contexts do not grow with the
GPU, and it would let a small model's leftover shard pass on a large GPU.
"""
POLL_S = 0.2
COMMAND_CHARS = 200
"""A process's command line is cut to this many characters in findings and details."""
MEMORY_FIELDS = ("index", "uuid", "memory.used")
MEMORY_ARGS = (f"--query-gpu={','.join(MEMORY_FIELDS)}", "--format=csv,noheader,nounits")
COMPUTE_APPS_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
COMPUTE_APPS_ARGS = (
    f"--query-compute-apps={','.join(COMPUTE_APPS_FIELDS)}",
    "--format=csv,noheader,nounits",
)
NO_COMPUTE_APPS = "no running processes found"
"""What older drivers print, instead of nothing, when no compute process runs (compared lowercased)."""
LIST_UNITS_ARGS = ("list-units", "--type=service", "--all", "--plain", "--no-legend")
PROC = "/proc"
PROC_NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")
TCP_LISTEN = 0x0A
SYSTEMCTL_TIMEOUT_S = 30.0
MODES = ("before", "after")
"""When a check runs: before a config's server starts, or after it was stopped (the failure's wording)."""
Baseline = Mapping[int, int] | Mapping[str, int]
"""Each GPU's idle memory.used in MiB, by GPU index, or by the index as a string (JSON's keys)."""
_SOCKET_LINK = "socket:["
_UNIT_BULLETS = ("●", "*")


class CleanStateError(Exception):
    """systemctl failed or said what the parser does not understand, a unit did not stop, or an argument
    is wrong; the message says which."""


# --- what was found -------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitState:
    """One unit as ``systemctl list-units`` lists it."""

    unit: str
    load: str
    active: str
    sub: str
    description: str

    @property
    def running(self) -> bool:
        return self.active not in STOPPED_STATES


@dataclass(frozen=True)
class Listener:
    """A socket LISTENing on the port, and the processes holding it (none where /proc does not say)."""

    port: int
    address: str
    inode: int
    pids: list[int]
    commands: list[str]
    units: list[str | None]
    """The systemd unit of each pid (``unit_of_cgroup``), None for a process of no service."""


@dataclass(frozen=True)
class Process:
    """A process of the serving user."""

    pid: int
    command: str
    """Its command line, cut to COMMAND_CHARS; ``[comm]`` for a process without one (a kernel thread)."""
    unit: str | None
    """The systemd service it belongs to; None outside any."""


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's row of the memory query."""

    index: int
    uuid: str
    used_mib: int | None
    """None when nvidia-smi cannot tell (``[N/A]``)."""


@dataclass(frozen=True)
class ComputeApp:
    """One row of the compute-apps query: a process with a CUDA context on a GPU."""

    pid: int | None
    process_name: str | None
    used_memory_mib: int | None
    gpu_uuid: str | None
    gpu_index: int | None = None
    """The GPU's index, from the memory query's uuids; None when no GPU there has the uuid (MIG)."""


@dataclass(frozen=True)
class GpuState:
    """What nvidia-smi says of the GPUs' memory and compute processes now."""

    gpus: list[GpuMemory]
    apps: list[ComputeApp]
    sources: dict[str, str] = field(default_factory=dict)
    """The commands that said it (keys ``memory``, ``apps``)."""


@dataclass(frozen=True)
class Finding:
    """One thing that is not clean: its sentence, and the units it belongs to, where known."""

    kind: str
    """unit | listener | process | gpu_process | gpu_memory"""
    text: str
    units: tuple[str, ...] = ()


@dataclass(frozen=True)
class CleanState:
    """A check's result: ``found`` holds one sentence per finding; ``clean`` when there is none."""

    clean: bool
    found: list[str]
    details: dict[str, Any]
    """What the check read, JSON-able: ``units`` (those not stopped), ``listeners``, ``processes``, ``gpus``
    (each with its baseline and limit; null without nvidia-smi), ``gpu_processes``, and the check's
    arguments (``port``, ``user``, ``unit_pattern``, ``baseline``, ``tolerance_mib``)."""
    stopped: list[str] = field(default_factory=list)
    """The units ``wait_clean`` stopped; in a dry run, those it would stop."""
    excused: list[str] = field(default_factory=list)
    """In a dry run: the findings of the units it would stop (not in ``found``, not counted against
    ``clean``)."""
    waited_s: float = 0.0
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "found": self.found,
            "stopped": self.stopped,
            "excused": self.excused,
            "details": self.details,
            "waited_s": round(self.waited_s, 3),
        }

    def excusing(self, units: Iterable[str]) -> CleanState:
        """The state as it would be judged once ``units`` were stopped: their own findings excused, and
        every GPU memory finding with them (memory says nothing of its owner; a stopped server frees it)."""
        stopping = set(units)
        if not stopping:
            return self
        kept = [f for f in self.findings if not _belongs_to(f, stopping)]
        excused = [f.text for f in self.findings if _belongs_to(f, stopping)]
        return replace(
            self, clean=not kept, found=[f.text for f in kept], excused=excused, findings=tuple(kept)
        )


def _belongs_to(finding: Finding, stopping: set[str]) -> bool:
    if finding.kind == "gpu_memory":
        return True
    return bool(finding.units) and set(finding.units) <= stopping


# --- systemd units ----------------------------------------------------------------------------------


def parse_unit_list(text: str, source: str) -> list[UnitState]:
    """The units of ``systemctl list-units --plain --no-legend`` output: UNIT LOAD ACTIVE SUB DESCRIPTION,
    a failed unit's line possibly led by a bullet."""
    units = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if fields and fields[0] in _UNIT_BULLETS:
            fields = fields[1:]
        if not fields:
            continue
        if len(fields) < 4 or not fields[0].endswith(".service"):
            raise CleanStateError(
                f"{source}: line {number}: expected UNIT LOAD ACTIVE SUB DESCRIPTION of a service: {line!r}"
            )
        unit, load, active, sub = fields[:4]
        units.append(UnitState(unit, load, active, sub, " ".join(fields[4:])))
    return units


def listed_units(pattern: str = SERVER_UNIT_GLOB) -> list[UnitState]:
    """Every service systemd knows that matches ``pattern``, in any state."""
    argv = ["systemctl", *LIST_UNITS_ARGS, pattern]
    return parse_unit_list(_systemctl(argv), " ".join(argv))


def running_units(pattern: str = SERVER_UNIT_GLOB) -> list[str]:
    """The services matching ``pattern`` that are not stopped: active, activating, deactivating, ..."""
    return [unit.unit for unit in listed_units(pattern) if unit.running]


def stop(units: list[str], timeout_s: float) -> None:
    """``systemctl stop`` the units, waiting for the stop jobs up to ``timeout_s``.

    A stop still running then is left to systemd (the unit shows as deactivating to the next check).
    """
    with contextlib.suppress(subprocess.TimeoutExpired):
        _systemctl(["systemctl", "stop", *units], timeout_s=timeout_s)


def _systemctl(argv: list[str], timeout_s: float = SYSTEMCTL_TIMEOUT_S) -> str:
    command = " ".join(argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except OSError as exc:
        raise CleanStateError(f"{command}: cannot run: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[:500]
        raise CleanStateError(f"{command}: exit status {done.returncode}: {said or 'no output'}")
    return done.stdout


# --- /proc: sockets and processes -------------------------------------------------------------------


@dataclass(frozen=True)
class TcpSocket:
    """One line of /proc/net/tcp or tcp6: the local address and port, the TCP state, the socket's inode."""

    address: str
    port: int
    state: int
    inode: int


def parse_proc_net_tcp(text: str, source: str) -> list[TcpSocket]:
    """The sockets of /proc/net/tcp or /proc/net/tcp6: a header line, then ``sl local rem st ... inode``."""
    lines = text.splitlines()
    if not lines or not lines[0].split() or lines[0].split()[0] != "sl":
        raise CleanStateError(f"{source}: line 1: expected the header 'sl local_address ...': {lines[:1]}")
    sockets = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split()
        if not fields:
            continue
        try:
            address, port = fields[1].split(":")
            sockets.append(TcpSocket(_ip(address), int(port, 16), int(fields[3], 16), int(fields[9])))
        except (IndexError, ValueError):
            raise CleanStateError(f"{source}: line {number}: not a socket's line: {line!r}") from None
    return sockets


def _ip(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    # The kernel prints the address as 32-bit words, each in the host's byte order.
    if sys.byteorder == "little":
        raw = b"".join(raw[at : at + 4][::-1] for at in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw))


def listeners(port: int) -> list[Listener]:
    """The sockets LISTENing on TCP ``port`` (IPv4 and IPv6), each with the processes that hold it."""
    found = []
    for path in PROC_NET_TCP:
        try:
            with open(path, encoding="ascii") as table:
                text = table.read()
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
        found += [s for s in parse_proc_net_tcp(text, path) if s.state == TCP_LISTEN and s.port == port]
    if not found:
        return []
    owners = _socket_owners({sock.inode for sock in found})
    result = []
    for sock in found:
        pids = sorted(owners.get(sock.inode, ()))
        result.append(
            Listener(
                port=sock.port,
                address=sock.address,
                inode=sock.inode,
                pids=pids,
                commands=[command_line(pid) for pid in pids],
                units=[unit_of_pid(pid) for pid in pids],
            )
        )
    return result


def _pids() -> Iterator[int]:
    for name in os.listdir(PROC):
        if name.isdigit():
            yield int(name)


def _socket_owners(inodes: set[int]) -> dict[int, set[int]]:
    """pid of every process with an fd on one of the socket ``inodes``, by inode (a forked server shares
    its listening socket)."""
    owners: dict[int, set[int]] = {}
    for pid in _pids():
        fd_dir = f"{PROC}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # gone, or another user's without root
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target.startswith(_SOCKET_LINK) and (inode := int(target[len(_SOCKET_LINK) : -1])) in inodes:
                owners.setdefault(inode, set()).add(pid)
    return owners


def command_line(pid: int) -> str:
    """The process's command line, arguments joined by spaces and cut to COMMAND_CHARS; ``[comm]`` for a
    process without one; ``?`` for one that is gone."""
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as cmdline:
            raw = cmdline.read()
        command = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
        if not command:
            with open(f"{PROC}/{pid}/comm", encoding="utf-8", errors="replace") as comm:
                command = f"[{comm.read().strip()}]"
    except OSError:
        return "?"
    return command if len(command) <= COMMAND_CHARS else command[: COMMAND_CHARS - 3] + "..."


def unit_of_cgroup(text: str) -> str | None:
    """The systemd service of a process from its /proc/PID/cgroup: in the unified line (``0::PATH``) or the
    ``name=systemd`` hierarchy's, the last component of PATH ending in ``.service``; None when there is
    none (a session scope, the root)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or parts[1] not in ("", "name=systemd"):
            continue
        services = [part for part in parts[2].split("/") if part.endswith(".service")]
        if services:
            return services[-1]
    return None


def unit_of_pid(pid: int) -> str | None:
    try:
        with open(f"{PROC}/{pid}/cgroup", encoding="utf-8") as cgroup:
            return unit_of_cgroup(cgroup.read())
    except OSError:
        return None


def _real_uid(status: str) -> int | None:
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


def user_processes(user: str) -> list[Process]:
    """The processes whose real uid is ``user``'s; CleanStateError when the host has no such user."""
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        raise CleanStateError(f"user {user!r}: no such user on this host") from None
    processes = []
    for pid in _pids():
        try:
            with open(f"{PROC}/{pid}/status", encoding="utf-8", errors="replace") as status:
                real_uid = _real_uid(status.read())
        except OSError:  # gone since the listing
            continue
        if real_uid == uid:
            processes.append(Process(pid=pid, command=command_line(pid), unit=unit_of_pid(pid)))
    return processes


# --- GPUs -------------------------------------------------------------------------------------------


def _mib(value: str, where: str, name: str) -> int | None:
    """An integer of MiB, optionally with its unit; None for a bracketed answer (``[N/A]``)."""
    if value.startswith("["):
        return None
    number = value.removesuffix("MiB").strip()
    if not number.isdigit():
        raise GpuFactsError(f"{where}: {name}: {value!r} is not a number of MiB")
    return int(number)


def parse_memory(text: str, source: str) -> list[GpuMemory]:
    """The GPUs of ``--query-gpu=index,uuid,memory.used --format=csv,noheader,nounits``: one per line."""
    gpus = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}: line {number}"
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(MEMORY_FIELDS):
            raise GpuFactsError(
                f"{where}: {len(cells)} values, expected {len(MEMORY_FIELDS)} ({', '.join(MEMORY_FIELDS)}): "
                f"{line!r}"
            )
        index, uuid, used = cells
        if not index.isdigit():
            raise GpuFactsError(f"{where}: index: {index!r} is not a GPU index")
        if not uuid or uuid.startswith("["):
            raise GpuFactsError(f"{where}: uuid: no value ({uuid!r})")
        gpus.append(GpuMemory(index=int(index), uuid=uuid, used_mib=_mib(used, where, "memory.used")))
    if not gpus:
        raise GpuFactsError(f"{source}: no GPU listed")
    return gpus


def parse_compute_apps(text: str, source: str) -> list[ComputeApp]:
    """The processes of ``--query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader,
    nounits``; empty output, or ``No running processes found``, is none.

    nvidia-smi does not quote: a process name holding a comma is what lies between the first and the last
    two values."""
    apps = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.lower() == NO_COMPUTE_APPS:
            continue
        where = f"{source}: line {number}"
        cells = [cell.strip() for cell in stripped.split(",")]
        if len(cells) < len(COMPUTE_APPS_FIELDS):
            raise GpuFactsError(
                f"{where}: {len(cells)} values, expected {len(COMPUTE_APPS_FIELDS)} "
                f"({', '.join(COMPUTE_APPS_FIELDS)}): {line!r}"
            )
        pid, name, used, uuid = cells[0], ",".join(cells[1:-2]).strip(), cells[-2], cells[-1]
        if not (pid.isdigit() or pid.startswith("[")):
            raise GpuFactsError(f"{where}: pid: {pid!r} is not a process id")
        apps.append(
            ComputeApp(
                pid=int(pid) if pid.isdigit() else None,
                process_name=None if name.startswith("[") or not name else name,
                used_memory_mib=_mib(used, where, "used_memory"),
                gpu_uuid=None if uuid.startswith("[") or not uuid else uuid,
            )
        )
    return apps


def gpu_state_from(*, memory: str, apps: str, sources: dict[str, str]) -> GpuState:
    """The state from both queries' outputs; ``sources`` names each (keys ``memory``, ``apps``)."""
    gpus = parse_memory(memory, sources["memory"])
    by_uuid = {gpu.uuid: gpu.index for gpu in gpus}
    listed = [
        replace(app, gpu_index=by_uuid.get(app.gpu_uuid or ""))
        for app in parse_compute_apps(apps, sources["apps"])
    ]
    return GpuState(gpus=gpus, apps=listed, sources=sources)


def gpu_state(nvidia_smi: str = "nvidia-smi") -> GpuState | None:
    """nvidia-smi's view of the GPUs' memory and compute processes; None without nvidia-smi (a host
    without NVIDIA GPUs). Raises ``GpuFactsError``."""
    executable = shutil.which(nvidia_smi)
    if executable is None:
        return None
    commands = {"memory": MEMORY_ARGS, "apps": COMPUTE_APPS_ARGS}
    outputs = {key: run_nvidia_smi(executable, args) for key, args in commands.items()}
    sources = {key: " ".join([nvidia_smi, *args]) for key, args in commands.items()}
    return gpu_state_from(memory=outputs["memory"], apps=outputs["apps"], sources=sources)


def idle_baseline(
    *, unit_pattern: str = SERVER_UNIT_GLOB, nvidia_smi: str = "nvidia-smi"
) -> dict[int, int] | None:
    """Each GPU's memory.used in MiB, by index, while no fairbench server runs; None without nvidia-smi.

    A baseline taken beside a server would let that server's memory pass every later check: a running
    fairbench unit or any GPU compute process raises CleanStateError instead. A GPU whose memory.used is
    unknown has no baseline (and is not compared)."""
    state = gpu_state(nvidia_smi)
    if state is None:
        return None
    busy = [f"unit {unit} runs" for unit in running_units(unit_pattern)]
    busy += [_app_sentence(app, None) for app in state.apps]
    if busy:
        raise CleanStateError("cannot record an idle GPU baseline: " + "; ".join(busy))
    return {gpu.index: gpu.used_mib for gpu in state.gpus if gpu.used_mib is not None}


def as_baseline(baseline: Mapping[Any, object] | None) -> dict[int, int] | None:
    """A baseline by GPU index, from one keyed by index or by the index as a string (as JSON holds it);
    CleanStateError for a key that is no GPU index or a value that is no whole number of MiB."""
    if baseline is None:
        return None
    parsed = {}
    for key, value in baseline.items():
        if not _whole(key):
            raise CleanStateError(f"baseline: {key!r} is not a GPU index")
        if not _whole(value):
            raise CleanStateError(f"baseline: GPU {key}: {value!r} is not a number of MiB")
        parsed[int(str(key))] = int(str(value))
    return parsed


def _whole(value: object) -> bool:
    """A non-negative integer, or its decimal digits (not ``True``, which is an int to Python)."""
    return (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (
        isinstance(value, str) and value.isdigit()
    )


def baseline_to_json(baseline: Mapping[int, int] | None) -> dict[str, int] | None:
    return None if baseline is None else {str(index): mib for index, mib in sorted(baseline.items())}


# --- the check --------------------------------------------------------------------------------------


def _owners(pids: list[int], commands: list[str], units: list[str | None]) -> str:
    return " and ".join(
        f"pid {pid} ({command}), unit {unit or 'none'}"
        for pid, command, unit in zip(pids, commands, units, strict=True)
    )


def _app_sentence(app: ComputeApp, unit: str | None, command: str | None = None) -> str:
    gpu = f"GPU {app.gpu_index}" if app.gpu_index is not None else f"GPU {app.gpu_uuid or 'unknown'}"
    pid = f"pid {app.pid}" if app.pid is not None else "pid unknown"
    memory = f"{app.used_memory_mib} MiB" if app.used_memory_mib is not None else "unknown memory"
    return (
        f"{gpu} runs compute process {pid} ({command or app.process_name or 'unknown'}) using {memory}, "
        f"unit {unit or 'none'}"
    )


def assess(
    *,
    port: int,
    user: str,
    units: list[UnitState],
    listening: list[Listener],
    processes: list[Process],
    gpu: GpuState | None,
    baseline: Mapping[int, int] | None,
    tolerance_mib: int,
    app_units: Mapping[int, str | None] | None = None,
    app_commands: Mapping[int, str] | None = None,
) -> list[Finding]:
    """The findings of what a check read: one per unit not stopped, listener, process of the user, GPU
    compute process, and GPU over baseline + tolerance. ``app_units`` and ``app_commands``: by pid, the unit
    and command line of each compute process where /proc knows them."""
    app_units = app_units or {}
    app_commands = app_commands or {}
    findings = [
        Finding("unit", f"unit {unit.unit} is {unit.active} ({unit.sub})", (unit.unit,))
        for unit in units
        if unit.running
    ]
    for sock in listening:
        held = (
            _owners(sock.pids, sock.commands, sock.units)
            if sock.pids
            else f"a socket (inode {sock.inode}) of no process this check can read"
        )
        owned = tuple(unit for unit in sock.units if unit is not None)
        complete = len(owned) == len(sock.units) and bool(owned)
        findings.append(
            Finding("listener", f"port {port} on {sock.address} is held by {held}", owned if complete else ())
        )
    findings += [
        Finding(
            "process",
            f"user {user} runs pid {proc.pid} ({proc.command}), unit {proc.unit or 'none'}",
            (proc.unit,) if proc.unit else (),
        )
        for proc in processes
    ]
    if gpu is not None:
        for app in gpu.apps:
            unit = app_units.get(app.pid) if app.pid is not None else None
            command = app_commands.get(app.pid) if app.pid is not None else None
            findings.append(
                Finding("gpu_process", _app_sentence(app, unit, command), (unit,) if unit else ())
            )
        for memory in gpu.gpus:
            idle = (baseline or {}).get(memory.index)
            if idle is None or memory.used_mib is None or memory.used_mib <= idle + tolerance_mib:
                continue
            findings.append(
                Finding(
                    "gpu_memory",
                    f"GPU {memory.index} uses {memory.used_mib} MiB, idle baseline {idle} MiB "
                    f"(tolerance {tolerance_mib} MiB)",
                )
            )
    return findings


def check(
    *,
    port: int,
    user: str,
    unit_pattern: str = SERVER_UNIT_GLOB,
    baseline: Baseline | None,
    tolerance_mib: int | None = None,
    nvidia_smi: str = "nvidia-smi",
) -> CleanState:
    """Everything on the host that is not clean (the module docstring's list), read once.

    ``baseline``: the idle memory.used of each GPU (``idle_baseline``), keyed by index or by its string;
    None: the host had no GPU when the baseline would have been recorded (the campaign's preflight), so
    nvidia-smi is not asked (on such a host it may fail: a driver that sees no device); a GPU absent from
    it, or whose memory.used nvidia-smi cannot tell, is not compared. ``tolerance_mib``: None is
    DEFAULT_TOLERANCE_MIB. Raises CleanStateError and GpuFactsError."""
    idle = as_baseline(baseline)
    tolerance = DEFAULT_TOLERANCE_MIB if tolerance_mib is None else tolerance_mib
    if not 0 < port < 65536:
        raise CleanStateError(f"port {port}: not a TCP port")
    if tolerance < 0:
        raise CleanStateError(f"tolerance_mib {tolerance}: must not be negative")
    units = listed_units(unit_pattern)
    listening = listeners(port)
    processes = user_processes(user)
    gpu = gpu_state(nvidia_smi) if idle is not None else None
    pids = [app.pid for app in gpu.apps if app.pid is not None] if gpu else []
    app_units = {pid: unit_of_pid(pid) for pid in pids}
    app_commands = {pid: command for pid in pids if (command := command_line(pid)) != "?"}
    findings = assess(
        port=port,
        user=user,
        units=units,
        listening=listening,
        processes=processes,
        gpu=gpu,
        baseline=idle,
        tolerance_mib=tolerance,
        app_units=app_units,
        app_commands=app_commands,
    )
    details = {
        "port": port,
        "user": user,
        "unit_pattern": unit_pattern,
        "baseline": baseline_to_json(idle),
        "tolerance_mib": tolerance,
        "units": [asdict(unit) for unit in units if unit.running],
        "listeners": [asdict(sock) for sock in listening],
        "processes": [asdict(proc) for proc in processes],
        "gpus": None if gpu is None else [_gpu_json(memory, idle, tolerance) for memory in gpu.gpus],
        "gpu_processes": []
        if gpu is None
        else [
            {**asdict(app), "unit": app_units.get(app.pid) if app.pid is not None else None}
            for app in gpu.apps
        ],
    }
    return CleanState(
        clean=not findings, found=[f.text for f in findings], details=details, findings=tuple(findings)
    )


def _gpu_json(memory: GpuMemory, baseline: Mapping[int, int] | None, tolerance_mib: int) -> dict[str, Any]:
    idle = (baseline or {}).get(memory.index)
    return {
        **asdict(memory),
        "baseline_mib": idle,
        "limit_mib": None if idle is None else idle + tolerance_mib,
    }


def wait_clean(
    *,
    port: int,
    user: str,
    unit_pattern: str = SERVER_UNIT_GLOB,
    baseline: Baseline | None,
    tolerance_mib: int | None = None,
    timeout_s: float,
    poll_s: float = POLL_S,
    stop_units: bool,
    dry_run: bool = False,
    nvidia_smi: str = "nvidia-smi",
) -> CleanState:
    """Check; when not clean, with ``stop_units`` stop every fairbench unit found running (fairbench's own
    servers, left from an earlier config), then check every ``poll_s`` until clean or ``timeout_s`` passed.
    Returns the last state (``stopped``: the units it stopped); the caller fails when it is not clean.

    An already clean host costs one check and no sleep: this runs before every config. ``dry_run`` (check
    mode) checks once, stops nothing and waits for nothing: ``stopped`` lists the units it would stop, whose
    findings are excused (``CleanState.excusing``)."""
    started = time.monotonic()
    deadline = started + timeout_s

    def read() -> CleanState:
        return check(
            port=port,
            user=user,
            unit_pattern=unit_pattern,
            baseline=baseline,
            tolerance_mib=tolerance_mib,
            nvidia_smi=nvidia_smi,
        )

    state = read()
    if state.clean:
        return replace(state, waited_s=time.monotonic() - started)
    running = [unit["unit"] for unit in state.details["units"]] if stop_units else []
    if dry_run:
        return replace(state.excusing(running), stopped=running, waited_s=time.monotonic() - started)
    if running:
        stop(running, max(deadline - time.monotonic(), 1.0))
        state = read()
    while not state.clean and time.monotonic() < deadline:
        time.sleep(min(poll_s, max(deadline - time.monotonic(), 0.0)))
        state = read()
    return replace(state, stopped=running, waited_s=time.monotonic() - started)


def failure_message(state: CleanState, mode: str, timeout_s: float) -> str:
    """Why a check failed, for ``mode`` (MODES), then every finding, one per line."""
    if mode not in MODES:
        raise CleanStateError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    what = "is not clean before starting" if mode == "before" else "did not become clean after stopping"
    return "\n".join([f"the host {what} (waited {state.waited_s:.1f} s of {timeout_s:g} s):", *state.found])
