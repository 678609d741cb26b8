"""The plan's times (fleet/estimate.py, fleet/forecast.py) against a real run: a campaign's job run as the
fleet runs it (tests/support/results_tree.py: a ``fairbench sim`` process, swept by fairbench's own sweep),
each point's measured ``duration`` and the job's sweep (its timeline's first request to its last point)
set against what the plan predicted for them before the run.

Three workloads of one server, each testing one part of the estimate: a closed loop of random ids at C=4
and C=16 (``predict_point``'s loop), conversations of two turns behind a primed system prompt (the turns'
uncached tokens, the primers), and an open loop of nearly even arrivals (gamma, burstiness 100: the
schedule's gaps vary by a tenth, where the plan spaces them evenly). The generic profile at 20x its time
makes each point last 0.8 to 2.7 s, so the client's few milliseconds per request and wave on a busy 2-core
machine stay a few percent of it. Tolerances: each point within 10 %, the job's sweep within 15 % (it adds
what the plan leaves out: the client's own time before and between points, and a sweep process's start
for each workload; at 10x, that was 16 to 18 % of the sweep in CI).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.results_tree import REPO, build_fleet_run

from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import workload_dir
from fairbench.fleet.estimate import SimPointModel, repeat_points, sim_config
from fairbench.fleet.forecast import LEAST, forecast
from fairbench.measure.results_format import POINTS_FILE

POINT_TOLERANCE = 0.10
SWEEP_TOLERANCE = 0.15
CAMPAIGN: dict[str, Any] = {
    "name": "plan",
    "engine": "sim",
    "model": "sim/test-model",
    "common": {"args": {"max-running-requests": 64}, "sim": {"sim-time-scale": 20}},
    "configs": {"generic": {}},
    "workloads": {
        "closed": {
            "api": "completions", "dataset": "random-ids", "input_len": 256, "output_len": 16,
            "concurrency": [4, 16], "prompts_per_level": 16, "warmup": 4, "repeats": 1, "vocab_size": 32000,
        },
        "turns": {
            "api": "generate", "dataset": "multi-turn", "output_len": 16, "cache_state": "primed",
            "multi_turn": {"turns": 2, "user_len": 64, "system_prompt_len": 1024},
            "concurrency": [4], "prompts_per_level": 16, "warmup": 0, "repeats": 1, "vocab_size": 32000,
        },
        "open": {
            "api": "completions", "dataset": "random-ids", "input_len": 256, "output_len": 16,
            "request_rate": [10], "arrival": "gamma", "burstiness": 100, "max_concurrency": 8,
            "prompts_per_level": 16, "warmup": 0, "repeats": 1, "vocab_size": 32000,
        },
    },
}  # fmt: skip


@pytest.mark.timing  # it holds measured durations to the plan's
def test_the_plans_point_and_sweep_times_are_what_a_real_sweep_of_the_simulator_takes(tmp_path: Path) -> None:
    campaign = parse_campaign(yaml.safe_dump(CAMPAIGN), "plan.yml", REPO)
    planned = forecast(campaign, {"gpu_hosts": ["lab1"]}, placement="spread", hosts_from="test")
    model = SimPointModel(sim_config(campaign.configs["generic"].argv))
    run = build_fleet_run(tmp_path, campaign, "r1", hosts=("lab1",))
    config_dir = run / "lab1" / "generic"
    compared = []
    for name, workload in campaign.workloads.items():
        lines = (workload_dir(config_dir, name) / POINTS_FILE).read_text().splitlines()
        measured = {json.loads(line)["point_id"]: json.loads(line)["duration"] for line in lines}
        for point in repeat_points(name, workload):
            # The measured phase alone, as the point's duration counts it.
            predicted = model.point_s(workload, replace(point, warmup=0, primers=0))
            compared.append((f"{name}/{point.tag}", predicted, measured[f"{point.tag}-r0"]))
    shown = "; ".join(f"{pid}: planned {p:.3f} s, measured {m:.3f} s" for pid, p, m in compared)
    print(shown)
    for pid, predicted, measured_s in compared:
        assert measured_s == pytest.approx(predicted, rel=POINT_TOLERANCE), (pid, shown)
    (job,) = json.loads((config_dir / "status.json").read_text())["jobs"]
    swept = job["timeline"]["last_point_ended_at"] - job["timeline"]["first_request_at"]
    planned_sweep = planned.configs["generic"].repeat_s[LEAST]
    print(f"sweep: planned {planned_sweep:.3f} s, measured {swept:.3f} s")
    assert swept == pytest.approx(planned_sweep, rel=SWEEP_TOLERANCE)
