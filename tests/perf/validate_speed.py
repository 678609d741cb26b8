"""How long `fairbench validate` takes, and how much memory, on the largest and the most hostile inputs.

    .venv/bin/python tests/perf/validate_speed.py

Each file is validated by its own `fairbench validate` process, interpreter start included: wall-clock
and CPU seconds, and the process's peak resident set (getrusage; Linux counts the parent's peak at the
fork too, so this script keeps itself small). A shipped campaign sets the baseline; then files at the size
limit (MAX_CAMPAIGN_BYTES) in several shapes, the largest of them at the node limit (MAX_CAMPAIGN_NODES)
or at the expansion limit (MAX_EXPANDED_VALUES), a byte over the size limit, far over it, and a "billion
laughs" document of nested aliases a few hundred bytes long.

Target: each file answered within a second of wall-clock time (TARGET_WALL_S), interpreter start
included, however large or hostile: the size, node and expansion limits are there to bound that cost, and
a file that takes longer is one they let through. The script exits 1, naming each file that took longer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fairbench.campaign.expand import MAX_EXPANDED_VALUES
from fairbench.campaign.source import MAX_CAMPAIGN_BYTES, MAX_CAMPAIGN_NODES

REPO = Path(__file__).resolve().parents[2]

DEMO = (REPO / "campaigns/demo.yml").read_text(encoding="utf-8")
HEAD = """name: speed
engine: sim
model: moonshotai/Kimi-K2.6
workload: {api: completions, dataset: random-ids, input_len: 256, output_len: 64, concurrency: [1, 16],
           prompts_per_level: 16, warmup: 0}
"""
TARGET_WALL_S = 1.0
NODES_LEFT = MAX_CAMPAIGN_NODES - 100
"""The nodes a generated campaign may spend beyond HEAD's."""


def padded(text: str, size: int = MAX_CAMPAIGN_BYTES) -> str:
    """``text`` with a trailing comment making it ``size`` bytes long."""
    return f"{text}# {'x' * (size - len(text.encode()) - 3)}\n"


def lines_up_to(head: str, line: Callable[[int], str]) -> str:
    """``head``, then ``line(0)``, ``line(1)``, ... as long as they fit in MAX_CAMPAIGN_BYTES."""
    lines = [head]
    used = len(head)
    while used + len(entry := line(len(lines) - 1)) <= MAX_CAMPAIGN_BYTES:
        lines.append(entry)
        used += len(entry)
    return "".join(lines)


def widest_expansion() -> str:
    """Under the node limit, the campaign that expands most: every config repeats all of common's flags."""
    count = NODES_LEFT // 4
    flags = "".join(f"    sim-flag-{index}: {index}\n" for index in range(count))
    configs = "".join(f"  c{index}: {{}}\n" for index in range(count))
    return f"{HEAD}common:\n  sim:\n{flags}configs:\n{configs}"


def expansion_at_the_limit() -> str:
    """A valid campaign just under MAX_EXPANDED_VALUES: 300 common flags repeated by each config."""
    flags = "".join(f"    sim-flag-{index}: {index}\n" for index in range(300))
    configs = "".join(f"  c{index}: {{}}\n" for index in range(MAX_EXPANDED_VALUES // 300 - 1))
    return f"{HEAD}common:\n  sim:\n{flags}configs:\n{configs}"


def numbered(head: str, line: Callable[[int], str], count: int) -> str:
    return head + "".join(line(index) for index in range(count))


def longest_chain() -> str:
    """Under the node limit, the longest chain of extends: each config's chain is the whole way up."""
    links = "".join(f"  c{index + 1}: {{extends: c{index}}}\n" for index in range(NODES_LEFT // 4))
    return f"{HEAD}configs:\n  c0: {{}}\n{links}"


def alias_bomb(levels: int = 9) -> str:
    """Nine times nine times ... "lol": 9**9 values once expanded."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]" for level in range(1, levels)]
    configs = f"configs: {{c: {{args: {{cuda-graph-bs-decode: *a{levels - 1}}}}}}}"
    return "\n".join([HEAD, *lines, configs, ""])


def write_50_mb(path: Path) -> None:
    """A demo campaign and 50 MB of comment, written in pieces: this script's own peak stays small."""
    with path.open("w", encoding="utf-8") as file:
        file.write(DEMO)
        for _ in range(50):
            file.write(f"# {'x' * (2**20 - 3)}\n")


def text(make: Callable[[], str]) -> Callable[[Path], object]:
    return lambda path: path.write_text(make(), encoding="utf-8")


CASES: dict[str, Callable[[Path], object]] = {
    "campaigns/demo.yml (baseline)": text(lambda: DEMO),
    "limit: demo.yml and a comment": text(lambda: padded(DEMO)),
    "limit: demo.yml, a model name that long": text(
        lambda: padded(DEMO.replace("Kimi-K2.6\n", "Kimi-K2.6" + "m" * (MAX_CAMPAIGN_BYTES - 2200) + "\n"))
    ),
    "limit: configs of one flag each": text(
        lambda: lines_up_to(
            f"{HEAD}configs:\n", lambda i: f"  c{i}: {{args: {{max-running-requests: {i + 1}}}}}\n"
        )
    ),
    "limit: unknown flags": text(
        lambda: lines_up_to(f"{HEAD}configs:\n  c:\n    args:\n", lambda i: f"      frobnicate-{i}: 1\n")
    ),
    "nodes: common flags x configs": text(lambda: padded(widest_expansion())),
    "nodes: the longest chain of extends": text(lambda: padded(longest_chain())),
    "nodes: unknown flags": text(
        lambda: numbered(
            f"{HEAD}configs:\n  c:\n    args:\n", lambda i: f"      frobnicate-{i}: 1\n", NODES_LEFT // 2
        )
    ),
    "nodes: configs extending unknown ones": text(
        lambda: numbered(f"{HEAD}configs:\n", lambda i: f"  c{i}: {{extends: x{i}}}\n", NODES_LEFT // 4)
    ),
    "expansion: just under its limit": text(expansion_at_the_limit),
    "limit + 1 byte": text(lambda: padded(DEMO, MAX_CAMPAIGN_BYTES + 1)),
    "50 MB": write_50_mb,
    "binary garbage, 1 MB": lambda path: path.write_bytes(os.urandom(2**20)),
    "alias bomb (9 levels of 9 aliases)": text(alias_bomb),
}


def measure(path: Path) -> tuple[float, float, float, str]:
    """Wall and CPU seconds, peak resident MiB and the outcome of one `fairbench validate PATH`."""
    command = [sys.executable, "-m", "fairbench", "validate", str(path)]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    first_line = stderr.splitlines()[0].removeprefix(str(path)) if stderr else ""
    outcome = f"exit {os.waitstatus_to_exitcode(status)}{first_line and ' '}{first_line}"
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, outcome


def main() -> int:
    print(
        f"MAX_CAMPAIGN_BYTES {MAX_CAMPAIGN_BYTES:,}, MAX_CAMPAIGN_NODES {MAX_CAMPAIGN_NODES:,}, "
        f"MAX_EXPANDED_VALUES {MAX_EXPANDED_VALUES:,}"
    )
    print(f"{'file':<40} {'bytes':>10}  {'wall':>6} {'cpu':>6} {'peak':>8}  outcome")
    slow = []
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "campaign.yml"
        for name, write in CASES.items():
            write(path)
            wall, cpu, peak_mib, outcome = measure(path)
            size = path.stat().st_size
            print(f"{name:<40} {size:>10,}  {wall:5.2f}s {cpu:5.2f}s {peak_mib:4.0f} MiB  {outcome[:100]}")
            if wall > TARGET_WALL_S:
                slow.append(f"{name}: {wall:.2f} s, over the target of {TARGET_WALL_S:g} s")
    for miss in slow:
        print(f"MISSED {miss}")
    print("FAIL" if slow else f"OK: every file answered within {TARGET_WALL_S:g} s")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
