"""fairbench's wheel, built on the control node for the bench role: ``python -m build --wheel
--no-isolation`` of a source tree, one build of that tree at a time.

setuptools builds in the source tree's ``build/`` directory, so two campaigns started at once from one
checkout would build over each other's files: an exclusive lock on ``build/.wheel.lock`` in the tree makes
the second wait for the first (seconds). The build's output is this command's (its last line names the
wheel).

    python -m fairbench.hosts.wheel SOURCE --outdir DIR
"""

from __future__ import annotations

import argparse
import fcntl
import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairbench.hosts.wheel", description=__doc__)
    parser.add_argument("source", type=Path, help="the source tree (fairbench's checkout)")
    parser.add_argument("--outdir", type=Path, required=True, help="where the wheel goes")
    args = parser.parse_args(argv)
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", f"--outdir={args.outdir}"]
    build.append(str(args.source))
    if not args.source.is_dir():
        return subprocess.call(build)  # nothing to lock: the build says what is wrong with the source
    lock_path = args.source / "build" / ".wheel.lock"
    lock_path.parent.mkdir(exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.call(build)


if __name__ == "__main__":
    sys.exit(main())
