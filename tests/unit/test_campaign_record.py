"""campaign.json of a run and a resume's check against it (fairbench.fleet.campaign_record): what counts as a
difference, the refusal and its message, and what recording a changed campaign keeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.plugins.filter.core import to_nice_json  # type: ignore[import-untyped]

from fairbench.campaign.load import load_campaign
from fairbench.fleet.campaign_record import (
    SHOWN,
    ResumeRefused,
    check_resume,
    differences,
    earlier,
    record,
    render,
)
from fairbench.measure.results import CAMPAIGN_FILE

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "campaigns" / "demo.yml"
FLAG = "--allow-changed"


def demo(tmp_path: Path, *edits: tuple[str, str], name: str = "changed.yml") -> dict[str, Any]:
    """The demo campaign, expanded, with each ``(old, new)`` text edit made to its file first."""
    text = DEMO.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text)
    return load_campaign(path).to_json()


def recorded_run(tmp_path: Path, campaign: dict[str, Any]) -> Path:
    """A run's directory whose campaign.json holds ``campaign``, as the bench role wrote it."""
    run_dir = tmp_path / "results" / "demo" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / CAMPAIGN_FILE).write_text(to_nice_json(campaign) + "\n")
    return run_dir


def shown(found: list[Any]) -> list[str]:
    return [str(difference) for difference in found]


def test_the_same_campaign_named_otherwise_or_with_other_volatile_keys_is_no_difference(
    tmp_path: Path,
) -> None:
    before = load_campaign(DEMO).to_json()
    again = demo(
        tmp_path, ("model: moonshotai/Kimi-K2.6\n", "model: moonshotai/Kimi-K2.6\nstart_timeout_s: 60\n")
    )
    assert again["source"] != before["source"] and again["start_timeout_s"] == 60
    again["warnings"] = ["a rule fairbench added since"]
    # Key order does not count either: campaign.json is written with its keys sorted.
    reordered = json.loads(to_nice_json(before))
    assert differences(before, again) == [] and differences(reordered, before) == []
    assert check_resume(recorded_run(tmp_path, before), again, allow_changed=False, allowed_by=FLAG) == []


def test_each_changed_key_is_named_by_its_path_with_both_values(tmp_path: Path) -> None:
    before = load_campaign(DEMO).to_json()
    after = demo(
        tmp_path,
        (
            "ep8-eplb:  {extends: ep8, args: {enable-eplb: true}}",
            "ep8-eplb:  {extends: ep8, args: {enable-eplb: false}}",
        ),
        ("concurrency: [1, 16, 64, 256]", "concurrency: [1, 16, 64, 128, 256]"),
        ("  tpot_p50_ms: 12\n", "  tpot_p50_ms: 12\n  ttft_p99_ms: 500\n"),
    )
    assert shown(differences(before, after)) == [
        # enable-eplb false renders no flag: argv, too long to show whole, is one shorter there.
        'configs.ep8-eplb.argv[4:5]: ["--enable-eplb"] -> []',
        'configs.ep8-eplb.sglang_argv[4:5]: ["--enable-eplb"] -> []',
        "configs.ep8-eplb.args.enable-eplb: true -> false",
        "configs.ep8-eplb.declared.args.enable-eplb: true -> false",
        "workloads.random.concurrency: [1, 16, 64, 256] -> [1, 16, 64, 128, 256]",
        "slo.ttft_p99_ms: (absent) -> 500.0",
    ]


def test_a_value_changed_in_a_list_of_one_length_is_named_by_its_index(tmp_path: Path) -> None:
    before = load_campaign(DEMO).to_json()
    after = demo(tmp_path, ("  tp8:       {args: {tp-size: 8}}", "  tp8:       {args: {tp-size: 4}}"))
    assert shown(differences(before, after)) == [
        'configs.tp8.argv[12]: "8" -> "4"',
        'configs.tp8.sglang_argv[12]: "8" -> "4"',
        "configs.tp8.args.tp-size: 8 -> 4",
        "configs.tp8.declared.args.tp-size: 8 -> 4",
        "configs.tp8.gpus: 8 -> 4",
        'configs.tp8.gpus_formula: "tp-size 8" -> "tp-size 4"',
        "configs.tp8.gpus_per_node: 8 -> 4",
        # tp8-nccl extends tp8: it changed too.
        'configs.tp8-nccl.argv[12]: "8" -> "4"',
        'configs.tp8-nccl.sglang_argv[12]: "8" -> "4"',
        "configs.tp8-nccl.args.tp-size: 8 -> 4",
        "configs.tp8-nccl.declared.args.tp-size: 8 -> 4",
        "configs.tp8-nccl.gpus: 8 -> 4",
        'configs.tp8-nccl.gpus_formula: "tp-size 8" -> "tp-size 4"',
        "configs.tp8-nccl.gpus_per_node: 8 -> 4",
    ]


def test_a_config_added_or_removed_and_true_against_1_are_differences() -> None:
    before: dict[str, Any] = {"configs": {"a": {"args": {"x": True}}, "b": {}}, "engine": "sim"}
    after: dict[str, Any] = {"configs": {"a": {"args": {"x": 1}}, "c": {"args": {}}}, "engine": "sim"}
    assert shown(differences(before, after)) == [
        "configs.a.args.x: true -> 1",
        'configs.c: (absent) -> {"args": {}}',
        "configs.b: {} -> (absent)",
    ]


def test_a_resume_with_a_changed_campaign_is_refused_naming_the_run_the_keys_and_the_flag(
    tmp_path: Path,
) -> None:
    run_dir = recorded_run(tmp_path, load_campaign(DEMO).to_json())
    before = (run_dir / CAMPAIGN_FILE).read_bytes()
    after = demo(tmp_path, ("mem-fraction-static: 0.88", "mem-fraction-static: 0.9"))
    with pytest.raises(ResumeRefused) as refused:
        check_resume(run_dir, after, allow_changed=False, allowed_by=FLAG)
    head, *lines, last = str(refused.value).splitlines()
    # The common setting, then each of the seven configs' argv, args and sglang_argv, and pd's servers'.
    assert head == (
        f"{run_dir}: a resume of this run with another campaign: 26 key(s) of the expanded campaign differ "
        "from the run's campaign.json (recorded -> now):"
    )
    assert lines[:3] == [
        "  common.args.mem-fraction-static: 0.88 -> 0.9",
        '  configs.tp8.argv[8]: "0.88" -> "0.9"',
        '  configs.tp8.sglang_argv[8]: "0.88" -> "0.9"',
    ]
    assert len(lines) == SHOWN + 1 and lines[-1] == f"  ... and {26 - SHOWN} more"
    assert last == (
        "The run's points so far were measured under the recorded campaign. Use a new run id for this one, "
        f"or resume with it on purpose: {FLAG} (the recorded campaign is then kept as campaign.<n>.json, and "
        "the report says the campaign changed)."
    )
    with pytest.raises(ResumeRefused):
        record(run_dir, after, allow_changed=False, allowed_by=FLAG)
    assert (run_dir / CAMPAIGN_FILE).read_bytes() == before and earlier(run_dir) == []


def test_a_new_run_is_recorded_indented_as_ansible_wrote_it_in_the_campaigns_order(tmp_path: Path) -> None:
    campaign = load_campaign(DEMO).to_json()
    run_dir = tmp_path / "new-run"
    assert check_resume(run_dir, campaign, allow_changed=False, allowed_by=FLAG) == []
    # Nor is a run whose directory cannot be there: making it says why.
    (tmp_path / "a-file").write_text("")
    assert check_resume(tmp_path / "a-file" / "r1", campaign, allow_changed=False, allowed_by=FLAG) == []
    run_dir.mkdir()
    done = record(run_dir, campaign, allow_changed=False, allowed_by=FLAG)
    assert done.changed and done.kept_as is None and done.before is None
    text = (run_dir / CAMPAIGN_FILE).read_text()
    assert text == render(campaign) and json.loads(text) == json.loads(to_nice_json(campaign))
    # Configs and workloads in the file's order, as the report shows them.
    recorded = json.loads(text)
    assert (
        list(recorded["configs"])
        == list(campaign["configs"])
        == ["tp8", "tp8-nccl", "ep4", "ep8", "ep8-eplb", "ep4-fp8kv", "pd"]
    )
    assert list(recorded["workloads"]) == ["random", "agentic"]
    # The same again: nothing written.
    assert not record(run_dir, campaign, allow_changed=False, allowed_by=FLAG).changed


def test_an_allowed_change_keeps_each_campaign_before_it_numbered(tmp_path: Path) -> None:
    first = load_campaign(DEMO).to_json()
    second = demo(tmp_path, ("seed: 1", "seed: 2"))
    third = demo(tmp_path, ("seed: 1", "seed: 3"))
    run_dir = recorded_run(tmp_path, first)
    # Dry (check mode): what would be kept, nothing written.
    dry = record(run_dir, second, allow_changed=True, allowed_by=FLAG, dry_run=True)
    assert dry.changed and dry.kept_as == run_dir / "campaign.1.json" and not dry.kept_as.exists()
    assert json.loads((run_dir / CAMPAIGN_FILE).read_text()) == first
    done = record(run_dir, second, allow_changed=True, allowed_by=FLAG)
    assert (
        shown(done.differences) == ["workloads.random.seed: 1 -> 2"]
        and done.kept_as == run_dir / "campaign.1.json"
    )
    record(run_dir, third, allow_changed=True, allowed_by=FLAG)
    assert earlier(run_dir) == [run_dir / "campaign.1.json", run_dir / "campaign.2.json"]
    assert [json.loads(path.read_text()) for path in earlier(run_dir)] == [first, second]
    assert json.loads((run_dir / CAMPAIGN_FILE).read_text()) == third
    assert not list(run_dir.glob("*.tmp"))
    # A resume with the latest again changes nothing, and is not refused.
    assert not record(run_dir, third, allow_changed=False, allowed_by=FLAG).changed
    assert len(earlier(run_dir)) == 2


def test_a_change_kept_by_a_resume_stopped_before_writing_is_not_kept_twice(tmp_path: Path) -> None:
    first = load_campaign(DEMO).to_json()
    run_dir = recorded_run(tmp_path, first)
    # Stopped after keeping campaign.json as campaign.1.json, before writing the new one.
    (run_dir / "campaign.1.json").write_bytes((run_dir / CAMPAIGN_FILE).read_bytes())
    done = record(run_dir, demo(tmp_path, ("seed: 1", "seed: 2")), allow_changed=True, allowed_by=FLAG)
    assert done.kept_as == run_dir / "campaign.1.json" and earlier(run_dir) == [run_dir / "campaign.1.json"]


def test_only_numbered_campaigns_are_earlier_ones_in_their_numbers_order(tmp_path: Path) -> None:
    for name in (
        "campaign.10.json",
        "campaign.2.json",
        "campaign.0.json",
        "campaign.x.json",
        "campaign.json",
    ):
        (tmp_path / name).write_text("{}")
    assert earlier(tmp_path) == [tmp_path / "campaign.2.json", tmp_path / "campaign.10.json"]
    assert earlier(tmp_path / "missing") == []


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{not json", "the campaign the run recorded: not JSON (Expecting property name"),
        (b"[1, 2]", "the campaign the run recorded: [1, 2] is not a JSON object"),
        (b"\xff\xfe", "cannot read the campaign the run recorded: 'utf-8' codec can't decode"),
    ],
)
def test_a_recorded_campaign_that_cannot_be_read_refuses_the_resume_naming_the_file(
    tmp_path: Path, content: bytes, why: str
) -> None:
    (tmp_path / CAMPAIGN_FILE).write_bytes(content)
    with pytest.raises(ResumeRefused) as refused:
        check_resume(tmp_path, load_campaign(DEMO).to_json(), allow_changed=True, allowed_by=FLAG)
    assert str(refused.value).startswith(f"{tmp_path / CAMPAIGN_FILE}: {why}")
