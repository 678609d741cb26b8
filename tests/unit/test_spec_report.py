"""The Speculative decoding section: per config and level, the accept length over the requests beside the
server's gauge and /server_info's, the accept rate, and the requests by accept length, over the repeats;
only configs whose points have them, and no section where none has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.report_files import markdown, point, section, table, write_run

from fairbench.report.load import load_run
from fairbench.report.spec import histogram_text, spec_histogram
from fairbench.report.summary import Level


def bins(**counts: int) -> list[int]:
    """A histogram of 15 bins with ``b<i>=count`` set."""
    found = [0] * 15
    for name, count in counts.items():
        found[int(name[1:])] = count
    return found


def speculative(concurrency: int, repeat: int, **figures: Any) -> dict[str, Any]:
    """A point of a speculating server over /generate: 16 requests of about 2.4 tokens a verify step."""
    spec = {
        "spec_requests": 16,
        "spec_accept_length": 2.40 + 0.02 * repeat,
        "spec_accept_rate": 0.70 + 0.01 * repeat,
        "spec_accept_length_histogram": bins(b1=2, b2=12, b4=2),  # 1.5-2, 2-2.5, 3-3.5
        "server_spec_accept_length": 2.30 + 0.02 * repeat,
        "accept_length": 2.25 + 0.02 * repeat,
    }
    return point(concurrency, repeat, **{**spec, **figures})


def test_the_histogram_is_summed_over_the_repeats_and_written_from_its_first_request_to_its_last() -> None:
    level = Level(4, (speculative(4, 0), speculative(4, 1), point(4, 2)))
    counts = spec_histogram(level)
    assert counts == bins(b1=4, b2=24, b4=4)
    assert histogram_text(counts) == "1.5-2: 4, 2-2.5: 24, 2.5-3: 0, 3-3.5: 4"
    assert histogram_text(bins(b0=1, b14=2)).startswith("<1.5: 1, 1.5-2: 0, ")
    assert histogram_text(bins(b0=1, b14=2)).endswith(", 7.5-8: 0, >=8: 2")
    assert histogram_text(None) == histogram_text(bins()) == "-"
    # A histogram of other bins (another version's) is not added to these.
    assert spec_histogram(Level(4, (speculative(4, 0, spec_accept_length_histogram=[1, 2]),))) is None


def test_each_speculating_config_has_its_levels_and_the_others_none(tmp_path: Path) -> None:
    run = write_run(
        tmp_path,
        {
            "tp8": [point(c, r, server_spec_accept_length=0.0) for c in (1, 4) for r in (0, 1)],
            "ep4": [speculative(c, r) for c in (1, 4) for r in (0, 1)],
        },
        workload={"concurrency": [1, 4]},
    )
    report = markdown(load_run(run))
    spec = section(report, "## Speculative decoding")
    assert "### tp8" not in spec  # its gauge read 0: SGLang's without speculation
    rows = table(section(spec, "### ep4"))
    assert rows["4"] == {
        "C": "4",
        "repeats": "2",
        "requests": "32",
        "accept length, requests": "2.41 ± 0.13",
        "server gauge": "2.31 ± 0.13",
        "/server_info": "2.26 ± 0.13",
        "accept rate %": "70.5 ± 6.4",
        "requests by accept length": "1.5-2: 4, 2-2.5: 24, 2.5-3: 0, 3-3.5: 4",
    }
    assert list(rows) == ["1", "4"]


def test_a_config_on_an_openai_api_has_the_servers_figures_only(tmp_path: Path) -> None:
    """The OpenAI APIs carry no meta_info: the sweep writes no per-request keys there."""
    per_request = ("spec_requests", "spec_accept_length", "spec_accept_rate", "spec_accept_length_histogram")
    points = [speculative(1, r) for r in (0, 1)]
    openai = [{key: value for key, value in found.items() if key not in per_request} for found in points]
    run = write_run(tmp_path, {"ep4": openai}, workload={"concurrency": [1]})
    row = table(section(markdown(load_run(run)), "## Speculative decoding"))["1"]
    assert (row["requests"], row["accept length, requests"], row["accept rate %"]) == ("-", "-", "-")
    assert (row["server gauge"], row["/server_info"]) == ("2.31 ± 0.13", "2.26 ± 0.13")
    assert row["requests by accept length"] == "-"


def test_no_section_where_no_config_speculates(tmp_path: Path) -> None:
    run = write_run(tmp_path, {"tp8": [point(1), point(4)], "ep4": [point(1), point(4, accept_length=None)]})
    assert "Speculative decoding" not in markdown(load_run(run))


def test_a_damaged_figure_is_named_and_left_out(tmp_path: Path) -> None:
    run = write_run(
        tmp_path,
        {"ep4": [speculative(1, 0, spec_accept_length="2.4", spec_accept_length_histogram=[1, -2])]},
        workload={"concurrency": [1]},
    )
    loaded = load_run(run)
    problems = " ".join(problem for found in loaded.results for problem in found.problems)
    assert 'point c1-r0: spec_accept_length: "2.4" is not null or a finite number; not used' in problems
    assert "spec_accept_length_histogram: [1, -2] is not a list of whole numbers; not used" in problems
    row = table(section(markdown(loaded), "## Speculative decoding"))["1"]
    assert (row["accept length, requests"], row["requests by accept length"]) == ("-", "-")
    assert row["server gauge"] == "2.30"
