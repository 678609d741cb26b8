"""Checks that every lab test passed: the tests under tests/lab against the JUnit reports of their runs.

``make lab-test`` and ``make lab-sglang-test`` select tests by file and by the ``lab`` marker, so a test
file left out of both targets, or a test without the marker, would never run and nothing would say so.
CI runs this after both targets::

    python tests/support/lab_counts.py build/lab-test.xml build/lab-sglang-test.xml

It exits 1 naming each lab test that did not pass (not run, skipped, failed), and prints the counts.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def existing_lab_tests() -> set[str]:
    """Every test under tests/lab, as ``tests/lab/file.py::name``, whatever its markers."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/lab"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"lab_counts: collecting tests/lab failed:\n{done.stdout}{done.stderr}")
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def junit_name(nodeid: str) -> tuple[str, str]:
    """A node id as pytest's JUnit report names it: ``tests/lab/t.py::C::f[x]`` is (``tests.lab.t.C``,
    ``f[x]``)."""
    base, bracket, params = nodeid.partition("[")
    path, *scopes, name = base.split("::")
    return ".".join([path.removesuffix(".py").replace("/", "."), *scopes]), name + bracket + params


def passed_tests(report: Path) -> set[tuple[str, str]]:
    """The tests a JUnit report of pytest says passed, as (classname, name)."""
    return {
        (case.get("classname", ""), case.get("name", ""))
        for case in ET.parse(report).getroot().iter("testcase")
        if all(case.find(outcome) is None for outcome in ("failure", "error", "skipped"))
    }


def main(argv: Sequence[str]) -> int:
    if not argv:
        raise SystemExit("usage: lab_counts.py JUNIT.xml...")
    missing = [path for path in argv if not Path(path).is_file()]
    if missing:
        raise SystemExit(f"lab_counts: no JUnit report at {', '.join(missing)}")
    existing = existing_lab_tests()
    passed: set[tuple[str, str]] = set().union(*(passed_tests(Path(path)) for path in argv))
    not_passed = sorted(test for test in existing if junit_name(test) not in passed)
    print(f"lab tests: {len(existing)} exist, {len(existing) - len(not_passed)} passed")
    for test in not_passed:
        print(f"  did not pass: {test}")
    return 1 if not_passed or not existing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
