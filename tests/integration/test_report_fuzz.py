"""Damaged results, generated: the report's loader and document end in a ResultsError naming the file (one
line), or in a report that names the damage and still shows everything else; never another exception.

Each case damages one file of a real run (tests/support/results_tree.py: two configs, two levels, two
repeats) with generated JSON values of every shape or garbage bytes, reads it, and puts the file back; a
host's nccl.json is the recording of tests/fixtures/nccl, damaged the same way.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.results_tree import REPO, brief_run

from fairbench.measure.results import ResultsError
from fairbench.report.build import headlines, report_blocks, write_report
from fairbench.report.figures import FIGURES
from fairbench.report.html import render_html
from fairbench.report.load import Run, load_run
from fairbench.report.markdown import render_markdown
from fairbench.report.tree import ConfigResult

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIGS = ("tp8", "ep4")
SETTINGS_FILES = ("status.json", "sweep.json", "server_info.json", "host.json", "unit.service")
NOT_CHECKED = "Not fully checked: "

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12)
keys = st.sampled_from(["name", "configs", "workload", "status", "gpus", "point_id", "completed"]) | st.text(
    max_size=8
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=16,
)
json_texts = values.map(lambda value: json.dumps(value).encode())
garbage = st.binary(max_size=80)


@pytest.fixture(scope="module")
def brief(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return brief_run(tmp_path_factory.mktemp("results"))


@contextmanager
def written(path: Path, data: bytes) -> Iterator[None]:
    """``path`` holding ``data``, then as it was: absent again if it was."""
    original = path.read_bytes() if path.exists() else None
    path.write_bytes(data)
    try:
        yield
    finally:
        if original is None:
            path.unlink()
        else:
            path.write_bytes(original)


def outcome(run_dir: Path) -> tuple[Run, str] | ResultsError:
    """The run with its report's Markdown (the HTML rendered too), or the error."""
    try:
        run = load_run(run_dir)
    except ResultsError as error:
        assert str(error).startswith(f"{run_dir}") and "\n" not in str(error), str(error)
        return error
    title, blocks = report_blocks([run], headlines([run]), [])
    render_html(blocks, title, run_dir)
    return run, render_markdown(blocks)


def report_of(run_dir: Path) -> tuple[Run, str]:
    found = outcome(run_dir)
    assert not isinstance(found, ResultsError), str(found)
    return found


def config(run: Run, name: str) -> ConfigResult:
    return next(result for result in run.results if result.name == name)


def point_lines(run_dir: Path, name: str) -> list[bytes]:
    return (run_dir / "lab1" / name / "points.jsonl").read_bytes().splitlines(keepends=True)


def ids(lines: list[bytes]) -> list[str]:
    return [json.loads(line)["point_id"] for line in lines]


def assert_named_in_the_report(result: ConfigResult, markdown: str) -> None:
    assert all(text in markdown for text in (*result.problems, *result.notes))


@FAST
@given(st.data())
def test_a_points_line_replaced_by_any_json_value_or_garbage(brief: Path, data: st.DataObject) -> None:
    lines = point_lines(brief, "tp8")
    index = data.draw(st.integers(0, len(lines) - 1))
    line = data.draw(json_texts | garbage.map(lambda raw: raw.replace(b"\n", b" ")))
    path = brief / "lab1" / "tp8" / "points.jsonl"
    with written(path, b"".join([*lines[:index], line + b"\n", *lines[index + 1 :]])):
        run, markdown = report_of(brief)
    tp8 = config(run, "tp8")
    assert [point["point_id"] for point in tp8.points] == ids(lines[:index] + lines[index + 1 :])
    if line.strip():
        (problem,) = tp8.problems
        assert problem.startswith(f"{path}:{index + 1}: ") and problem.endswith("; line skipped")
    else:
        assert tp8.problems == ()
    assert_named_in_the_report(tp8, markdown)


@FAST
@given(st.data())
def test_a_value_of_a_point_replaced(brief: Path, data: st.DataObject) -> None:
    lines = point_lines(brief, "ep4")
    index = data.draw(st.integers(0, len(lines) - 1))
    point: dict[str, Any] = json.loads(lines[index])
    key = data.draw(st.sampled_from(sorted(point)) | keys)
    point[key] = data.draw(values)
    path = brief / "lab1" / "ep4" / "points.jsonl"
    with written(path, b"".join([*lines[:index], json.dumps(point).encode() + b"\n", *lines[index + 1 :]])):
        run, markdown = report_of(brief)
    ep4 = config(run, "ep4")
    named = [problem for problem in ep4.problems if problem.startswith(f"{path}:{index + 1}: ")]
    # A measurement check that breaks its rule is named and left out of the point (load.CHECK_RULES).
    dropped = [problem for problem in named if problem.endswith("; not used")]
    assert all(
        problem.startswith(f"{path}:{index + 1}: point {point['point_id']}: {key}: ") for problem in dropped
    )
    expected = {name: found for name, found in point.items() if not (dropped and name == key)}
    shown = json.dumps(expected) in {json.dumps(found) for found in ep4.points}  # NaN equals no NaN
    # Either the point is shown as it is (less a check named), or its line is named and skipped: never both,
    # never neither.
    assert shown != any(problem.endswith("; line skipped") for problem in named)
    value = point[key]
    if key in FIGURES and (isinstance(value, bool) or not isinstance(value, int | float)):
        assert not shown
    if shown and key in FIGURES and isinstance(value, float) and math.isnan(value):
        assert f"{path}:{index + 1}: point {point['point_id']}: {key} is NaN, shown as such" in named
    assert len(ep4.points) == len(lines) - (not shown)
    assert_named_in_the_report(ep4, markdown)


@FAST
@given(st.data())
def test_the_points_file_cut_anywhere(brief: Path, data: st.DataObject) -> None:
    path = brief / "lab1" / "tp8" / "points.jsonl"
    whole = path.read_bytes()
    cut = whole[: data.draw(st.integers(0, len(whole)))]
    *complete, tail = cut.split(b"\n")
    with written(path, cut):
        run, markdown = report_of(brief)
    tp8 = config(run, "tp8")
    assert [point["point_id"] for point in tp8.points] == ids(complete)
    assert tp8.problems == ()
    assert len(tp8.notes) == (1 if tail.strip() else 0)
    if tail.strip():
        assert tp8.notes[0].startswith(f"{path}:{len(complete) + 1}: incomplete last line skipped")
    assert_named_in_the_report(tp8, markdown)


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        found = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


@FAST
@given(st.sampled_from(CONFIGS), st.sampled_from(SETTINGS_FILES), json_texts | garbage)
def test_a_file_of_one_config_replaced(brief: Path, name: str, file: str, content: bytes) -> None:
    path = brief / "lab1" / name / file
    with written(path, content):
        run, markdown = report_of(brief)
    damaged, other = config(run, name), config(run, next(other for other in CONFIGS if other != name))
    assert other.problems == () and len(other.points) == len(point_lines(brief, other.name))
    assert len(damaged.points) == len(point_lines(brief, name))
    assert_named_in_the_report(damaged, markdown)
    if file == "unit.service":
        return
    found = _json_object(content)
    if found is None:
        assert any(problem.startswith(f"{path}: ") for problem in damaged.problems)
    if file == "status.json":
        status = (found or {}).get("status")
        assert damaged.state == (status if isinstance(status, str) and status else "unreadable")
    elif found is None:
        first_screen = markdown[: markdown.index("## Headline")]
        assert NOT_CHECKED in first_screen and "No undeclared differences" not in first_screen


def key_paths(node: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path and list index of a JSON document."""
    found: list[tuple[Any, ...]] = []
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in children:
        found += [(*prefix, key), *key_paths(child, (*prefix, key))]
    return found


def holder_of(document: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        document = document[key]
    return document


@FAST
@given(json_texts | garbage)
def test_campaign_json_replaced_by_any_json_value_or_garbage(brief: Path, content: bytes) -> None:
    with written(brief / "campaign.json", content):
        found = outcome(brief)
    assert isinstance(found, ResultsError)
    why = str(found).removeprefix(f"{brief / 'campaign.json'}: ")
    if _json_object(content) is None:
        assert why.startswith("not JSON") or why.endswith(" is not a JSON object"), why
    else:
        assert why.endswith(": required key is missing") or " is not " in why, why


REQUIRED = {("name",), ("engine",), ("model",), ("configs",), ("workload",)} | {
    ("workload", key) for key in ("api", "input_len", "output_len", "concurrency")
}


@FAST
@given(st.data())
def test_a_campaign_value_replaced_or_removed_anywhere(brief: Path, data: st.DataObject) -> None:
    campaign = json.loads((brief / "campaign.json").read_bytes())
    path = data.draw(st.sampled_from(key_paths(campaign)))
    remove = data.draw(st.booleans())
    if remove:
        del holder_of(campaign, path)[path[-1]]
    else:
        holder_of(campaign, path)[path[-1]] = data.draw(values)
    with written(brief / "campaign.json", json.dumps(campaign).encode()):
        found = outcome(brief)
    if remove and path in REQUIRED:
        assert isinstance(found, ResultsError)
        assert f"{'.'.join(path)}: required key is missing" in str(found)
    if not isinstance(found, ResultsError):
        run, markdown = found
        assert markdown.startswith(f"# {run.name}: run {run.run_id}\n")


NCCL_RECORDING = json.loads((REPO / "tests/fixtures/nccl/h200x2-nvlink.json").read_bytes())


@FAST
@given(st.data())
def test_parts_of_a_nccl_json_replaced_or_removed(brief: Path, data: st.DataObject) -> None:
    document = json.loads(json.dumps(NCCL_RECORDING))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(key_paths(document)))
        if data.draw(st.booleans()):
            del holder_of(document, path)[path[-1]]
        else:
            holder_of(document, path)[path[-1]] = data.draw(values)
    nccl = brief / "lab1" / "nccl.json"
    with written(nccl, json.dumps(document).encode()), tempfile.TemporaryDirectory() as out:
        run = load_run(brief)
        markdown = write_report([run], Path(out))[0].read_text(encoding="utf-8")
    assert markdown.startswith(f"# {run.name}: run {run.run_id}\n")
    problems = [problem for result in run.results for problem in result.problems]
    first_screen = markdown[: markdown.index("## Headline")]
    assert all(problem.startswith(f"{nccl}: ") and problem in first_screen for problem in problems)
    variants = document.get("variants")
    assert ("## NCCL all-reduce on lab1" in markdown) == isinstance(variants, list)
    if isinstance(variants, list):
        dropped = [problem for problem in problems if problem.endswith("; variant not shown")]
        assert markdown.count("\n### Variant ") == len(variants) - len(dropped)
    if not problems:
        assert all(f"\n### Variant {variant['name']}\n" in markdown for variant in variants)
