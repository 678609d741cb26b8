"""The report's NCCL section on damaged nccl.json files, hand-written from the 2x H200 recording: what it
cannot use is named on the first screen (file, and key path), everything well-formed is still shown, and a
figure that is not finite is shown as such and compared with nothing."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support.results_tree import REPO, one_workload

from fairbench.campaign.load import load_campaign
from fairbench.measure.results_format import point_id
from fairbench.report.build import headlines, report_blocks
from fairbench.report.load import Run, load_run
from fairbench.report.markdown import render_markdown

CAMPAIGN = one_workload(load_campaign(REPO / "campaigns" / "demo.yml").to_json())
RECORDING = json.loads((REPO / "tests/fixtures/nccl/h200x2-nvlink.json").read_text())
"""Variants default, tp8-nccl and p2p-off, 14 sizes each: 9 decode (14 KiB to 3.5 MiB), 5 prefill."""
SECTION = "## NCCL all-reduce on lab1"
NOT_COMPARED = "not compared (NaN or inf)"


def write_run(root: Path, nccl: bytes | None) -> Path:
    """A run of the demo campaign's tp8 on lab1 (ok, one level) with ``nccl`` as lab1/nccl.json."""
    run = root / "demo" / "run1"
    config = run / "lab1" / "tp8"
    config.mkdir(parents=True)
    (run / "campaign.json").write_text(
        json.dumps({**CAMPAIGN, "configs": {"tp8": CAMPAIGN["configs"]["tp8"]}})
    )
    (config / "status.json").write_text('{"status": "ok"}')
    figures = {"completed": 16, "failed": 0, "output_throughput": 100.0, "median_ttft_ms": 10.0}
    (config / "points.jsonl").write_text(
        json.dumps({"point_id": point_id(1, 0), "max_concurrency": 1, "repeat": 0, **figures}) + "\n"
    )
    if nccl is not None:
        (run / "lab1" / "nccl.json").write_bytes(nccl)
    return run


def recording(change: Callable[[dict[str, Any]], object] | None = None) -> bytes:
    """The recording as nccl.json, ``change`` applied to a copy of it."""
    data = json.loads(json.dumps(RECORDING))
    if change is not None:
        change(data)
    return json.dumps(data).encode()


def markdown(run: Run) -> str:
    _, blocks = report_blocks([run], headlines([run]), [])
    return render_markdown(blocks)


def first_screen(report: str) -> str:
    return report[: report.index("## Headline")]


def problems(run: Run) -> list[str]:
    return [problem for result in run.results for problem in result.problems]


def table_rows(section: str, first_cell: str) -> dict[str, list[str]]:
    """The rows of the section's tables whose first cell starts with ``first_cell``, by that cell."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in section.splitlines()]
    return {row[0]: row for row in rows if row[0].startswith(first_cell)}


def variant_section(report: str, name: str) -> str:
    return report[report.index(f"### Variant {name}\n") :].split("\n### ", 1)[0]


def assert_rest_intact(report: str) -> None:
    """The headline shows tp8, with the host it ran on (the demo campaign spreads its configs)."""
    assert "| tp8 | lab1 | ok | 100.0 |" in report


UNUSABLE = {
    "not JSON": (b'{"variants": [', "not JSON (Expecting value: line 1 column 15 (char 14))"),
    "not UTF-8": (b'{"host": "\xff"}', "not JSON ('utf-8' codec can't decode byte 0xff"),
    "an array": (b"[1, 2]", "[1, 2] is not a JSON object"),
    "without variants": (recording(lambda data: data.pop("variants")), "variants: required key is missing"),
    "variants an object": (
        recording(lambda data: data.update(variants={"default": {}})),
        'variants: {"default": {}} is not a list',
    ),
}


@pytest.mark.parametrize("content, why", UNUSABLE.values(), ids=UNUSABLE)
def test_a_nccl_json_that_cannot_be_used_is_named_and_the_rest_of_the_report_shown(
    tmp_path: Path, content: bytes, why: str
) -> None:
    run = load_run(write_run(tmp_path, content))
    report = markdown(run)
    (problem,) = problems(run)
    assert problem.startswith(f"{run.path / 'lab1' / 'nccl.json'}: {why}")
    assert problem in first_screen(report)
    assert SECTION not in report
    assert_rest_intact(report)


def test_a_nccl_json_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, None)
    (run_dir / "lab1" / "nccl.json").mkdir()
    run = load_run(run_dir)
    report = markdown(run)
    assert problems(run) == [f"{run_dir / 'lab1' / 'nccl.json'}: cannot read: Is a directory"]
    assert problems(run)[0] in first_screen(report) and SECTION not in report
    assert_rest_intact(report)


def _holder(data: dict[str, Any], path: str) -> tuple[Any, Any]:
    """The container of the value at a dotted path, list indices as numbers (``variants.1.env``), and
    its key there."""
    *parents, last = (int(key) if key.isdigit() else key for key in path.split("."))
    holder: Any = data
    for key in parents:
        holder = holder[key]
    return holder, last


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        holder, key = _holder(data, path)
        holder[key] = value

    return change


def _remove(path: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        holder, key = _holder(data, path)
        del holder[key]

    return change


# Each: the change, the problem (after "<file>: "), and the variants still in the summary table.
BROKEN_VARIANTS = {
    "a variant a string": (
        _set("variants.1", "tp8-nccl"),
        'variants[1]: "tp8-nccl" is not an object; variant not shown',
        ("default", "p2p-off"),
    ),
    "a variant without a name": (
        _remove("variants.2.name"),
        "variants[2].name: required key is missing; variant not shown",
        ("default", "tp8-nccl"),
    ),
    "env a list, configs a string": (
        lambda data: data["variants"][1].update(env=["NCCL_PROTO=LL"], configs="tp8-nccl"),
        'variants[1].env: ["NCCL_PROTO=LL"] is not an object of strings; variants[1].configs: "tp8-nccl" '
        "is not a list of strings; variant not shown",
        ("default", "p2p-off"),
    ),
    "an env value a number": (
        _set("variants.2.env.NCCL_P2P_DISABLE", 1),
        'variants[2].env: {"NCCL_P2P_DISABLE": 1} is not an object of strings; variant not shown',
        ("default", "tp8-nccl"),
    ),
    "error a number": (
        _set("variants.1.error", 3),
        "variants[1].error: 3 is not null or a string; variant not shown",
        ("default", "p2p-off"),
    ),
    "sizes an object": (
        _set("variants.0.sizes", {}),
        "variants[0].sizes: {} is not a list; variant not shown",
        ("tp8-nccl", "p2p-off"),
    ),
}


@pytest.mark.parametrize("change, why, shown", BROKEN_VARIANTS.values(), ids=BROKEN_VARIANTS)
def test_a_broken_variant_is_named_and_the_others_are_shown(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], why: str, shown: tuple[str, ...]
) -> None:
    run = load_run(write_run(tmp_path, recording(change)))
    report = markdown(run)
    assert problems(run) == [f"{run.path / 'lab1' / 'nccl.json'}: {why}"]
    assert problems(run)[0] in first_screen(report)
    section = report[report.index(SECTION) :]
    assert set(table_rows(section, "**")) == {f"**{name}**" for name in shown}
    assert_rest_intact(report)


def test_without_a_well_formed_default_no_variant_is_compared(tmp_path: Path) -> None:
    run = load_run(write_run(tmp_path, recording(_set("variants.0.name", ["default"]))))
    assert problems(run) == [
        f'{run.path / "lab1" / "nccl.json"}: variants[0].name: ["default"] is not a string; variant not shown'
    ]
    section = markdown(run)[markdown(run).index(SECTION) :]
    assert "No successful `default` variant: nothing to compare the variants with." in section
    for row in table_rows(section, "**").values():
        assert row[3:5] == ["-", "-"]


BROKEN_SIZES = {
    "bytes text": (
        _set("variants.0.sizes.0.bytes", "14336"),
        'bytes: "14336" is not a whole number of at least 1',
    ),
    "bytes too large for a float": (
        _set("variants.0.sizes.0.bytes", 10**400),
        f"bytes: {str(10**400)[:39]}… is not a whole number of at least 1",
    ),
    "scale unknown": (_set("variants.0.sizes.0.scale", "Decode"), 'scale: "Decode" is not decode or prefill'),
    "without tokens": (_remove("variants.0.sizes.0.tokens"), "tokens: required key is missing"),
}


@pytest.mark.parametrize("change, why", BROKEN_SIZES.values(), ids=BROKEN_SIZES)
def test_a_broken_size_is_named_and_the_other_sizes_are_shown(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], why: str
) -> None:
    run = load_run(write_run(tmp_path, recording(change)))
    report = markdown(run)
    assert problems(run) == [f"{run.path / 'lab1' / 'nccl.json'}: variants[0].sizes[0].{why}; size not shown"]
    assert problems(run)[0] in first_screen(report)
    default = table_rows(variant_section(report, "default"), "")
    assert "14 KiB" not in default and "28 KiB" in default and "64 MiB" in default
    # The other variants' 14 KiB has no default to compare with; the rest is compared.
    tuned = table_rows(variant_section(report, "tp8-nccl"), "")
    assert tuned["14 KiB"][-1] == "-" and tuned["28 KiB"][-1].startswith("latency ")


def test_a_size_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    run = load_run(write_run(tmp_path, recording(_set("variants.2.sizes.13", [67108864]))))
    path = run.path / "lab1" / "nccl.json"
    assert problems(run) == [f"{path}: variants[2].sizes[13]: [67108864] is not an object; size not shown"]
    p2p = table_rows(markdown(run)[markdown(run).index(SECTION) :], "**p2p-off**")["**p2p-off**"]
    largest = RECORDING["variants"][2]["sizes"][12]
    assert (
        p2p[-1] == f"{largest['eager']['busbw_gbps']:,.1f} / {largest['graph']['busbw_gbps']:,.1f} at 56 MiB"
    )


BROKEN_MEASUREMENTS = {
    "median text": (
        _set("variants.1.sizes.0.eager.median_us", "64.2"),
        'eager.median_us: "64.2" is not a positive number',
    ),
    "median 0": (
        _set("variants.1.sizes.0.eager.median_us", 0),
        "eager.median_us: 0 is not a positive number",
    ),
    "a boolean": (
        _set("variants.1.sizes.0.eager.p90_us", True),
        "eager.p90_us: true is not a positive number",
    ),
    "without busbw": (
        _remove("variants.1.sizes.0.eager.busbw_gbps"),
        "eager.busbw_gbps: required key is missing",
    ),
    "a list": (_set("variants.1.sizes.0.eager", [64.2]), "eager: [64.2] is not an object"),
    "empty": (_set("variants.1.sizes.0.eager", {}), "eager.median_us: required key is missing; variants[1]"),
}


@pytest.mark.parametrize("change, why", BROKEN_MEASUREMENTS.values(), ids=BROKEN_MEASUREMENTS)
def test_a_broken_measurement_is_named_and_shown_as_missing(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], why: str
) -> None:
    run = load_run(write_run(tmp_path, recording(change)))
    report = markdown(run)
    (problem,) = problems(run)
    assert problem.startswith(f"{run.path / 'lab1' / 'nccl.json'}: variants[1].sizes[0].{why}")
    assert problem.endswith("; measurement not shown") and problem in first_screen(report)
    row = table_rows(variant_section(report, "tp8-nccl"), "14 KiB")["14 KiB"]
    graph = RECORDING["variants"][1]["sizes"][0]["graph"]
    assert row[2] == "-" and row[3].startswith(f"{graph['median_us']:,.1f} (")
    assert row[-1].startswith("latency - / ")


def test_a_broken_fact_is_named_and_left_out(tmp_path: Path) -> None:
    run = load_run(write_run(tmp_path, recording(lambda data: data.update(gpus="2", graph_ops=0))))
    path = run.path / "lab1" / "nccl.json"
    assert problems(run) == [
        f'{path}: gpus: "2" is not a whole number of at least 1; not shown',
        f"{path}: graph_ops: 0 is not null or a whole number of at least 1; not shown",
    ]
    section = markdown(run)[markdown(run).index(SECTION) :]
    assert '"2"x' not in section and "2x NVIDIA" not in section and "CUDA graphs of 0" not in section


def test_nan_and_infinity_are_shown_as_such_with_a_warning_and_never_compared(tmp_path: Path) -> None:
    def odd(data: dict[str, Any]) -> None:
        default, tuned, _ = data["variants"]
        default["sizes"][0]["graph"]["median_us"] = math.nan
        tuned["sizes"][10]["eager"]["busbw_gbps"] = math.inf
        tuned["sizes"][10]["eager"]["p10_us"] = -math.inf

    run = load_run(write_run(tmp_path, recording(odd)))
    path = run.path / "lab1" / "nccl.json"
    assert problems(run) == [
        f"{path}: variants[0].sizes[0].graph.median_us is NaN, shown as such",
        f"{path}: variants[1].sizes[10].eager.p10_us is -inf, shown as such",
        f"{path}: variants[1].sizes[10].eager.busbw_gbps is inf, shown as such",
    ]
    report = markdown(run)
    assert all(problem in first_screen(report) for problem in problems(run))
    default = table_rows(variant_section(report, "default"), "14 KiB")["14 KiB"]
    assert default[3].startswith("NaN (")
    tuned = table_rows(variant_section(report, "tp8-nccl"), "")
    assert tuned["14 KiB"][-1].startswith("latency ") and tuned["14 KiB"][-1].endswith(f" / {NOT_COMPARED}")
    assert tuned["14 MiB"][2].startswith(
        f"{RECORDING['variants'][1]['sizes'][10]['eager']['median_us']:,.1f} (-inf-"
    )
    assert tuned["14 MiB"][4] == "inf" and tuned["14 MiB"][-1].startswith(f"busbw {NOT_COMPARED} / ")
    # The summary's geometric means over every size of a scale: one non-finite figure leaves it uncompared.
    section = report[report.index(SECTION) :]
    assert "nan" not in section
    summary = table_rows(section, "**tp8-nccl**")["**tp8-nccl**"]
    assert summary[3].endswith(f" / {NOT_COMPARED}") and summary[4].startswith(f"{NOT_COMPARED} / ")
    assert "%" in summary[3].split(" / ")[0] and "%" in summary[4].split(" / ")[1]
    p2p = table_rows(section, "**p2p-off**")["**p2p-off**"]
    assert p2p[3].endswith(f" / {NOT_COMPARED}") and NOT_COMPARED not in p2p[4]
    # A trade-off needs both scales compared in one launch mode: tp8-nccl has none left.
    assert "**tp8-nccl** (" not in section


def test_extreme_figures_are_compared_without_overflow(tmp_path: Path) -> None:
    def extreme(data: dict[str, Any]) -> None:
        data["variants"][0]["sizes"][0]["eager"]["median_us"] = 1e308
        data["variants"][1]["sizes"][0]["eager"]["median_us"] = 5e-324
        data["variants"][2]["sizes"][0]["eager"]["median_us"] = 1e308

    run = load_run(write_run(tmp_path, recording(extreme)))
    assert problems(run) == []
    report = markdown(run)
    assert table_rows(variant_section(report, "tp8-nccl"), "14 KiB")["14 KiB"][-1].startswith(
        "latency -100.0 % / "
    )
    assert table_rows(variant_section(report, "p2p-off"), "14 KiB")["14 KiB"][-1].startswith(
        "latency +0.0 % / "
    )


def test_the_problems_of_each_runs_nccl_json_are_named_in_a_comparison_of_two_runs(tmp_path: Path) -> None:
    run_a = load_run(write_run(tmp_path / "a", recording()))
    run_b = load_run(write_run(tmp_path / "b", b"[]"))
    _, blocks = report_blocks([run_a, run_b], headlines([run_a, run_b]), [])
    report = render_markdown(blocks)
    problem = f"{run_b.path / 'lab1' / 'nccl.json'}: [] is not a JSON object"
    assert problems(run_b) == [problem] and problem in report[: report.index("## Side by side")]
    assert problems(run_a) == []
    section = report[report.index(f"{SECTION}, run {run_a.run_id}") :]
    assert set(table_rows(section, "**")) == {"**default**", "**tp8-nccl**", "**p2p-off**"}
