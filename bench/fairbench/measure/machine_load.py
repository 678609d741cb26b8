"""The client machine's CPU over a point, from /proc/stat: how busy all its cores were, and how much time
its hypervisor took from them (steal), so that a point measured on a loaded or starved client shows it.

/proc/stat's first line counts, since boot, the jiffies all cores spent in each state: user, nice, system,
idle, iowait, irq, softirq, steal (guest time is inside user). Over a point, with d the growth of each:

- client_cpu_busy_share = (d total - d idle - d iowait) / d total: the share of the machine's cores busy,
  with the client's own work and anything else;
- client_cpu_steal_share = d steal / d total: the share the hypervisor ran something else on them.

Both null where /proc/stat cannot be read (not Linux) or did not advance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
IDLE_FIELDS = (3, 4)
"""idle and iowait, by position among the numbers of the ``cpu`` line."""
STEAL_FIELD = 7


@dataclass(frozen=True)
class CpuTimes:
    """The ``cpu`` line of /proc/stat: every core's jiffies since boot."""

    total: int
    idle: int
    steal: int


def cpu_times(path: Path = PROC_STAT) -> CpuTimes | None:
    """The machine's CPU times now; None where ``path`` cannot be read or has no ``cpu`` line of numbers."""
    try:
        first = path.read_text(encoding="ascii").split("\n", 1)[0].split()
    except (OSError, UnicodeDecodeError):
        return None
    if not first or first[0] != "cpu":
        return None
    try:
        values = [int(value) for value in first[1:9]]
    except ValueError:
        return None
    if len(values) <= STEAL_FIELD:
        return None
    return CpuTimes(sum(values), sum(values[field] for field in IDLE_FIELDS), values[STEAL_FIELD])


def load_fields(before: CpuTimes | None, after: CpuTimes | None) -> dict[str, float | None]:
    """``client_cpu_busy_share`` and ``client_cpu_steal_share`` between two readings (module docstring)."""
    if before is None or after is None or after.total <= before.total:
        return {"client_cpu_busy_share": None, "client_cpu_steal_share": None}
    total = after.total - before.total
    return {
        "client_cpu_busy_share": (total - (after.idle - before.idle)) / total,
        "client_cpu_steal_share": (after.steal - before.steal) / total,
    }
