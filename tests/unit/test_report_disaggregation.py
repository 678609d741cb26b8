"""The Disaggregated servers section: each prefill and decode server's own figures by level, over the
level's repeats, and the TTFT split (the client's TTFT, the prefill servers' request time, the rest); no
section without a disaggregated config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.report_files import markdown, point, section, table, write_run

from fairbench.report.load import load_run


def _roles(prefill_ms: float, transfer_ms: float, queue: float | None) -> dict[str, Any]:
    return {
        "prefill-0": {
            "running_mean": 2.0,
            "request_latency_ms": prefill_ms,
            "prefill_bootstrap_queue_mean": 1.0,
        },
        "decode-0": {
            "running_mean": 8.0,
            "kv_transfer_latency_ms": transfer_ms,
            "decode_transfer_queue_mean": queue,
        },
    }


def test_each_server_of_a_disaggregated_config_by_level_and_where_ttft_went(tmp_path: Path) -> None:
    run = write_run(
        tmp_path,
        {
            # ep4 stands for a disaggregated config: two repeats a level, each with its servers' figures.
            "ep4": [
                point(
                    c,
                    r,
                    mean_ttft_ms=100.0 + 10 * r,
                    server_roles=_roles(60.0 + 10 * r, 4.0 + r, None if r else 2.0),
                )
                for c in (1, 4)
                for r in (0, 1)
            ],
            "tp8": [point(1), point(4)],
        },
        workload={"concurrency": [1, 4]},
    )
    found = section(markdown(load_run(run)), "## Disaggregated servers")
    # The client waited 105 ms for a first token on average, of which the prefill server held it 65.
    assert table(section(found, "### ep4: TTFT split"))["4"] == {
        "C": "4",
        "TTFT ms": "105.0",
        "prefill ms": "65.0",
        "rest ms": "40.0",
    }
    assert table(section(found, "### ep4: decode-0"))["1"] == {
        "C": "1",
        "running": "8.0",
        "queued": "-",
        "bootstrap queue": "-",
        "transfer queue": "2.0",
        "KV transfer ms": "4.5",
        "request ms": "-",
    }
    assert table(section(found, "### ep4: prefill-0"))["1"]["bootstrap queue"] == "1.0"
    assert "### tp8" not in found


def test_a_run_without_a_disaggregated_config_has_no_such_section(tmp_path: Path) -> None:
    run = write_run(tmp_path, {"tp8": [point(1), point(4)]})
    assert "## Disaggregated servers" not in markdown(load_run(run))
