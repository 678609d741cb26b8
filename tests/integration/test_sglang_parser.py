"""SGLang's own parser judges every shipped campaign (``fairbench validate --sglang-parser``) and the
flag table bundled with fairbench.

The parser needs SGLang 0.5.23, not a GPU: the tests' SGLang venv (tests/support/real_sglang.py), the one
the real-server tests use, built once for all of them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import real_sglang

from fairbench.campaign import sglang_flags as flag_rules
from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import load_campaign, parse_campaign
from fairbench.campaign.model import render_flags
from fairbench.campaign.sglang_parser import campaign_argvs, parse_argvs, venv_python
from fairbench.cli import validate as campaign_cli
from fairbench.sim.args import flag_table

# With the real-SGLang tests, in one pytest worker: the venv they all need is built (or waited for) once,
# by one worker, while the other runs the rest.
pytestmark = pytest.mark.xdist_group("real_sglang")

REPO = Path(__file__).resolve().parents[2]
CAMPAIGNS = sorted((REPO / "campaigns").glob("*.yml"))


@pytest.fixture(scope="module")
def sglang_venv() -> Path:
    real_sglang.ensure_venv()
    return real_sglang.VENV


Verdicts = dict[str, dict[str, str | None]]
"""SGLang's parser's verdicts by group (a campaign's file name, ``raw``, ``offline``), then name: None when it
accepts the argv, else its error."""

REMOVED_AND_AMBIGUOUS_BASE = ["--model-path", "moonshotai/Kimi-K2.6", "--tp-size", "8"]
REMOVED_AND_AMBIGUOUS = {
    "enable-ep-moe": [*REMOVED_AND_AMBIGUOUS_BASE, "--enable-ep-moe"],
    "cuda-graph-max-bs": [*REMOVED_AND_AMBIGUOUS_BASE, "--cuda-graph-max-bs", "256"],
    "ep-size": [*REMOVED_AND_AMBIGUOUS_BASE, "--ep-size", "8"],
}
"""Raw argvs: the campaign model itself refuses enable-ep-moe."""


@pytest.fixture(scope="module")
def verdicts(sglang_venv: Path) -> Verdicts:
    """SGLang's verdict on every argv the tests below give it, in one run of its parser (importing SGLang
    takes half a minute on a CPU): each shipped campaign's servers, the raw argvs, the offline cases."""
    groups = {
        **{path.name: campaign_argvs(load_campaign(str(path))) for path in CAMPAIGNS},
        "raw": REMOVED_AND_AMBIGUOUS,
        "offline": {
            name: _offline_argv(args) for name, args in {**OFFLINE_ACCEPTS, **OFFLINE_REJECTS}.items()
        },
    }
    argvs = {f"{group}/{name}": argv for group, members in groups.items() for name, argv in members.items()}
    judged = parse_argvs(sglang_venv, argvs)
    return {group: {name: judged[f"{group}/{name}"] for name in members} for group, members in groups.items()}


@pytest.mark.parametrize("path", CAMPAIGNS, ids=[path.name for path in CAMPAIGNS])
def test_every_server_of_every_campaign_parses(verdicts: Verdicts, path: Path) -> None:
    campaign = load_campaign(str(path))
    results = verdicts[path.name]
    # One argv per config, or one per server of a disaggregated config, by its key path.
    expected: set[str] = set()
    for name, config in campaign.configs.items():
        servers = () if config.disaggregation is None else config.disaggregation.servers
        expected |= {f"{name}.disaggregation.{server.role} ({server.name})" for server in servers} or {name}
    assert set(results) == expected
    assert {name: error for name, error in results.items() if error is not None} == {}


def test_a_disaggregated_configs_servers_are_judged_with_their_roles_flags(verdicts: Verdicts) -> None:
    """The demo's pd: its prefill and decode servers are launched, not the config's own argv."""
    argvs = campaign_argvs(load_campaign(str(REPO / "campaigns" / "demo.yml")))
    servers = {key: argv for key, argv in argvs.items() if key.startswith("pd")}
    assert list(servers) == ["pd.disaggregation.prefill (prefill-0)", "pd.disaggregation.decode (decode-0)"]
    prefill, decode = servers.values()
    for argv, role, base_gpu in ((prefill, "prefill", "0"), (decode, "decode", "8")):
        values = dict(itertools.pairwise(argv))
        assert (values["--disaggregation-mode"], values["--base-gpu-id"]) == (role, base_gpu)
    assert not any(word.startswith("--sim-") for word in prefill + decode)
    assert [verdicts["demo.yml"][key] for key in servers] == [None, None]


def test_removed_and_ambiguous_flags_are_rejected(verdicts: Verdicts) -> None:
    results = verdicts["raw"]
    assert results["enable-ep-moe"] is not None
    assert "unrecognized arguments: --enable-ep-moe" in results["enable-ep-moe"]
    assert results["cuda-graph-max-bs"] is not None
    assert "ambiguous option: --cuda-graph-max-bs" in results["cuda-graph-max-bs"]
    assert results["ep-size"] is None


def validate_args(*argv: str) -> argparse.Namespace:
    """``fairbench validate``'s arguments, as its own parser reads them."""
    parser = argparse.ArgumentParser()
    campaign_cli.configure(parser)
    return parser.parse_args(list(argv))


def test_validate_cli_fails_for_a_campaign_using_enable_ep_moe(
    sglang_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fairbench validate --sglang-parser` on the shipped campaign with enable-ep-moe: that config fails, the
    others pass (the shipped campaign as it is passes above). The model's own rules against enable-ep-moe
    (its rejection, and the flag table that lacks it) are lifted here, so that SGLang's parser is the
    judge."""
    shipped = REPO / "campaigns" / "kimi-k2.6-pcie.yml"
    monkeypatch.delitem(flag_rules.REJECTED_ARGS, "enable-ep-moe")
    table = flag_rules.sglang_flags()
    monkeypatch.setitem(table, "enable-ep-moe", table["enable-eplb"])  # a bare flag, as it was
    bad = tmp_path / "ep-moe.yml"
    bad.write_text(
        shipped.read_text().replace(
            "ep8:       {args: {tp-size: 8, ep-size: 8}}",
            "ep8:       {args: {tp-size: 8, ep-size: 8, enable-ep-moe: true}}",
        )
    )
    assert campaign_cli.run(validate_args(str(bad), "--sglang-parser", str(sglang_venv))) == 1
    out, err = capsys.readouterr()
    assert "sglang parser: tp8: ok" in out and "sglang parser: ep8: ok" not in out
    assert (
        "configs.ep8: SGLang's parser: sglang.launch_server: error: unrecognized arguments: --enable-ep-moe"
        in err
    )
    assert "configs.tp8:" not in err


# Launch arguments the offline check (the bundled flag table) accepts, and ones it rejects: SGLang's own
# parser must give each the same verdict.
OFFLINE_ACCEPTS: dict[str, dict[str, Any]] = {
    "typical": {"tp-size": 8, "mem-fraction-static": 0.88, "trust-remote-code": True},
    "choices": {"schedule-policy": "lpm", "attention-backend": "triton", "log-requests-level": 3},
    "negative-numbers": {"random-seed": -1, "schedule-conservativeness": -0.5},
    "suffixed-int": {"context-length": "25.6k"},
    "list": {"cuda-graph-bs-decode": [1, 2, 4, 8]},
    "optional-values-left-out": {"model-checksum": True, "lora-paths": True},
    "boolean-optional": {"no-enable-tf32-matmul": True},
    "alias": {"enable-hicache": True},
    "retired-flag": {"monokernel-backend": "amd"},
    "leading-dash-with-a-space": {"served-model-name": "-kimi k2"},
}
OFFLINE_REJECTS: dict[str, dict[str, Any]] = {
    "unknown-flag": {"tp-szie": 8},
    "float-type": {"mem-fraction-static": "lots"},
    "int-type": {"chunked-prefill-size": 8.5},
    "suffixed-int-type": {"context-length": "1.5Ki"},
    "bare-flag-with-a-value": {"trust-remote-code": "yes"},
    "choice": {"schedule-policy": "fastest"},
    "integer-choice": {"log-requests-level": 4},
    "list-for-one-value": {"mem-fraction-static": [0.8, 0.9]},
    "no-value": {"cuda-graph-bs-decode": True},
    "list-item-type": {"cuda-graph-bs-decode": [1, "two"]},
    "leading-dash": {"served-model-name": "-kimi"},
    "negative-exponent": {"schedule-conservativeness": -0.00001},
    "removed-backend": {"cuda-graph-backend-decode": "tc_piecewise"},
}


def _offline_errors(args: dict[str, Any]) -> list[str]:
    """The campaign model's errors for one config with ``args``: its verdict without SGLang."""
    document = {
        "name": "agree",
        "engine": "sglang",
        "model": "moonshotai/Kimi-K2.6",
        "configs": {"c": {"args": args}},
        "workload": {
            "api": "completions",
            "dataset": "random-ids",
            "input_len": 128,
            "output_len": 64,
            "concurrency": [1],
            "prompts_per_level": 16,
            "warmup": 0,
        },
    }
    try:
        parse_campaign(yaml.safe_dump(document), "agree.yml", Path())
    except CampaignError as exc:
        return exc.messages
    return []


def _offline_argv(args: dict[str, Any]) -> list[str]:
    """The argv a config with ``args`` renders (YAML's lists as the campaign model holds them: tuples)."""
    values = {key: tuple(value) if isinstance(value, list) else value for key, value in args.items()}
    return ["--model-path", "m", *render_flags(values)]


def test_the_offline_flag_check_agrees_with_sglangs_parser(
    verdicts: Verdicts,
) -> None:
    cases = {**OFFLINE_ACCEPTS, **OFFLINE_REJECTS}
    offline = {name: _offline_errors(args) for name, args in cases.items()}
    assert {name: errors for name, errors in offline.items() if name in OFFLINE_ACCEPTS and errors} == {}
    assert [name for name in OFFLINE_REJECTS if not offline[name]] == []
    sglang = verdicts["offline"]
    assert {name: sglang[name] for name in OFFLINE_ACCEPTS if sglang[name] is not None} == {}
    assert [name for name in OFFLINE_REJECTS if sglang[name] is None] == []


# Runs inside the SGLang venv: every option of ServerArgs.add_cli_args as argparse holds it, and every
# ServerArgs field with its default, as plain JSON (sets sorted, other objects as their str). Written apart
# from tools/gen_sglang_flags.py, which made the table: a fault of the generator shows here.
_REAL_FLAGS_SCRIPT = r"""
import argparse, json, sys
import msgspec, sglang
from sglang.srt.server_args import ServerArgs

def plain(value):
    if isinstance(value, (set, frozenset)):
        return sorted(plain(item) for item in value)
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)

parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
flags = [
    {
        "option_strings": action.option_strings,
        "dest": action.dest,
        "nargs": action.nargs,
        # A retired flag's value-taking action keeps what it stores in const_value.
        "const": plain(getattr(action, "const_value", action.const)),
        "default": plain(action.default),
        "type": None if action.type is None else getattr(action.type, "__name__", str(action.type)),
        "choices": None if action.choices is None else plain(action.choices),
        "required": action.required,
        "boolean_optional": isinstance(action, argparse.BooleanOptionalAction),
    }
    for action in parser._actions
    if not isinstance(action, argparse._HelpAction)
]
fields = {}
for field in msgspec.structs.fields(ServerArgs):
    if field.default_factory is not msgspec.NODEFAULT:
        fields[field.name] = plain(field.default_factory())
    else:
        fields[field.name] = None if field.default is msgspec.NODEFAULT else plain(field.default)
json.dump({"version": sglang.__version__, "flags": flags, "fields": fields}, sys.stdout)
"""
VALUED_KINDS = ("store", "store_const_value")
"""The table's kinds of a flag followed by values; the others are switches, which argparse gives nargs 0."""


def _as_argparse_holds_it(option: dict[str, Any]) -> dict[str, Any]:
    """A flag of the bundled table in the terms of _REAL_FLAGS_SCRIPT."""
    return {
        "option_strings": option["option_strings"],
        "dest": option["dest"],
        "nargs": option["nargs"] if option["action"] in VALUED_KINDS else 0,
        "const": option["const"],
        "default": option["default"],
        "type": option["type"],
        "choices": option["choices"],
        "required": option["required"],
        "boolean_optional": option["action"] == "boolean_optional",
    }


def _by_first_spelling(flags: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {flag["option_strings"][0]: flag for flag in flags}


def test_the_bundled_flag_table_is_sglangs_parser(sglang_venv: Path) -> None:
    """Campaign validation and ``fairbench sim`` read the bundled table: it must hold every flag of
    SGLang's parser and no other, each with SGLang's spellings, arity, type, choices and default."""
    script = [str(venv_python(sglang_venv)), "-c", _REAL_FLAGS_SCRIPT]
    done = subprocess.run(script, capture_output=True, text=True, timeout=300, check=True)
    real = json.loads(done.stdout)
    table = flag_table()
    assert table["sglang_version"] == real["version"]
    real_flags = _by_first_spelling(real["flags"])
    table_flags = _by_first_spelling([_as_argparse_holds_it(option) for option in table["options"]])
    real_spellings = {spelling for flag in real["flags"] for spelling in flag["option_strings"]}
    table_spellings = {spelling for option in table["options"] for spelling in option["option_strings"]}
    differences = {
        name: {
            key: (value, real_flags[name][key])
            for key, value in flag.items()
            if real_flags[name][key] != value
        }
        for name, flag in table_flags.items()
        if name in real_flags and flag != real_flags[name]
    }
    assert {
        "SGLang's flags the table lacks": sorted(real_spellings - table_spellings),
        "the table's flags SGLang lacks": sorted(table_spellings - real_spellings),
        "(table, SGLang) where they differ": differences,
    } == {
        "SGLang's flags the table lacks": [],
        "the table's flags SGLang lacks": [],
        "(table, SGLang) where they differ": {},
    }
    assert len(table_flags) == len(table["options"]) == len(real["flags"])
    # /server_info lists these fields in this order, with these defaults for the flags not given.
    assert list(table["fields"]) == list(real["fields"])
    assert {
        name: (default, real["fields"][name])
        for name, default in table["fields"].items()
        if real["fields"][name] != default
    } == {}
