"""``fairbench report`` on damaged runs from real sweeps (tests/support/results_tree.py): a report that
names the damage and shows the rest, or one line ``fairbench report: error: <path>: <what>``, never a
traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.support.report_files import unmarked
from tests.support.results_tree import brief_run, fairbench_report

ERROR = "fairbench report: error: "


@pytest.fixture(scope="module")
def brief(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return brief_run(tmp_path_factory.mktemp("results"))


@pytest.fixture
def run(brief: Path, tmp_path: Path) -> Path:
    """A copy of the brief run, to damage."""
    return Path(shutil.copytree(brief, tmp_path / "demo" / brief.name))


def level_row(markdown: str, config: str, concurrency: int) -> list[str]:
    markdown = unmarked(markdown)
    section = markdown[markdown.index(f"### {config}\n", markdown.index("## Every concurrency level")) :]
    row = next(line for line in section.splitlines() if line.startswith(f"| {concurrency} |"))
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_a_killed_sweeps_torn_last_line_is_skipped_and_every_other_point_shown(run: Path) -> None:
    points = run / "lab1" / "tp8" / "points.jsonl"
    whole = points.read_bytes()
    points.write_bytes(whole[:-40])  # killed while appending its last point, c4-r1
    kept = [json.loads(line) for line in whole.splitlines()[:-1]]
    done = fairbench_report(run)
    assert done.returncode == 0, done.stderr
    markdown = (run / "report.md").read_text()
    assert f"{points}:4: incomplete last line skipped (an interrupted write; " in markdown
    c4 = next(point for point in kept if point["point_id"] == "c4-r0")
    assert level_row(markdown, "tp8", 4)[:3] == ["4", "1", f"{c4['output_throughput']:,.1f}"]
    assert level_row(markdown, "tp8", 1)[1] == "2"


def test_nan_and_infinity_are_reported_plotted_around_and_named(run: Path) -> None:
    points = run / "lab1" / "ep4" / "points.jsonl"
    lines = [json.loads(line) for line in points.read_text().splitlines()]
    lines[0]["output_throughput"] = float("nan")  # c1-r0
    lines[1]["median_ttft_ms"] = float("inf")  # c4-r0
    points.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = fairbench_report(run)
    assert done.returncode == 0, done.stderr
    markdown = (run / "report.md").read_text()
    first_screen = markdown[: markdown.index("## Headline")]
    assert f"{points}:1: point c1-r0: output_throughput is NaN, shown as such" in first_screen
    assert f"{points}:2: point c4-r0: median_ttft_ms is inf, shown as such" in first_screen
    assert level_row(markdown, "ep4", 1)[2] == "NaN"
    assert level_row(markdown, "ep4", 4)[5] == "inf"
    assert sorted(path.name for path in (run / "plots").iterdir()) == [
        "latency.png",
        "pareto.png",
        "throughput.png",
    ]


def _without_name(run: Path) -> str:
    campaign = json.loads((run / "campaign.json").read_text())
    del campaign["name"]
    (run / "campaign.json").write_text(json.dumps(campaign))
    return f"{run / 'campaign.json'}: name: required key is missing"


def _garbage_campaign(run: Path) -> str:
    (run / "campaign.json").write_bytes(b"\x89PNG\r\n")
    return f"{run / 'campaign.json'}: not JSON ("


def _an_array_campaign(run: Path) -> str:
    (run / "campaign.json").write_text('[{"name": "demo"}]')
    return f'{run / "campaign.json"}: [{{"name": "demo"}}] is not a JSON object'


def _missing(run: Path) -> str:
    shutil.rmtree(run)
    return f"{run}: no such directory"


BREAKERS: dict[str, Callable[[Path], str]] = {
    "campaign.json without name": _without_name,
    "campaign.json not JSON": _garbage_campaign,
    "campaign.json an array": _an_array_campaign,
    "run directory missing": _missing,
}


@pytest.mark.parametrize("breaker", BREAKERS.values(), ids=BREAKERS)
def test_a_run_the_report_cannot_read_is_one_line_naming_the_path(
    run: Path, breaker: Callable[[Path], str]
) -> None:
    expected = breaker(run)
    done = fairbench_report(run)
    assert done.returncode == 2
    assert done.stderr.startswith(ERROR + expected), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` read-only: by its mode, and for root (whom modes do not stop) by the immutable attribute."""
    path.chmod(0o555)
    chattr = shutil.which("chattr") if os.geteuid() == 0 else None
    try:
        if chattr:
            subprocess.run([chattr, "+i", str(path)], check=False, capture_output=True)
        try:
            (path / ".probe").touch()
        except OSError:
            yield
        else:
            pytest.skip(f"cannot make {path} read-only here")
    finally:
        if chattr:
            subprocess.run([chattr, "-i", str(path)], check=False, capture_output=True)
        path.chmod(0o755)


def test_a_read_only_run_directory_is_named_with_the_option_to_write_elsewhere(
    run: Path, tmp_path: Path
) -> None:
    with read_only(run):
        done = fairbench_report(run)
        elsewhere = fairbench_report(run, "--out", tmp_path / "elsewhere")
    assert done.returncode == 2
    assert done.stderr.startswith(f"{ERROR}{run}: cannot write the report there ({run / 'plots'}: "), (
        done.stderr
    )
    assert done.stderr.endswith("); --out DIR writes it elsewhere\n")
    assert done.stderr.count("\n") == 1
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert (tmp_path / "elsewhere" / "report.md").exists()
