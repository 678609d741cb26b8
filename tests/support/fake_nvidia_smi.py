"""A stand-in ``nvidia-smi`` that answers from a fixture set (tests/fixtures/gpu/<set>/).

It answers exactly the commands tools/record_gpu_fixtures.sh records (``RECORDED``: arguments -> file),
and fails on any other, so code that asks nvidia-smi something the recordings do not hold fails its test.
"""

from __future__ import annotations

import shlex
from pathlib import Path

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


def write_fake_nvidia_smi(directory: Path, fixture_set: Path) -> Path:
    """An executable ``directory/nvidia-smi`` that prints ``fixture_set``'s recording of each command."""
    cases = "".join(
        f"    {shlex.quote(args)}) cat {shlex.quote(str(fixture_set / file))} ;;\n"
        for args, file in RECORDED.items()
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
