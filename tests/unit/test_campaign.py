"""The campaign model: every rule's exact message, rendering, extends/unset, the shipped campaigns."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import load_campaign, parse_campaign
from fairbench.campaign.model import SINGLE_WORKLOAD, ArgValue, Campaign, render_flags
from fairbench.campaign.workload import workload_from_json
from fairbench.cli.main import main

SOURCE = "campaigns/x.yml"
CAMPAIGNS = Path(__file__).resolve().parents[2] / "campaigns"

VALID: dict[str, Any] = {
    "name": "k26",
    "engine": "sglang",
    "model": "moonshotai/Kimi-K2.6",
    "common": {
        "args": {"trust-remote-code": True, "mem-fraction-static": 0.88, "max-running-requests": 256},
        "env": {"NCCL_DEBUG": "WARN"},
    },
    "configs": {
        "tp8": {"args": {"tp-size": 8}},
        "tp8-nccl": {"extends": "tp8", "env": {"NCCL_MIN_NCHANNELS": 8, "NCCL_PROTO": "LL"}},
        "ep4": {"args": {"tp-size": 8, "ep-size": 4}},
        "ep8-eplb": {"args": {"tp-size": 8, "ep-size": 8, "enable-eplb": True}},
    },
    "workload": {
        "api": "completions",
        "dataset": "random-ids",
        "input_len": 1024,
        "output_len": 512,
        "concurrency": [1, 2, 4],
        "prompts_per_level": "10x",
        "warmup": "2x",
        "repeats": 1,
        "seed": 1,
    },
}


def changed(*edits: tuple[str, Any]) -> dict[str, Any]:
    """VALID with each dotted path set to a value; ``DELETE`` removes the key."""
    document = copy.deepcopy(VALID)
    for path, value in edits:
        *parents, last = path.split(".")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return document


DELETE = object()


def parse(document: object, base_dir: Path = Path()) -> Campaign:
    return parse_campaign(yaml.safe_dump(document, sort_keys=False), SOURCE, base_dir)


def errors_of(document: object, base_dir: Path = Path()) -> list[str]:
    with pytest.raises(CampaignError) as caught:
        parse(document, base_dir)
    return caught.value.messages


def only_error(document: object) -> str:
    messages = errors_of(document)
    assert len(messages) == 1, messages
    return messages[0]


# --- one rule, one exact message ------------------------------------------------------------------

RULES = [
    pytest.param(
        changed(("configs.ep4.args.ep-size", 3)),
        "configs.ep4.args.ep-size: 3 does not divide tp-size 8",
        id="ep-size-divides-tp-size",
    ),
    pytest.param(
        changed(("configs.ep4.args", {"ep-size": 2})),
        "configs.ep4.args.ep-size: 2 does not divide tp-size 1 (SGLang's default)",
        id="ep-size-against-default-tp-size",
    ),
    pytest.param(
        changed(("configs.tp8.args.enable-eplb", True)),
        "configs.tp8.args.enable-eplb: needs ep-size > 1, and ep-size is 1",
        id="eplb-needs-ep",
    ),
    pytest.param(
        changed(("configs.tp8.args.enable-eplb", "yes")),
        "configs.tp8.args.enable-eplb: must be true or false, got 'yes'",
        id="eplb-is-boolean",
    ),
    pytest.param(
        changed(("configs.tp8.args.tp-size", "8")),
        "configs.tp8.args.tp-size: must be an integer from 1 to 4,096 GPUs, got '8'",
        id="tp-size-type",
    ),
    pytest.param(
        changed(("colour", "blue")),
        "colour: unknown key; expected one of name, engine, model, configs, workload, workloads, common, "
        "start_timeout_s, expected_start_s, placement, accept_host_differences, isolated_hosts, slo, decide, "
        "answers, accuracy",
        id="unknown-top-key",
    ),
    pytest.param(
        changed(("configs.tp8.argz", {})),
        "configs.tp8.argz: unknown key; expected one of extends, args, env, sim, unset, nodes, hosts, "
        "disaggregation (did you mean 'args'?)",
        id="unknown-config-key",
    ),
    pytest.param(
        changed(("common.arguments", {})),
        "common.arguments: unknown key; expected one of args, env, sim (did you mean 'args'?)",
        id="unknown-common-key",
    ),
    pytest.param(
        changed(("workload.input_length", 8)),
        "workload.input_length: unknown key; expected one of api, dataset, shared_prefix, multi_turn, "
        "trace, trace_speedup, input_len, output_len, cache_state, concurrency, request_rate, arrival, "
        "burstiness, max_concurrency, prompts_per_level, warmup, repeats, search_resolution, seed, "
        "vocab_size (did you mean 'input_len'?)",
        id="unknown-workload-key",
    ),
    pytest.param(
        changed(("configs.tp8.unset", {"argv": []})),
        "configs.tp8.unset.argv: unknown key; expected one of args, env, sim (did you mean 'args'?)",
        id="unknown-unset-key",
    ),
    pytest.param(changed(("model", DELETE)), "model: required key is missing", id="missing-top-key"),
    pytest.param(
        changed(("workload.dataset", DELETE)),
        "workload.dataset: required key is missing",
        id="missing-workload-key",
    ),
    pytest.param(
        changed(("engine", "vllm")), "engine: must be one of sglang, sim, got 'vllm'", id="engine-choice"
    ),
    pytest.param(
        changed(("name", "kimi k26")),
        "name: 'kimi k26' is not a valid systemd unit name part: use letters, digits, '-', '_' and '.', "
        "starting with a letter or digit",
        id="campaign-name",
    ),
    pytest.param(
        changed(("configs.-ep4", {})),
        "configs.-ep4: '-ep4' is not a valid systemd unit name part: use letters, digits, '-', '_' and '.', "
        "starting with a letter or digit",
        id="config-name",
    ),
    pytest.param(
        changed(("configs." + "t" * 240, {})),
        f"configs.{'t' * 240}: unit name fairbench-k26-{'t' * 240}.service is longer than 255 characters",
        id="unit-name-length",
    ),
    pytest.param(changed(("model", "")), "model: must be a non-empty string, got ''", id="model-string"),
    pytest.param(
        changed(("workload.api", "grpc")),
        "workload.api: must be one of completions, chat, generate, got 'grpc'",
        id="api-choice",
    ),
    pytest.param(
        changed(("workload.dataset", "sharegpt")),
        "workload.dataset: must be random-ids, shared-prefix, trace, multi-turn or the path of a local "
        "ShareGPT-style .json file, got 'sharegpt'",
        id="dataset-name",
    ),
    pytest.param(
        changed(("workload.input_len", 0)),
        "workload.input_len: must be an integer from 1 to 10,000,000 tokens, got 0",
        id="input-len-positive",
    ),
    pytest.param(
        changed(("workload.output_len", 1.5)),
        "workload.output_len: must be an integer from 1 to 10,000,000 tokens, got 1.5",
        id="output-len-integer",
    ),
    pytest.param(
        changed(("workload.concurrency", [])),
        "workload.concurrency: must be a non-empty list of positive integers, got a list",
        id="concurrency-empty",
    ),
    pytest.param(
        changed(("workload.concurrency", 8)),
        "workload.concurrency: must be a non-empty list of positive integers, got 8",
        id="concurrency-list",
    ),
    pytest.param(
        changed(("workload.concurrency", [1, 0])),
        "workload.concurrency[1]: must be an integer from 1 to 100,000 requests in flight, got 0",
        id="concurrency-positive",
    ),
    pytest.param(
        changed(("workload.concurrency", [1, True])),
        "workload.concurrency[1]: must be an integer from 1 to 100,000 requests in flight, got true",
        id="concurrency-not-boolean",
    ),
    pytest.param(
        changed(("workload.concurrency", [4, 4])),
        "workload.concurrency[1]: 4 is listed twice",
        id="concurrency-duplicate",
    ),
    pytest.param(
        changed(("workload.prompts_per_level", "0x")),
        "workload.prompts_per_level: must be an integer >= 1 or Nx (N times the concurrency), got '0x'",
        id="prompts-multiple",
    ),
    pytest.param(
        changed(("workload.prompts_per_level", 0)),
        "workload.prompts_per_level: must be an integer >= 1 or Nx (N times the concurrency), got 0",
        id="prompts-count",
    ),
    pytest.param(
        changed(("workload.warmup", "1.5x")),
        "workload.warmup: must be an integer >= 0 or Nx (N times the concurrency), got '1.5x'",
        id="warmup-multiple",
    ),
    pytest.param(
        changed(("workload.warmup", -1)),
        "workload.warmup: must be an integer >= 0 or Nx (N times the concurrency), got -1",
        id="warmup-count",
    ),
    pytest.param(
        changed(("workload.repeats", 0)),
        "workload.repeats: must be an integer from 1 to 1,000 repeats, got 0",
        id="repeats",
    ),
    pytest.param(
        changed(("workload.seed", "1")),
        "workload.seed: must be an integer from 0 to 4,294,967,295 (a 32-bit seed), got '1'",
        id="seed",
    ),
    pytest.param(
        changed(("start_timeout_s", -5)),
        "start_timeout_s: must be an integer from 1 to 604,800 seconds, got -5",
        id="timeout",
    ),
    pytest.param(
        changed(("configs.tp8.args.enable-ep-moe", True)),
        "configs.tp8.args.enable-ep-moe: SGLang 0.5.23 no longer has this flag: use ep-size",
        id="removed-enable-ep-moe",
    ),
    pytest.param(
        changed(("common.args.cuda-graph-max-bs", 256)),
        "common.args.cuda-graph-max-bs: an ambiguous prefix in SGLang 0.5.23 (-decode, -prefill): "
        "use cuda-graph-max-bs-decode",
        id="ambiguous-cuda-graph-max-bs",
    ),
    pytest.param(
        changed(("configs.tp8.args", {"tensor-parallel-size": 8})),
        "configs.tp8.args.tensor-parallel-size: an alias: spell it tp-size",
        id="alias",
    ),
    pytest.param(
        changed(("common.args.model-path", "x")),
        "common.args.model-path: set by the campaign's model key",
        id="model-path-arg",
    ),
    pytest.param(
        changed(("common.args.port", 30000)),
        "common.args.port: set per host by the serving role, not by the campaign",
        id="port-arg",
    ),
    pytest.param(
        changed(("common.args.--tp-size", 8)),
        "common.args.--tp-size: is not a flag as on the command line: lowercase words joined by '-', no '--'",
        id="flag-spelling-dashes",
    ),
    pytest.param(
        changed(("common.args.tp_size", 8)),
        "common.args.tp_size: is not a flag as on the command line: lowercase words joined by '-', no '--'",
        id="flag-spelling-underscore",
    ),
    pytest.param(
        changed(("common.args.json-model-override-args", {"a": 1})),
        "common.args.json-model-override-args: must be true, false, a number, a string or a non-empty list "
        "of numbers and strings, got a mapping",
        id="arg-value-mapping",
    ),
    pytest.param(
        changed(("common.args.chunked-prefill-size", None)),
        "common.args.chunked-prefill-size: must be true, false, a number, a string or a non-empty list "
        "of numbers and strings, got null",
        id="arg-value-null",
    ),
    pytest.param(
        changed(("common.env.NCCL_P2P_DISABLE", True)),
        "common.env.NCCL_P2P_DISABLE: must be a string or a number, got true "
        "(quote words YAML reads as booleans: yes, no, on, off)",
        id="env-value-boolean",
    ),
    pytest.param(
        changed(("common.env.NCCL-PROTO", "LL")),
        "common.env.NCCL-PROTO: is not an environment variable name: letters, digits and '_'",
        id="env-name",
    ),
    pytest.param(
        changed(("common.env", ["NCCL_PROTO=LL"])),
        "common.env: must be a mapping, got a list",
        id="env-mapping",
    ),
    pytest.param(
        changed(("configs.tp8-nccl.extends", "tp9")),
        "configs.tp8-nccl.extends: unknown config 'tp9' (did you mean 'tp8'?)",
        id="extends-unknown",
    ),
    pytest.param(
        changed(("configs.tp8.extends", "tp8")), "configs.tp8.extends: cycle: tp8 -> tp8", id="extends-self"
    ),
    pytest.param(
        changed(("configs.tp8.extends", "tp8-nccl")),
        "configs.tp8-nccl.extends: cycle: tp8 -> tp8-nccl -> tp8",
        id="extends-cycle",
    ),
    pytest.param(
        changed(("configs.tp8.extends", ["ep4"])),
        "configs.tp8.extends: must name a config, got a list",
        id="extends-type",
    ),
    pytest.param(
        changed(("configs.tp8.unset", {"args": ["max-running-request"]})),
        "configs.tp8.unset.args[0]: 'max-running-request' is not set by common "
        "or by the configs this one extends",
        id="unset-unknown-key",
    ),
    pytest.param(
        changed(("configs.tp8.unset", {"args": ["tp-size"]})),
        "configs.tp8.unset.args[0]: 'tp-size' is both set and unset by this config",
        id="unset-and-set",
    ),
    pytest.param(
        changed(("configs.tp8.unset", {"env": "NCCL_DEBUG"})),
        "configs.tp8.unset.env: must be a list of keys, got 'NCCL_DEBUG'",
        id="unset-list",
    ),
    pytest.param(changed(("configs", {})), "configs: must name at least one config", id="configs-empty"),
    pytest.param([VALID], "must be a mapping, got a list", id="document-mapping"),
    # What reaches a systemd unit holds no line end: it could add a directive of its own.
    pytest.param(
        changed(("model", "m\nExecStartPre=/bin/evil")),
        "model: holds '\\n', which ends a line in a systemd unit",
        id="model-newline",
    ),
    pytest.param(
        changed(("name", "k26\n")),
        "name: holds '\\n', which ends a line in a systemd unit",
        id="name-newline",
    ),
    pytest.param(
        changed(("configs.tp8\r", {})),
        "'configs.tp8\\r': holds '\\r', which ends a line in a systemd unit",
        id="config-name-carriage-return",
    ),
    pytest.param(
        changed(("common.args.served-model-name", "kimi\nExecStartPre=/bin/evil")),
        "common.args.served-model-name: holds '\\n', which ends a line in a systemd unit",
        id="arg-newline",
    ),
    pytest.param(
        changed(("common.args.lora-target-modules", ["q_proj", "v_proj\x00"])),
        "common.args.lora-target-modules[1]: holds '\\x00', which ends a line in a systemd unit",
        id="arg-list-nul",
    ),
    pytest.param(
        changed(("configs.tp8.sim", {"sim-profile": "kimi\r"})),
        "configs.tp8.sim.sim-profile: holds '\\r', which ends a line in a systemd unit",
        id="sim-carriage-return",
    ),
    pytest.param(
        changed(("common.env.NCCL_DEBUG", "WARN\nExecStartPre=/bin/evil")),
        "common.env.NCCL_DEBUG: holds '\\n', which ends a line in a systemd unit",
        id="env-newline",
    ),
    # Every number within its bound (fairbench.measure.bounds), and finite.
    pytest.param(
        changed(("configs.tp8.args.tp-size", 10**23)),
        "configs.tp8.args.tp-size: must be an integer from 1 to 4,096 GPUs, got 1e+23",
        id="tp-size-int-1e23",
    ),
    pytest.param(
        changed(("configs.tp8.args.tp-size", 1e23)),
        "configs.tp8.args.tp-size: must be an integer from 1 to 4,096 GPUs, got 1e+23",
        id="tp-size-float-1e23",
    ),
    pytest.param(
        changed(("configs.ep4.args.ep-size", 8192)),
        "configs.ep4.args.ep-size: must be an integer from 1 to 4,096 GPUs, got 8192",
        id="ep-size-bound",
    ),
    pytest.param(
        changed(("common.args.max-running-requests", 10**7)),
        "common.args.max-running-requests: must be an integer from 1 to 1,000,000 requests, got 10000000",
        id="max-running-requests-bound",
    ),
    pytest.param(
        changed(("workload.input_len", 10**27)),
        "workload.input_len: must be an integer from 1 to 10,000,000 tokens, got 1e+27",
        id="input-len-1e27",
    ),
    pytest.param(
        changed(("workload.input_len", 10**400)),
        "workload.input_len: must be an integer from 1 to 10,000,000 tokens, got 1e+400",
        id="input-len-beyond-a-float",
    ),
    pytest.param(
        changed(("workload.output_len", float("nan"))),
        "workload.output_len: must be a finite number, got nan",
        id="output-len-nan",
    ),
    pytest.param(
        changed(("workload.seed", 10**29)),
        "workload.seed: must be an integer from 0 to 4,294,967,295 (a 32-bit seed), got 1e+29",
        id="seed-1e29",
    ),
    pytest.param(
        changed(("workload.seed", -1)),
        "workload.seed: must be an integer from 0 to 4,294,967,295 (a 32-bit seed), got -1",
        id="seed-negative",
    ),
    pytest.param(
        changed(("workload.concurrency", [1, 10**20])),
        "workload.concurrency[1]: must be an integer from 1 to 100,000 requests in flight, got 1e+20",
        id="concurrency-1e20",
    ),
    pytest.param(
        changed(("workload.concurrency", [1, float("inf")])),
        "workload.concurrency[1]: must be a finite number, got inf",
        id="concurrency-infinity",
    ),
    pytest.param(
        changed(("workload.repeats", 1001)),
        "workload.repeats: must be an integer from 1 to 1,000 repeats, got 1001",
        id="repeats-bound",
    ),
    pytest.param(
        changed(("decide", {"margin_pct": 0})),
        "decide.margin_pct: must be a number from 0.01 to 100 percent of the lower mean, got 0",
        id="margin-bound",
    ),
    pytest.param(
        changed(("decide", {"margin_pct": 1, "margin": 1})),
        "decide.margin: unknown key; expected one of margin_pct, baseline (did you mean 'margin_pct'?)",
        id="decide-unknown-key",
    ),
    pytest.param(
        changed(("decide", {"margin_pct": 1, "baseline": "tp9"})),
        "decide.baseline: 'tp9' is not a config of the campaign (tp8, tp8-nccl, ep4, ep8-eplb)",
        id="decide-baseline-unknown",
    ),
    pytest.param(
        changed(("decide", {})),
        "decide.margin_pct: required key is missing",
        id="decide-margin-missing",
    ),
    pytest.param(
        changed(("workload.vocab_size", 2**24 + 1)),
        "workload.vocab_size: must be an integer from 1 to 16,777,216 token ids, got 16777217",
        id="vocab-size-bound",
    ),
    pytest.param(
        changed(("start_timeout_s", 10**9)),
        "start_timeout_s: must be an integer from 1 to 604,800 seconds, got 1000000000",
        id="start-timeout-bound",
    ),
    pytest.param(
        changed(("workload.prompts_per_level", 10**8)),
        "workload.prompts_per_level: must be an integer from 0 to 10,000,000 requests, got 100000000",
        id="prompts-bound",
    ),
    pytest.param(
        changed(("workload.prompts_per_level", "10001x")),
        "workload.prompts_per_level: N of 10001x must be a number from 0 to 10,000 times the concurrency, "
        "got 10001",
        id="prompts-factor-bound",
    ),
    pytest.param(
        changed(("workload.warmup", "1000x"), ("workload.concurrency", [1, 100_000])),
        "workload.warmup: 1000x at level 100000: must be an integer from 0 to 10,000,000 requests, "
        "got 100000000",
        id="warmup-at-the-largest-level",
    ),
    pytest.param(
        changed(("workload.warmup", "1" * 5000 + "x")),
        f"workload.warmup: must be an integer >= 0 or Nx (N times the concurrency), got '{'1' * 37}...'",
        id="warmup-factor-of-thousands-of-digits",
    ),
]


@pytest.mark.parametrize(("document", "message"), RULES)
def test_each_rule_has_its_exact_message(document: object, message: str) -> None:
    assert only_error(document) == f"{SOURCE}: {message}"


def test_several_errors_are_reported_together() -> None:
    document = changed(
        ("engine", "vllm"),
        ("configs.ep4.args.ep-size", 3),
        ("workload.concurrency", [1, -1]),
        ("configs.tp8.extends", "nope"),
    )
    assert errors_of(document) == [
        f"{SOURCE}: engine: must be one of sglang, sim, got 'vllm'",
        f"{SOURCE}: workload.concurrency[1]: must be an integer from 1 to 100,000 requests in flight, got -1",
        f"{SOURCE}: configs.tp8.extends: unknown config 'nope'",
        f"{SOURCE}: configs.ep4.args.ep-size: 3 does not divide tp-size 8",
    ]


def test_config_names_may_use_letters_digits_dash_underscore_and_dot() -> None:
    document = changed()
    document["configs"]["TP8_v1.2"] = {"args": {"tp-size": 8}}
    assert parse(document).configs["TP8_v1.2"].unit == "fairbench-k26-TP8_v1.2.service"


def test_a_config_name_that_is_not_a_string_is_an_error() -> None:
    assert only_error(changed(("configs", {8: {}}))) == f"{SOURCE}: configs: key 8 must be a string"


def test_a_config_is_not_blamed_for_what_it_inherits() -> None:
    assert errors_of(changed(("configs.tp8.args.enable-eplb", True))) == [
        f"{SOURCE}: configs.tp8.args.enable-eplb: needs ep-size > 1, and ep-size is 1"
    ]


def test_a_cycle_is_reported_once_and_configs_behind_it_are_not_blamed() -> None:
    document = changed(
        ("configs.a", {"extends": "b"}), ("configs.b", {"extends": "a"}), ("configs.c", {"extends": "a"})
    )
    assert errors_of(document) == [f"{SOURCE}: configs.b.extends: cycle: a -> b -> a"]


# --- datasets -------------------------------------------------------------------------------------


def test_a_dataset_path_is_resolved_from_the_campaign_folder(tmp_path: Path) -> None:
    (tmp_path / "sharegpt.json").write_text("[]", encoding="utf-8")
    campaign = parse(changed(("workload.dataset", "sharegpt.json")), base_dir=tmp_path)
    assert campaign.workloads[SINGLE_WORKLOAD].dataset == str(tmp_path / "sharegpt.json")


def test_a_missing_dataset_file_is_an_error(tmp_path: Path) -> None:
    messages = errors_of(changed(("workload.dataset", "missing.json")), base_dir=tmp_path)
    assert messages == [
        f"{SOURCE}: workload.dataset: must be random-ids, shared-prefix, trace, multi-turn or the path of a "
        f"local ShareGPT-style .json file: {str(tmp_path / 'missing.json')!r} is not a file"
    ]


SHARED = (("workload.dataset", "shared-prefix"), ("workload.input_len", DELETE))


def test_a_shared_prefix_workload_takes_its_input_length_from_its_groups_and_round_trips() -> None:
    groups = {"groups": 4, "prompts_per_group": 8, "system_prompt_len": 1000, "question_len": 24}
    campaign = parse(changed(*SHARED, ("workload.shared_prefix", groups), ("workload.cache_state", "primed")))
    workload = campaign.workloads[SINGLE_WORKLOAD]
    assert workload.input_len == 1024 and workload.cache_state == "primed"
    assert workload.shared_prefix is not None and workload.shared_prefix.order == "shuffled"
    recorded = workload.to_json()
    assert recorded["shared_prefix"] == {**groups, "order": "shuffled"} and recorded["input_len"] == 1024
    assert workload_from_json(recorded, "campaign.json") == workload


def test_a_shared_prefix_workload_without_its_groups_has_sglangs_defaults() -> None:
    workload = parse(changed(*SHARED)).workloads[SINGLE_WORKLOAD]
    assert workload.shared_prefix is not None
    assert (workload.shared_prefix.groups, workload.shared_prefix.prompts_per_group) == (64, 16)
    assert workload.input_len == 2048 + 128


def test_a_workload_without_shared_prefixes_records_neither_new_key() -> None:
    recorded = parse(VALID).workloads[SINGLE_WORKLOAD].to_json()
    assert "shared_prefix" not in recorded and "cache_state" not in recorded
    assert (
        parse(changed(("workload.cache_state", "flushed")))
        .workloads[SINGLE_WORKLOAD]
        .to_json()["cache_state"]
        == "flushed"
    )


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        (
            (("workload.dataset", "shared-prefix"), ("workload.shared_prefix", {"question_len": 24})),
            "workload.input_len: 1024 is not shared_prefix's system_prompt_len + question_len, 2072: "
            "leave it out",
        ),
        (
            (("workload.shared_prefix", {"groups": 2}),),
            "workload.shared_prefix: describes the shared-prefix dataset's groups: set dataset: "
            "shared-prefix, or leave it out",
        ),
        (
            (("workload.cache_state", "primed"),),
            "workload.cache_state: primed sends each group's system prompt before a point: only dataset "
            "shared-prefix, and multi-turn with a system_prompt_len, have them (flushed starts every point "
            "from an empty cache)",
        ),
        (
            (*SHARED, ("workload.shared_prefix", {"groups": 0, "order": "sorted", "prefix": 1})),
            "workload.shared_prefix.prefix: unknown key; expected one of groups, prompts_per_group, "
            "system_prompt_len, question_len, order",
        ),
        (
            (*SHARED, ("workload.shared_prefix", {"system_prompt_len": 10_000_000})),
            "workload.shared_prefix: system_prompt_len + question_len must be an integer from 1 to "
            "10,000,000 tokens, got 10000128",
        ),
        (
            (("workload.cache_state", "warm"),),
            "workload.cache_state: must be one of flushed, primed, carried, got 'warm'",
        ),
    ],
    ids=[
        "input-len-contradicts",
        "groups-without-dataset",
        "primed-without-groups",
        "groups-keys",
        "sum-too-long",
        "cache-state-choice",
    ],
)
def test_a_shared_prefix_or_cache_state_that_breaks_a_rule_is_named(
    edits: tuple[tuple[str, Any], ...], message: str
) -> None:
    assert f"{SOURCE}: {message}" in errors_of(changed(*edits))


def test_shared_prefix_counts_out_of_range_are_each_named() -> None:
    groups = {"groups": 0, "prompts_per_group": 10_000_001, "order": "sorted"}
    messages = errors_of(changed(*SHARED, ("workload.shared_prefix", groups)))
    assert messages == [
        f"{SOURCE}: workload.shared_prefix.groups: must be an integer from 1 to 1,000,000 groups, got 0",
        f"{SOURCE}: workload.shared_prefix.prompts_per_group: must be an integer from 1 to 10,000,000 "
        "prompts, got 10000001",
        f"{SOURCE}: workload.shared_prefix.order: must be one of grouped, shuffled, got 'sorted'",
    ]


# --- warnings -------------------------------------------------------------------------------------


def test_concurrency_above_max_running_requests_is_a_warning() -> None:
    campaign = parse(
        changed(("workload.concurrency", [64, 256, 512]), ("configs.tp8.args.max-running-requests", 128))
    )
    assert campaign.warnings == (
        f"{SOURCE}: workload.concurrency: 256, 512 above max-running-requests 128 of tp8, tp8-nccl: "
        "the excess requests queue",
        f"{SOURCE}: workload.concurrency: 512 above max-running-requests 256 of ep4, ep8-eplb: "
        "the excess requests queue",
    )


def test_fewer_prompts_than_the_concurrency_is_a_warning() -> None:
    campaign = parse(changed(("workload.prompts_per_level", 20), ("workload.concurrency", [16, 32, 64])))
    assert campaign.warnings == (
        f"{SOURCE}: workload.prompts_per_level: fewer prompts than the concurrency at level 32, 64: "
        "such a level never has that many requests in flight",
    )


def test_deprecated_disable_cuda_graph_is_a_warning() -> None:
    campaign = parse(changed(("common.args.disable-cuda-graph", True)))
    assert campaign.warnings == (
        f"{SOURCE}: common.args.disable-cuda-graph: deprecated in SGLang 0.5.23: "
        "use cuda-graph-backend-decode: disabled and cuda-graph-backend-prefill: disabled",
    )


def test_cuda_graph_settings_that_differ_between_configs_are_a_warning() -> None:
    campaign = parse(changed(("configs.tp8.args.cuda-graph-max-bs-decode", 32)))
    assert campaign.warnings == (
        f"{SOURCE}: configs.tp8.args.cuda-graph-max-bs-decode: CUDA graph settings differ from common: "
        "the comparison is unfair unless that is its point",
    )


def test_sim_flags_with_the_sglang_engine_are_a_warning() -> None:
    campaign = parse(changed(("common.sim", {"sim-profile": "kimi-k2.6"})))
    assert campaign.warnings == (f"{SOURCE}: common.sim: ignored: the engine is sglang",)
    assert "--sim-profile" not in campaign.configs["tp8"].argv


def test_a_sim_flag_may_not_repeat_an_sglang_flag() -> None:
    document = changed(("engine", "sim"), ("configs.tp8.sim", {"tp-size": 4}))
    assert (
        only_error(document)
        == f"{SOURCE}: configs.tp8.sim.tp-size: is also an SGLang flag in args: give each flag once"
    )


# --- YAML and files -------------------------------------------------------------------------------


def test_a_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(CampaignError) as caught:
        parse_campaign("name: x\nconfigs:\n  tp8: {args: [}\n", SOURCE, Path())
    assert caught.value.messages == [
        f"{SOURCE}:3: expected the node content, but found '}}' (while parsing a flow node at line 3)"
    ]


def test_a_repeated_key_is_an_error_with_both_lines() -> None:
    with pytest.raises(CampaignError) as caught:
        parse_campaign("configs:\n  tp8: {}\n  ep4: {}\n  tp8: {}\n", SOURCE, Path())
    assert caught.value.messages == [f"{SOURCE}:4: duplicate key 'tp8' (first at line 2)"]


def test_a_bad_explicit_tag_is_an_error_with_its_line() -> None:
    with pytest.raises(CampaignError) as caught:
        parse_campaign("name: x\nseed: !!int one\n", SOURCE, Path())
    assert caught.value.messages == [
        f"{SOURCE}:2: invalid int value: invalid literal for int() with base 10: 'one'"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("seed: !!int\n", ":1: invalid int value: string index out of range"),
        (
            "name: x\nwhen: !!timestamp\n",
            ":2: invalid timestamp value: 'NoneType' object has no attribute 'groupdict'",
        ),
        ("!!set 0\n", ":1: expected a mapping node, but found scalar"),
        ("name: \x00\n", ":1: character #x0000: special characters are not allowed"),
        ("[" * 1000 + "]" * 1000, ": nested too deeply"),
        ("!!binary aGk=\n", ": must be a mapping, got a bytes value"),
    ],
    ids=["empty-int", "empty-timestamp", "set-of-scalar", "control-character", "deep", "binary"],
)
def test_odd_yaml_is_an_error_too(text: str, message: str) -> None:
    with pytest.raises(CampaignError) as caught:
        parse_campaign(text, SOURCE, Path())
    assert caught.value.messages == [f"{SOURCE}{message}"]


def test_an_empty_file_is_an_error() -> None:
    with pytest.raises(CampaignError) as caught:
        parse_campaign("", SOURCE, Path())
    assert caught.value.messages == [f"{SOURCE}: must be a mapping, got null"]


def test_an_unreadable_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CampaignError) as caught:
        load_campaign(tmp_path / "absent.yml")
    assert caught.value.messages == [f"{tmp_path / 'absent.yml'}: cannot read: No such file or directory"]
    (tmp_path / "latin1.yml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(CampaignError) as caught:
        load_campaign(tmp_path / "latin1.yml")
    assert caught.value.messages == [
        f"{tmp_path / 'latin1.yml'}: not UTF-8 text: invalid continuation byte at byte 9"
    ]


# --- rendering ------------------------------------------------------------------------------------


def test_flags_render_sorted_with_bare_true_and_omitted_false() -> None:
    flags: dict[str, ArgValue] = {
        "tp-size": 8,
        "trust-remote-code": True,
        "disable-radix-cache": False,
        "mem-fraction-static": 0.88,
        "cuda-graph-bs-decode": (1, 2, 4),
        "attention-backend": "triton",
    }
    assert render_flags(flags) == [
        "--attention-backend", "triton",
        "--cuda-graph-bs-decode", "1", "2", "4",
        "--mem-fraction-static", "0.88",
        "--tp-size", "8",
        "--trust-remote-code",
    ]  # fmt: skip


def test_argv_starts_with_the_model_and_env_values_are_strings() -> None:
    config = parse(VALID).configs["tp8-nccl"]
    assert config.sglang_argv == (
        "--model-path", "moonshotai/Kimi-K2.6",
        "--max-running-requests", "256",
        "--mem-fraction-static", "0.88",
        "--tp-size", "8",
        "--trust-remote-code",
    )  # fmt: skip
    assert config.argv == config.sglang_argv
    assert config.env == {"NCCL_DEBUG": "WARN", "NCCL_MIN_NCHANNELS": "8", "NCCL_PROTO": "LL"}
    assert config.unit == "fairbench-k26-tp8-nccl.service"


def test_the_sim_engine_appends_the_sim_flags() -> None:
    document = changed(("engine", "sim"), ("common.sim", {"sim-profile": "kimi-k2.6"}))
    document["configs"]["tp8"]["sim"] = {"sim-crash-after": 5}
    config = parse(document).configs["tp8"]
    assert config.argv == (*config.sglang_argv, "--sim-crash-after", "5", "--sim-profile", "kimi-k2.6")
    assert "--sim-profile" not in config.sglang_argv


# --- extends and unset ----------------------------------------------------------------------------


def test_extends_inherits_and_declared_lists_what_differs_from_common() -> None:
    campaign = parse(VALID)
    nccl = campaign.configs["tp8-nccl"]
    assert nccl.extends == ("tp8",)
    assert nccl.declared.args == {"tp-size": 8}
    assert nccl.declared.env == {"NCCL_MIN_NCHANNELS": "8", "NCCL_PROTO": "LL"}
    assert campaign.configs["tp8"].declared.env == {}


def test_a_value_equal_to_common_is_not_a_difference_but_another_type_is() -> None:
    document = changed(
        ("common.args.schedule-conservativeness", 1),
        ("configs.tp8.args.mem-fraction-static", 0.88),
        ("configs.tp8.args.schedule-conservativeness", 1.0),
    )
    declared = parse(document).configs["tp8"].declared.args
    assert declared == {"tp-size": 8, "schedule-conservativeness": 1.0}
    assert isinstance(declared["schedule-conservativeness"], float)  # renders 1.0, not common's 1


def test_unset_removes_a_common_key_and_is_recorded() -> None:
    document = changed(
        ("configs.tp8.unset", {"args": ["mem-fraction-static"], "env": ["NCCL_DEBUG"]}),
        ("configs.tp8.env", {"NCCL_ALGO": "Ring"}),
        ("configs.tp8-nccl.unset", {"env": ["NCCL_ALGO"]}),
    )
    document["configs"]["tp8-nccl"]["args"] = {"mem-fraction-static": 0.8}
    campaign = parse(document)
    tp8, nccl = campaign.configs["tp8"], campaign.configs["tp8-nccl"]
    assert "--mem-fraction-static" not in tp8.argv
    assert tp8.unset.args == ("mem-fraction-static",)
    assert tp8.unset.env == ("NCCL_DEBUG",)
    assert "NCCL_DEBUG" not in tp8.env
    # the child inherits the unset, sets the flag again, and removes an env key of its own parent's
    assert nccl.unset.args == ()
    assert nccl.unset.env == ("NCCL_DEBUG",)
    assert nccl.args["mem-fraction-static"] == 0.8
    assert nccl.env == {"NCCL_MIN_NCHANNELS": "8", "NCCL_PROTO": "LL"}


def test_a_chain_of_extends_is_applied_root_first() -> None:
    document = changed(
        ("configs.ep8", {"args": {"tp-size": 8, "ep-size": 8}}),
        ("configs.ep8-eplb", {"extends": "ep8", "args": {"enable-eplb": True}}),
        ("configs.ep8-eplb-nccl", {"extends": "ep8-eplb", "env": {"NCCL_PROTO": "LL"}}),
    )
    config = parse(document).configs["ep8-eplb-nccl"]
    assert config.extends == ("ep8-eplb", "ep8")
    assert config.declared.args == {"tp-size": 8, "ep-size": 8, "enable-eplb": True}


# --- plain data -----------------------------------------------------------------------------------


def test_to_json_is_plain_data_with_every_config() -> None:
    document = changed(("common.args.cuda-graph-bs-decode", [1, 2]))
    data = parse(document).to_json()
    assert json.loads(json.dumps(data)) == data
    assert list(data) == [
        "name", "source", "engine", "model", "start_timeout_s", "placement", "accept_host_differences",
        "common", "configs", "workload", "answers", "slo", "warnings",
    ]  # fmt: skip
    assert list(data["configs"]) == ["tp8", "tp8-nccl", "ep4", "ep8-eplb"]
    assert data["common"]["args"]["cuda-graph-bs-decode"] == [1, 2]
    nccl = data["configs"]["tp8-nccl"]
    assert list(nccl) == [
        "name", "unit", "extends", "argv", "sglang_argv", "env", "args", "sim", "declared", "unset", "gpus",
        "gpus_formula", "nodes", "gpus_per_node", "hosts",
    ]  # fmt: skip
    assert (nccl["gpus"], nccl["gpus_formula"]) == (8, "tp-size 8")
    assert nccl["declared"] == {
        "args": {"tp-size": 8},
        "env": {"NCCL_MIN_NCHANNELS": "8", "NCCL_PROTO": "LL"},
        "sim": {},
    }
    assert nccl["unset"] == {"args": [], "env": [], "sim": []}
    assert data["workload"]["prompts_per_level"] == "10x"


@pytest.mark.parametrize(
    ("args", "gpus", "formula"),
    [
        ({}, 1, "tp-size 1"),
        ({"tp-size": 8, "ep-size": 4}, 8, "tp-size 8"),
        ({"tp-size": 2, "pp-size": 2}, 4, "tp-size 2 x pp-size 2"),
        ({"tp-size": 2, "dp-size": 4}, 8, "tp-size 2 x dp-size 4"),
        ({"tp-size": 2, "pp-size": 2, "dp-size": 2}, 8, "tp-size 2 x pp-size 2 x dp-size 2"),
        ({"dp-size": 2}, 2, "tp-size 1 x dp-size 2"),
        # Data-parallel attention runs its dp ranks inside the TP group: no more GPUs.
        ({"tp-size": 8, "dp-size": 8, "enable-dp-attention": True}, 8, "tp-size 8"),
        ({"tp-size": 8, "dp-size": 2, "enable-dp-attention": False}, 16, "tp-size 8 x dp-size 2"),
        # SGLang on the CPU occupies no GPU, whatever its parallel layout.
        ({"device": "cpu"}, 0, "device cpu"),
        ({"device": "cpu", "tp-size": 2}, 0, "device cpu"),
        ({"device": "cuda", "tp-size": 2}, 2, "tp-size 2"),
    ],
)
def test_each_config_knows_the_gpus_its_server_needs(
    args: dict[str, ArgValue], gpus: int, formula: str
) -> None:
    config = parse(changed(("configs", {"c": {"args": args}}))).configs["c"]
    assert (config.gpus, config.gpus_formula) == (gpus, formula)


def test_the_gpus_of_a_config_count_what_it_inherits() -> None:
    document = changed(("common.args.tp-size", 4), ("configs", {"dp2": {"args": {"dp-size": 2}}}))
    assert parse(document).configs["dp2"].gpus == 8


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("pp-size", 0, "must be an integer from 1 to 4,096 GPUs, got 0"),
        ("dp-size", "2", "must be an integer from 1 to 4,096 GPUs, got '2'"),
        ("enable-dp-attention", "yes", "must be true or false, got 'yes'"),
        ("pipeline-parallel-size", 2, "an alias: spell it pp-size"),
        ("data-parallel-size", 2, "an alias: spell it dp-size"),
    ],
)
def test_flags_that_set_the_gpu_count_are_checked(key: str, value: object, message: str) -> None:
    error = only_error(changed((f"configs.tp8.args.{key}", value)))
    assert error == f"{SOURCE}: configs.tp8.args.{key}: {message}"


def test_a_workload_round_trips_through_json() -> None:
    workload = parse(VALID).workloads[SINGLE_WORKLOAD]
    assert workload_from_json(workload.to_json(), "sweep") == workload
    with pytest.raises(CampaignError) as caught:
        workload_from_json({**workload.to_json(), "repeats": 0}, "sweep")
    assert caught.value.messages == [
        "sweep: workload.repeats: must be an integer from 1 to 1,000 repeats, got 0"
    ]


def test_request_counts_per_level() -> None:
    workload = parse(changed(("workload.prompts_per_level", "3x"), ("workload.warmup", 5))).workloads[
        SINGLE_WORKLOAD
    ]
    assert [workload.prompts_at(level) for level in (1, 8)] == [16, 24]
    assert [workload.warmup_at(level) for level in (1, 8)] == [5, 5]


# --- the shipped campaigns and the command --------------------------------------------------------


K26_CAMPAIGNS = sorted(set(CAMPAIGNS.glob("*.yml")) - {CAMPAIGNS / "lab-sglang.yml"})


SPECULATION_ON_RANDOM_PROMPTS = {"kimi-k2.6-pcie.yml": ("workloads.random", "workloads.agentic")}
"""The shipped campaigns' workloads of random token ids that measure a speculative config (ep8-dflash): the
warning that its acceptance there is not real text's (rules.warn_speculation_on_random_prompts)."""


@pytest.mark.parametrize("path", K26_CAMPAIGNS, ids=lambda path: path.name)
def test_shipped_campaigns_validate_without_warnings_but_speculation_on_random_prompts(path: Path) -> None:
    campaign = load_campaign(path)
    warned = SPECULATION_ON_RANDOM_PROMPTS.get(path.name, ())
    assert [warning.split(": ")[1] for warning in campaign.warnings] == [f"{key}.dataset" for key in warned]
    assert all(
        "ep8-dflash (speculative-algorithm DFLASH) decodes speculatively" in w for w in campaign.warnings
    )
    assert list(campaign.configs)[:2] == ["tp8", "tp8-nccl"]
    assert {"tp8", "tp8-nccl", "ep4", "ep8", "ep8-eplb"} <= set(campaign.configs)


def test_the_lab_sglang_campaign_warns_only_of_the_queue_its_running_4_config_exists_for() -> None:
    campaign = load_campaign(CAMPAIGNS / "lab-sglang.yml")
    assert campaign.warnings == (
        f"{CAMPAIGNS / 'lab-sglang.yml'}: workload.concurrency: 16 above max-running-requests 4 of "
        "running-4: the excess requests queue",
    )
    assert campaign.engine == "sglang" and "baseline" in campaign.configs


def test_the_real_campaign_has_ep8_with_dflash_speculative_decoding() -> None:
    config = load_campaign(CAMPAIGNS / "kimi-k2.6-pcie.yml").configs["ep8-dflash"]
    assert config.extends == ("ep8",)
    assert config.declared.args["speculative-algorithm"] == "DFLASH"
    assert "--speculative-draft-model-path" in config.sglang_argv


def test_the_real_campaign_keeps_cuda_graphs_equal_for_every_config() -> None:
    campaign = load_campaign(CAMPAIGNS / "kimi-k2.6-pcie.yml")
    assert campaign.engine == "sglang"
    assert "cuda-graph-max-bs-decode" in campaign.common.args
    for config in campaign.configs.values():
        assert not [key for key in (*config.declared.args, *config.unset.args) if "cuda-graph" in key]


def test_the_demo_runs_on_the_simulator() -> None:
    campaign = load_campaign(CAMPAIGNS / "demo.yml")
    assert campaign.engine == "sim"
    assert all("--sim-profile" in config.argv for config in campaign.configs.values())


def test_validate_prints_each_config_and_exits_zero(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "x.yml"
    path.write_text(
        yaml.safe_dump(changed(("workload.concurrency", [512])), sort_keys=False), encoding="utf-8"
    )
    assert main(["validate", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{path}: campaign k26, engine sglang, 4 configs, placement spread"
    assert lines[2] == (
        "  tp8-nccl  NCCL_DEBUG=WARN NCCL_MIN_NCHANNELS=8 NCCL_PROTO=LL --model-path moonshotai/Kimi-K2.6 "
        "--max-running-requests 256 --mem-fraction-static 0.88 --tp-size 8 --trust-remote-code"
    )
    assert lines[5].startswith("  workload: `completions`, ")
    assert lines[6] == "  answers: 16 probes greedy through completions, at most 32 tokens each"
    assert lines[7].startswith(f"warning: {path}: workload.concurrency: 512 above max-running-requests 256")


def test_validate_reports_errors_on_stderr_and_exits_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "x.yml"
    path.write_text(yaml.safe_dump(changed(("configs.ep4.args.ep-size", 3))), encoding="utf-8")
    assert main(["validate", str(CAMPAIGNS / "demo.yml"), str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"{path}: configs.ep4.args.ep-size: 3 does not divide tp-size 8\n"
    assert "campaign demo, engine sim, 7 configs" in captured.out
