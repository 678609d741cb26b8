"""The ``fairbench`` command's own handling, shared by every subcommand (its version, its help in users'
words), and what ``fairbench validate`` shows of where each config's server runs."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairbench.campaign.load import load_campaign
from fairbench.cli.main import COMMANDS, main

REPO = Path(__file__).resolve().parents[2]

FLEET_CAMPAIGN: dict[str, Any] = {
    "name": "fleet",
    "engine": "sim",
    "model": "m",
    "configs": {
        "tp8": {"args": {"tp-size": 8}},
        "tp16": {"args": {"tp-size": 16}, "nodes": 2},
        "tp8-b200": {"extends": "tp8", "hosts": "b200"},
        "tp16-b200": {"extends": "tp16", "hosts": "b200"},
    },
    "workload": {
        "api": "completions",
        "dataset": "random-ids",
        "input_len": 8,
        "output_len": 8,
        "concurrency": [1],
        "prompts_per_level": "1x",
        "warmup": 0,
        "vocab_size": 100,
    },
}


def test_a_reader_that_goes_away_ends_the_command_without_a_traceback() -> None:
    """``fairbench validate ... | head``: the pipe closes before the output is written."""
    command = [sys.executable, "-m", "fairbench", "validate", str(REPO / "campaigns/demo.yml")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=120)
    assert stderr == b"" and process.returncode == 141


def test_version_prints_the_installed_distributions_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"fairbench {importlib.metadata.version('fairbench')}\n"


# Docstring markup that must not reach a user: ``literal``, `interpreted`, :role:`x`, field lists
# (:param x:), directives (.. note::) and literal-block markers (a paragraph ending in ::).
RST_MARKUP = re.compile(
    r"``|`[^`\s][^`]*`_?|:[a-z]+:`|^\s*:[a-z]+( [\w.]+)?:|^\s*\.\. [\w-]+::|::$", re.MULTILINE
)


def help_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_the_markup_pattern_finds_restructuredtext() -> None:
    for markup in (
        "the ``fairbench`` command",
        "see `sweep`",
        ":func:`run`",
        ":param url: the server",
        "  :returns: a path",
        ".. note::",
        "as follows::",
    ):
        assert RST_MARKUP.search(markup), markup
    for plain in (
        "KEY=MS, e.g. ttft_p99_ms=2000",
        "auto:MIN:MAX:PCT",
        "http://127.0.0.1:30000",
        "LABEL@prompt",
    ):
        assert not RST_MARKUP.search(plain), plain


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_every_help_is_in_plain_words_with_a_description_and_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_text([command] if command else [], capsys)
    assert [found.group() for found in RST_MARKUP.finditer(text)] == []
    usage, description, *_ = text.split("\n\n")
    assert usage.startswith(f"usage: {' '.join(['fairbench', command]).strip()} ")
    # What the command does and ends in: sentences, more than the one line the command list gives it.
    assert description.endswith(".") and len(description.split()) > 20, description
    assert "\nexamples" in text and "  fairbench " in text.split("\nexamples", 1)[1]


def test_the_command_list_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text([], capsys)
    listed = re.findall(r"^    (\w+) ", text, re.MULTILINE)
    assert listed == list(COMMANDS)


def validated(tmp_path: Path, document: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """What ``fairbench validate`` prints of ``document``, written as a campaign file (it must be valid)."""
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    assert main(["validate", str(path)]) == 0
    return capsys.readouterr().out.splitlines()


def test_validate_shows_the_placement_and_each_config_spread_over_hosts_or_pinned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = validated(tmp_path, FLEET_CAMPAIGN, capsys)
    assert lines[0] == f"{tmp_path / 'fleet.yml'}: campaign fleet, engine sim, 4 configs, placement spread"
    assert lines[1] == "  tp8        --model-path m --tp-size 8"
    assert lines[2] == "  tp16       --model-path m --tp-size 16  # nodes: 2 (8 GPUs per host)"
    assert lines[3] == "  tp8-b200   --model-path m --tp-size 8  # hosts: b200"
    assert lines[4] == "  tp16-b200  --model-path m --tp-size 16  # nodes: 2 (8 GPUs per host), hosts: b200"
    assert lines[5] == "  workload: `completions`, 8 tokens in, 8 out, concurrency 1, 1 repeat(s)"
    assert lines[6] == "  answers: 16 probes greedy through completions, at most 32 tokens each"
    assert len(lines) == 7


def test_validate_notes_where_a_server_runs_as_a_comment_the_shell_ignores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = validated(tmp_path, FLEET_CAMPAIGN, capsys)
    campaign = load_campaign(tmp_path / "fleet.yml")
    for line in lines[1:5]:
        name, *argv = shlex.split(line, comments=True)
        assert argv == list(campaign.configs[name].argv)


def test_validate_shows_each_workload_of_a_campaign_as_the_report_says_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = FLEET_CAMPAIGN["workload"]
    agentic = {
        **{key: value for key, value in workload.items() if key != "input_len"},
        "dataset": "multi-turn",
        "api": "generate",
        "multi_turn": {"turns": 3, "system_prompt_len": 400, "user_len": 16},
        "cache_state": "primed",
        "prompts_per_level": "3x",
    }
    document = {key: value for key, value in FLEET_CAMPAIGN.items() if key != "workload"}
    lines = validated(tmp_path, {**document, "workloads": {"random": workload, "agentic": agentic}}, capsys)
    assert lines[5:] == [
        "  workload random: `completions`, 8 tokens in, 8 out, concurrency 1, 1 repeat(s)",
        "  workload agentic: `generate`, conversations of 3 turns (16-token user turns, a 400-token "
        "system prompt shared by all), each turn sending the server's earlier replies back, first turn 416 "
        "tokens in, 8 out, concurrency 1, 1 repeat(s), each point's prefix cache primed",
        "  answers: 16 probes greedy through completions, at most 32 tokens each",
    ]


def test_validate_shows_a_campaign_that_runs_every_config_on_every_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    single_host = {name: config for name, config in FLEET_CAMPAIGN["configs"].items() if "16" not in name}
    lines = validated(tmp_path, {**FLEET_CAMPAIGN, "placement": "every-host", "configs": single_host}, capsys)
    assert lines[0].endswith(": campaign fleet, engine sim, 2 configs, placement every-host")
    assert lines[1:3] == [
        "  tp8       --model-path m --tp-size 8",
        "  tp8-b200  --model-path m --tp-size 8  # hosts: b200",
    ]
