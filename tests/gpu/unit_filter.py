"""Does a GPU server still work under the serving unit's system-call filter? Checked on a GPU machine.

The unit (roles/serving/templates/config_server.service.j2) restricts system calls
(``SystemCallFilter=``, refused calls failing with EPERM) and socket address families
(``RestrictAddressFamilies=``). The lab hosts have no GPU, so this script runs what a GPU server does
under the same filter, without systemd: CUDA, a one-rank NCCL all-reduce, a CUDA tensor handed to a
second process (CUDA IPC over a Unix socket), and a Triton kernel compiled cold. Each probe runs
unfiltered, then filtered; a probe that only fails filtered names a need the unit's filter misses.

    python tests/gpu/unit_filter.py prepare build/unit-filter   # here: needs systemd-analyze
    python tests/gpu/unit_filter.py check build/unit-filter     # on the GPU machine: needs gcc, torch

``prepare`` expands the template's filter with systemd-analyze (the lists differ between systemd
releases: the GPU hosts' systemd decides, so prepare on a machine of the same release).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE.parents[1] / "roles" / "serving" / "templates" / "config_server.service.j2"
LIBSECCOMP = "/lib/x86_64-linux-gnu/libseccomp.so.2"


def _setting(name: str) -> list[str]:
    words: list[str] = []
    for line in TEMPLATE.read_text().splitlines():
        if line.startswith(f"{name}="):
            words += line.split("=", 1)[1].split()
    if not words:
        raise SystemExit(f"{TEMPLATE}: no {name}= line")
    return words


def _expand(group: str, seen: set[str]) -> set[str]:
    listing = subprocess.run(
        ["systemd-analyze", "syscall-filter", group], capture_output=True, text=True, check=True
    ).stdout.splitlines()[1:]
    names: set[str] = set()
    for word in (line.strip() for line in listing):
        if word.startswith("@") and word not in seen:
            seen.add(word)
            names |= _expand(word, seen)
        elif word and not word.startswith(("#", "@")):
            names.add(word)
    return names


def prepare(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    allowed: set[str] = set()
    for entry in _setting("SystemCallFilter"):
        allowed |= _expand(entry, set()) if entry.startswith("@") else {entry}
    families = [str(int(getattr(socket, name))) for name in _setting("RestrictAddressFamilies")]
    (out / "allowed.txt").write_text("\n".join(sorted(allowed)) + "\n")
    (out / "families.txt").write_text("\n".join(families) + "\n")
    shutil.copy(HERE / "seccomp_exec.c", out)
    shutil.copy(__file__, out)
    print(f"{out}: {len(allowed)} system calls, families {' '.join(families)}")


# --- the probes, each run in a fresh interpreter --------------------------------------------------


def _cuda() -> str:
    import torch  # noqa: PLC0415 - the GPU machine has it, prepare's does not

    x = torch.randn(2048, 2048, device="cuda")
    return f"matmul sum {float((x @ x).abs().sum()):.3g}"


def _nccl() -> str:
    import torch  # noqa: PLC0415 - the GPU machine has it, prepare's does not
    import torch.distributed as dist  # noqa: PLC0415 - the GPU machine has it, prepare's does not

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29555")
    dist.init_process_group("nccl", rank=0, world_size=1)
    tensor = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    return f"all-reduce {float(tensor[0])}"


def _receive(queue: object, answer: object) -> None:
    answer.put(float(queue.get().sum()))  # type: ignore[attr-defined]


def _cuda_ipc() -> str:
    import torch  # noqa: PLC0415 - the GPU machine has it, prepare's does not
    import torch.multiprocessing as mp  # noqa: PLC0415 - the GPU machine has it, prepare's does not

    context = mp.get_context("spawn")
    queue, answer = context.Queue(), context.Queue()
    child = context.Process(target=_receive, args=(queue, answer))
    child.start()
    tensor = torch.ones(1000, device="cuda")
    queue.put(tensor)
    received = answer.get(timeout=120)
    child.join()
    return f"received sum {received}"


def _triton() -> str:
    import torch  # noqa: PLC0415 - the GPU machine has it, prepare's does not
    import triton  # noqa: PLC0415 - the GPU machine has it, prepare's does not
    import triton.language as tl  # noqa: PLC0415 - the GPU machine has it, prepare's does not

    @triton.jit  # type: ignore[misc]
    def add(x, y, out, n, block: tl.constexpr):  # type: ignore[no-untyped-def]
        index = tl.program_id(0) * block + tl.arange(0, block)
        mask = index < n
        tl.store(out + index, tl.load(x + index, mask=mask) + tl.load(y + index, mask=mask), mask=mask)

    x = torch.ones(4096, device="cuda")
    out = torch.empty_like(x)
    add[(4,)](x, x, out, 4096, block=1024)
    torch.cuda.synchronize()
    return f"kernel sum {float(out.sum())}"


PROBES = {"cuda": _cuda, "nccl": _nccl, "cuda-ipc": _cuda_ipc, "triton": _triton}


def _run(argv: list[str]) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as cache:  # Triton compiles cold every time
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    # What the probe printed when it worked, why it failed when it did not.
    lines = (done.stdout if done.returncode == 0 else done.stderr).strip().splitlines()
    return done.returncode == 0, re.sub(r"\s+", " ", lines[-1] if lines else "")[:100]


def check(directory: Path) -> int:
    wrapper = directory / "seccomp_exec"
    subprocess.run(["gcc", "-O1", "-o", wrapper, directory / "seccomp_exec.c", LIBSECCOMP], check=True)
    filtered = [str(wrapper), str(directory / "allowed.txt"), str(directory / "families.txt")]
    failures = 0
    for name in PROBES:
        probe = [sys.executable, str(directory / Path(__file__).name), "probe", name]
        plain_ok, plain = _run(probe)
        ok, said = _run(filtered + probe)
        failures += plain_ok and not ok
        print(f"{name:9} unfiltered {'ok' if plain_ok else 'FAILED'}: {plain}")
        print(f"{'':9} filtered   {'ok' if ok else 'FAILED'}: {said}")
    return 1 if failures else 0


def main() -> int:
    command, argument = sys.argv[1:3]
    if command == "prepare":
        prepare(Path(argument))
        return 0
    if command == "check":
        return check(Path(argument))
    print(PROBES[argument]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
