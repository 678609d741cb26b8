"""GPU facts from nvidia-smi: the parsers over every recorded fixture set, bad input, and ``collect``.

Each fixture set (tests/fixtures/gpu/<set>/, recorded with tools/record_gpu_fixtures.sh) is checked against
its own independent sources: nvidia-smi-q.xml (names, UUIDs, bus ids, memory, clocks, power limits,
versions) and the GPU rows of the plain ``nvidia-smi`` table (how many GPUs). A new set needs no new code.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.support.fake_nvidia_smi import RECORDED, fixture_sets, write_fake_nvidia_smi

from fairbench.hosts.ansible_support import host_facts
from fairbench.hosts.gpu import (
    QUERY_ARGS,
    TOPOLOGY_ARGS,
    GpuFacts,
    GpuFactsError,
    collect,
    facts_from,
    parse_query,
    parse_topology,
    parse_versions,
)

REPO = Path(__file__).resolve().parents[2]
SETS = fixture_sets()
H200X2 = REPO / "tests/fixtures/gpu/h200x2"


def facts_of(fixture_set: Path) -> GpuFacts:
    files = {"smi": "nvidia-smi.txt", "query": "nvidia-smi-query.csv", "topology": "nvidia-smi-topo-m.txt"}
    texts = {key: (fixture_set / file).read_text() for key, file in files.items()}
    return facts_from(**texts, sources={key: str(fixture_set / file) for key, file in files.items()})


def _number(text: str) -> float:
    """``143771 MiB`` -> 143771.0, as nvidia-smi -q -x writes a quantity."""
    return float(text.split(maxsplit=1)[0])


def test_the_h200x2_recording_is_among_the_sets() -> None:
    assert H200X2 in SETS


@pytest.mark.parametrize("fixture_set", SETS, ids=[path.name for path in SETS])
def test_facts_match_the_xml_recording_of_the_same_host(fixture_set: Path) -> None:
    facts = facts_of(fixture_set)
    xml = ET.parse(fixture_set / "nvidia-smi-q.xml").getroot()
    assert facts.driver_version == xml.findtext("driver_version")
    assert facts.cuda_version == xml.findtext("cuda_version")
    xml_gpus = xml.findall("gpu")
    assert [gpu.index for gpu in facts.gpus] == list(range(len(xml_gpus)))
    for gpu, recorded in zip(facts.gpus, xml_gpus, strict=True):
        assert gpu.name == recorded.findtext("product_name")
        assert gpu.uuid == recorded.findtext("uuid")
        assert gpu.pci_bus_id == recorded.findtext("pci/pci_bus_id")
        assert gpu.memory_total_mib == _number(recorded.findtext("fb_memory_usage/total", ""))
        assert gpu.max_sm_clock_mhz == _number(recorded.findtext("max_clocks/sm_clock", ""))
        assert gpu.power_limit_w == _number(recorded.findtext("gpu_power_readings/current_power_limit", ""))
        assert gpu.compute_capability is not None and re.fullmatch(r"[0-9]+\.[0-9]+", gpu.compute_capability)


@pytest.mark.parametrize("fixture_set", SETS, ids=[path.name for path in SETS])
def test_gpu_count_matches_the_nvidia_smi_table(fixture_set: Path) -> None:
    # The table's first row of each GPU: "|   0  NVIDIA H200   On  |   00000000:00:06.0 Off |".
    table = (fixture_set / "nvidia-smi.txt").read_text()
    rows = re.findall(r"^\|\s+(\d+)\s+.*\|\s+([0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F])", table, re.M)
    facts = facts_of(fixture_set)
    assert [(str(gpu.index), gpu.pci_bus_id) for gpu in facts.gpus] == rows


@pytest.mark.parametrize("fixture_set", SETS, ids=[path.name for path in SETS])
def test_links_are_the_gpu_cells_of_the_topology_matrix(fixture_set: Path) -> None:
    facts = facts_of(fixture_set)
    count = len(facts.gpus)
    gpu_rows = [line.split("\t") for line in (fixture_set / "nvidia-smi-topo-m.txt").read_text().splitlines()]
    cells = {
        int(row[0][3:]): [cell.strip() for cell in row[1 : count + 1]]
        for row in gpu_rows
        if row[0][:3] == "GPU"
    }
    expected = {f"{a}-{b}": cells[a][b] for a in range(count) for b in range(a + 1, count)}
    assert facts.links == expected
    assert len(facts.links) == count * (count - 1) // 2
    kinds = set(facts.links.values())
    nvlink = {kind for kind in kinds if re.fullmatch(r"NV[0-9]+", kind)}
    expected_class = (
        "none" if not kinds else "nvlink" if nvlink == kinds else "pcie" if not nvlink else "mixed"
    )
    assert facts.interconnect == expected_class
    assert all(
        gpu.numa_affinity is None or re.fullmatch(r"[0-9,-]+", gpu.numa_affinity) for gpu in facts.gpus
    )


def test_h200x2_values() -> None:
    facts = facts_of(H200X2).to_json()
    assert facts["driver_version"] == "580.159.04"
    assert facts["cuda_version"] == "13.0"
    assert facts["links"] == {"0-1": "NV18"}
    assert facts["interconnect"] == "nvlink"
    assert facts["reason"] is None
    assert facts["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "uuid": "GPU-ccf73502-4694-b51e-b13e-32570a2e6e57",
            "pci_bus_id": "00000000:00:06.0",
            "memory_total_mib": 143771,
            "power_limit_w": 700.0,
            "max_sm_clock_mhz": 1980,
            "compute_capability": "9.0",
            "cpu_affinity": "0-31",
            "numa_affinity": "0",
        },
        {
            "index": 1,
            "name": "NVIDIA H200",
            "uuid": "GPU-fad8c7f9-7d99-b7f2-4828-7cdc57816b3c",
            "pci_bus_id": "00000000:00:07.0",
            "memory_total_mib": 143771,
            "power_limit_w": 700.0,
            "max_sm_clock_mhz": 1980,
            "compute_capability": "9.0",
            "cpu_affinity": "0-31",
            "numa_affinity": "0",
        },
    ]


# --- the query CSV --------------------------------------------------------------------------------

HEADER = (
    "index, name, uuid, pci.bus_id, memory.total [MiB], power.limit [W], clocks.max.sm [MHz], compute_cap\n"
)
ROW = "0, NVIDIA RTX PRO 6000, GPU-1, 00000000:01:00.0, {memory}, {power}, 2617 MHz, 12.0\n"


def test_query_without_units_and_with_unknown_values() -> None:
    text = HEADER + ROW.format(memory="97887", power="[N/A]").replace("2617 MHz", "[Not Supported]")
    (gpu,) = parse_query(text, "q.csv")
    assert (gpu.memory_total_mib, gpu.power_limit_w, gpu.max_sm_clock_mhz) == (97887, None, None)
    assert gpu.compute_capability == "12.0"


def test_query_ignores_columns_it_did_not_ask_for() -> None:
    (gpu,) = parse_query(
        "driver_version, " + HEADER + "580.1, " + ROW.format(memory="1 MiB", power="600.00 W"), "q.csv"
    )
    assert (gpu.name, gpu.memory_total_mib, gpu.power_limit_w) == ("NVIDIA RTX PRO 6000", 1, 600.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "q.csv: line 1: empty, expected a header row naming index, name,"),
        (HEADER.replace(", compute_cap", ""), "q.csv: line 1: no column compute_cap in the header"),
        (HEADER + "0, NVIDIA H200\n", "q.csv: line 2: 2 values for 8 columns"),
        (
            HEADER + ROW.format(memory="97887 GiB", power="600 W"),
            "q.csv: line 2: memory.total: '97887 GiB' is not",
        ),
        (
            HEADER + ROW.format(memory="lots", power="600 W"),
            "q.csv: line 2: memory.total: 'lots' is not a number",
        ),
        (
            HEADER + ROW.format(memory="1.5 MiB", power="600 W"),
            "q.csv: line 2: memory.total: 1.5 is not a whole",
        ),
        (
            HEADER + ROW.format(memory="1", power="1").replace("GPU-1", "[N/A]"),
            "q.csv: line 2: uuid: no value",
        ),
        (
            HEADER + ROW.format(memory="1", power="1").replace("0,", "x,", 1),
            "q.csv: line 2: index: 'x' is not",
        ),
        (
            HEADER + ROW.format(memory="1", power="1").replace("0,", "1,", 1),
            "q.csv: GPU indexes [1], expected",
        ),
    ],
)
def test_query_errors_name_the_source_and_line(text: str, message: str) -> None:
    with pytest.raises(GpuFactsError) as raised:
        parse_query(text, "q.csv")
    assert str(raised.value).startswith(message), str(raised.value)


# --- topo -m --------------------------------------------------------------------------------------

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo(*rows: str, nics: int = 0) -> str:
    """A ``topo -m`` text: GPU rows as ``"X NV12 SYS 0-15 0"`` (cells, then CPU and NUMA affinity)."""
    gpus = len(rows)
    header = "\t" + "\t".join([*(f"GPU{i}" for i in range(gpus)), *(f"NIC{i}" for i in range(nics))])
    lines = [header + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for index, row in enumerate(rows):
        *links, cpus, numa = row.split()
        lines.append("\t".join([f"GPU{index}", *(f" {cell} " for cell in links), cpus, numa, "", "N/A"]))
    for nic in range(nics):
        lines.append(
            "\t".join([f"NIC{nic}", *["PXB"] * gpus, *["X" if i == nic else "SYS" for i in range(nics)]])
        )
    nic_legend = "\nNIC Legend:\n\n" + "".join(f"  NIC{i}: mlx5_{i}\n" for i in range(nics)) if nics else ""
    return "\n".join(lines) + "\n" + LEGEND + nic_legend


def test_topology_of_pcie_cards_with_nvlink_bridges_and_nics() -> None:
    text = topo(
        "X NV4 SYS SYS PXB 0-15 0",
        "NV4 X SYS SYS PXB 0-15 0",
        "SYS SYS X NV4 SYS 16-31 1",
        "SYS SYS NV4 X SYS 16-31 1",
        nics=1,
    )
    parsed = parse_topology(text, "t.txt")
    assert parsed.links == {
        "0-1": "NV4",
        "0-2": "SYS",
        "0-3": "SYS",
        "1-2": "SYS",
        "1-3": "SYS",
        "2-3": "NV4",
    }
    assert parsed.numa_affinity == {0: "0", 1: "0", 2: "1", 3: "1"}
    assert parsed.cpu_affinity == {0: "0-15", 1: "0-15", 2: "16-31", 3: "16-31"}


def test_interconnect_classes() -> None:
    def interconnect_of(text: str) -> str:
        smi = "| NVIDIA-SMI 1  Driver Version: 1.2  CUDA Version: 13.0 |"
        rows = "".join(f"{i}, G, GPU-{i}, 0:{i}, 1, 1, 1, 9.0\n" for i in range(text.count("\nGPU")))
        sources = {"smi": "s", "query": "q", "topology": "t"}
        return facts_from(smi=smi, query=HEADER + rows, topology=text, sources=sources).interconnect

    assert interconnect_of(topo("X 0-7 0")) == "none"
    assert interconnect_of(topo("X NV18 0-7 0", "NV18 X 0-7 0")) == "nvlink"
    assert interconnect_of(topo("X NODE 0-7 0", "NODE X 0-7 0")) == "pcie"
    assert interconnect_of(topo("X NV2 SYS 0-7 0", "NV2 X SYS 0-7 0", "SYS SYS X 0-7 0")) == "mixed"


TWO_GPUS = topo("X NV18 0-7 0", "NV18 X 0-7 0")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nvidia-smi: topology unavailable\n", "t.txt: no header row"),
        (TWO_GPUS.split("\nLegend")[0], "t.txt: no 'Legend:'"),
        (topo("X NV18 0-7 0", "SYS X 0-7 0"), "t.txt: GPU0 to GPU1 is NV18, but GPU1 to GPU0 is SYS"),
        (topo("X QPI 0-7 0", "QPI X 0-7 0"), "t.txt: line 2: GPU0 to GPU1: 'QPI' is not a link kind"),
        (topo("X X 0-7 0", "X X 0-7 0"), "t.txt: line 2: GPU0 to GPU1: 'X' (X marks a GPU itself)"),
        (TWO_GPUS.replace(" NV18 \t", "", 1), "t.txt: line 2: 4 cells for 5 columns"),
        ("\n".join(line for line in TWO_GPUS.splitlines() if line[:4] != "GPU1"),
         "t.txt: rows for GPUs [0], columns for GPUs [0, 1]"),
    ],
)  # fmt: skip
def test_topology_errors_name_the_source_and_line(text: str, message: str) -> None:
    with pytest.raises(GpuFactsError) as raised:
        parse_topology(text, "t.txt")
    assert str(raised.value).startswith(message), str(raised.value)


def test_versions_errors() -> None:
    with pytest.raises(GpuFactsError, match=r"^s\.txt: no 'CUDA Version' in: '\| Driver Version: 1 \|'$"):
        parse_versions("| Driver Version: 1 |\n", "s.txt")
    with pytest.raises(GpuFactsError, match=r"^s\.txt: line 2: the driver version is N/A$"):
        parse_versions("\nDriver Version: N/A  CUDA Version: N/A\n", "s.txt")
    assert parse_versions("Driver Version: 575.1  CUDA Version: N/A", "s.txt") == ("575.1", None)


# --- collect: running nvidia-smi ------------------------------------------------------------------


@pytest.mark.parametrize("fixture_set", SETS, ids=[path.name for path in SETS])
def test_collect_runs_the_recorded_commands(tmp_path: Path, fixture_set: Path) -> None:
    fake = write_fake_nvidia_smi(tmp_path, fixture_set)
    collected = collect(str(fake))
    recorded = facts_of(fixture_set)
    assert collected.gpus == recorded.gpus and collected.links == recorded.links
    assert collected.driver_version == recorded.driver_version
    assert collected.sources["topology"] == f"{fake} topo -m"


def test_recorder_records_what_collect_asks() -> None:
    """The fake answers only RECORDED; the recorder must record exactly those, which collect asks for."""
    script = (REPO / "tools/record_gpu_fixtures.sh").read_text()
    recorded = {
        match[1].strip(): match[2]
        for match in re.finditer(r"^nvidia-smi([^>]*?)\s*(?:\\\n\s*)?>\"\$dir/([^\"]+)\"", script, re.M)
    }
    assert recorded == RECORDED
    assert " ".join(QUERY_ARGS) in RECORDED and " ".join(TOPOLOGY_ARGS) in RECORDED


def test_collect_without_nvidia_smi_reports_why(tmp_path: Path) -> None:
    facts = collect(str(tmp_path / "nvidia-smi"))
    assert facts.gpus == [] and facts.interconnect == "none"
    assert facts.reason == f"{tmp_path / 'nvidia-smi'} not found (not on PATH, or not an executable)"


def _script(tmp_path: Path, body: str) -> str:
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/usr/bin/env bash\n" + body)
    script.chmod(0o755)
    return str(script)


def test_collect_failure_quotes_nvidia_smi(tmp_path: Path) -> None:
    said = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    fake = _script(tmp_path, f'echo "{said}" >&2\nexit 9\n')
    with pytest.raises(GpuFactsError, match=f"^{re.escape(fake)}: exit status 9: {re.escape(said)}$"):
        collect(fake)


def test_collect_malformed_output_names_the_command(tmp_path: Path) -> None:
    fake = _script(tmp_path, 'echo "Driver Version: 1  CUDA Version: 2"\n')
    with pytest.raises(GpuFactsError, match=f"^{re.escape(fake)} {re.escape(' '.join(QUERY_ARGS))}: line 1"):
        collect(fake)


def test_collect_gives_up_on_a_hung_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fairbench.hosts.gpu.TIMEOUT_S", 0.2)
    fake = _script(tmp_path, "exec sleep 10\n")
    with pytest.raises(GpuFactsError, match=f"^{re.escape(fake)}: no answer after 0.2 s$"):
        collect(fake)


def test_host_json_records_the_gpu_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    write_fake_nvidia_smi(tmp_path, H200X2)
    recorded = facts_of(H200X2).to_json()
    recorded["sources"] = {
        "smi": "nvidia-smi",
        "query": f"nvidia-smi {' '.join(QUERY_ARGS)}",
        "topology": "nvidia-smi topo -m",
    }
    assert host_facts()["gpu"] == recorded


def test_host_json_says_why_it_has_no_gpu_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    _script(tmp_path, 'echo "No devices were found"\nexit 6\n')
    gpu = host_facts()["gpu"]
    assert (
        gpu["gpus"] == [] and gpu["reason"] == f"{tmp_path}/nvidia-smi: exit status 6: No devices were found"
    )
