"""sglang-router's flags judged offline against the router's flag table: each rule's exact message, the
flags fairbench sets itself, and the table against the router's own parser where the router is installed."""

from __future__ import annotations

import argparse
import os
from typing import Any

import pytest

from fairbench.campaign.findings import Findings
from fairbench.campaign.model import ArgValue
from fairbench.campaign.router_flags import (
    ROUTER_REQUIREMENT,
    ROUTER_SET_BY_FAIRBENCH,
    check_router_arg,
    router_flag_table,
)
from fairbench.campaign.sglang_flags import FlagTable, check_flag, flags_by_spelling
from fairbench.sim.args import CONVERTERS

SOURCE = "campaigns/x.yml"
WHERE = "configs.pd.router"
SERVERS = "rendered by fairbench from the config's prefill and decode servers"


def errors_of(key: str, value: ArgValue) -> list[str]:
    findings = Findings(SOURCE)
    check_router_arg(findings, f"{WHERE}.{key}", key, value)
    return findings.errors


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("policy", "round_robin"),
        ("cache-threshold", 0.5),
        ("max-concurrent-requests", -1),
        ("dp-aware", True),
        ("cors-allowed-origins", ("http://a:3000", "http://b:3000")),
        ("prometheus-duration-buckets", (0.1, 1, 10)),
        ("tool-call-parser", "kimik2"),
    ],
)
def test_a_known_flag_with_a_good_value_passes(key: str, value: ArgValue) -> None:
    assert errors_of(key, value) == []


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        pytest.param(
            "policy",
            "round_robbin",
            "must be one of cache_aware, manual, power_of_two, random, round_robin, got 'round_robbin'",
            id="choice",
        ),
        pytest.param(
            "polcy",
            "cache_aware",
            "is not a flag of sglang-router 0.3.2 (did you mean 'policy'?)",
            id="unknown-did-you-mean",
        ),
        pytest.param("prefill", "http://p:8000", SERVERS, id="rendered-prefill"),
        pytest.param("host", "0.0.0.0", "set per host by the serving role, not by the campaign", id="host"),
        pytest.param("dp-aware", 1, "must be true or false, got 1", id="bare-flag-number"),
        pytest.param("queue-size", "lots", "must be an integer, got 'lots'", id="int-type"),
        pytest.param("cache-threshold", "high", "must be a number, got 'high'", id="float-type"),
        pytest.param("policy", ("random",), "takes one value, got a list", id="list-for-one-value"),
        pytest.param("policy", True, "takes one value, got true", id="true-for-a-value"),
        pytest.param(
            "api-key",
            "-k",
            "'-k' starts with '-': sglang-router's parser would take it for a flag",
            id="leading-dash",
        ),
    ],
)
def test_each_mistake_is_one_error(key: str, value: ArgValue, rule: str) -> None:
    assert errors_of(key, value) == [f"{SOURCE}: {WHERE}.{key}: {rule}"]


def test_an_item_of_a_list_is_judged_at_its_index() -> None:
    assert errors_of("prometheus-duration-buckets", (0.1, "slow")) == [
        f"{SOURCE}: {WHERE}.prometheus-duration-buckets[1]: must be a number, got 'slow'"
    ]


def test_every_flag_fairbench_sets_is_a_flag_of_the_router() -> None:
    """A rejection must name a real flag, or a renamed one would slip through under its new name."""
    flags = flags_by_spelling(router_flag_table()["options"])
    assert sorted(set(ROUTER_SET_BY_FAIRBENCH) - set(flags)) == []


def test_the_append_flags_fairbench_renders_are_judged_as_the_router_parses_them() -> None:
    """``--prefill URL [PORT]`` and ``--decode URL`` (argparse's append), through the shared judge itself:
    the campaign refuses them, the table still describes them rightly."""
    flags = flags_by_spelling(router_flag_table()["options"])
    table = FlagTable(flags=flags, suggestions=(), unknown="unknown", parser="sglang-router's parser")
    findings = Findings(SOURCE)
    check_flag(findings, "prefill", "prefill", ("http://p:8000", 9000), table)
    check_flag(findings, "decode", "decode", "http://d:8000", table)
    check_flag(findings, "decode[]", "decode", ("http://d:8000", "http://e:8000"), table)
    assert findings.errors == [f"{SOURCE}: decode[]: takes one value, got a list"]


def test_the_tables_converters_are_the_checks() -> None:
    types = {option["type"] for option in router_flag_table()["options"]} - {None}
    assert sorted(types - set(CONVERTERS)) == []


def test_the_table_is_of_the_pinned_router() -> None:
    assert f"sglang-router=={router_flag_table()['sglang_router_version']}" == ROUTER_REQUIREMENT


_KINDS = {
    argparse._StoreAction: "store",
    argparse._StoreTrueAction: "store_true",
    argparse._AppendAction: "append",
}
"""argparse's actions by the flag table's kinds, written apart from tools/gen_router_flags.py, which made
the table: a fault of the generator shows here."""


def _as_recorded(action: argparse.Action) -> dict[str, Any]:
    kind = _KINDS[type(action)]
    return {
        "option_strings": action.option_strings,
        "dest": action.dest,
        "action": kind,
        "nargs": action.nargs if kind != "store_true" else None,
        "const": action.const,
        "default": action.default,
        "type": None if action.type is None else getattr(action.type, "__name__", None),
        "choices": None if action.choices is None else sorted(action.choices),
        "required": action.required,
    }


def test_the_recorded_table_is_the_installed_routers_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the router is importable (it is no dependency of fairbench), its parser, read in an empty
    environment as the generator reads it, gives the recorded table option for option."""
    router_args = pytest.importorskip("sglang_router.router_args")
    assert pytest.importorskip("sglang_router").__version__ == router_flag_table()["sglang_router_version"]
    for name in list(os.environ):
        monkeypatch.delenv(name)
    parser = argparse.ArgumentParser()
    router_args.RouterArgs.add_cli_args(parser, use_router_prefix=False)
    installed = sorted(
        (_as_recorded(action) for action in parser._actions if not isinstance(action, argparse._HelpAction)),
        key=lambda option: option["option_strings"],
    )
    assert router_flag_table()["options"] == installed
