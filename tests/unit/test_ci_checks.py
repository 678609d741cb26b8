"""What CI checks of the test runs themselves.

In CI a skip fails its test unless tests/support/ci_skips.py accepts it (elsewhere it stays a skip), and
tests/support/lab_counts.py requires every lab test to have passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.support import ci_skips, lab_counts

REPO = Path(__file__).resolve().parents[2]
PROBES = """
import pytest

def test_skips_at_run_time():
    pytest.skip("lab not up: no inventory")

@pytest.mark.skipif(True, reason="needs systemd-analyze")
def test_skips_by_its_mark():
    pass

@pytest.fixture(scope="module")
def lab():
    pytest.skip("lab not up: no SSH on lab1")

def test_skips_in_a_fixture(lab):
    pass

@pytest.mark.xfail(reason="known to fail")
def test_expected_to_fail():
    assert False

def test_runs():
    pass
"""


def _pytest_with_the_suites_hooks(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """The probe tests run by a pytest that loads tests/conftest.py as a plugin, as the suite does."""
    (tmp_path / "test_probes.py").write_text(PROBES)
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-rA", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_probes.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_in_ci_every_kind_of_skip_fails_and_names_what_was_missing(tmp_path: Path) -> None:
    done = _pytest_with_the_suites_hooks(tmp_path, "1")
    assert done.returncode == 1, done.stdout
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith("1 failed, 1 passed, 1 xfailed, 2 errors"), summary
    for name, reason in [
        ("test_skips_at_run_time", "lab not up: no inventory"),
        ("test_skips_by_its_mark", "needs systemd-analyze"),
        ("test_skips_in_a_fixture", "lab not up: no SSH on lab1"),
    ]:
        assert f"test_probes.py::{name} - skipped in CI, where every test must run: {reason}" in done.stdout


def test_outside_ci_a_skip_stays_a_skip(tmp_path: Path) -> None:
    done = _pytest_with_the_suites_hooks(tmp_path, None)
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("1 passed, 3 skipped, 1 xfailed")


def test_a_skip_ci_accepts_needs_its_test_and_its_reason() -> None:
    entry = ci_skips.ACCEPTED_IN_CI[0]
    assert entry.why
    assert ci_skips.accepted(entry.test + "_whatever[param]", entry.reason + "here") is entry
    assert ci_skips.accepted(entry.test, "lab not up") is None
    assert ci_skips.accepted("tests/unit/test_other.py::test_x", entry.reason) is None


@pytest.mark.parametrize("entry", ci_skips.ACCEPTED_IN_CI, ids=lambda entry: entry.test)
def test_every_accepted_skip_names_a_test_that_exists(entry: ci_skips.AcceptedSkip) -> None:
    path, _, name = entry.test.partition("::")
    assert f"def {name}" in (REPO / path).read_text()


LAB_LIKE_PROBES = """
import pytest

class TestGroup:
    @pytest.mark.parametrize("value", ["a", "b::c"])
    def test_in_a_class(self, value):
        pass

def test_fails():
    assert False

def test_skips():
    pytest.skip("lab not up")

def test_passes():
    pass
"""


def test_lab_counts_names_each_test_that_did_not_pass_as_pytests_junit_report_has_it(tmp_path: Path) -> None:
    probes = tmp_path / "tests" / "lab" / "test_probes.py"
    probes.parent.mkdir(parents=True)
    probes.write_text(LAB_LIKE_PROBES)
    pytest_in_tmp = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tmp_path),
    ]
    collected = subprocess.run(
        [*pytest_in_tmp, "--collect-only", "tests/lab"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    node_ids = [line for line in collected.stdout.splitlines() if "::" in line]
    assert len(node_ids) == 5
    report = tmp_path / "junit.xml"
    subprocess.run(
        [*pytest_in_tmp, f"--junitxml={report}", "tests/lab"], cwd=tmp_path, capture_output=True, check=False
    )
    passed = lab_counts.passed_tests(report)
    assert {node_id for node_id in node_ids if lab_counts.junit_name(node_id) in passed} == {
        "tests/lab/test_probes.py::TestGroup::test_in_a_class[a]",
        "tests/lab/test_probes.py::TestGroup::test_in_a_class[b::c]",
        "tests/lab/test_probes.py::test_passes",
    }


def _junit_report(path: Path, node_ids: list[str]) -> Path:
    suite = ET.SubElement(ET.Element("testsuites"), "testsuite")
    for node_id in node_ids:
        classname, name = lab_counts.junit_name(node_id)
        ET.SubElement(suite, "testcase", classname=classname, name=name)
    ET.ElementTree(suite).write(path)
    return path


def test_lab_counts_fails_when_a_lab_test_is_missing_from_the_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    existing = sorted(lab_counts.existing_lab_tests())
    assert len(existing) >= 20  # every lab test file collects without the lab
    assert lab_counts.main([str(_junit_report(tmp_path / "all.xml", existing))]) == 0
    assert f"lab tests: {len(existing)} exist, {len(existing)} passed" in capsys.readouterr().out
    assert lab_counts.main([str(_junit_report(tmp_path / "short.xml", existing[1:]))]) == 1
    out = capsys.readouterr().out
    assert f"lab tests: {len(existing)} exist, {len(existing) - 1} passed" in out
    assert f"did not pass: {existing[0]}" in out
