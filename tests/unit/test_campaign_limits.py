"""The limits that keep any input quick to judge: file size, YAML nodes (aliases expanded), expanded
settings, suggestions; the campaign's own path; `fairbench validate` on files that are no campaign."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairbench.campaign import findings as findings_module
from fairbench.campaign import sglang_flags as flag_rules
from fairbench.campaign.expand import MAX_EXPANDED_VALUES
from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import load_campaign, parse_campaign
from fairbench.campaign.model import Campaign
from fairbench.campaign.source import MAX_CAMPAIGN_BYTES, MAX_CAMPAIGN_NODES
from fairbench.cli.main import main

SOURCE = "campaigns/x.yml"
DEMO = Path(__file__).resolve().parents[2] / "campaigns" / "demo.yml"
NODES_REFUSED = f"more than {MAX_CAMPAIGN_NODES:,} YAML nodes, an alias counted as every node it repeats: "
NODES_REFUSED += "not a campaign file"
TOO_LARGE = f"larger than {MAX_CAMPAIGN_BYTES // 1024} KiB: not a campaign file"


def outcome(text: str, source: str = SOURCE) -> Campaign | list[str]:
    try:
        return parse_campaign(text, source, Path())
    except CampaignError as error:
        return error.messages


def padded(text: str, size: int) -> str:
    """``text`` and a comment: ``size`` bytes of UTF-8 in all."""
    return f"{text}# {'x' * (size - len(text.encode()) - 3)}\n"


def sim_campaign(sim_flags: int, configs: int) -> str:
    """A valid campaign whose configs each repeat ``sim_flags`` flags of common, and have no other."""
    document: dict[str, Any] = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    document["common"] = {"sim": {f"sim-flag-{index}": index for index in range(sim_flags)}}
    document["configs"] = {f"c{index}": {} for index in range(configs)}
    return yaml.safe_dump(document, sort_keys=False)


# --- size -----------------------------------------------------------------------------------------


def test_a_campaign_of_the_size_limit_is_read_and_one_byte_more_is_refused() -> None:
    demo = DEMO.read_text(encoding="utf-8")
    assert isinstance(outcome(padded(demo, MAX_CAMPAIGN_BYTES)), Campaign)
    assert outcome(padded(demo, MAX_CAMPAIGN_BYTES + 1)) == [f"{SOURCE}: {TOO_LARGE}"]


def test_the_size_limit_counts_bytes_not_characters() -> None:
    text = f"# {'é' * (MAX_CAMPAIGN_BYTES // 2)}\n"
    assert len(text) < MAX_CAMPAIGN_BYTES
    assert outcome(text) == [f"{SOURCE}: {TOO_LARGE}"]


def test_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.yml"
    with path.open("wb") as file:
        file.truncate(50 * 2**20)  # sparse: 50 MB of NUL
    with pytest.raises(CampaignError) as caught:
        load_campaign(path)
    assert caught.value.messages == [f"{path}: {TOO_LARGE}"]


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "campaign.yml"
    os.mkfifo(path)
    with pytest.raises(CampaignError) as caught:
        load_campaign(path)
    assert caught.value.messages == [f"{path}: not a regular file"]


# --- YAML nodes and aliases -----------------------------------------------------------------------


def test_a_billion_laughs_is_refused_at_the_alias_that_crosses_the_limit() -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]" for level in range(1, 9)]
    assert outcome("\n".join(lines)) == [f"{SOURCE}:5: {NODES_REFUSED}"]


def test_an_alias_counts_as_every_node_it_repeats() -> None:
    # A list of 99 numbers is 100 nodes: the document is 104 nodes and 100 more for each alias of the list.
    numbers = ", ".join(map(str, range(99)))
    uses = (MAX_CAMPAIGN_NODES - 104) // 100
    fitting = f"x: &x [{numbers}]\nconfigs: [{', '.join(['*x'] * uses)}]\n"
    read = outcome(fitting)
    assert isinstance(read, list) and read[0].startswith(f"{SOURCE}: x: unknown key")
    assert outcome(fitting.replace("[*x", "[*x, *x")) == [f"{SOURCE}:2: {NODES_REFUSED}"]


def test_a_long_list_is_refused_at_the_node_that_crosses_the_limit() -> None:
    crossing = MAX_CAMPAIGN_NODES + 1
    assert outcome("- 1\n" * crossing) == [f"{SOURCE}:{crossing}: {NODES_REFUSED}"]


def test_an_alias_inside_the_node_it_names_is_refused() -> None:
    assert outcome("name: x\nconfigs: &c {tp8: *c}\n") == [
        f"{SOURCE}:2: alias 'c' inside the node it names: the value would hold itself"
    ]


def test_expanded_settings_beyond_the_limit_are_refused() -> None:
    flags = 100
    assert isinstance(outcome(sim_campaign(flags, MAX_EXPANDED_VALUES // flags)), Campaign)
    assert outcome(sim_campaign(flags, MAX_EXPANDED_VALUES // flags + 1)) == [
        f"{SOURCE}: configs: more than {MAX_EXPANDED_VALUES:,} flag values and variables once each config "
        "repeats what it inherits: not a campaign file"
    ]


def test_suggestions_stop_once_their_comparisons_are_spent() -> None:
    document: dict[str, Any] = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    typos = [f"max-running-requestz{letter}" for letter in "abcdefghijklmnopqrstuvwxyz"]
    typos += [f"max-running-requesty{letter}" for letter in "abcdefghijklmnopqrstuvwxyz"]
    document["configs"]["tp8"]["args"] |= dict.fromkeys(typos, 1)
    messages = outcome(yaml.safe_dump(document))
    assert isinstance(messages, list) and len(messages) == len(typos)
    suggested = findings_module._SUGGESTION_COMPARISONS // len(flag_rules._suggested_flags())
    assert suggested < len(typos)
    for message in messages[:suggested]:
        assert message.endswith("unknown SGLang 0.5.23 flag (did you mean 'max-running-requests'?)")
    for message in messages[suggested:]:
        assert message.endswith("unknown SGLang 0.5.23 flag")


# --- the campaign's own path ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ("campaigns/x\nExecStartPre=/bin/evil.yml", "holds '\\n', which ends a line in a systemd unit"),
        ("campaigns/x\r.yml", "holds '\\r', which ends a line in a systemd unit"),
        ("campaigns/caf\udce9.yml", "is not UTF-8 text"),
    ],
    ids=["newline", "carriage-return", "not-utf-8"],
)
def test_the_campaigns_path_must_fit_a_unit_comment(source: str, rule: str) -> None:
    assert outcome(DEMO.read_text(encoding="utf-8"), source) == [f"{source!r}: the campaign's path {rule}"]


def test_a_path_holding_nul_is_refused_before_it_is_opened() -> None:
    with pytest.raises(CampaignError) as caught:
        load_campaign("campaigns/demo\0.yml")
    assert caught.value.messages == [
        "'campaigns/demo\\x00.yml': the campaign's path holds '\\x00', which ends a line in a systemd unit"
    ]


# --- fairbench validate ---------------------------------------------------------------------------


def write_newline_named(directory: Path) -> Path:
    path = directory / "x\ny.yml"
    path.write_bytes(DEMO.read_bytes())
    return path


def write_non_utf8_named(directory: Path) -> Path:
    path = Path(os.fsdecode(os.fsencode(directory) + b"/caf\xe9.yml"))
    path.write_bytes(DEMO.read_bytes())
    return path


def write_large(directory: Path) -> Path:
    path = directory / "large.yml"
    path.write_text(padded(DEMO.read_text(encoding="utf-8"), 2**20), encoding="utf-8")
    return path


def write_garbage(directory: Path) -> Path:
    path = directory / "garbage.bin"
    path.write_bytes(bytes(range(256)) * 4096)
    return path


@pytest.mark.parametrize(
    ("write", "named"),
    [
        (
            write_newline_named,
            lambda path: (
                f"{str(path)!r}: the campaign's path holds '\\n', which ends a line in a systemd unit"
            ),
        ),
        (write_non_utf8_named, lambda path: f"{str(path)!r}: the campaign's path is not UTF-8 text"),
        (write_large, lambda path: f"{path}: {TOO_LARGE}"),
        (write_garbage, lambda path: f"{path}: {TOO_LARGE}"),
    ],
    ids=["newline-in-the-path", "path-not-utf-8", "large-file", "binary-garbage"],
)
def test_validate_ends_a_file_that_is_no_campaign_in_one_line(
    write: Callable[[Path], Path],
    named: Callable[[Path], str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    path = write(tmp_path)
    assert main(["validate", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == named(path) + "\n"
