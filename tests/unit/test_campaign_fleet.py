"""The campaign's fleet keys: placement, accept_host_differences, isolated_hosts, and each config's nodes and
hosts; their defaults, exact messages, inheritance through extends, their place in to_json, and the schema's
agreement."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.fleet_facts import FACTS
from fairbench.campaign.load import load_campaign, parse_campaign
from fairbench.campaign.model import (
    DEFAULT_ISOLATED_HOSTS,
    DEFAULT_NODES,
    DEFAULT_PLACEMENT,
    PLACEMENTS,
    Campaign,
)
from fairbench.campaign.schema import campaign_schema
from fairbench.measure.bounds import NODES

SOURCE = "campaigns/fleet.yml"
CAMPAIGNS = Path(__file__).resolve().parents[2] / "campaigns"
VALIDATOR = jsonschema.Draft202012Validator(campaign_schema())

VALID: dict[str, Any] = {
    "name": "fleet",
    "engine": "sglang",
    "model": "moonshotai/Kimi-K2.6",
    "common": {"args": {"trust-remote-code": True}},
    "configs": {"tp8": {"args": {"tp-size": 8}}, "tp8-ll": {"extends": "tp8", "env": {"NCCL_PROTO": "LL"}}},
    "workload": {
        "api": "completions",
        "dataset": "random-ids",
        "input_len": 128,
        "output_len": 64,
        "concurrency": [1, 4],
        "prompts_per_level": 16,
        "warmup": 0,
    },
}


def document(top: dict[str, Any] | None = None, **configs: dict[str, Any]) -> dict[str, Any]:
    """VALID with top-level keys set and configs' entries updated (a config VALID lacks is added)."""
    result = copy.deepcopy(VALID)
    result.update(top or {})
    for name, entry in configs.items():
        result["configs"].setdefault(name, {}).update(entry)
    return result


def parse(doc: object) -> Campaign:
    return parse_campaign(yaml.safe_dump(doc, sort_keys=False), SOURCE, Path())


def errors_of(doc: object) -> list[str]:
    with pytest.raises(CampaignError) as caught:
        parse(doc)
    return caught.value.messages


def only_error(doc: object) -> str:
    messages = errors_of(doc)
    assert len(messages) == 1, messages
    return messages[0]


# --- defaults and plain data ----------------------------------------------------------------------


def test_a_campaign_without_fleet_keys_spreads_one_host_servers_over_the_play_pool() -> None:
    campaign = parse(VALID)
    assert (campaign.placement, campaign.accept_host_differences) == (DEFAULT_PLACEMENT, ())
    assert DEFAULT_PLACEMENT == "spread" == PLACEMENTS[0]
    for config in campaign.configs.values():
        assert (config.nodes, config.gpus_per_node, config.hosts) == (DEFAULT_NODES, 8, None)
    data = campaign.to_json()
    assert (data["placement"], data["accept_host_differences"]) == ("spread", [])
    assert {key: data["configs"]["tp8"][key] for key in ("nodes", "gpus_per_node", "hosts")} == {
        "nodes": 1,
        "gpus_per_node": 8,
        "hosts": None,
    }


def test_the_fleet_keys_reach_to_json_as_plain_data() -> None:
    doc = document(
        {"placement": "spread", "accept_host_differences": ["driver", "cpu_model"]},
        tp8={"nodes": 2, "hosts": "h200_pool"},
    )
    data = parse(doc).to_json()
    assert json.loads(json.dumps(data)) == data
    assert data["placement"] == "spread"
    assert data["accept_host_differences"] == ["driver", "cpu_model"]  # the file's order
    tp8 = data["configs"]["tp8"]
    assert (tp8["gpus"], tp8["nodes"], tp8["gpus_per_node"], tp8["hosts"]) == (8, 2, 4, "h200_pool")
    assert tp8["argv"] == ["--model-path", "moonshotai/Kimi-K2.6", "--tp-size", "8", "--trust-remote-code"]


def test_isolated_hosts_is_false_unless_declared_and_campaign_json_holds_it_only_when_true() -> None:
    assert parse(VALID).isolated_hosts is DEFAULT_ISOLATED_HOSTS is False
    assert "isolated_hosts" not in parse(VALID).to_json()  # a run recorded before the key resumes
    assert "isolated_hosts" not in parse(document({"isolated_hosts": False})).to_json()
    declared = parse(document({"isolated_hosts": True}))
    assert declared.isolated_hosts is True and declared.to_json()["isolated_hosts"] is True


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_each_placement_is_taken(placement: str) -> None:
    assert parse(document({"placement": placement})).to_json()["placement"] == placement


@pytest.mark.parametrize(
    ("args", "nodes", "gpus_per_node"),
    [
        ({"tp-size": 8}, 2, 4),
        ({"tp-size": 16}, 4, 4),
        ({"tp-size": 8, "pp-size": 2}, 2, 8),
        # dp-size under enable-dp-attention counts attention-DP groups, which may span the hosts.
        ({"tp-size": 8, "dp-size": 8, "enable-dp-attention": True}, 2, 4),
        ({"tp-size": 8, "attn-dp-size": 4}, 2, 4),
        ({"tp-size": 2, "dp-size": 4}, 1, 8),
        ({"tp-size": 8}, 8, 1),
        ({"tp-size": 8}, 1, 8),
        # SGLang on the CPU occupies no GPU on any of its hosts.
        ({"device": "cpu", "tp-size": 2}, 2, 0),
        ({"device": "cpu"}, 64, 0),
    ],
)
def test_a_servers_gpus_are_shared_by_its_hosts(args: dict[str, Any], nodes: int, gpus_per_node: int) -> None:
    config = parse(document(c={"args": args, "nodes": nodes})).configs["c"]
    assert (config.nodes, config.gpus_per_node, config.gpus) == (nodes, gpus_per_node, gpus_per_node * nodes)


# --- one rule, one exact message ------------------------------------------------------------------

KNOWN_FACTS = ", ".join(FACTS)

RULES = [
    pytest.param(
        document({"placement": "round-robin"}),
        "placement: must be one of spread, every-host, got 'round-robin'",
        id="placement-choice",
    ),
    pytest.param(
        document({"placement": ["spread"]}),
        "placement: must be one of spread, every-host, got a list",
        id="placement-string",
    ),
    pytest.param(
        document({"accept_host_differences": "driver"}),
        "accept_host_differences: must be a list of host facts, got 'driver'",
        id="accept-is-a-list",
    ),
    pytest.param(
        document({"accept_host_differences": ["driver", "kernel"]}),
        f"accept_host_differences[1]: unknown host fact 'kernel'; expected one of {KNOWN_FACTS}",
        id="accept-unknown-fact",
    ),
    pytest.param(
        document({"accept_host_differences": ["drivers"]}),
        f"accept_host_differences[0]: unknown host fact 'drivers'; expected one of {KNOWN_FACTS} "
        "(did you mean 'driver'?)",
        id="accept-did-you-mean",
    ),
    pytest.param(
        document({"accept_host_differences": [3]}),
        f"accept_host_differences[0]: unknown host fact 3; expected one of {KNOWN_FACTS}",
        id="accept-not-a-string",
    ),
    pytest.param(
        document({"accept_host_differences": ["cuda", "nccl", "cuda"]}),
        "accept_host_differences[2]: 'cuda' is listed twice",
        id="accept-duplicate",
    ),
    pytest.param(
        document(tp8={"nodes": 0}),
        "configs.tp8.nodes: must be an integer from 1 to 64 hosts, got 0",
        id="nodes-positive",
    ),
    pytest.param(
        document(tp8={"nodes": 65}),
        "configs.tp8.nodes: must be an integer from 1 to 64 hosts, got 65",
        id="nodes-bounded",
    ),
    pytest.param(
        document(tp8={"nodes": "2"}),
        "configs.tp8.nodes: must be an integer from 1 to 64 hosts, got '2'",
        id="nodes-integer",
    ),
    pytest.param(
        document(tp8={"nodes": True}),
        "configs.tp8.nodes: must be an integer from 1 to 64 hosts, got true",
        id="nodes-not-a-boolean",
    ),
    pytest.param(
        document(tp8={"nodes": 2.0}),
        "configs.tp8.nodes: must be an integer from 1 to 64 hosts, got 2.0",
        id="nodes-not-a-float",
    ),
    pytest.param(
        document(tp8={"nodes": 3}),
        "configs.tp8.nodes: 3 does not divide the server's 8 GPUs (tp-size 8): each of its hosts runs the "
        "same number",
        id="nodes-divide-gpus",
    ),
    pytest.param(
        document(c={"args": {"tp-size": 2, "pp-size": 3}, "nodes": 4}),
        "configs.c.nodes: 4 does not divide the server's 6 GPUs (tp-size 2 x pp-size 3): each of its hosts "
        "runs the same number",
        id="nodes-divide-gpus-formula",
    ),
    pytest.param(
        document(c={"args": {"tp-size": 4, "dp-size": 2}, "nodes": 2}),
        "configs.c.nodes: a server over 2 hosts cannot hold dp-size 2 replicas: SGLang runs no multi-node "
        "data-parallel replicas (use attn-dp-size across the hosts)",
        id="no-dp-replicas-over-hosts",
    ),
    pytest.param(
        document(c={"nodes": 2}),
        "configs.c.nodes: 2 does not divide the server's 1 GPUs (tp-size 1): each of its hosts runs the "
        "same number",
        id="nodes-more-than-gpus",
    ),
    pytest.param(
        document({"placement": "every-host"}, tp8={"nodes": 2}),
        "configs.tp8.nodes: a server over 2 hosts needs placement spread: every-host would run it on every "
        "host",
        id="every-host-single-host-servers",
    ),
    pytest.param(
        document(tp8={"hosts": "gpu-hosts"}),
        "configs.tp8.hosts: must name an inventory group (letters, digits and '_', starting with a letter "
        "or '_') or be null for the campaign's pool, got 'gpu-hosts'",
        id="hosts-group-name",
    ),
    pytest.param(
        document(tp8={"hosts": "8gpu"}),
        "configs.tp8.hosts: must name an inventory group (letters, digits and '_', starting with a letter "
        "or '_') or be null for the campaign's pool, got '8gpu'",
        id="hosts-starts-with-a-letter",
    ),
    pytest.param(
        document(tp8={"hosts": ""}),
        "configs.tp8.hosts: must name an inventory group (letters, digits and '_', starting with a letter "
        "or '_') or be null for the campaign's pool, got ''",
        id="hosts-empty",
    ),
    pytest.param(
        document(tp8={"hosts": ["a", "b"]}),
        "configs.tp8.hosts: must name an inventory group (letters, digits and '_', starting with a letter "
        "or '_') or be null for the campaign's pool, got a list",
        id="hosts-one-group",
    ),
    pytest.param(
        document({"isolated_hosts": "yes"}),
        "isolated_hosts: must be true or false, got 'yes'",
        id="isolated-hosts-a-boolean",
    ),
    pytest.param(
        document({"isolated_hosts": 1}),
        "isolated_hosts: must be true or false, got 1",
        id="isolated-hosts-not-a-number",
    ),
    pytest.param(
        document({"common": {"args": {"trust-remote-code": True}, "nodes": 2}}),
        "common.nodes: is a config's key, not common's: set it in the configs it places (a config passes it "
        "on to those that extend it)",
        id="nodes-not-in-common",
    ),
    pytest.param(
        document({"common": {"hosts": "h200"}}),
        "common.hosts: is a config's key, not common's: set it in the configs it places (a config passes it "
        "on to those that extend it)",
        id="hosts-not-in-common",
    ),
]


@pytest.mark.parametrize(("doc", "message"), RULES)
def test_each_fleet_rule_has_its_exact_message(doc: object, message: str) -> None:
    assert only_error(doc) == f"{SOURCE}: {message}"


@pytest.mark.parametrize("flag", ["nnodes", "node-rank", "dist-init-addr", "nccl-init-addr"])
def test_the_multi_node_flags_are_refused_in_args_for_nodes(flag: str) -> None:
    value = "10.0.0.1:5000" if "addr" in flag else 2
    for where in ("common", "configs.tp8"):
        doc = copy.deepcopy(VALID)
        node = doc
        for key in where.split("."):
            node = node.setdefault(key, {})
        node.setdefault("args", {})[flag] = value
        assert only_error(doc) == (
            f"{SOURCE}: {where}.args.{flag}: rendered per host by fairbench for a server over several hosts: "
            "use the config's nodes: instead"
        )


def test_every_mistake_of_the_fleet_keys_is_reported_at_once() -> None:
    doc = document({"placement": "all", "accept_host_differences": ["gpu"]}, tp8={"nodes": 0, "hosts": "a.b"})
    assert [message.split(": ")[1] for message in errors_of(doc)] == [
        "configs.tp8.nodes",
        "configs.tp8.hosts",
        "placement",
        "accept_host_differences[0]",
    ]


def test_every_host_takes_servers_of_one_host_and_spread_takes_any() -> None:
    one_host = document({"placement": "every-host"}, tp8={"nodes": 1, "hosts": "h200"})
    assert parse(one_host).configs["tp8"].nodes == 1
    over_two = document({"placement": "spread"}, tp8={"nodes": 2})
    assert parse(over_two).configs["tp8-ll"].nodes == 2


def test_a_cpu_server_over_several_hosts_needs_placement_spread_too() -> None:
    doc = document({"placement": "every-host"}, c={"args": {"device": "cpu"}, "nodes": 2})
    assert only_error(doc) == (
        f"{SOURCE}: configs.c.nodes: a server over 2 hosts needs placement spread: every-host would run it "
        "on every host"
    )


def test_every_known_fact_may_be_accepted() -> None:
    campaign = parse(document({"accept_host_differences": list(FACTS)}))
    assert campaign.accept_host_differences == tuple(FACTS)


@pytest.mark.parametrize("group", ["h200", "gpu_hosts", "_spare", "Pool2", "a"])
def test_a_config_may_be_pinned_to_a_group(group: str) -> None:
    assert parse(document(tp8={"hosts": group})).configs["tp8"].hosts == group


def test_hosts_null_is_the_campaigns_pool() -> None:
    assert parse(document(tp8={"hosts": None})).configs["tp8"].hosts is None


# --- inheritance through extends ------------------------------------------------------------------


def test_a_child_of_a_pinned_multi_node_config_is_one_too() -> None:
    doc = document(
        tp8={"nodes": 2, "hosts": "h200"},
        **{"tp8-ll-eplb": {"extends": "tp8-ll", "args": {"ep-size": 8, "enable-eplb": True}}},
    )
    configs = parse(doc).configs
    for name in ("tp8", "tp8-ll", "tp8-ll-eplb"):
        assert (configs[name].nodes, configs[name].gpus_per_node, configs[name].hosts) == (2, 4, "h200")


def test_a_child_sets_its_own_nodes_and_hosts() -> None:
    children: dict[str, dict[str, Any]] = {
        "tp8-one": {"extends": "tp8", "nodes": 1, "hosts": "b200"},
        "tp8-pool": {"extends": "tp8", "hosts": None},
        "tp8-pool-ll": {"extends": "tp8-pool"},
    }
    doc = document(tp8={"nodes": 2, "hosts": "h200"}, **children)
    configs = parse(doc).configs
    assert (configs["tp8-one"].nodes, configs["tp8-one"].gpus_per_node, configs["tp8-one"].hosts) == (
        1,
        8,
        "b200",
    )
    # null returns a child of a pinned config to the pool; its nodes are still inherited.
    assert (configs["tp8-pool"].nodes, configs["tp8-pool"].hosts) == (2, None)
    assert (configs["tp8-pool-ll"].nodes, configs["tp8-pool-ll"].hosts) == (2, None)


def test_a_childs_args_are_judged_against_the_nodes_it_inherits() -> None:
    doc = document(tp8={"nodes": 2}, **{"tp3": {"extends": "tp8", "args": {"tp-size": 3}}})
    assert only_error(doc) == (
        f"{SOURCE}: configs.tp3.nodes: 2 does not divide the server's 3 GPUs (tp-size 3): each of its hosts "
        "runs the same number"
    )


def test_a_nodes_problem_is_blamed_on_the_config_that_has_it_first() -> None:
    doc = document(
        {"placement": "every-host"},
        tp8={"nodes": 3},
        **{"tp8-ll-2": {"extends": "tp8-ll", "env": {"NCCL_DEBUG": "INFO"}}},
    )
    assert [message.split(": ")[1] for message in errors_of(doc)] == [
        "configs.tp8.nodes",
        "configs.tp8.nodes",
    ]


def test_nodes_and_hosts_follow_a_chain_written_in_any_order() -> None:
    doc = copy.deepcopy(VALID)
    doc["configs"] = {
        "leaf": {"extends": "mid"},
        "mid": {"extends": "root", "hosts": "h200"},
        "root": {"args": {"tp-size": 4}, "nodes": 4},
    }
    configs = parse(doc).configs
    assert [(c.nodes, c.gpus_per_node, c.hosts) for c in configs.values()] == [
        (4, 1, "h200"),
        (4, 1, "h200"),
        (4, 1, None),
    ]


# --- the schema -----------------------------------------------------------------------------------


def schema_error_paths(doc: object) -> list[list[str | int]]:
    return [list(error.absolute_path) for error in VALIDATOR.iter_errors(doc)]


def loader_error_paths(doc: object) -> list[str]:
    try:
        parse(doc)
    except CampaignError as error:
        return [message.split(": ")[1] for message in error.messages]
    return []


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (document({"placement": "round-robin"}), ["placement"]),
        (document({"accept_host_differences": "driver"}), ["accept_host_differences"]),
        (document({"accept_host_differences": ["kernel"]}), ["accept_host_differences", 0]),
        (document({"accept_host_differences": ["cuda", "cuda"]}), ["accept_host_differences"]),
        (document({"isolated_hosts": "yes"}), ["isolated_hosts"]),
        (document(tp8={"nodes": NODES.low - 1}), ["configs", "tp8", "nodes"]),
        (document(tp8={"nodes": NODES.high + 1}), ["configs", "tp8", "nodes"]),
        (document(tp8={"nodes": "2"}), ["configs", "tp8", "nodes"]),
        (document(tp8={"hosts": "gpu-hosts"}), ["configs", "tp8", "hosts"]),
        (document(tp8={"hosts": 5}), ["configs", "tp8", "hosts"]),
        (document({"common": {"nodes": 2}}), ["common"]),
        (document(tp8={"args": {"tp-size": 8, "nnodes": 2}}), ["configs", "tp8", "args"]),
    ],
)
def test_the_schema_refuses_what_the_loader_refuses_at_the_same_key(
    doc: object, path: list[str | int]
) -> None:
    assert loader_error_paths(doc)
    assert path in schema_error_paths(doc), schema_error_paths(doc)


def test_the_schema_takes_every_fleet_key_the_loader_takes() -> None:
    doc = document(
        {"placement": "every-host", "accept_host_differences": list(FACTS), "isolated_hosts": True},
        tp8={"nodes": NODES.low, "hosts": "h200"},
        **{"tp8-ll": {"hosts": None}},
        c={"args": {"device": "cpu"}},
    )
    assert loader_error_paths(doc) == []
    assert schema_error_paths(doc) == []
    spread = document(tp8={"nodes": 8}, c={"args": {"device": "cpu"}, "nodes": NODES.high})
    assert loader_error_paths(spread) == []
    assert schema_error_paths(spread) == []


def test_the_schema_names_the_defaults_the_loader_applies() -> None:
    schema = campaign_schema()
    config = schema["$defs"]["config"]["properties"]
    assert schema["properties"]["placement"]["default"] == DEFAULT_PLACEMENT
    assert schema["properties"]["accept_host_differences"]["items"]["enum"] == list(FACTS)
    assert schema["properties"]["isolated_hosts"]["default"] is DEFAULT_ISOLATED_HOSTS
    assert (config["nodes"]["default"], config["nodes"]["minimum"], config["nodes"]["maximum"]) == (
        DEFAULT_NODES,
        NODES.low,
        NODES.high,
    )
    assert config["hosts"]["default"] is None


# --- the shipped campaigns ------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(CAMPAIGNS.glob("*.yml")), ids=lambda path: path.name)
def test_a_shipped_campaign_spreads_one_host_servers(path: Path) -> None:
    campaign = load_campaign(path)
    assert campaign.placement == DEFAULT_PLACEMENT
    assert all(config.nodes == 1 and config.hosts is None for config in campaign.configs.values())
    assert all(config.gpus_per_node == config.gpus for config in campaign.configs.values())
