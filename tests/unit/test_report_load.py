"""The report on damaged results: what it cannot use is named (file, and line of points.jsonl), the rest is
shown; campaign.json it cannot use is one error naming the file and the key. Trees are written here, point
by point; tests/integration/test_report_fuzz.py does the same to trees from real sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.report_files import CAMPAIGN, first_screen, lines, point, replaced, without

from fairbench.measure.results import ResultsError
from fairbench.measure.results_format import point_id
from fairbench.report.build import headlines, report_blocks
from fairbench.report.load import Run, load_run
from fairbench.report.markdown import render_markdown
from fairbench.report.tree import ConfigResult

CONFIGS = ("tp8", "ep4")
NO_THREAT = "No undeclared differences"


SETTINGS_FILES = {"server_info.json": b"{}", "host.json": b"{}", "sweep.json": b"{}", "unit.service": b""}


def write_run(root: Path, files: dict[str, dict[str, bytes]] | None = None) -> Path:
    """A run of the demo campaign on lab1: tp8 and ep4 ok, each with two levels and every settings file
    (empty); ``files`` (config -> file name -> content) replaces some of them."""
    run = root / "demo" / "run1"
    run.mkdir(parents=True)
    (run / "campaign.json").write_text(
        json.dumps({**CAMPAIGN, "configs": {name: CAMPAIGN["configs"][name] for name in CONFIGS}})
    )
    for name in CONFIGS:
        config = run / "lab1" / name
        config.mkdir(parents=True)
        default = {
            "status.json": b'{"status": "ok"}',
            "points.jsonl": lines(point(1), point(4)),
            **SETTINGS_FILES,
        }
        for file, content in (default | (files or {}).get(name, {})).items():
            (config / file).write_bytes(content)
    return run


def result(run: Run, name: str) -> ConfigResult:
    return next(found for found in run.results if found.name == name)


def markdown(run: Run) -> str:
    _, blocks = report_blocks([run], headlines([run]), [])
    return render_markdown(blocks)


def level_rows(
    report: str, config: str, heading: str = "## Every concurrency level"
) -> dict[str, dict[str, str]]:
    """The rows of ``config``'s table under ``heading`` (an open loop's: "Every request rate level"), by
    its level."""
    start = report.index(f"### {config}\n", report.index(heading))
    section = report[start:].split("\n#", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


def test_a_torn_last_line_is_skipped_with_a_note_and_the_points_before_it_are_shown(tmp_path: Path) -> None:
    torn = lines(point(1), point(4)) + json.dumps(point(16)).encode()[:40]
    run = load_run(write_run(tmp_path, {"tp8": {"points.jsonl": torn}}))
    points = run.path / "lab1" / "tp8" / "points.jsonl"
    assert [found["point_id"] for found in result(run, "tp8").points] == ["c1-r0", "c4-r0"]
    assert result(run, "tp8").problems == ()
    report = markdown(run)
    assert f"{points}:3: incomplete last line skipped (an interrupted write;" in first_screen(report)
    assert level_rows(report, "tp8")["4"]["out tok/s"] == "400.0"


CORRUPT_LINES = {
    "not JSON": (b'{"point_id": "c2-r0", ', "not JSON (Expecting property name enclosed in double quotes"),
    "an array": (b"[1, 2]", "[1, 2] is not a JSON object"),
    "a string figure": (
        json.dumps(point(2, median_ttft_ms="12.5")).encode(),
        'median_ttft_ms: "12.5" is not a number',
    ),
    "a missing key": (
        json.dumps({key: value for key, value in point(2).items() if key != "max_concurrency"}).encode(),
        "max_concurrency: required key is missing",
    ),
    "a boolean count": (
        json.dumps(point(2, completed=True)).encode(),
        "completed: true is not a whole number",
    ),
    "another point's id": (
        json.dumps({**point(2), "point_id": "c1-r0"}).encode(),
        'point_id "c1-r0" is not c2-r0, as max_concurrency 2 and repeat 0 make it',
    ),
    "not UTF-8": (b'{"point_id": "\xff"}', "not JSON ("),
}


@pytest.mark.parametrize("line, why", CORRUPT_LINES.values(), ids=CORRUPT_LINES)
def test_a_corrupted_line_is_named_and_the_rest_of_the_file_is_shown(
    tmp_path: Path, line: bytes, why: str
) -> None:
    content = lines(point(1)) + line + b"\n" + lines(point(4))
    run = load_run(write_run(tmp_path, {"ep4": {"points.jsonl": content}}))
    report = markdown(run)
    assert list(level_rows(report, "ep4")) == ["1", "4"]
    (problem,) = result(run, "ep4").problems
    assert problem.startswith(f"{run.path / 'lab1' / 'ep4' / 'points.jsonl'}:2: {why}")
    assert problem.endswith("; line skipped")
    assert problem in first_screen(report)


def test_a_point_written_twice_is_named_and_counted_once(tmp_path: Path) -> None:
    content = lines(point(1), point(4), point(1, output_throughput=150.0))
    run = load_run(write_run(tmp_path, {"tp8": {"points.jsonl": content}}))
    points = run.path / "lab1" / "tp8" / "points.jsonl"
    report = markdown(run)
    assert level_rows(report, "tp8")["1"]["repeats"] == "1"
    assert level_rows(report, "tp8")["1"]["out tok/s"] == "100.0"
    assert result(run, "tp8").problems == (f"{points}:3: point c1-r0 again (first on line 1); not counted",)
    assert result(run, "tp8").problems[0] in first_screen(report)


def test_a_point_measured_again_supersedes_the_line_it_names(tmp_path: Path) -> None:
    failed = point(1, completed=0, failed=16, output_throughput=0.0)
    again = point(1, supersedes={"line": 1, "requests": "requests/c1-r0.line1.jsonl.gz"})
    run = load_run(write_run(tmp_path, {"tp8": {"points.jsonl": lines(failed, point(4), again)}}))
    assert [found["completed"] for found in result(run, "tp8").points] == [16, 16]
    assert result(run, "tp8").problems == ()


def test_nan_and_infinity_are_shown_as_such_with_a_warning_naming_the_point(tmp_path: Path) -> None:
    odd = lines(point(1, output_throughput=float("nan")), point(4, median_ttft_ms=float("-inf")))
    run = load_run(write_run(tmp_path, {"ep4": {"points.jsonl": odd}}))
    points = run.path / "lab1" / "ep4" / "points.jsonl"
    report = markdown(run)
    rows = level_rows(report, "ep4")
    assert (rows["1"]["out tok/s"], rows["4"]["TTFT p50 ms"]) == ("NaN", "-inf")
    assert result(run, "ep4").problems == (
        f"{points}:1: point c1-r0: output_throughput is NaN, shown as such",
        f"{points}:2: point c4-r0: median_ttft_ms is -inf, shown as such",
    )
    assert all(problem in first_screen(report) for problem in result(run, "ep4").problems)
    # NaN is compared with nothing, and a level whose throughput is NaN is never the peak.
    comparisons = "output tok/s C=1: not compared (a value is NaN or infinite); peak (C=4 vs C=4): +0.0 %"
    assert f"- **tp8** vs **ep4**: {comparisons}" in report


def test_a_level_where_nothing_completed_shows_its_latencies_as_missing(tmp_path: Path) -> None:
    nothing = point(4, completed=0, failed=16, output_throughput=0.0, median_ttft_ms=0.0, p99_ttft_ms=0.0)
    run = load_run(write_run(tmp_path, {"tp8": {"points.jsonl": lines(point(1), nothing)}}))
    rows = level_rows(markdown(run), "tp8")
    assert [rows["4"][column] for column in ("out tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms")] == [
        "0.0",
        "-",
        "-",
        "-",
    ]
    assert rows["1"]["TTFT p50 ms"] == "10.0"


def open_point(rate: float, achieved: object, **figures: object) -> dict[str, object]:
    """An open loop's point at ``rate`` req/s (at most 8 in flight), its requests sent at ``achieved``."""
    return point(
        8,
        point_id=point_id(rate, 0, open_loop=True),
        request_rate=rate,
        achieved_request_rate=achieved,
        median_send_delay_ms=0.25,
        p99_send_delay_ms=1.5,
        **figures,
    )


def test_an_open_loops_achieved_rate_may_be_null_or_infinite_but_not_text(tmp_path: Path) -> None:
    nothing = {"completed": 0, "failed": 16, "output_throughput": 0.0, "median_ttft_ms": 0.0}
    content = lines(open_point(1, None, **nothing), open_point(2, float("inf")), open_point(4, "fast"))
    on_time = lines(open_point(1, 1.0), open_point(2, 2.0))
    run = load_run(write_run(tmp_path, {"tp8": {"points.jsonl": content}, "ep4": {"points.jsonl": on_time}}))
    points = run.path / "lab1" / "tp8" / "points.jsonl"
    assert result(run, "tp8").problems == (
        f'{points}:3: achieved_request_rate: "fast" is not null or a number; line skipped',
        f"{points}:2: point rps2-r0: achieved_request_rate is inf, shown as such",
    )
    rows = level_rows(markdown(run), "tp8", "## Every request rate level")
    assert list(rows) == ["1", "2"]
    # Nothing completed at 1 req/s: no latency, and no achieved rate (one request sent or none), but the
    # send delays are of the requests sent.
    assert [rows["1"][column] for column in ("achieved req/s", "TTFT p50 ms", "send delay p50 ms")] == [
        "-",
        "-",
        "0.25",
    ]
    assert rows["2"]["achieved req/s"] == "inf"


@pytest.mark.parametrize(
    "content, why",
    [(None, "server_info.json missing"), (b"{not json", "server_info.json unreadable")],
    ids=["missing", "garbage"],
)
def test_a_server_info_that_cannot_be_read_is_named_in_the_fairness_verdict(
    tmp_path: Path, content: bytes | None, why: str
) -> None:
    run_dir = write_run(tmp_path)
    assert NO_THREAT in first_screen(markdown(load_run(run_dir)))
    server_info = run_dir / "lab1" / "ep4" / "server_info.json"
    if content is None:
        server_info.unlink()
    else:
        server_info.write_bytes(content)
    verdict = first_screen(markdown(load_run(run_dir)))
    assert NO_THREAT not in verdict
    assert "**Not fully checked: 1 config(s) lack settings that the comparison reads" in verdict
    assert f"- **ep4**: server ({why})" in verdict


GARBAGE_FILES = {
    "status.json not JSON": ("status.json", b"\x00\xff", "not JSON ("),
    "status.json without status": ("status.json", b'{"stage": "sweep"}', "status: required key is missing"),
    "status.json an array": ("status.json", b'["ok"]', '["ok"] is not a JSON object'),
    "sweep.json not JSON": ("sweep.json", b"{", "not JSON ("),
    "sweep.json gpus text": ("sweep.json", b'{"gpus": "x"}', 'gpus: "x" is not null or a whole number'),
    "server_info.json a number": ("server_info.json", b"12", "12 is not a JSON object"),
    "server_info.json pp_size text": ("server_info.json", b'{"tp_size": 8, "pp_size": "x"}', None),
    "host.json gpus not objects": ("host.json", b'{"gpu": {"gpus": [1, "x"]}}', None),
    "unit.service quoting": ("unit.service", b'Environment="A=1\n', "cannot read its Environment= lines"),
    "unit.service not UTF-8": ("unit.service", b"Environment=A=\xff\n", "cannot read its Environment= lines"),
}


@pytest.mark.parametrize("file, content, why", GARBAGE_FILES.values(), ids=GARBAGE_FILES)
def test_a_garbage_file_of_one_config_is_named_and_the_others_are_shown(
    tmp_path: Path, file: str, content: bytes, why: str | None
) -> None:
    run = load_run(write_run(tmp_path, {"tp8": {file: content}}))
    report = markdown(run)
    assert list(level_rows(report, "tp8")) == list(level_rows(report, "ep4")) == ["1", "4"]
    problems = result(run, "tp8").problems
    if why is None:
        assert problems == ()
    else:
        (problem,) = problems
        assert problem.startswith(f"{run.path / 'lab1' / 'tp8' / file}: {why}")
    assert all(problem in first_screen(report) for problem in problems)
    if file == "status.json":
        assert "- **tp8**: unreadable" in first_screen(report)


BAD_CAMPAIGNS = {
    "without name": (json.dumps(without(CAMPAIGN, "name")), "name: required key is missing"),
    "name a number": (json.dumps(replaced(CAMPAIGN, "name", 7)), "name: 7 is not a string"),
    "without workload.api": (
        json.dumps(without(CAMPAIGN, "workload.api")),
        "workload.api: required key is missing",
    ),
    "repeats text": (
        json.dumps(replaced(CAMPAIGN, "workload.repeats", "2")),
        'workload.repeats: "2" is not a whole',
    ),
    "configs a list": (json.dumps(replaced(CAMPAIGN, "configs", [])), "configs: [] is not an object"),
    "a config a string": (
        json.dumps(replaced(CAMPAIGN, "configs.tp8", "x")),
        'configs.tp8: "x" is not an object',
    ),
    "unset args a string": (
        json.dumps(replaced(CAMPAIGN, "configs.tp8.unset.args", "tp-size")),
        'configs.tp8.unset.args: "tp-size" is not a list of strings',
    ),
    "warnings numbers": (
        json.dumps(replaced(CAMPAIGN, "warnings", [1])),
        "warnings: [1] is not a list of strings",
    ),
    "without a workload": (
        json.dumps(without(CAMPAIGN, "workload")),
        "workload: required key is missing",
    ),
    "both forms": (
        json.dumps(replaced(CAMPAIGN, "workloads", {"chat": CAMPAIGN["workload"]})),
        "workloads: and workload both given",
    ),
    "a named workload without api": (
        json.dumps(
            replaced(
                without(CAMPAIGN, "workload"),
                "workloads",
                {"chat": without(CAMPAIGN, "workload.api")["workload"]},
            )
        ),
        "workloads.chat.api: required key is missing",
    ),
    "a named workload a list": (
        json.dumps(replaced(without(CAMPAIGN, "workload"), "workloads", {"chat": []})),
        "workloads.chat: [] is not an object",
    ),
    "not JSON": ("{", "not JSON (Expecting property name"),
    "an array": ("[]", "[] is not a JSON object"),
}


@pytest.mark.parametrize("text, why", BAD_CAMPAIGNS.values(), ids=BAD_CAMPAIGNS)
def test_a_campaign_json_the_report_cannot_use_is_one_error_naming_the_file_and_key(
    tmp_path: Path, text: str, why: str
) -> None:
    run_dir = write_run(tmp_path)
    (run_dir / "campaign.json").write_text(text)
    with pytest.raises(ResultsError) as raised:
        load_run(run_dir)
    assert str(raised.value).startswith(f"{run_dir / 'campaign.json'}: {why}")
    assert "\n" not in str(raised.value)


def test_a_run_directory_that_is_not_there_or_not_a_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    for path, why in [
        ("absent", "absent: no such directory"),
        ("file", "file: not a directory: a run is results/<campaign>/<run_id>"),
        ("empty", "empty/campaign.json: missing: is "),
    ]:
        with pytest.raises(ResultsError) as raised:
            load_run(tmp_path / path)
        assert str(raised.value).startswith(f"{tmp_path}/{why}")
