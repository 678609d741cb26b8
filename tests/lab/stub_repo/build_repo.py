"""A local apt repository of stub packages with NVIDIA's real package names: a test fixture, nothing more.

NVIDIA's CUDA repository is not reachable from CI, so the provisioning lab test points the roles at this
one instead. It has the same shape as NVIDIA's (a flat repository: ``deb [signed-by=KEY] URL /``), is signed
with a throwaway GPG key made here (so apt's signature check and the roles' keyring/signed_by logic run for
real), and carries two driver branches so that the pinning package is what decides which ``nvidia-open``
is installed. The packages install shell scripts only: ``nvcc --version`` prints the toolkit's release,
``nvidia-smi`` finds no GPU, ``nvidia-persistenced`` sleeps. Every file says it is a stub.

    python tests/lab/stub_repo/build_repo.py OUT_DIR      # OUT_DIR/repo (serve it), OUT_DIR/gnupg
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# The key's file name in the repository, as NVIDIA's is 3bf863cc.pub.
KEY_FILE = "fairbench-stub.pub"
STUB_NOTE = "fairbench test stub (tests/lab/stub_repo): not NVIDIA software"
# Driver branches in the repository: the role pins the first; an unpinned apt would pick the newer one.
PINNED_BRANCH = "580"
PINNED_DRIVER = "580.95.05-1"
NEWER_DRIVER = "590.44.01-1"
CUDA_VERSION = "13.0"
NCCL_VERSION = "2.28.7-1+cuda13.0"


@dataclass
class Package:
    name: str
    version: str
    files: dict[str, tuple[str | bytes, int]] = field(default_factory=dict)  # path -> (content, mode)
    depends: str = ""
    description: str = ""


def _script(body: str) -> tuple[str, int]:
    return (f"#!/bin/sh\n# {STUB_NOTE}\n{body}\n", 0o755)


def _packages() -> list[Package]:
    pinning = (
        f"# {STUB_NOTE}\n"
        "Package: nvidia-open nvidia-persistenced\n"
        f"Pin: version {PINNED_BRANCH}.*\n"
        "Pin-Priority: 1000\n"
    )
    cuda_home = f"/usr/local/cuda-{CUDA_VERSION}"
    nvcc = _script(
        'echo "nvcc: NVIDIA (R) Cuda compiler driver"\n'
        f'echo "Cuda compilation tools, release {CUDA_VERSION}, V{CUDA_VERSION}.88"'
    )
    persistenced_unit = (
        f"# {STUB_NOTE}\n[Unit]\nDescription=NVIDIA Persistence Daemon (stub)\n\n"
        "[Service]\nType=simple\nExecStart=/usr/bin/nvidia-persistenced\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    packages = [
        Package(
            "cuda-keyring",
            "1.1-1",
            {},  # the key: filled in by build()
            description="keyring of the stub repository",
        ),
        Package(
            f"nvidia-driver-pinning-{PINNED_BRANCH}",
            f"{PINNED_DRIVER.split('-', maxsplit=1)[0]}-1",
            {f"etc/apt/preferences.d/nvidia-driver-pinning-{PINNED_BRANCH}": (pinning, 0o644)},
            description=f"pins the driver packages to branch {PINNED_BRANCH}",
        ),
        Package(
            "nvidia-persistenced",
            PINNED_DRIVER,
            {
                "usr/bin/nvidia-persistenced": _script("exec sleep infinity"),
                "lib/systemd/system/nvidia-persistenced.service": (persistenced_unit, 0o644),
            },
        ),
        Package(
            "nvidia-persistenced",
            NEWER_DRIVER,
            {
                "usr/bin/nvidia-persistenced": _script("exec sleep infinity"),
                "lib/systemd/system/nvidia-persistenced.service": (persistenced_unit, 0o644),
            },
        ),
        Package(
            "cuda-toolkit-13-0",
            "13.0.2-1",
            {f"{cuda_home[1:]}/bin/nvcc": nvcc, f"{cuda_home[1:]}/lib64/.stub": (STUB_NOTE + "\n", 0o644)},
        ),
        Package("libnccl2", NCCL_VERSION, {"usr/share/doc/libnccl2/STUB": (STUB_NOTE + "\n", 0o644)}),
        Package(
            "libnccl-dev",
            NCCL_VERSION,
            {"usr/share/doc/libnccl-dev/STUB": (STUB_NOTE + "\n", 0o644)},
            depends=f"libnccl2 (= {NCCL_VERSION})",
        ),
    ]
    for version in (PINNED_DRIVER, NEWER_DRIVER):
        packages.append(
            Package(
                "nvidia-open",
                version,
                {
                    "usr/bin/nvidia-smi": _script(
                        f'echo "stub nvidia-smi {version}: No devices were found" >&2\nexit 6'
                    )
                },
                depends=f"nvidia-persistenced (= {version})",
                description=f"open kernel module driver {version}",
            )
        )
    return packages


def _run(*argv: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout


def _build_deb(pkg: Package, work: Path, out: Path) -> Path:
    root = work / f"{pkg.name}_{pkg.version}"
    (root / "DEBIAN").mkdir(parents=True)
    for rel, (content, mode) in pkg.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        path.chmod(mode)
    control = [
        f"Package: {pkg.name}",
        f"Version: {pkg.version}",
        "Architecture: all",
        "Maintainer: fairbench tests <fairbench@localhost>",
        "Section: misc",
        "Priority: optional",
    ]
    if pkg.depends:
        control.append(f"Depends: {pkg.depends}")
    control.append(f"Description: {pkg.description or pkg.name} ({STUB_NOTE})")
    (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    deb = out / f"{pkg.name}_{pkg.version}_all.deb"
    _run("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb))
    return deb


def _stanza(deb: Path) -> str:
    data = deb.read_bytes()
    fields = _run("dpkg-deb", "-f", str(deb)).rstrip("\n")
    return (
        f"{fields}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
        f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
    )


def build(out_dir: Path) -> Path:
    """Builds OUT_DIR/repo (signed) and OUT_DIR/gnupg (the throwaway key); returns the repository path."""
    repo = out_dir / "repo"
    gnupg = out_dir / "gnupg"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.rmtree(gnupg, ignore_errors=True)
    repo.mkdir(parents=True)
    gnupg.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(gnupg)}
    uid = "fairbench stub repository <fairbench-stub@localhost>"
    _run("gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "rsa3072", "sign", "1d", env=env)
    armored = _run("gpg", "--batch", "--armor", "--export", uid, env=env)
    (repo / KEY_FILE).write_text(armored)
    binary = subprocess.run(
        ["gpg", "--batch", "--export", uid], check=True, capture_output=True, env=env
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        stanzas = []
        for pkg in _packages():
            if pkg.name == "cuda-keyring":
                pkg.files = {"usr/share/keyrings/cuda-archive-keyring.gpg": (binary, 0o644)}
            deb = _build_deb(pkg, Path(tmp), repo)
            stanzas.append(_stanza(deb))
    packages = "\n".join(stanzas)
    (repo / "Packages").write_text(packages)
    (repo / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    lines = ["Origin: fairbench-stub", "Label: fairbench stub CUDA repository"]
    lines += ["Architectures: all amd64 arm64", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = (repo / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (repo / "Release").write_text("\n".join(lines) + "\n")
    release = str(repo / "Release")
    _run("gpg", "--batch", "--yes", "--clearsign", "-o", str(repo / "InRelease"), release, env=env)
    _run("gpg", "--batch", "--yes", "-abs", "-o", str(repo / "Release.gpg"), release, env=env)
    # gpg started an agent for this GNUPGHOME: stop it, so that no process outlives the build.
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
    return repo


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(build(Path(sys.argv[1])))
