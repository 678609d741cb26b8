"""A wheelhouse for the sglang role's offline path: a stub ``sglang`` wheel and uv's real wheel.

The lab hosts must not download SGLang and torch (gigabytes), so the provisioning lab test installs this stub
instead: the distribution ``sglang`` at the pinned version, whose ``python -m sglang.launch_server --help``
prints a usage line and exits 0. uv's wheel comes from this machine's package index (``pip download``).

    python tests/lab/stub_repo/build_wheelhouse.py OUT_DIR [SGLANG_VERSION] [UV_VERSION]
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

STUB_NOTE = "fairbench test stub (tests/lab/stub_repo): not SGLang"
LAUNCH_SERVER = f'''"""{STUB_NOTE}."""
import argparse

parser = argparse.ArgumentParser(prog="sglang.launch_server", description="{STUB_NOTE}")
parser.add_argument("--model-path", required=True)
parser.add_argument("--tp-size", type=int, default=1)
args = parser.parse_args()
raise SystemExit("stub: cannot serve " + args.model_path)
'''


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def stub_sglang_wheel(out_dir: Path, version: str) -> Path:
    """Writes sglang-VERSION-py3-none-any.whl (pure Python, no dependencies) into out_dir."""
    dist_info = f"sglang-{version}.dist-info"
    files = {
        "sglang/__init__.py": f'"""{STUB_NOTE}."""\n__version__ = "{version}"\n'.encode(),
        "sglang/launch_server.py": LAUNCH_SERVER.encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\nSummary: {STUB_NOTE}\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: fairbench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = [_record_line(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return wheel


def build(out_dir: Path, sglang_version: str, uv_version: str) -> Path:
    """The wheelhouse: the stub sglang wheel and uv's wheel for this machine's platform."""
    stub_sglang_wheel(out_dir, sglang_version)
    if not list(out_dir.glob(f"uv-{uv_version}-*.whl")):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--dest", str(out_dir), f"uv=={uv_version}"],
            check=True,
        )  # fmt: skip
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3, 4):
        sys.exit(__doc__)
    sglang_version = sys.argv[2] if len(sys.argv) > 2 else "0.5.23"
    uv_version = sys.argv[3] if len(sys.argv) > 3 else "0.13.9"
    print(build(Path(sys.argv[1]), sglang_version, uv_version))
