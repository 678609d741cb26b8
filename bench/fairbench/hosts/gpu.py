"""What a host's GPUs are and how they are joined, from ``nvidia-smi``: parsers, and ``collect`` to run it.

Three commands, each parsed by its own function (a recording of each is in tests/fixtures/gpu/):

- ``nvidia-smi`` (its header): the driver and CUDA versions (``parse_versions``);
- ``nvidia-smi --query-gpu=QUERY_FIELDS --format=csv``: one row per GPU (``parse_query``). The header row
  names the columns, so a driver that drops or reorders a field is an error, not a shifted value; values
  may carry their unit (``143771 MiB``) or not (``nounits``); ``[N/A]`` and the other bracketed answers
  (``[Not Supported]``) mean unknown;
- ``nvidia-smi topo -m``: the link between every pair of GPUs and each GPU's CPU and NUMA affinity
  (``parse_topology``). Link kinds are the ones its own legend defines (``X``, ``SYS``, ``NODE``, ``PHB``,
  ``PXB``, ``PIX``, ``NV#`` = a bond of # NVLinks); NIC rows and columns are skipped.

``interconnect`` classes the host from its links: ``nvlink`` when every GPU pair is joined by NVLink
(``NV#``), ``pcie`` when none is, ``mixed`` when some are (e.g. NVLink bridges across pairs of PCIe
cards), ``none`` with fewer than two GPUs.

Bad input raises ``GpuFactsError`` naming the source (a file or the command) and the line. A host without
``nvidia-smi`` is no error: ``collect`` returns facts with no GPUs and the reason. Only the standard
library is used, so the parsers run with any Python 3.10+.
"""

from __future__ import annotations

import csv
import itertools
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field, replace
from typing import Any

QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "power.limit",
    "clocks.max.sm",
    "compute_cap",
)
"""The ``--query-gpu`` fields ``collect`` asks for; tools/record_gpu_fixtures.sh records the same."""
QUERY_ARGS = (f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv")
TOPOLOGY_ARGS = ("topo", "-m")
TIMEOUT_S = 60.0
"""One nvidia-smi call: it can take seconds per GPU when persistence mode is off (the driver loads)."""
STDERR_EXCERPT_CHARS = 500

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_NUMBER_WITH_UNIT = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?:\s*(?P<unit>[A-Za-z]+))?")
_HEADER_UNIT = re.compile(r"(?P<name>[^\[]+?)\s*\[(?P<unit>[^\]]+)\]")
_VERSION = {
    "driver_version": re.compile(r"Driver Version:\s*(\S+)"),
    "cuda_version": re.compile(r"CUDA Version:\s*(\S+)"),
}
_GPU_LABEL = re.compile(r"GPU([0-9]+)")
_LEGEND_ENTRY = re.compile(r"\s+(\S+)\s+=\s+\S")
_NVLINK = re.compile(r"NV[0-9]+")
_UNKNOWN = ("N/A", "")


class GpuFactsError(Exception):
    """nvidia-smi failed, or said something these parsers do not understand; the message says where."""


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi numbers it (the index CUDA uses unless CUDA_VISIBLE_DEVICES reorders)."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_total_mib: int | None
    power_limit_w: float | None
    max_sm_clock_mhz: int | None
    compute_capability: str | None
    """As nvidia-smi prints it (``9.0``): a string, so ``10.0`` and ``1.0`` stay apart."""
    cpu_affinity: str | None = None
    """The CPUs near the GPU, as ``topo -m`` prints them (``0-31,64-95``)."""
    numa_affinity: str | None = None
    """The NUMA node(s) near the GPU, as ``topo -m`` prints them (``0``)."""


@dataclass(frozen=True)
class Topology:
    """What ``topo -m`` says: the link of each GPU pair (``"0-1": "NV18"``, lower index first), affinities."""

    links: dict[str, str]
    cpu_affinity: dict[int, str | None]
    numa_affinity: dict[int, str | None]


@dataclass(frozen=True)
class GpuFacts:
    """A host's GPUs; host.json records them and the campaign's preflight counts them."""

    gpus: list[Gpu]
    driver_version: str | None
    cuda_version: str | None
    """The newest CUDA the driver supports (nvidia-smi's header), not an installed toolkit's."""
    links: dict[str, str]
    interconnect: str
    """nvlink | pcie | mixed | none: see the module docstring."""
    reason: str | None = None
    """Why there are no GPU facts (no nvidia-smi on the host); None when nvidia-smi answered."""
    sources: dict[str, str] = field(default_factory=dict)
    """The commands that gave these facts."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def unavailable(cls, reason: str) -> GpuFacts:
        return cls(
            gpus=[], driver_version=None, cuda_version=None, links={}, interconnect="none", reason=reason
        )


# --- parsers --------------------------------------------------------------------------------------


def parse_versions(text: str, source: str) -> tuple[str, str | None]:
    """The driver and CUDA versions from ``nvidia-smi``'s header; CUDA ``N/A`` (no libcuda) gives None."""
    found: dict[str, tuple[int, str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        for key, pattern in _VERSION.items():
            match = pattern.search(line)
            if match and key not in found:
                found[key] = (number, match[1])
    missing = [pattern.pattern.split(":")[0] for key, pattern in _VERSION.items() if key not in found]
    if missing:
        raise GpuFactsError(f"{source}: no {' and no '.join(map(repr, missing))} in: {_excerpt(text)}")
    driver_line, driver = found["driver_version"]
    if driver in _UNKNOWN:
        raise GpuFactsError(f"{source}: line {driver_line}: the driver version is {driver}")
    cuda = found["cuda_version"][1]
    return driver, None if cuda in _UNKNOWN else cuda


def parse_query(text: str, source: str) -> list[Gpu]:
    """The GPUs of ``--query-gpu=QUERY_FIELDS --format=csv`` output (header row first; units optional)."""
    rows = list(csv.reader(text.splitlines(), skipinitialspace=True))
    if not rows or not any(rows[0]):
        raise GpuFactsError(
            f"{source}: line 1: empty, expected a header row naming {', '.join(QUERY_FIELDS)}"
        )
    columns: dict[str, tuple[int, str | None]] = {}
    for position, heading in enumerate(rows[0]):
        match = _HEADER_UNIT.fullmatch(heading.strip())
        name, unit = (match["name"], match["unit"]) if match else (heading.strip(), None)
        columns[name] = (position, unit)
    missing = [name for name in QUERY_FIELDS if name not in columns]
    if missing:
        raise GpuFactsError(f"{source}: line 1: no column {', '.join(missing)} in the header {rows[0]}")
    gpus = []
    for line_number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(rows[0]):
            raise GpuFactsError(
                f"{source}: line {line_number}: {len(row)} values for {len(rows[0])} columns: {row}"
            )
        cells = _QueryRow(source, line_number, row, columns)
        gpus.append(
            Gpu(
                index=cells.index(),
                name=cells.text("name"),
                uuid=cells.text("uuid"),
                pci_bus_id=cells.text("pci.bus_id"),
                memory_total_mib=cells.integer("memory.total"),
                power_limit_w=cells.number("power.limit"),
                max_sm_clock_mhz=cells.integer("clocks.max.sm"),
                compute_capability=cells.optional_text("compute_cap"),
            )
        )
    indexes = [gpu.index for gpu in gpus]
    if indexes != list(range(len(gpus))):
        raise GpuFactsError(f"{source}: GPU indexes {indexes}, expected 0 to {len(gpus) - 1} in order")
    return gpus


class _QueryRow:
    """One GPU's row of the query CSV, read cell by cell; every problem names the line and the column."""

    def __init__(
        self, source: str, line: int, row: list[str], columns: dict[str, tuple[int, str | None]]
    ) -> None:
        self._where = f"{source}: line {line}"
        self._row = row
        self._columns = columns

    def optional_text(self, name: str) -> str | None:
        """The cell, or None when nvidia-smi could not tell (``[N/A]``, ``[Not Supported]``, ...)."""
        value = self._row[self._columns[name][0]].strip()
        return None if value.startswith("[") or value in _UNKNOWN else value

    def text(self, name: str) -> str:
        value = self.optional_text(name)
        if value is None:
            raise GpuFactsError(f"{self._where}: {name}: no value ({self._row[self._columns[name][0]]!r})")
        return value

    def index(self) -> int:
        value = self.text("index")
        if not value.isdigit():
            raise GpuFactsError(f"{self._where}: index: {value!r} is not a GPU index")
        return int(value)

    def number(self, name: str) -> float | None:
        value = self.optional_text(name)
        if value is None:
            return None
        unit = self._columns[name][1]
        match = _NUMBER_WITH_UNIT.fullmatch(value)
        if match is None or (match["unit"] is not None and match["unit"] != unit):
            expected = f"a number, optionally followed by {unit}" if unit else "a number"
            raise GpuFactsError(f"{self._where}: {name}: {value!r} is not {expected}")
        return float(match["number"])

    def integer(self, name: str) -> int | None:
        value = self.number(name)
        if value is None:
            return None
        if not value.is_integer():
            raise GpuFactsError(f"{self._where}: {name}: {value:g} is not a whole number")
        return int(value)


def parse_topology(text: str, source: str) -> Topology:
    """The GPU-to-GPU links and each GPU's CPU and NUMA affinity from ``nvidia-smi topo -m``."""
    lines = [_ANSI_ESCAPE.sub("", line) for line in text.splitlines()]
    header_at = next((number for number, line in enumerate(lines) if "\tGPU0" in line), None)
    if header_at is None:
        raise GpuFactsError(f"{source}: no header row (a tab, then GPU0 ...): {_excerpt(text)}")
    # nvidia-smi pads some cells with an empty one (two tabs before "GPU NUMA ID"): drop the empties.
    columns = _cells(lines[header_at])
    kinds = _legend(lines, source)
    gpu_columns = {
        int(match[1]): position
        for position, name in enumerate(columns)
        if (match := _GPU_LABEL.fullmatch(name))
    }
    matrix: dict[int, dict[int, str]] = {}
    cpu_affinity: dict[int, str | None] = {}
    numa_affinity: dict[int, str | None] = {}
    for number in range(header_at + 1, len(lines)):
        cells = _cells(lines[number])
        if not cells or cells[0] == "Legend:":
            break
        label = _GPU_LABEL.fullmatch(cells[0])
        if label is None:  # a NIC's row
            continue
        where = f"{source}: line {number + 1}"
        values = cells[1:]
        if len(values) != len(columns):
            raise GpuFactsError(f"{where}: {len(values)} cells for {len(columns)} columns: {cells}")
        row = int(label[1])
        matrix[row] = {}
        for column, position in gpu_columns.items():
            kind = values[position]
            if not _is_link_kind(kind, kinds):
                raise GpuFactsError(
                    f"{where}: GPU{row} to GPU{column}: {kind!r} is not a link kind of the legend "
                    f"({', '.join(kinds)})"
                )
            if (kind == "X") != (row == column):
                raise GpuFactsError(f"{where}: GPU{row} to GPU{column}: {kind!r} (X marks a GPU itself)")
            matrix[row][column] = kind
        cpu_affinity[row] = _known(values, columns, "CPU Affinity")
        numa_affinity[row] = _known(values, columns, "NUMA Affinity")
    if sorted(matrix) != sorted(gpu_columns):
        raise GpuFactsError(
            f"{source}: rows for GPUs {sorted(matrix)}, columns for GPUs {sorted(gpu_columns)}"
        )
    links = {}
    for first, second in itertools.combinations(sorted(matrix), 2):
        if matrix[first][second] != matrix[second][first]:
            raise GpuFactsError(
                f"{source}: GPU{first} to GPU{second} is {matrix[first][second]}, "
                f"but GPU{second} to GPU{first} is {matrix[second][first]}"
            )
        links[f"{first}-{second}"] = matrix[first][second]
    return Topology(links=links, cpu_affinity=cpu_affinity, numa_affinity=numa_affinity)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.split("\t") if cell.strip()]


def _legend(lines: list[str], source: str) -> list[str]:
    """The link kinds ``topo -m`` defines below ``Legend:`` (``NV#`` stands for NV1, NV2, ...)."""
    start = next((number for number, line in enumerate(lines) if line.strip() == "Legend:"), None)
    if start is None:
        raise GpuFactsError(f"{source}: no 'Legend:' defining the link kinds")
    kinds = []
    for line in lines[start + 1 :]:
        if line.strip().endswith("Legend:"):  # the NIC legend names devices, not link kinds
            break
        match = _LEGEND_ENTRY.match(line)
        if match:
            kinds.append(match[1])
    if not kinds:
        raise GpuFactsError(f"{source}: line {start + 1}: a legend without link kinds")
    return kinds


def _is_link_kind(kind: str, legend: list[str]) -> bool:
    return kind in legend or ("NV#" in legend and _NVLINK.fullmatch(kind) is not None)


def _known(values: list[str], columns: list[str], name: str) -> str | None:
    if name not in columns:
        return None
    value = values[columns.index(name)]
    return None if value in _UNKNOWN else value


def interconnect(links: dict[str, str]) -> str:
    """nvlink (every GPU pair NV#), pcie (none), mixed (some), none (fewer than two GPUs)."""
    if not links:
        return "none"
    nvlinks = sum(1 for kind in links.values() if _NVLINK.fullmatch(kind))
    if nvlinks == len(links):
        return "nvlink"
    return "pcie" if nvlinks == 0 else "mixed"


def facts_from(*, smi: str, query: str, topology: str, sources: dict[str, str]) -> GpuFacts:
    """Facts from the three outputs; ``sources`` names each (keys ``smi``, ``query``, ``topology``)."""
    driver_version, cuda_version = parse_versions(smi, sources["smi"])
    gpus = parse_query(query, sources["query"])
    topo = parse_topology(topology, sources["topology"])
    if sorted(topo.numa_affinity) != [gpu.index for gpu in gpus]:
        raise GpuFactsError(
            f"{sources['topology']}: GPUs {sorted(topo.numa_affinity)}, but {sources['query']} lists "
            f"GPUs {[gpu.index for gpu in gpus]}"
        )
    placed = [
        replace(gpu, cpu_affinity=topo.cpu_affinity[gpu.index], numa_affinity=topo.numa_affinity[gpu.index])
        for gpu in gpus
    ]
    return GpuFacts(
        gpus=placed,
        driver_version=driver_version,
        cuda_version=cuda_version,
        links=topo.links,
        interconnect=interconnect(topo.links),
        sources=sources,
    )


# --- running nvidia-smi ---------------------------------------------------------------------------


def collect(nvidia_smi: str = "nvidia-smi") -> GpuFacts:
    """Run nvidia-smi (a name on PATH or a path) and parse what it says; raises ``GpuFactsError``.

    No nvidia-smi at all is a host without NVIDIA GPUs (the simulator's hosts): facts with no GPUs and
    the reason, not an error.
    """
    executable = shutil.which(nvidia_smi)
    if executable is None:
        return GpuFacts.unavailable(f"{nvidia_smi} not found (not on PATH, or not an executable)")
    commands = {"smi": (), "query": QUERY_ARGS, "topology": TOPOLOGY_ARGS}
    outputs = {key: run_nvidia_smi(executable, args) for key, args in commands.items()}
    sources = {key: " ".join([nvidia_smi, *args]) for key, args in commands.items()}
    return facts_from(
        smi=outputs["smi"], query=outputs["query"], topology=outputs["topology"], sources=sources
    )


def run_nvidia_smi(executable: str, args: tuple[str, ...]) -> str:
    """nvidia-smi's output for ``args``; GpuFactsError (the command, and its exit status and stderr, or why it
    could not run) otherwise."""
    command = " ".join([executable, *args])
    try:
        done = subprocess.run(
            [executable, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise GpuFactsError(f"{command}: no answer after {TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise GpuFactsError(f"{command}: cannot run: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[:STDERR_EXCERPT_CHARS]
        raise GpuFactsError(f"{command}: exit status {done.returncode}: {said or 'no output'}")
    return done.stdout


def _excerpt(text: str) -> str:
    return repr(text.strip()[:200]) if text.strip() else "empty output"
