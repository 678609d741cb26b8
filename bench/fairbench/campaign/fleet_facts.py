"""The facts that must match between equivalent GPU hosts of a pool: their names, and how a host reports
them.

A campaign spread over a pool runs each config on one host, so its configs compare fairly only when the
hosts do not differ in what shapes a measurement. ``FACTS`` names those facts (name -> what it is): a
campaign may accept a difference by name (``accept_host_differences``), each host reports them
(fairbench.hosts.fleet_facts collects them) and the control node compares them
(fairbench.fleet.equivalence). A host's report is one JSON object:

- every name of ``FACTS``, each a JSON scalar (string or integer) or null;
- ``reasons`` (``REASONS``): ``{fact: why it is null}``, one entry for each null fact and no other;
- ``machine`` (``MACHINE``): what tells which machine the host runs on (fairbench.hosts.machine:
  ``MACHINE_FACTS`` and their own ``reasons``). Never compared for equivalence: two hosts share these
  only when they are one machine, which fairbench.fleet.sharing finds.

What is left out on purpose: the OS and the kernel (host.json records them; boxes of one kind may differ
there and measure alike), and anything that differs between identical boxes (hostnames, UUIDs, serials).
``memory_gib`` is rounded to a whole GiB for the same reason: kernel reservations move MemTotal by MiBs.

The standard library only, so a GPU host reads it without the campaign's dependencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

FACTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "gpu_model": "the distinct GPU names nvidia-smi lists, sorted and joined by ', '",
        "gpu_count": "how many GPUs nvidia-smi lists (0 without nvidia-smi)",
        "driver": "the NVIDIA driver's version",
        "cuda": "the newest CUDA the driver supports (nvidia-smi's header), not an installed toolkit's",
        "cuda_toolkit": "the installed CUDA toolkit's version ($CUDA_HOME or /usr/local/cuda, version.json)",
        "nccl": "the NCCL of the SGLang venv (the nvidia-nccl-cu13 or nvidia-nccl-cu12 distribution)",
        "sglang": "the sglang distribution's version in the SGLang venv",
        "fairbench": "fairbench's version on the host (it measures and controls the servers)",
        "cpu_model": "the distinct CPU model names of /proc/cpuinfo, joined by ', '",
        "cpus": "how many logical CPUs the host has (os.cpu_count)",
        "memory_gib": "MemTotal of /proc/meminfo in GiB, rounded to a whole number",
    }
)
"""Each fact a host must share with the others of its pool -> what it is, in one line."""
REASONS: Final = "reasons"
"""The key of a host's report that says why each null fact is null."""
MACHINE: Final = "machine"
"""The key of a host's report that holds its machine facts (fairbench.hosts.machine)."""
