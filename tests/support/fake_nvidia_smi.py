"""A stand-in ``nvidia-smi`` that answers from a fixture set (tests/fixtures/gpu/<set>/).

It answers exactly the commands tools/record_gpu_fixtures.sh records (``RECORDED``: arguments -> file),
and the clean-state queries of fairbench.hosts.clean_state (memory used, compute processes), which it reads
from the same recording's ``nvidia-smi -q -x`` (each GPU's ``fb_memory_usage/used`` and
``processes/process_info``); it fails on any other, so code that asks nvidia-smi something the
recordings do not hold fails its test.
"""

from __future__ import annotations

import csv
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

from fairbench.hosts.clean_state import COMPUTE_APPS_ARGS, MEMORY_ARGS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
QUERY = (
    "--query-gpu=index,name,uuid,pci.bus_id,memory.total,power.limit,clocks.max.sm,compute_cap --format=csv"
)
RECORDED = {
    "": "nvidia-smi.txt",
    QUERY: "nvidia-smi-query.csv",
    "topo -m": "nvidia-smi-topo-m.txt",
    "-q -x": "nvidia-smi-q.xml",
}
"""nvidia-smi's arguments, as one string, and the file of a fixture set that holds its output."""


def fixture_sets() -> list[Path]:
    """Every recorded set: a new directory under tests/fixtures/gpu/ is tested without new test code."""
    return sorted(path for path in FIXTURES.iterdir() if path.is_dir())


def _mib(text: str | None) -> str:
    """``2658 MiB`` as the ``nounits`` queries print it."""
    return (text or "[N/A]").removesuffix(" MiB")


def clean_state_answers(fixture_set: Path) -> dict[str, str]:
    """The clean-state queries' answers, from the set's ``-q -x`` recording, by their arguments."""
    with (fixture_set / RECORDED[QUERY]).open(encoding="utf-8") as table:
        index_of = {row["uuid"]: row["index"] for row in csv.DictReader(table, skipinitialspace=True)}
    gpus = ET.parse(fixture_set / RECORDED["-q -x"]).getroot().findall("gpu")
    memory = apps = ""
    for gpu in gpus:
        uuid = gpu.findtext("uuid", "")
        memory += f"{index_of[uuid]}, {uuid}, {_mib(gpu.findtext('fb_memory_usage/used'))}\n"
        for process in gpu.findall("processes/process_info"):
            apps += (
                f"{process.findtext('pid')}, {process.findtext('process_name')}, "
                f"{_mib(process.findtext('used_memory'))}, {uuid}\n"
            )
    return {" ".join(MEMORY_ARGS): memory, " ".join(COMPUTE_APPS_ARGS): apps}


def write_fake_nvidia_smi(directory: Path, fixture_set: Path) -> Path:
    """An executable ``directory/nvidia-smi`` that prints ``fixture_set``'s recording of each command."""
    answers = dict(RECORDED.items())
    for number, (args, text) in enumerate(clean_state_answers(fixture_set).items()):
        derived = directory / f"nvidia-smi-clean-state-{number}.txt"
        derived.write_text(text, encoding="utf-8")
        answers[args] = str(derived)
    cases = "".join(
        f"    {shlex.quote(args)}) cat {shlex.quote(str(fixture_set / file))} ;;\n"
        for args, file in answers.items()
    )
    script = directory / "nvidia-smi"
    script.write_text(
        "#!/usr/bin/env bash\n"
        'case "$*" in\n'
        f"{cases}"
        '    *) echo "fake nvidia-smi: no recording of: $*" >&2; exit 2 ;;\n'
        "esac\n"
    )
    script.chmod(0o755)
    return script
