"""``fairbench validate --plan``: the plan's lines, its hosts from an inventory as Ansible reads it (the real
ansible-inventory), the earlier run it learns from, and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairbench.campaign.load import load_campaign
from fairbench.cli.main import main
from fairbench.fleet.forecast import LEAST, MOST, clock_text, forecast

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "campaigns" / "demo.yml"


def validate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    try:
        code = main(["validate", *argv])
    except SystemExit as exited:
        code = int(exited.code or 0)
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_the_plan_follows_the_campaigns_lines_and_counts_every_job_point_and_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, lines, err = validate(capsys, str(DEMO), "--plan", "--fresh")
    assert (code, err) == (0, "")
    code, plain, _ = validate(capsys, str(DEMO))
    assert lines[: len(plain)] == plain  # what validate prints without --plan, unchanged
    planned = lines[len(plain) :]
    assert planned[0] == (
        "plan: 1 host(s) (gpu_hosts: gpu_hosts-1; no inventory given (-i): each pool as the fewest hosts its "
        "configs need), placement spread"
    )
    assert (
        planned[1] == "  repeats of each level: 3 to 4; workload random: 4 levels; workload agentic: 3 levels"
    )
    expected = forecast(
        load_campaign(DEMO), {"gpu_hosts": ["gpu_hosts-1"]}, placement="spread", hosts_from=""
    )
    least, most = expected.outlook[LEAST], expected.outlook[MOST]
    # 7 configs x 3 (or 4) repeats; each repeat 7 points and 959 requests (warmups and primers included).
    assert planned[-2] == (
        f"  at the least: 21 jobs (each a server start), 147 points, 20,139 requests; {least.gpu_hours:,.2f} "
        f"GPU-hours; wall time {clock_text(least.wall_s)}"
    )
    assert planned[-1] == (
        f"  at the most: 28 jobs (each a server start), 196 points, 26,852 requests; {most.gpu_hours:,.2f} "
        f"GPU-hours; wall time {clock_text(most.wall_s)}"
    )
    tp8 = next(line for line in planned if line.startswith("  tp8 "))
    assert tp8.endswith("start: simulator; points: simulator")


def test_an_engine_without_a_model_gets_its_counts_and_declared_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = yaml.safe_load((REPO / "campaigns" / "kimi-k2.6-pcie.yml").read_text())
    path = tmp_path / "k.yml"
    path.write_text(yaml.safe_dump({**document, "expected_start_s": 600}))
    code, lines, _ = validate(capsys, str(path), "--plan", "--fresh")
    assert code == 0
    # 6 configs, one job each of 600 s start on 8 GPUs: 6 x 600 x 8 / 3600 = 8.00 GPU-hours of starts.
    assert (
        "  at the least: 6 jobs (each a server start), 78 points, 40,128 requests; unknown (the server "
        in ("\n".join(lines))
    )
    assert "starts alone: 8.00) GPU-hours; wall time unknown" in "\n".join(lines)
    assert lines[-1] == (
        "  points of engine sglang have no model of their speed: plan from an earlier run of the campaign "
        "(--from RUN_DIR) to time them"
    )


def test_the_inventorys_hosts_limit_and_placement_are_ansibles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "hosts.yml"
    gpu_hosts = {"hosts": {"g1": {}, "g2": {}, "g3": {}}, "vars": {"bench_placement": "every-host"}}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_hosts": gpu_hosts}}}))
    code, lines, err = validate(capsys, str(DEMO), "--plan", "--fresh", "-i", str(inventory))
    assert (code, err) == (0, "")
    header = next(line for line in lines if line.startswith("plan: "))
    assert header == f"plan: 3 host(s) (gpu_hosts: g1, g2, g3; {inventory}), placement every-host"
    # every-host: each config on each host, all its repeats in one job.
    assert any(line.startswith("  at the least: 21 jobs ") for line in lines)
    code, lines, _ = validate(capsys, str(DEMO), "--plan", "--fresh", "-i", str(inventory), "-l", "g2")
    assert next(line for line in lines if line.startswith("plan: ")).startswith(
        "plan: 1 host(s) (gpu_hosts: g2;"
    )


def test_the_plan_learns_from_the_newest_run_of_the_campaign_here_or_the_one_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "results" / "demo" / "r1"
    directory = run / "lab1" / "tp8"
    directory.mkdir(parents=True)
    (run / "campaign.json").write_text(json.dumps({"name": "demo"}))
    timeline = {
        "unit_started_at": 0.0,
        "healthy_at": 42.0,
        "first_request_at": 43.0,
        "last_point_ended_at": 50.0,
    }
    job = {"job": "tp8#r0", "repeats": [0], "hosts": ["lab1"], "status": "ok", "timeline": timeline}
    (directory / "status.json").write_text(json.dumps({"status": "ok", "jobs": [job]}))
    monkeypatch.chdir(tmp_path)
    _, lines, _ = validate(capsys, str(DEMO), "--plan")
    header = next(line for line in lines if line.startswith("plan: "))
    assert header.endswith("; times of results/demo/r1")
    tp8 = next(line for line in lines[lines.index(header) :] if line.startswith("  tp8 "))
    assert "  42 s  " in tp8 and tp8.endswith("start: earlier run; points: simulator")
    _, lines, _ = validate(capsys, str(DEMO), "--plan", "--from", str(run))
    assert next(line for line in lines if line.startswith("plan: ")).endswith(f"; times of {run}")
    _, fresh, _ = validate(capsys, str(DEMO), "--plan", "--fresh")
    assert "times of" not in next(line for line in fresh if line.startswith("plan: "))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-i", "hosts.yml"], "-i: only with --plan"),
        (["--fresh"], "--fresh: only with --plan"),
        (["--plan", "-l", "g1"], "-l/--limit: limits an inventory: give it with -i"),
        (["--plan", "--fresh", "--from", "."], "--fresh: learns from no earlier run, and --from names one"),
        (["--plan", "--from", "."], "--from: . is no run's directory (no readable campaign.json)"),
    ],
)
def test_a_plan_option_that_cannot_be_is_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = validate(capsys, str(DEMO), *argv)
    assert (code, err) == (2, f"fairbench validate: error: {message}\n")


def test_a_run_of_another_campaign_or_a_group_the_inventory_lacks_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "campaign.json").write_text(json.dumps({"name": "other"}))
    code, _, err = validate(capsys, str(DEMO), "--plan", "--from", str(tmp_path))
    assert (code, err) == (
        2,
        f"fairbench validate: error: --from: {tmp_path} is a run of campaign other, not demo\n",
    )
    document: dict[str, Any] = yaml.safe_load(DEMO.read_text())
    document["configs"]["tp8"]["hosts"] = "h200"
    path = tmp_path / "pinned.yml"
    path.write_text(yaml.safe_dump(document))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_hosts": {"hosts": {"g1": {}}}}}}))
    code, _, err = validate(capsys, str(path), "--plan", "--fresh", "-i", str(inventory))
    assert code == 1
    assert err == (
        f"error: {path}: plan: config tp8: hosts: h200 is no inventory group (groups: gpu_hosts)\n"
    )
    code, _, err = validate(capsys, str(DEMO), "--plan", "-i", str(tmp_path / "missing.yml"))
    missing = tmp_path / "missing.yml"
    assert (code, err) == (
        2,
        f"fairbench validate: error: -i: ansible-inventory could not read {missing}: Unable to parse "
        f"{missing} as an inventory source\n",
    )
