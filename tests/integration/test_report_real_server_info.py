"""The report's fairness verdict on what real SGLang 0.5.23 servers answer at ``/server_info``.

Each run is a results tree as the Ansible layer writes it (tests/support/results_tree.py: every config
served and swept, the simulator standing in for the server) for configs of campaigns/lab-sglang.yml on
the tiny model, with each config's server_info.json then replaced by a real server's answer, recorded
on a CPU by tests/fixtures/server_info/record.py:

- ``fair``: ``baseline`` and ``again``, both the lab campaign's baseline, from two starts with the same
  flags: they differ in per-start values alone;
- ``unfair``: the same two configs, ``again``'s server started with ``--schedule-policy lpm`` where the
  campaign declares fcfs for both;
- ``declared``: ``baseline`` with the lab campaign's ``stream-4``, ``running-4`` and ``chunked-64``, each
  declaring one flag, the last two changing what SGLang derives from it.

The verdicts are read twice: from ``config_differences``, which ``fairbench report`` calls for its
"What differed" section and first screen, and from the report.md that ``fairbench report`` writes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.results_tree import REPO, Deviation, build_run, campaign_from, fairbench_report
from tests.support.tiny_model import build as build_tiny_model

from fairbench.campaign.model import Campaign
from fairbench.report.differences import PairDifferences, config_differences, flatten
from fairbench.report.load import load_run

# The tests share runs built once per module: on one pytest worker, not built again on each.
pytestmark = pytest.mark.xdist_group("report_real_server_info")

LAB = REPO / "campaigns" / "lab-sglang.yml"
RECORDED = REPO / "tests" / "fixtures" / "server_info"
# One short level: the sweeps only have to leave a tree the report reads.
WORKLOAD = {"concurrency": [1], "input_len": 16, "output_len": 8, "prompts_per_level": 16, "warmup": 1}
NO_THREAT = "No undeclared differences: every setting that differs was declared by the campaign."


def _recorded(name: str) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((RECORDED / f"{name}.json").read_text(encoding="utf-8"))
    return info


def _campaign(work: Path, configs: Mapping[str, Any]) -> Campaign:
    """The lab campaign with ``configs``, serving a tiny model directory here, whose vocabulary the
    sweep reads (the lab's model path exists only on the lab hosts)."""
    data = yaml.safe_load(LAB.read_text(encoding="utf-8"))
    data["configs"] = dict(configs)
    data["model"] = str(build_tiny_model(work / "tiny-gpt2"))
    path = work / f"{data['name']}.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return campaign_from(path, configs=list(configs), workload=WORKLOAD, sim={})


def _report(run: Path) -> str:
    done = fairbench_report(run)
    assert done.returncode == 0, done.stderr
    return (run / "report.md").read_text(encoding="utf-8")


def _run(
    root: Path,
    campaign: Campaign,
    run_id: str,
    server_info: Mapping[str, str],
    deviations: Mapping[str, Deviation] | None = None,
) -> Path:
    """A run of ``campaign``, each config in ``server_info`` with the recorded answer named there."""
    run = build_run(root, campaign, run_id, deviations=deviations)
    for config, recording in server_info.items():
        shutil.copyfile(RECORDED / f"{recording}.json", run / "lab1" / config / "server_info.json")
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("real-server-info")
    lab_configs = yaml.safe_load(LAB.read_text(encoding="utf-8"))["configs"]
    twins = _campaign(work, {"baseline": {}, "again": {}})
    declared = _campaign(
        work, {name: lab_configs[name] for name in ("baseline", "stream-4", "running-4", "chunked-64")}
    )
    lpm = Deviation(flags=("--schedule-policy", "lpm"))
    root = work / "results"
    return {
        "fair": _run(root, twins, "fair", {"baseline": "baseline-a", "again": "baseline-b"}),
        "unfair": _run(
            root, twins, "unfair", {"baseline": "baseline-a", "again": "lpm"}, deviations={"again": lpm}
        ),
        "declared": _run(
            root,
            declared,
            "declared",
            {name: name for name in ("stream-4", "running-4", "chunked-64")} | {"baseline": "baseline-a"},
        ),
    }


def _pairs(run: Path) -> dict[tuple[str, str], PairDifferences]:
    return {(pair.a.name, pair.b.name): pair for pair in config_differences(load_run(run))}


def _verdicts(pair: PairDifferences) -> dict[str, tuple[str, Any, Any]]:
    return {d.name: (d.verdict, d.value_a, d.value_b) for d in pair.differences}


def test_the_two_starts_differ_in_per_start_values() -> None:
    first, second = flatten(_recorded("baseline-a")), flatten(_recorded("baseline-b"))
    differing = {name for name in first.keys() | second.keys() if first.get(name) != second.get(name)}
    # What makes the fair run a test: the recordings really do differ, top level and DP rank alike.
    assert {"port", "random_seed", "startup_time.tokenizer_e2e", "internal_states"} <= differing
    ranks = [flatten(_recorded(name)["internal_states"][0]) for name in ("baseline-a", "baseline-b")]
    assert ranks[0]["port"] != ranks[1]["port"]
    assert ranks[0]["memory_usage.startup_available"] != ranks[1]["memory_usage.startup_available"]


def test_two_starts_of_one_config_are_identical_in_every_compared_setting(runs: dict[str, Path]) -> None:
    (pair,) = _pairs(runs["fair"]).values()
    assert pair.differences == []
    assert pair.not_compared == []
    report = _report(runs["fair"])
    assert NO_THREAT in report
    assert "Not a fair comparison" not in report
    assert "Identical in every compared setting: baseline vs again." in report


def test_an_undeclared_schedule_policy_is_a_threat_with_both_values(runs: dict[str, Path]) -> None:
    (pair,) = _pairs(runs["unfair"]).values()
    assert _verdicts(pair) == {"schedule_policy": ("threat", "fcfs", "lpm")}
    report = _report(runs["unfair"])
    assert (
        "Not a fair comparison: 1 setting(s) differ between configs without the campaign declaring them."
        in (report)
    )
    assert "server `schedule_policy`: baseline: `fcfs`; again: `lpm`" in report
    assert "| THREAT | server | `schedule_policy` | fcfs | lpm |" in report
    assert NO_THREAT not in report


def test_declared_flags_are_intended_and_what_sglang_derives_from_them_derived(runs: dict[str, Path]) -> None:
    pairs = _pairs(runs["declared"])
    assert [d for pair in pairs.values() for d in pair.with_verdict("threat")] == []
    assert _verdicts(pairs[("baseline", "stream-4")]) == {"stream_interval": ("intended", 1, 4)}
    running = _verdicts(pairs[("baseline", "running-4")])
    assert running["max_running_requests"] == ("intended", 16, 4)
    # The scheduler's own limits follow from it, reported once, by its DP rank.
    assert running["internal_states.0.effective_max_running_requests_per_dp"] == ("derived", 16, 4)
    assert running["internal_states.0.pp_max_micro_batch_size"] == ("derived", 16, 4)
    chunked = _verdicts(pairs[("baseline", "chunked-64")])
    assert chunked["chunked_prefill_size"] == ("intended", 4096, 64)
    # SGLang sizes the prefill CUDA graphs and the static memory share from the chunk size.
    assert chunked["cuda_graph_config.prefill.max_bs"] == ("derived", 4096, 64)
    assert chunked["cuda_graph_config.prefill.bs"][0] == "derived"
    assert chunked["mem_fraction_static"][0] == "derived"
    report = _report(runs["declared"])
    assert NO_THREAT in report
    assert "| intended | server | `stream_interval` | 1 | 4 |" in report
    assert "| derived | server | `mem_fraction_static` |" in report
