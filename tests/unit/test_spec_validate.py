"""`fairbench validate` warns where a speculative config (args set speculative-algorithm) is measured on
prompts nobody wrote: random token ids (random words on the chat API), which every generated dataset sends.
A draft's acceptance there is not real text's, so neither is the speed-up. No warning for a config without
speculation, nor for a workload of real text (a ShareGPT-style file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.campaign_documents import DELETE, SOURCE, changed, parse

from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import Campaign
from fairbench.cli.main import main

EAGLE = {"extends": "tp8", "args": {"speculative-algorithm": "EAGLE3", "speculative-num-draft-tokens": 4}}
CONSEQUENCE = (
    "a draft's acceptance on them is not what real text gets, so neither is the speed-up; measure "
    "speculation on real text too"
)


def with_configs(workload: dict[str, Any] | None = None, **configs: Any) -> dict[str, Any]:
    document = changed(workload)
    document["configs"] = {**document["configs"], **configs}
    return document


def test_a_speculative_config_on_random_token_ids_is_a_warning_naming_it_and_the_workload() -> None:
    campaign = parse(with_configs(**{"tp8-eagle": EAGLE}))
    assert campaign.warnings == (
        f"{SOURCE}: workload.dataset: random-ids sends random token ids, and tp8-eagle "
        f"(speculative-algorithm EAGLE3) decodes speculatively: {CONSEQUENCE} (dataset: a ShareGPT-style "
        "file)",
    )


def test_every_speculative_config_is_named_once_per_workload() -> None:
    document = with_configs(
        **{"tp8-eagle": EAGLE, "tp8-ngram": {"extends": "tp8", "args": {"speculative-algorithm": "NGRAM"}}}
    )
    workload = document.pop("workload")
    document["workloads"] = {"random": workload, "chat": {**workload, "api": "chat"}}
    warnings = parse(document).warnings
    assert warnings == tuple(
        f"{SOURCE}: workloads.{name}.dataset: random-ids sends {what}, and tp8-eagle (speculative-algorithm "
        f"EAGLE3), tp8-ngram (speculative-algorithm NGRAM) decode speculatively: {CONSEQUENCE} (dataset: a "
        "ShareGPT-style file)"
        for name, what in (("random", "random token ids"), ("chat", "random words"))
    )


def test_a_synthetic_multi_turn_workload_names_its_own_key_for_real_text() -> None:
    multi_turn = {
        "api": "generate",
        "dataset": "multi-turn",
        "multi_turn": {"turns": 2, "user_len": 64},
        "input_len": DELETE,
    }
    (warning,) = parse(with_configs(multi_turn, **{"tp8-eagle": EAGLE})).warnings
    assert warning.startswith(f"{SOURCE}: workload.dataset: multi-turn sends random token ids, and tp8-eagle")
    assert warning.endswith("(multi_turn.sharegpt: a ShareGPT-style file)")


def real_text(tmp_path: Path, document: dict[str, Any]) -> Campaign:
    (tmp_path / "sharegpt.json").write_text("[]", encoding="utf-8")
    return parse_campaign(yaml.safe_dump(document, sort_keys=False), SOURCE, tmp_path)


def test_no_warning_on_real_text(tmp_path: Path) -> None:
    assert (
        real_text(tmp_path, with_configs({"dataset": "sharegpt.json"}, **{"tp8-eagle": EAGLE})).warnings == ()
    )
    turns = {
        "api": "chat",
        "dataset": "multi-turn",
        "multi_turn": {"turns": 2, "sharegpt": "sharegpt.json"},
        "input_len": DELETE,
    }
    assert real_text(tmp_path, with_configs(turns, **{"tp8-eagle": EAGLE})).warnings == ()


@pytest.mark.parametrize("algorithm", [None, "NONE", "none"], ids=["unset", "NONE", "none"])
def test_no_warning_for_configs_without_speculation(algorithm: str | None) -> None:
    args = {} if algorithm is None else {"speculative-algorithm": algorithm}
    assert parse(with_configs(**{"tp8-plain": {"extends": "tp8", "args": args}})).warnings == ()


def test_validate_prints_the_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "spec.yml"
    path.write_text(yaml.safe_dump(with_configs(**{"tp8-eagle": EAGLE}), sort_keys=False), encoding="utf-8")
    assert main(["validate", str(path)]) == 0
    printed = capsys.readouterr()
    assert f"warning: {path}: workload.dataset: random-ids sends random token ids, and tp8-eagle" in (
        printed.out + printed.err
    )
