"""The clean-state check of a GPU host: its parsers against recorded output, /proc against real sockets and
processes of this test, and ``check``/``wait_clean`` against a fake nvidia-smi and a fake systemctl.

The nvidia-smi recordings (tests/fixtures/gpu/README.md) are checked against the plain ``nvidia-smi`` table
recorded at the same moment, an independent source of the same numbers.
"""

from __future__ import annotations

import ast
import os
import pwd
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fairbench.hosts.clean_state import (
    COMPUTE_APPS_ARGS,
    DEFAULT_TOLERANCE_MIB,
    LIST_UNITS_ARGS,
    MEMORY_ARGS,
    MODES,
    SERVER_UNIT_GLOB,
    CleanStateError,
    as_baseline,
    baseline_to_json,
    check,
    command_line,
    failure_message,
    gpu_state,
    gpu_state_from,
    idle_baseline,
    listeners,
    parse_compute_apps,
    parse_memory,
    parse_proc_net_tcp,
    parse_unit_list,
    running_units,
    unit_of_cgroup,
    unit_of_pid,
    user_processes,
    wait_clean,
)
from fairbench.hosts.gpu import GpuFactsError

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/fixtures/gpu"
MODULE = REPO / "plugins/modules/fairbench_clean_state.py"
UUID = "GPU-2cf08462-e19e-d354-abe3-7895807b9363"
"""The recorded H200's uuid, as the plain nvidia-smi table does not show it."""


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- nvidia-smi's two queries ---------------------------------------------------------------------


def _table() -> tuple[list[tuple[int, int]], list[tuple[int, int, str, int]]]:
    """From the plain table recorded while busy: (GPU, MiB used) of each GPU row, and (GPU, pid, name, MiB)
    of each process row."""
    table = fixture("compute-apps-busy-nvidia-smi.txt")
    gpus = re.findall(r"^\|\s+(\d+)\s+NVIDIA.*$\n^\|.*?(\d+)MiB\s*/\s*\d+MiB", table, re.M)
    processes = re.findall(r"^\|\s+(\d+)\s+\S+\s+\S+\s+(\d+)\s+C\s+(\S+)\s+(\d+)MiB\s*\|$", table, re.M)
    return (
        [(int(gpu), int(used)) for gpu, used in gpus],
        [(int(gpu), int(pid), name, int(used)) for gpu, pid, name, used in processes],
    )


def test_the_busy_recording_matches_the_table_recorded_with_it() -> None:
    table_gpus, table_processes = _table()
    assert table_gpus and table_processes
    gpus = parse_memory(fixture("query-memory-busy.txt"), "memory")
    assert [(gpu.index, gpu.used_mib) for gpu in gpus] == table_gpus
    assert [gpu.uuid for gpu in gpus] == [UUID]
    state = gpu_state_from(
        memory=fixture("query-memory-busy.txt"),
        apps=fixture("compute-apps-busy.txt"),
        sources={"memory": "memory", "apps": "apps"},
    )
    assert [
        (app.gpu_index, app.pid, app.process_name, app.used_memory_mib) for app in state.apps
    ] == table_processes
    assert [app.gpu_uuid for app in state.apps] == [UUID]


def test_values_with_units_read_as_without() -> None:
    assert parse_compute_apps(fixture("compute-apps-busy-units.txt"), "units") == parse_compute_apps(
        fixture("compute-apps-busy.txt"), "nounits"
    )


@pytest.mark.parametrize("moment", ["idle", "after"])
def test_an_idle_gpu_lists_no_process_and_less_memory_than_busy(moment: str) -> None:
    assert parse_compute_apps(fixture(f"compute-apps-{moment}.txt"), moment) == []
    (busy,) = parse_memory(fixture("query-memory-busy.txt"), "busy")
    (gpu,) = parse_memory(fixture(f"query-memory-{moment}.txt"), moment)
    assert gpu.uuid == busy.uuid and gpu.used_mib is not None and busy.used_mib is not None
    # The 2 GiB tensor and its CUDA context are what the busy recording adds.
    assert busy.used_mib - gpu.used_mib > 2048


def test_older_drivers_sentence_for_no_process_is_none() -> None:
    assert parse_compute_apps("No running processes found\n", "apps") == []


def test_bracketed_values_are_unknown() -> None:
    busy = fixture("compute-apps-busy.txt")
    pid, name, used, uuid = (cell.strip() for cell in busy.split(","))
    (app,) = parse_compute_apps(busy.replace(pid, "[N/A]").replace(used, "[N/A]"), "apps")
    assert (app.pid, app.process_name, app.used_memory_mib, app.gpu_uuid) == (None, name, None, uuid)
    (gpu,) = parse_memory(fixture("query-memory-busy.txt").replace(", 2667", ", [N/A]"), "memory")
    assert gpu.used_mib is None
    (app,) = parse_compute_apps(f"[Insufficient Permissions], [N/A], 10, {UUID}\n", "apps")
    assert (app.pid, app.process_name, app.used_memory_mib) == (None, None, 10)


def test_a_process_name_holding_a_comma_is_kept_whole() -> None:
    (app,) = parse_compute_apps(f"12, /opt/a,b/python3, 100, {UUID}\n", "apps")
    assert (app.pid, app.process_name, app.used_memory_mib, app.gpu_uuid) == (
        12,
        "/opt/a,b/python3",
        100,
        UUID,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "memory: no GPU listed"),
        ("0, GPU-1\n", "memory: line 1: 2 values, expected 3 (index, uuid, memory.used)"),
        ("0, GPU-1, 10\nx, GPU-2, 10\n", "memory: line 2: index: 'x' is not a GPU index"),
        ("0, [N/A], 10\n", "memory: line 1: uuid: no value"),
        ("0, GPU-1, 10 GiB\n", "memory: line 1: memory.used: '10 GiB' is not a number of MiB"),
    ],
)
def test_memory_errors_name_the_command_and_line(text: str, message: str) -> None:
    with pytest.raises(GpuFactsError) as raised:
        parse_memory(text, "memory")
    assert str(raised.value).startswith(message), str(raised.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("12, python3, 100\n", "apps: line 1: 3 values, expected 4 (pid, process_name, used_memory"),
        (f"\nabc, python3, 100, {UUID}\n", "apps: line 2: pid: 'abc' is not a process id"),
        (f"12, python3, lots, {UUID}\n", "apps: line 1: used_memory: 'lots' is not a number of MiB"),
    ],
)
def test_compute_apps_errors_name_the_command_and_line(text: str, message: str) -> None:
    with pytest.raises(GpuFactsError) as raised:
        parse_compute_apps(text, "apps")
    assert str(raised.value).startswith(message), str(raised.value)


# --- systemctl list-units ---------------------------------------------------------------------------

LISTING = """\
fairbench-demo-tp8.service  loaded active       running      fairbench demo tp8
fairbench-demo-ep4.service  loaded inactive     dead         fairbench demo ep4
fairbench-demo-ep8.service  loaded deactivating stop-sigterm fairbench demo ep8
● fairbench-demo-nccl.service loaded failed     failed       fairbench demo nccl
fairbench-demo-eplb.service loaded activating   start        fairbench demo eplb
"""
"""As ``systemctl list-units --type=service --all --plain --no-legend`` lists units (a failed one's line
led by its bullet)."""


def test_unit_listing_columns() -> None:
    units = parse_unit_list(LISTING, "systemctl")
    assert [(u.unit, u.load, u.active, u.sub) for u in units][:2] == [
        ("fairbench-demo-tp8.service", "loaded", "active", "running"),
        ("fairbench-demo-ep4.service", "loaded", "inactive", "dead"),
    ]
    assert units[0].description == "fairbench demo tp8"
    assert units[3].unit == "fairbench-demo-nccl.service" and units[3].active == "failed"
    # A stop under way is not clean yet; inactive and failed units run nothing.
    assert [u.unit for u in units if u.running] == [
        "fairbench-demo-tp8.service",
        "fairbench-demo-ep8.service",
        "fairbench-demo-eplb.service",
    ]
    assert parse_unit_list("", "systemctl") == []


@pytest.mark.parametrize("line", ["fairbench-demo-tp8.service loaded active", "loaded active running x"])
def test_a_unit_line_of_another_shape_is_an_error(line: str) -> None:
    with pytest.raises(CleanStateError, match=r"^systemctl: line 2: expected UNIT LOAD ACTIVE SUB"):
        parse_unit_list(LISTING.splitlines()[0] + "\n" + line + "\n", "systemctl")


# --- /proc ------------------------------------------------------------------------------------------


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server
    server.close()


def test_a_listening_socket_is_found_with_this_process_as_its_owner(listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    # A connection to it shares its port on one side: only the listener counts.
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listening.accept()
    (found,) = listeners(port)
    assert (found.port, found.address) == (port, "127.0.0.1")
    assert found.inode == os.fstat(listening.fileno()).st_ino
    assert found.pids == [os.getpid()]
    assert found.commands == [command_line(os.getpid())]
    assert found.units == [unit_of_pid(os.getpid())]
    client.close()
    accepted.close()
    listening.close()
    assert listeners(port) == []


def test_a_bound_socket_that_does_not_listen_is_none() -> None:
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        assert listeners(bound.getsockname()[1]) == []


def test_proc_net_tcp_lines() -> None:
    # Recorded on x86-64 (little-endian words): a listener on 127.0.0.1:42963, one end of a connection to
    # it, and a listener on [::1]:43401.
    tcp = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   1: 0100007F:A7D3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
        "3631970 1 00000000231f1906 100 0 0 10 0\n"
        "   5: 0100007F:A7D3 0100007F:B224 01 00000000:00000000 00:00000000 00000000     0        0 "
        "3631972 1 00000000b5f60c07 20 0 0 10 -1\n"
    )
    tcp6 = (
        "  sl  local_address                         remote_address                        st tx_queue "
        "rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000000000000000000001000000:A989 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000     0        0 3630362 1 0000000008a61c7a 100 0 0 10 0\n"
    )
    assert [(s.address, s.port, s.state, s.inode) for s in parse_proc_net_tcp(tcp, "tcp")] == [
        ("127.0.0.1", 42963, 0x0A, 3631970),
        ("127.0.0.1", 42963, 0x01, 3631972),
    ]
    assert [(s.address, s.port, s.inode) for s in parse_proc_net_tcp(tcp6, "tcp6")] == [
        ("::1", 43401, 3630362)
    ]
    with pytest.raises(CleanStateError, match=r"^tcp: line 2: not a socket's line"):
        parse_proc_net_tcp(tcp.splitlines()[0] + "\n   1: 0100007F 0A\n", "tcp")


def test_the_processes_of_a_user_include_this_one() -> None:
    me = pwd.getpwuid(os.getuid()).pw_name
    mine = {proc.pid: proc for proc in user_processes(me)}
    assert os.getpid() in mine
    assert mine[os.getpid()].command == command_line(os.getpid())
    assert "pytest" in mine[os.getpid()].command or "python" in mine[os.getpid()].command
    assert mine[os.getpid()].unit == unit_of_pid(os.getpid())
    with pytest.raises(CleanStateError, match=r"^user 'no-such-user-x': no such user on this host$"):
        user_processes("no-such-user-x")


def test_a_long_command_line_is_cut_and_a_gone_process_has_none() -> None:
    script = "import time; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script, "x" * 400])
    start = f"{sys.executable} -c {script} xxx"
    try:
        deadline = time.monotonic() + 5
        # Until its exec is done the child is a copy of this interpreter, with this one's command line.
        while not command_line(child.pid).startswith(start) and time.monotonic() < deadline:
            time.sleep(0.01)
        command = command_line(child.pid)
        assert command.startswith(start) and command.endswith("...") and len(command) == 200, command
    finally:
        child.kill()
        child.wait()
    assert command_line(child.pid) == "?"


@pytest.mark.parametrize(
    ("cgroup", "unit"),
    [
        ("0::/system.slice/fairbench-demo-tp8.service\n", "fairbench-demo-tp8.service"),
        ("0::/system.slice/fairbench-demo-tp8.service/payload\n", "fairbench-demo-tp8.service"),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-x.service\n", "app-x.service"),
        (
            "12:pids:/system.slice/ssh.service\n"
            "4:memory:/process_api/b93\n"
            "1:name=systemd:/system.slice/fairbench-demo-ep4.service\n",
            "fairbench-demo-ep4.service",
        ),
        ("9:name=systemd:/\n0::/\n", None),
    ],
)
def test_the_unit_of_a_process_is_its_cgroups_service(cgroup: str, unit: str | None) -> None:
    assert unit_of_cgroup(cgroup) == unit


# --- check and wait_clean, with a fake nvidia-smi and systemctl -------------------------------------


def idle_user() -> str:
    """A user of this machine that runs no process: the serving user of a clean host."""
    for entry in sorted(pwd.getpwall(), key=lambda entry: entry.pw_name != "nobody"):
        if not user_processes(entry.pw_name):
            return entry.pw_name
    raise AssertionError("every user of this machine runs a process")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeHost:
    """An nvidia-smi answering each memory query with the next of ``memory`` (the last one repeats), and a
    systemctl listing ``units.txt``; ``stop`` marks the unit inactive. Both log their calls."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dir = directory
        bin_dir = directory / "bin"
        bin_dir.mkdir()
        self.nvidia_smi = bin_dir / "nvidia-smi"
        self.set_memory([fixture("query-memory-idle.txt")])
        self.set_apps(fixture("compute-apps-idle.txt"))
        self.set_units("")
        memory, apps = shlex.quote(" ".join(MEMORY_ARGS)), shlex.quote(" ".join(COMPUTE_APPS_ARGS))
        here = shlex.quote(str(directory))
        self.nvidia_smi.write_text(
            "#!/usr/bin/env bash\n"
            f"cd {here}\n"
            'case "$*" in\n'
            f"    {memory})\n"
            "        echo memory >> nvidia-smi.log\n"
            "        n=$(grep -c memory nvidia-smi.log); last=$(ls memory-*.txt | wc -l)\n"
            '        cat "memory-$(( n < last ? n : last )).txt" ;;\n'
            f"    {apps}) echo apps >> nvidia-smi.log; cat apps.txt ;;\n"
            '    *) echo "fake nvidia-smi: no answer to $*" >&2; exit 2 ;;\n'
            "esac\n"
        )
        systemctl = bin_dir / "systemctl"
        systemctl.write_text(
            "#!/usr/bin/env bash\n"
            f"cd {here}\n"
            'echo "$*" >> systemctl.log\n'
            'case "$1" in\n'
            "    list-units) cat units.txt ;;\n"
            '    stop) shift; for unit in "$@"; do\n'
            '        sed -i "s/^$unit .*/$unit loaded inactive dead stopped/" units.txt; done ;;\n'
            "    *) exit 1 ;;\n"
            "esac\n"
        )
        for script in (self.nvidia_smi, systemctl):
            script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def set_memory(self, answers: list[str]) -> None:
        for old in self.dir.glob("memory-*.txt"):
            old.unlink()
        for number, answer in enumerate(answers, start=1):
            (self.dir / f"memory-{number}.txt").write_text(answer)

    def set_apps(self, answer: str) -> None:
        (self.dir / "apps.txt").write_text(answer)

    def set_units(self, listing: str) -> None:
        (self.dir / "units.txt").write_text(listing)

    def calls(self, program: str) -> list[str]:
        log = self.dir / f"{program}.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHost:
    return FakeHost(tmp_path, monkeypatch)


BUSY = fixture("query-memory-busy.txt")
IDLE = fixture("query-memory-idle.txt")
BASELINE = {"0": 0}
"""The recorded GPU's idle memory.used, as JSON would carry it."""


def test_a_clean_host(host: FakeHost) -> None:
    state = check(port=free_port(), user=idle_user(), baseline=BASELINE, nvidia_smi=str(host.nvidia_smi))
    assert state.clean and state.found == []
    assert state.details["gpus"] == [
        {"index": 0, "uuid": UUID, "used_mib": 0, "baseline_mib": 0, "limit_mib": DEFAULT_TOLERANCE_MIB}
    ]
    assert host.calls("systemctl") == [" ".join([*LIST_UNITS_ARGS, SERVER_UNIT_GLOB])]


def test_gpu_memory_over_baseline_and_tolerance_is_not_clean(host: FakeHost) -> None:
    host.set_memory([BUSY])
    args = {"port": free_port(), "user": idle_user(), "nvidia_smi": str(host.nvidia_smi)}
    state = check(**args, baseline={0: 512}, tolerance_mib=1024)
    assert not state.clean
    assert state.found == ["GPU 0 uses 2667 MiB, idle baseline 512 MiB (tolerance 1024 MiB)"]
    assert state.details["gpus"][0]["limit_mib"] == 1536
    # Within the tolerance, or without a baseline to compare with, it is clean.
    assert check(**args, baseline={0: 512}, tolerance_mib=2155).clean
    assert check(**args, baseline=None).clean
    assert check(**args, baseline={"1": 0}).clean
    # No baseline: the host had no GPU at preflight, and nvidia-smi is not asked (a driver that sees no
    # device fails it).
    assert check(**{**args, "nvidia_smi": "/nonexistent/nvidia-smi"}, baseline=None).clean


def test_a_gpu_compute_process_is_named_with_its_command_and_unit(host: FakeHost) -> None:
    recorded = fixture("compute-apps-busy.txt")
    host.set_apps(recorded.replace("445,", f"{os.getpid()},", 1))
    # A GPU host, whatever its baseline: its compute processes are listed.
    state = check(port=free_port(), user=idle_user(), baseline={}, nvidia_smi=str(host.nvidia_smi))
    unit = unit_of_pid(os.getpid()) or "none"
    command = command_line(os.getpid())
    assert state.found == [
        f"GPU 0 runs compute process pid {os.getpid()} ({command}) using 2658 MiB, unit {unit}"
    ]
    assert state.details["gpu_processes"][0]["pid"] == os.getpid()


def test_units_ports_and_user_processes_are_each_a_finding(host: FakeHost, listening: socket.socket) -> None:
    host.set_units(LISTING)
    me = pwd.getpwuid(os.getuid()).pw_name
    port = listening.getsockname()[1]
    state = check(port=port, user=me, baseline=None, nvidia_smi=str(host.nvidia_smi))
    unit = unit_of_pid(os.getpid()) or "none"
    mine = f"pid {os.getpid()} ({command_line(os.getpid())}), unit {unit}"
    assert state.found[:4] == [
        "unit fairbench-demo-tp8.service is active (running)",
        "unit fairbench-demo-ep8.service is deactivating (stop-sigterm)",
        "unit fairbench-demo-eplb.service is activating (start)",
        f"port {port} on 127.0.0.1 is held by {mine}",
    ]
    assert f"user {me} runs {mine}" in state.found[4:]
    assert [unit["unit"] for unit in state.details["units"]] == [
        "fairbench-demo-tp8.service",
        "fairbench-demo-ep8.service",
        "fairbench-demo-eplb.service",
    ]
    assert state.details["listeners"][0]["pids"] == [os.getpid()]


def test_the_running_units_of_the_listing(host: FakeHost) -> None:
    host.set_units(LISTING)
    assert running_units("fairbench-demo-*.service") == [
        "fairbench-demo-tp8.service",
        "fairbench-demo-ep8.service",
        "fairbench-demo-eplb.service",
    ]
    assert host.calls("systemctl") == [" ".join([*LIST_UNITS_ARGS, "fairbench-demo-*.service"])]


def test_no_nvidia_smi_checks_no_gpu(host: FakeHost, tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere" / "nvidia-smi")
    assert gpu_state(missing) is None
    state = check(port=free_port(), user=idle_user(), baseline=BASELINE, nvidia_smi=missing)
    assert state.clean and state.details["gpus"] is None


@pytest.mark.timing  # its bound is wall time
def test_an_already_clean_host_costs_one_check_and_no_sleep(host: FakeHost) -> None:
    port, user = free_port(), idle_user()
    started = time.monotonic()
    state = wait_clean(
        port=port,
        user=user,
        baseline=BASELINE,
        timeout_s=30,
        poll_s=5,
        stop_units=True,
        nvidia_smi=str(host.nvidia_smi),
    )
    elapsed = time.monotonic() - started
    assert state.clean and state.stopped == []
    assert elapsed < 0.1, elapsed
    assert host.calls("nvidia-smi") == ["memory", "apps"]


def test_wait_clean_returns_once_the_memory_is_freed(host: FakeHost) -> None:
    host.set_memory([BUSY, BUSY, BUSY, IDLE])
    state = wait_clean(
        port=free_port(),
        user=idle_user(),
        baseline=BASELINE,
        timeout_s=30,
        poll_s=0.05,
        stop_units=True,
        nvidia_smi=str(host.nvidia_smi),
    )
    assert state.clean and state.found == []
    # The fourth check was clean, and the last.
    assert host.calls("nvidia-smi").count("memory") == 4
    assert 0.15 <= state.waited_s < 5


def test_wait_clean_times_out_with_the_last_findings(host: FakeHost) -> None:
    host.set_memory([BUSY])
    started = time.monotonic()
    state = wait_clean(
        port=free_port(),
        user=idle_user(),
        baseline=BASELINE,
        timeout_s=0.5,
        poll_s=0.05,
        stop_units=True,
        nvidia_smi=str(host.nvidia_smi),
    )
    assert not state.clean
    assert state.found == [
        f"GPU 0 uses 2667 MiB, idle baseline 0 MiB (tolerance {DEFAULT_TOLERANCE_MIB} MiB)"
    ]
    assert 0.5 <= state.waited_s <= time.monotonic() - started < 3
    assert host.calls("nvidia-smi").count("memory") > 2
    message = failure_message(state, "before", 0.5)
    assert message.splitlines() == [
        f"the host is not clean before starting (waited {state.waited_s:.1f} s of 0.5 s):",
        *state.found,
    ]
    assert failure_message(state, "after", 0.5).startswith("the host did not become clean after stopping (")


def test_wait_clean_stops_fairbench_units_left_running(host: FakeHost) -> None:
    host.set_units(LISTING)
    args = {
        "port": free_port(),
        "user": idle_user(),
        "baseline": BASELINE,
        "nvidia_smi": str(host.nvidia_smi),
    }
    state = wait_clean(**args, timeout_s=10, poll_s=0.05, stop_units=True)
    running = ["fairbench-demo-tp8.service", "fairbench-demo-ep8.service", "fairbench-demo-eplb.service"]
    assert state.clean and state.stopped == running
    assert [call for call in host.calls("systemctl") if call.startswith("stop")] == [
        f"stop {' '.join(running)}"
    ]
    assert running_units(SERVER_UNIT_GLOB) == []


def test_without_stop_units_a_running_unit_is_waited_on_not_stopped(host: FakeHost) -> None:
    host.set_units(LISTING.splitlines()[0] + "\n")
    args = {
        "port": free_port(),
        "user": idle_user(),
        "baseline": BASELINE,
        "nvidia_smi": str(host.nvidia_smi),
    }
    state = wait_clean(**args, timeout_s=0.3, poll_s=0.05, stop_units=False)
    assert not state.clean and state.stopped == []
    assert state.found == ["unit fairbench-demo-tp8.service is active (running)"]
    assert not [call for call in host.calls("systemctl") if call.startswith("stop")]


def test_a_dry_run_stops_nothing_and_excuses_what_the_units_account_for(
    host: FakeHost, listening: socket.socket
) -> None:
    host.set_units(LISTING.splitlines()[0] + "\n")
    host.set_memory([BUSY])
    args = {"user": idle_user(), "baseline": BASELINE, "nvidia_smi": str(host.nvidia_smi)}
    state = wait_clean(**args, port=free_port(), timeout_s=30, poll_s=5, stop_units=True, dry_run=True)
    assert state.clean and state.found == []
    assert state.stopped == ["fairbench-demo-tp8.service"]
    assert state.excused == [
        "unit fairbench-demo-tp8.service is active (running)",
        f"GPU 0 uses 2667 MiB, idle baseline 0 MiB (tolerance {DEFAULT_TOLERANCE_MIB} MiB)",
    ]
    assert not [call for call in host.calls("systemctl") if call.startswith("stop")]
    assert state.waited_s < 1
    # A socket of no unit on the port is not the units' doing: that fails the dry run too.
    port = listening.getsockname()[1]
    held = wait_clean(**args, port=port, timeout_s=30, poll_s=5, stop_units=True, dry_run=True)
    unit = unit_of_pid(os.getpid()) or "none"
    assert not held.clean and held.stopped == ["fairbench-demo-tp8.service"]
    assert held.found == [
        f"port {port} on 127.0.0.1 is held by pid {os.getpid()} ({command_line(os.getpid())}), unit {unit}"
    ]


def test_the_idle_baseline(host: FakeHost, tmp_path: Path) -> None:
    assert idle_baseline(nvidia_smi=str(host.nvidia_smi)) == {0: 0}
    assert baseline_to_json({1: 5, 0: 512}) == {"0": 512, "1": 5}
    assert idle_baseline(nvidia_smi=str(tmp_path / "nowhere")) is None
    # Beside a server, memory is not idle.
    host.set_apps(fixture("compute-apps-busy.txt"))
    with pytest.raises(
        CleanStateError, match=r"^cannot record an idle GPU baseline: GPU 0 runs compute process pid 445 "
    ):
        idle_baseline(nvidia_smi=str(host.nvidia_smi))
    host.set_apps("")
    host.set_units(LISTING)
    with pytest.raises(
        CleanStateError, match=r"unit fairbench-demo-tp8.service runs; unit fairbench-demo-ep8"
    ):
        idle_baseline(nvidia_smi=str(host.nvidia_smi))


def test_baselines_keyed_by_index_or_its_string() -> None:
    assert as_baseline({"0": 512, "1": 0}) == {0: 512, 1: 0} == as_baseline({0: 512, 1: 0})
    assert as_baseline(None) is None
    with pytest.raises(CleanStateError, match=r"^baseline: 'gpu0' is not a GPU index"):
        as_baseline({"gpu0": 1})
    with pytest.raises(CleanStateError, match=r"^baseline: GPU 0: True is not a number of MiB"):
        as_baseline({"0": True})
    with pytest.raises(CleanStateError, match=r"^baseline: GPU 0: -1 is not a number of MiB"):
        as_baseline({"0": -1})


def test_a_failing_systemctl_is_an_error_naming_it(host: FakeHost) -> None:
    (host.dir / "bin" / "systemctl").write_text(
        "#!/usr/bin/env bash\necho 'Failed to connect to bus' >&2\nexit 1\n"
    )
    with pytest.raises(
        CleanStateError, match=r"^systemctl list-units .*: exit status 1: Failed to connect to bus$"
    ):
        running_units()


# --- the Ansible module's documented defaults -------------------------------------------------------


def _module_documentation() -> dict[str, object]:
    tree = ast.parse(MODULE.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            "DOCUMENTATION"
        ]:
            documentation = yaml.safe_load(ast.literal_eval(node.value))
            assert isinstance(documentation, dict)
            return documentation
    raise AssertionError(f"{MODULE}: no DOCUMENTATION")


def test_the_modules_documented_defaults_are_fairbenchs() -> None:
    options = _module_documentation()["options"]
    assert isinstance(options, dict)
    assert options["unit_pattern"]["default"] == SERVER_UNIT_GLOB
    assert options["tolerance_mib"]["default"] == DEFAULT_TOLERANCE_MIB
    assert options["mode"]["choices"] == list(MODES)
