"""``collect``: a GPU host's fleet facts, the facts that must match between equivalent hosts of a pool.

Which facts they are (``FACTS``) and the shape of the answer (every fact, ``REASONS`` and ``MACHINE``)
are the campaign's: fairbench.campaign.fleet_facts. ``MACHINE`` holds what tells which machine the host
runs on (fairbench.hosts.machine), from the same nvidia-smi answer.

Nothing here raises: a fact that cannot be read is null with its reason, so the comparison names it.
SGLang's versions are read by running the SGLang venv's Python once on a few lines of importlib.metadata
(``VERSIONS_SCRIPT``), never by importing sglang or torch, which takes many seconds.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from fairbench import __version__
from fairbench.campaign.fleet_facts import FACTS, MACHINE, REASONS
from fairbench.hosts.gpu import GpuFacts, GpuFactsError
from fairbench.hosts.gpu import collect as collect_gpu_facts
from fairbench.hosts.machine import collect as collect_machine_facts

NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12")
"""The distributions that bring NCCL into the SGLang venv, the first installed one counting."""
SGLANG_DISTRIBUTION = "sglang"
VERSIONS_SCRIPT = """\
import importlib.metadata, json, sys
versions = {}
for name in sys.argv[1:]:
    try:
        versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        versions[name] = None
print(json.dumps(versions))
"""
"""What the SGLang venv's Python runs (``-c``, the distributions as arguments): a JSON object, name ->
version or null. Any Python 3.8+ runs it, whatever the venv holds."""
VERSIONS_TIMEOUT_S = 60.0
"""A Python start plus a scan of site-packages' metadata: under a second, unless the disk is cold."""
OUTPUT_EXCERPT_CHARS = 500
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")
PROC_CPUINFO = Path("/proc/cpuinfo")
PROC_MEMINFO = Path("/proc/meminfo")
KIB_PER_GIB = 1024 * 1024


# --- parsers --------------------------------------------------------------------------------------


def parse_meminfo(text: str) -> int | None:
    """MemTotal of a /proc/meminfo text (in kB, which the kernel means as KiB) in GiB, rounded; None
    without a MemTotal line."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "MemTotal":
            number, *unit = value.split()
            if not number.isdigit() or unit not in ([], ["kB"]):
                return None
            return round(int(number) / KIB_PER_GIB)
    return None


def parse_cpu_models(text: str) -> str | None:
    """The distinct ``model name`` values of a /proc/cpuinfo text, in order, joined by ', '; None without
    any (ARM kernels print none)."""
    models: list[str] = []
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name" and value.strip() and value.strip() not in models:
            models.append(value.strip())
    return ", ".join(models) or None


def parse_cuda_version_json(text: str) -> str | None:
    """The toolkit's version of a CUDA ``version.json`` (``{"cuda": {"version": "12.8.1"}, ...}``)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    cuda = data.get("cuda") if isinstance(data, dict) else None
    version = cuda.get("version") if isinstance(cuda, dict) else None
    return version if isinstance(version, str) and version else None


# --- collecting -----------------------------------------------------------------------------------


class _Facts:
    """The facts gathered so far: each set once, a null one with its reason."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.reasons: dict[str, str] = {}
        self.machine: dict[str, Any] = {}

    def set(self, fact: str, value: Any, reason: str) -> None:
        """``value``, or null with ``reason`` when it is None."""
        self.values[fact] = value
        if value is None:
            self.reasons[fact] = reason

    def to_json(self) -> dict[str, Any]:
        return {**{fact: self.values[fact] for fact in FACTS}, REASONS: self.reasons, MACHINE: self.machine}


def collect(*, sglang_python: str | None, nvidia_smi: str = "nvidia-smi") -> dict[str, Any]:
    """This host's ``FACTS``, ``reasons`` and ``machine`` (fairbench.campaign.fleet_facts); ``sglang_python``
    is the SGLang venv's interpreter (None: the host has no SGLang), ``nvidia_smi`` the nvidia-smi to run."""
    facts = _Facts()
    _gpu_facts(facts, nvidia_smi)
    facts.set("cuda_toolkit", *_cuda_toolkit())
    _sglang_facts(facts, sglang_python)
    facts.set("fairbench", __version__, "")
    facts.set("cpu_model", *_cpu_model())
    facts.set("cpus", os.cpu_count(), "os.cpu_count() cannot tell")
    facts.set("memory_gib", *_memory_gib())
    return facts.to_json()


def _gpu_facts(facts: _Facts, nvidia_smi: str) -> None:
    try:
        gpu = collect_gpu_facts(nvidia_smi)
    except GpuFactsError as exc:
        gpu = GpuFacts.unavailable(str(exc))
    no_gpus = gpu.reason or f"{nvidia_smi} lists no GPUs"
    facts.set("gpu_model", ", ".join(sorted({each.name for each in gpu.gpus})) or None, no_gpus)
    facts.set("gpu_count", len(gpu.gpus), "")
    facts.set("driver", gpu.driver_version, no_gpus)
    facts.set("cuda", gpu.cuda_version, gpu.reason or f"{nvidia_smi} says CUDA Version: N/A (no libcuda)")
    facts.machine = collect_machine_facts([each.uuid for each in gpu.gpus])


def _cuda_toolkit() -> tuple[str | None, str]:
    """The toolkit's version and, when None, why; $CUDA_HOME first, as CUDA's own tools look."""
    homes = [Path(home) for home in (os.environ.get("CUDA_HOME"), DEFAULT_CUDA_HOME) if home]
    for home in dict.fromkeys(homes):
        path = home / "version.json"
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as exc:
            return None, f"{path}: cannot read: {exc.strerror or exc}"
        version = parse_cuda_version_json(text)
        return version, f"{path}: no cuda.version in it"
    return None, f"no CUDA toolkit: no {' and no '.join(str(home / 'version.json') for home in homes)}"


def _sglang_facts(facts: _Facts, sglang_python: str | None) -> None:
    versions, why = _distribution_versions(sglang_python, [SGLANG_DISTRIBUTION, *NCCL_DISTRIBUTIONS])
    nccl = next((versions[name] for name in NCCL_DISTRIBUTIONS if versions.get(name)), None)
    facts.set("nccl", nccl, why or f"neither {' nor '.join(NCCL_DISTRIBUTIONS)} in {sglang_python}'s venv")
    sglang = versions.get(SGLANG_DISTRIBUTION)
    facts.set("sglang", sglang, why or f"no {SGLANG_DISTRIBUTION} distribution in {sglang_python}'s venv")


def _distribution_versions(python: str | None, names: list[str]) -> tuple[dict[str, str | None], str]:
    """The versions ``python`` has of ``names`` (VERSIONS_SCRIPT), or nothing and why not."""
    if python is None:
        return {}, "no SGLang venv on this host (no sglang_python given)"
    if not Path(python).exists():
        return {}, f"{python} does not exist (no SGLang venv)"
    # cwd /: python -c puts the working directory first on sys.path, where stray metadata would count.
    command = [python, "-c", VERSIONS_SCRIPT, *names]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=VERSIONS_TIMEOUT_S, cwd="/", check=False
        )
    except subprocess.TimeoutExpired:
        return {}, f"{python}: no answer after {VERSIONS_TIMEOUT_S:g} s"
    except OSError as exc:
        return {}, f"{python}: cannot run: {exc.strerror or exc}"
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[-OUTPUT_EXCERPT_CHARS:]
        return {}, f"{python}: exit status {done.returncode}: {said or 'no output'}"
    try:
        versions = json.loads(done.stdout)
    except ValueError:
        versions = None
    if not isinstance(versions, dict) or not all(
        isinstance(versions.get(name), str | None) for name in names
    ):
        said = done.stdout.strip()[:OUTPUT_EXCERPT_CHARS]
        return {}, f"{python}: not a JSON object of versions: {said or 'no output'}"
    return {name: versions.get(name) for name in names}, ""


def _cpu_model() -> tuple[str | None, str]:
    try:
        model = parse_cpu_models(PROC_CPUINFO.read_text())
    except OSError:
        model = None
    if model is None:
        model = platform.processor() or None
    return model, f"no 'model name' in {PROC_CPUINFO}, and platform.processor() is empty"


def _memory_gib() -> tuple[int | None, str]:
    try:
        text = PROC_MEMINFO.read_text()
    except OSError as exc:
        return None, f"{PROC_MEMINFO}: cannot read: {exc.strerror or exc}"
    return parse_meminfo(text), f"{PROC_MEMINFO}: no MemTotal in kB"
