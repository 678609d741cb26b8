"""A host's fleet facts (fairbench.hosts.fleet_facts): the parsers, and ``collect`` against stand-ins.

The SGLang venv is a real Python whose only site directory is a directory of ``*.dist-info`` metadata
(``fake_sglang_python``), so the versions come through the same ``-c`` script and importlib.metadata as
on a host; its ``sglang`` package exits when imported, so a collect that imports SGLang fails. GPU facts
come from tests/support/fake_nvidia_smi.py's recordings.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.fake_nvidia_smi import write_fake_nvidia_smi

import fairbench
from fairbench.campaign.fleet_facts import FACTS, MACHINE, REASONS
from fairbench.hosts import fleet_facts
from fairbench.hosts.fleet_facts import (
    collect,
    parse_cpu_models,
    parse_cuda_version_json,
    parse_meminfo,
)
from fairbench.hosts.machine import MACHINE_FACTS

REPO = Path(__file__).resolve().parents[2]
H200X2 = REPO / "tests/fixtures/gpu/h200x2"


def fake_sglang_python(directory: Path, distributions: dict[str, str]) -> Path:
    """An executable ``directory/python``: this Python, its only site directory ``directory/site`` holding
    the metadata of ``distributions`` (name -> version) and an ``sglang`` package that exits on import."""
    site = directory / "site"
    site.mkdir(parents=True)
    for name, version in distributions.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (site / "sglang").mkdir()
    (site / "sglang" / "__init__.py").write_text("raise SystemExit('sglang was imported')\n")
    python = directory / "python"
    # -S: no site-packages of this venv, so only the metadata above is installed.
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    return python


@pytest.fixture(autouse=True)
def no_cuda_toolkit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No CUDA toolkit unless a test installs one: this machine's own /usr/local/cuda must not count."""
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(fleet_facts, "DEFAULT_CUDA_HOME", tmp_path / "no-usr-local-cuda")


def _no_nvidia_smi(tmp_path: Path) -> str:
    return str(tmp_path / "nowhere" / "nvidia-smi")


def _check_shape(facts: dict[str, Any]) -> None:
    """Every fact, ``reasons`` and ``machine``, nothing else; a reason for each null fact and for no other,
    in ``machine`` too."""
    assert list(facts) == [*FACTS, REASONS, MACHINE]
    assert sorted(facts[REASONS]) == sorted(fact for fact in FACTS if facts[fact] is None)
    assert all(isinstance(reason, str) and reason for reason in facts[REASONS].values())
    assert all(
        value is None or isinstance(value, str | int) for fact, value in facts.items() if fact in FACTS
    )
    machine = facts[MACHINE]
    assert list(machine) == [*MACHINE_FACTS, REASONS]
    assert sorted(machine[REASONS]) == sorted(fact for fact in MACHINE_FACTS if machine[fact] is None)
    json.dumps(facts)


def test_facts_are_named_and_described_once_each() -> None:
    assert len(FACTS) == len(set(FACTS)) >= 10
    assert {"gpu_model", "driver", "nccl", "sglang", "memory_gib"} <= set(FACTS)
    assert "os" not in FACTS and "kernel" not in FACTS and REASONS not in FACTS
    assert all(description and "\n" not in description for description in FACTS.values())


# --- the SGLang venv's versions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("installed", "nccl"),
    [
        ({"nvidia-nccl-cu13": "2.28.3"}, "2.28.3"),
        ({"nvidia-nccl-cu12": "2.27.5"}, "2.27.5"),
        ({"nvidia-nccl-cu12": "2.27.5", "nvidia-nccl-cu13": "2.28.3"}, "2.28.3"),
    ],
    ids=["cu13", "cu12", "both"],
)
def test_versions_come_from_the_sglang_venvs_metadata(
    tmp_path: Path, installed: dict[str, str], nccl: str
) -> None:
    python = fake_sglang_python(tmp_path, {"sglang": "0.5.23", **installed})
    facts = collect(sglang_python=str(python), nvidia_smi=_no_nvidia_smi(tmp_path))
    _check_shape(facts)
    assert (facts["sglang"], facts["nccl"]) == ("0.5.23", nccl)
    assert "sglang" not in facts[REASONS] and "nccl" not in facts[REASONS]


def test_a_venv_without_the_packages_gives_nulls_naming_them(tmp_path: Path) -> None:
    python = fake_sglang_python(tmp_path, {"torch": "2.9.1"})
    facts = collect(sglang_python=str(python), nvidia_smi=_no_nvidia_smi(tmp_path))
    _check_shape(facts)
    assert facts["sglang"] is None and facts["nccl"] is None
    assert facts[REASONS]["sglang"] == f"no sglang distribution in {python}'s venv"
    assert facts[REASONS]["nccl"] == f"neither nvidia-nccl-cu13 nor nvidia-nccl-cu12 in {python}'s venv"


@pytest.mark.parametrize("given", ["none", "missing"])
def test_no_sglang_python_gives_nulls_with_reasons(tmp_path: Path, given: str) -> None:
    python = None if given == "none" else str(tmp_path / "venv" / "bin" / "python")
    facts = collect(sglang_python=python, nvidia_smi=_no_nvidia_smi(tmp_path))
    _check_shape(facts)
    assert facts["sglang"] is None and facts["nccl"] is None
    expected = (
        "no SGLang venv on this host (no sglang_python given)"
        if python is None
        else f"{python} does not exist (no SGLang venv)"
    )
    assert facts[REASONS]["sglang"] == facts[REASONS]["nccl"] == expected


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("echo 'cannot open shared object' >&2; exit 3", "exit status 3: cannot open shared object"),
        ("echo 'Python 2.7'", "not a JSON object of versions: Python 2.7"),
        ("echo '{\"sglang\": 5}'", 'not a JSON object of versions: {"sglang": 5}'),
    ],
)
def test_a_python_that_does_not_answer_gives_nulls_quoting_it(tmp_path: Path, body: str, reason: str) -> None:
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    facts = collect(sglang_python=str(python), nvidia_smi=_no_nvidia_smi(tmp_path))
    _check_shape(facts)
    assert facts[REASONS]["sglang"] == facts[REASONS]["nccl"] == f"{python}: {reason}"


# --- GPUs -----------------------------------------------------------------------------------------


def test_gpu_facts_come_from_nvidia_smi(tmp_path: Path) -> None:
    fake = write_fake_nvidia_smi(tmp_path, H200X2)
    facts = collect(sglang_python=None, nvidia_smi=str(fake))
    _check_shape(facts)
    header = (H200X2 / "nvidia-smi.txt").read_text()
    names = re.findall(r"^\|\s+\d+\s+(NVIDIA \S+)", header, re.M)
    assert facts["gpu_count"] == len(names) == 2
    assert facts["gpu_model"] == "NVIDIA H200" == names[0]
    assert f"Driver Version: {facts['driver']} " in header and f"CUDA Version: {facts['cuda']} " in header
    query = (H200X2 / "nvidia-smi-query.csv").read_text()
    uuids = re.findall(r"GPU-[0-9a-f-]{36}", query)
    assert facts[MACHINE]["gpu_uuids"] == sorted(uuids) and len(uuids) == 2


def test_mixed_gpu_models_are_listed_sorted(tmp_path: Path) -> None:
    fixture = tmp_path / "mixed"
    fixture.mkdir()
    for path in H200X2.iterdir():
        (fixture / path.name).write_text(path.read_text())
    query = fixture / "nvidia-smi-query.csv"
    header, first, second = query.read_text().splitlines()[:3]
    query.write_text("\n".join([header, first, second.replace("NVIDIA H200", "NVIDIA B200")]) + "\n")
    facts = collect(sglang_python=None, nvidia_smi=str(write_fake_nvidia_smi(tmp_path, fixture)))
    assert facts["gpu_model"] == "NVIDIA B200, NVIDIA H200" and facts["gpu_count"] == 2


def test_no_nvidia_smi_is_no_gpus_and_why(tmp_path: Path) -> None:
    missing = _no_nvidia_smi(tmp_path)
    facts = collect(sglang_python=None, nvidia_smi=missing)
    _check_shape(facts)
    assert facts["gpu_count"] == 0 and facts[MACHINE]["gpu_uuids"] == []
    why = f"{missing} not found (not on PATH, or not an executable)"
    assert facts[REASONS]["gpu_model"] == facts[REASONS]["driver"] == facts[REASONS]["cuda"] == why


def test_a_failing_nvidia_smi_is_no_gpus_and_its_error(tmp_path: Path) -> None:
    broken = tmp_path / "nvidia-smi"
    broken.write_text('#!/bin/sh\necho "No devices were found"\nexit 6\n')
    broken.chmod(0o755)
    facts = collect(sglang_python=None, nvidia_smi=str(broken))
    _check_shape(facts)
    assert facts["gpu_count"] == 0 and facts["gpu_model"] is None
    assert facts[REASONS]["driver"] == f"{broken}: exit status 6: No devices were found"


# --- the CUDA toolkit -----------------------------------------------------------------------------


def _toolkit(home: Path, text: str) -> Path:
    home.mkdir(parents=True)
    (home / "version.json").write_text(text)
    return home


def _version_json(version: str) -> str:
    return json.dumps({"cuda": {"name": "CUDA SDK", "version": version}, "nvcc": {"version": "x"}})


def test_cuda_home_comes_first_then_usr_local_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    usr_local = _toolkit(tmp_path / "usr-local-cuda", _version_json("12.8.1"))
    monkeypatch.setattr(fleet_facts, "DEFAULT_CUDA_HOME", usr_local)
    assert collect(sglang_python=None, nvidia_smi=_no_nvidia_smi(tmp_path))["cuda_toolkit"] == "12.8.1"
    monkeypatch.setenv("CUDA_HOME", str(_toolkit(tmp_path / "cuda-13.0", _version_json("13.0.2"))))
    assert collect(sglang_python=None, nvidia_smi=_no_nvidia_smi(tmp_path))["cuda_toolkit"] == "13.0.2"
    # A CUDA_HOME without version.json (an old toolkit) leaves /usr/local/cuda's.
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert collect(sglang_python=None, nvidia_smi=_no_nvidia_smi(tmp_path))["cuda_toolkit"] == "12.8.1"


def test_no_or_a_broken_toolkit_is_null_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = collect(sglang_python=None, nvidia_smi=_no_nvidia_smi(tmp_path))
    assert facts["cuda_toolkit"] is None
    missing = tmp_path / "no-usr-local-cuda" / "version.json"
    assert facts[REASONS]["cuda_toolkit"] == f"no CUDA toolkit: no {missing}"
    home = _toolkit(tmp_path / "cuda", '{"cuda": {"name": "CUDA SDK"}}')
    monkeypatch.setenv("CUDA_HOME", str(home))
    facts = collect(sglang_python=None, nvidia_smi=_no_nvidia_smi(tmp_path))
    assert facts["cuda_toolkit"] is None
    assert facts[REASONS]["cuda_toolkit"] == f"{home / 'version.json'}: no cuda.version in it"


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"cuda": "12.8"}', '{"cuda": {"version": 12}}'])
def test_version_json_without_a_version(text: str) -> None:
    assert parse_cuda_version_json(text) is None


# --- CPUs and memory ------------------------------------------------------------------------------

MEMINFO = "MemTotal:       {kib} kB\nMemFree:        20310044 kB\nMemAvailable:   22000000 kB\n"


@pytest.mark.parametrize(
    ("kib", "gib"),
    [
        (24684084, 24),  # 23.54 GiB
        (2113516339, 2016),  # 2015.60 GiB: a 2 TiB box less the kernel's reservations
        (2112865368, 2015),  # 2014.99 GiB
        (1048576 * 3 // 2 - 1, 1),  # just under 1.5 GiB
    ],
)
def test_meminfo_is_whole_gib(kib: int, gib: int) -> None:
    assert parse_meminfo(MEMINFO.format(kib=kib)) == gib


def test_boxes_of_one_kind_with_different_reservations_have_equal_memory() -> None:
    # Two 1 TiB boxes whose kernels reserve 310 MiB apart.
    first, second = 1056427348, 1056427348 - 310 * 1024
    assert parse_meminfo(MEMINFO.format(kib=first)) == parse_meminfo(MEMINFO.format(kib=second)) == 1007


@pytest.mark.parametrize("text", ["", "MemFree: 1 kB\n", "MemTotal: lots kB\n", "MemTotal: 1024 MB\n"])
def test_meminfo_without_memtotal_in_kb(text: str) -> None:
    assert parse_meminfo(text) is None


def test_cpu_models_are_the_distinct_model_names() -> None:
    processor = "processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: {model}\nflags\t\t: fpu\n\n"
    xeon = "Intel(R) Xeon(R) Platinum 8480+"
    two_sockets = "".join(processor.format(n=n, model=xeon) for n in range(4))
    assert parse_cpu_models(two_sockets) == xeon
    mixed = two_sockets + processor.format(n=4, model="Other CPU")
    assert parse_cpu_models(mixed) == f"{xeon}, Other CPU"
    assert parse_cpu_models("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n") is None


def test_cpu_and_memory_facts_are_read_from_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpuinfo, meminfo = tmp_path / "cpuinfo", tmp_path / "meminfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    meminfo.write_text(MEMINFO.format(kib=24684084))
    monkeypatch.setattr(fleet_facts, "PROC_CPUINFO", cpuinfo)
    monkeypatch.setattr(fleet_facts, "PROC_MEMINFO", meminfo)
    facts = collect(sglang_python=None, nvidia_smi=_no_nvidia_smi(tmp_path))
    _check_shape(facts)
    assert facts["cpu_model"] == "AMD EPYC 9654 96-Core Processor"
    assert facts["memory_gib"] == 24
    assert facts["cpus"] == os.cpu_count()
    assert facts["fairbench"] == fairbench.__version__


def test_unreadable_proc_files_are_null_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")
    monkeypatch.setattr(fleet_facts, "PROC_CPUINFO", cpuinfo)
    monkeypatch.setattr(fleet_facts, "PROC_MEMINFO", tmp_path / "no-meminfo")
    monkeypatch.setattr(fleet_facts.platform, "processor", lambda: "")
    facts = collect(sglang_python=None, nvidia_smi=_no_nvidia_smi(tmp_path))
    _check_shape(facts)
    assert facts["cpu_model"] is None and facts["memory_gib"] is None
    assert facts[REASONS]["cpu_model"] == f"no 'model name' in {cpuinfo}, and platform.processor() is empty"
    assert (
        facts[REASONS]["memory_gib"] == f"{tmp_path / 'no-meminfo'}: cannot read: No such file or directory"
    )
    # ARM: no model name, but platform.processor() may tell.
    monkeypatch.setattr(fleet_facts.platform, "processor", lambda: "aarch64")
    assert collect(sglang_python=None, nvidia_smi=_no_nvidia_smi(tmp_path))["cpu_model"] == "aarch64"
