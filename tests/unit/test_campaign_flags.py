"""Every ``args`` flag judged offline against SGLang 0.5.23's flag table: each rule's exact message, where
it is reported, and the values the table allows."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairbench.campaign import sglang_flags as flag_rules
from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import load_campaign, parse_campaign
from fairbench.campaign.model import Campaign
from fairbench.cli.main import main
from fairbench.sim.args import flag_table

SOURCE = "campaigns/x.yml"
CAMPAIGNS = sorted((Path(__file__).resolve().parents[2] / "campaigns").glob("*.yml"))
ATTENTION_BACKENDS = (
    "triton, torch_native, flex_attention, dsa, nsa, qsa, dsv4, compressed, fa3, fa4, flashinfer, "
    "llada2_cfg_flashinfer, flashmla, trtllm_mla, cutedsl_mla, tokenspeed_mla, trtllm_mha, hpc_ops, "
    "minicpm_flashattn, minicpm_flashinfer, aiter, wave, intel_amx, ascend, intel_xpu"
)
LORA_TARGET_MODULES = (
    "q_proj, k_proj, v_proj, o_proj, q_a_proj, kv_a_proj_with_mqa, q_b_proj, kv_b_proj, wq_b, wk, "
    "weights_proj, gate_proj, up_proj, down_proj, qkv_proj, gate_up_proj, embed_tokens, lm_head, qkvr, "
    "wo_ud, all"
)

BASE: dict[str, Any] = {
    "name": "flags",
    "engine": "sglang",
    "model": "moonshotai/Kimi-K2.6",
    "common": {"args": {"trust-remote-code": True, "mem-fraction-static": 0.88}},
    "configs": {"tp8": {"args": {"tp-size": 8}}, "tp8-lpm": {"extends": "tp8"}},
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


def with_args(args: dict[str, Any], where: str = "configs.tp8", engine: str = "sglang") -> dict[str, Any]:
    """BASE with ``args`` added to the args of ``where`` (``common`` or ``configs.NAME``)."""
    document = copy.deepcopy(BASE)
    document["engine"] = engine
    node = document
    for key in where.split("."):
        node = node[key]
    node.setdefault("args", {}).update(args)
    return document


def parse(document: dict[str, Any]) -> Campaign:
    return parse_campaign(yaml.safe_dump(document, sort_keys=False), SOURCE, Path())


def errors_of(document: dict[str, Any]) -> list[str]:
    with pytest.raises(CampaignError) as caught:
        parse(document)
    return caught.value.messages


# --- one rule, one exact message ------------------------------------------------------------------

RULES = [
    pytest.param(
        {"tp-szie": 8},
        "configs.tp8.args.tp-szie: unknown SGLang 0.5.23 flag (did you mean 'tp-size'?)",
        id="unknown-flag-did-you-mean",
    ),
    pytest.param(
        {"frobnicate": True}, "configs.tp8.args.frobnicate: unknown SGLang 0.5.23 flag", id="unknown"
    ),
    pytest.param(
        {"mem-fraction-static": "lots"},
        "configs.tp8.args.mem-fraction-static: must be a number, got 'lots'",
        id="float-type",
    ),
    pytest.param(
        {"chunked-prefill-size": 8.5},
        "configs.tp8.args.chunked-prefill-size: must be an integer, got 8.5",
        id="int-type",
    ),
    pytest.param(
        {"preferred-sampling-params": "{temperature: 0}"},
        "configs.tp8.args.preferred-sampling-params: must be JSON, got '{temperature: 0}'",
        id="json-type",
    ),
    pytest.param(
        {"context-length": "lots"},
        "configs.tp8.args.context-length: Invalid integer value: 'lots'. Use a plain integer, SI suffixes "
        "(1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive.",
        id="converter-message",
    ),
    pytest.param(
        {"cuda-graph-backend-decode": "tc_piecewise"},
        "configs.tp8.args.cuda-graph-backend-decode: tc_piecewise was removed; select breakable, full, "
        "or disabled",
        id="removed-backend",
    ),
    pytest.param(
        {"trust-remote-code": "yes"},
        "configs.tp8.args.trust-remote-code: must be true or false, got 'yes'",
        id="bare-flag-string",
    ),
    pytest.param(
        {"skip-server-warmup": 1},
        "configs.tp8.args.skip-server-warmup: must be true or false, got 1",
        id="bare-flag-number",
    ),
    pytest.param(
        {"enable-tf32-matmul": ["a"]},
        "configs.tp8.args.enable-tf32-matmul: must be true or false, got a list",
        id="bare-boolean-optional-list",
    ),
    pytest.param(
        {"schedule-policy": "fastest"},
        "configs.tp8.args.schedule-policy: must be one of lpm, random, fcfs, dfs-weight, lof, priority, "
        "routing-key, hrrn, shortest-prefill-first, got 'fastest'",
        id="choice",
    ),
    pytest.param(
        {"attention-backend": "flash"},
        f"configs.tp8.args.attention-backend: must be one of {ATTENTION_BACKENDS}, got 'flash'",
        id="choice-attention-backend",
    ),
    pytest.param(
        {"log-requests-level": 4},
        "configs.tp8.args.log-requests-level: must be one of 0, 1, 2, 3, got 4",
        id="integer-choice",
    ),
    pytest.param(
        {"monokernel-backend": "nvidia"},
        "configs.tp8.args.monokernel-backend: must be one of amd, got 'nvidia'",
        id="retired-flag-choice",
    ),
    pytest.param(
        {"mem-fraction-static": [0.8, 0.9]},
        "configs.tp8.args.mem-fraction-static: takes one value, got a list",
        id="list-for-one-value",
    ),
    pytest.param(
        {"model-checksum": ["a", "b"]},
        "configs.tp8.args.model-checksum: takes at most one value, got a list",
        id="list-for-an-optional-value",
    ),
    pytest.param(
        {"speculative-algorithm": True},
        "configs.tp8.args.speculative-algorithm: takes one value, got true",
        id="true-for-a-value",
    ),
    pytest.param(
        {"chunked-prefill-size": False},
        "configs.tp8.args.chunked-prefill-size: takes one value, got false",
        id="false-for-a-value",
    ),
    pytest.param(
        {"cuda-graph-bs-decode": True},
        "configs.tp8.args.cuda-graph-bs-decode: takes one or more values, got true",
        id="true-for-values",
    ),
    pytest.param(
        {"cuda-graph-bs-decode": [1, "two", 4]},
        "configs.tp8.args.cuda-graph-bs-decode[1]: must be an integer, got 'two'",
        id="list-item-type",
    ),
    pytest.param(
        {"lora-target-modules": ["q_proj", "attn"]},
        f"configs.tp8.args.lora-target-modules[1]: must be one of {LORA_TARGET_MODULES}, got 'attn'",
        id="list-item-choice",
    ),
    pytest.param(
        {"served-model-name": "-kimi"},
        "configs.tp8.args.served-model-name: '-kimi' starts with '-': SGLang's parser would take it "
        "for a flag",
        id="leading-dash",
    ),
    pytest.param(
        {"schedule-conservativeness": -0.00001},
        "configs.tp8.args.schedule-conservativeness: -1e-05 starts with '-': SGLang's parser would take it "
        "for a flag",
        id="negative-exponent",
    ),
    pytest.param(
        {"mem-fraction-static": float("nan")},
        "configs.tp8.args.mem-fraction-static: must be a finite number, got nan",
        id="float-nan",
    ),
    pytest.param(
        {"watchdog-timeout": float("inf")},
        "configs.tp8.args.watchdog-timeout: must be a finite number, got inf",
        id="float-infinity",
    ),
    pytest.param(
        {"mem-fraction-static": "NaN"},
        "configs.tp8.args.mem-fraction-static: must be a finite number, got 'NaN'",
        id="float-nan-as-a-string",
    ),
    pytest.param(
        {"bucket-time-to-first-token": [0.1, "Infinity"]},
        "configs.tp8.args.bucket-time-to-first-token[1]: must be a finite number, got 'Infinity'",
        id="float-list-infinity-as-a-string",
    ),
    pytest.param(
        {"chunked-prefill-size": float("-inf")},
        "configs.tp8.args.chunked-prefill-size: must be a finite number, got -inf",
        id="int-flag-infinity",
    ),
]


@pytest.mark.parametrize(("args", "message"), RULES)
def test_each_flag_rule_has_its_exact_message(args: dict[str, Any], message: str) -> None:
    assert errors_of(with_args(args)) == [f"{SOURCE}: {message}"]


@pytest.mark.parametrize(("args", "message"), RULES[:3])
def test_the_sim_engine_checks_the_same_flags(args: dict[str, Any], message: str) -> None:
    assert errors_of(with_args(args, engine="sim")) == [f"{SOURCE}: {message}"]


def test_every_broken_flag_is_reported_together() -> None:
    document = with_args({"mem-fraction-static": "lots"}, where="common")
    document["configs"]["tp8"]["args"].update({"tp-szie": 8, "log-requests-level": 4})
    assert errors_of(document) == [
        f"{SOURCE}: common.args.mem-fraction-static: must be a number, got 'lots'",
        f"{SOURCE}: configs.tp8.args.tp-szie: unknown SGLang 0.5.23 flag (did you mean 'tp-size'?)",
        f"{SOURCE}: configs.tp8.args.log-requests-level: must be one of 0, 1, 2, 3, got 4",
    ]


# --- where a mistake is reported ------------------------------------------------------------------


def test_a_flag_from_common_is_reported_at_common_once() -> None:
    assert errors_of(with_args({"mem-fraction-static": "lots"}, where="common")) == [
        f"{SOURCE}: common.args.mem-fraction-static: must be a number, got 'lots'"
    ]


def test_a_flag_is_reported_at_the_config_that_sets_it_not_at_those_extending_it() -> None:
    document = with_args({"schedule-policy": "fastest"}, where="configs.tp8-lpm")
    document["configs"]["tp8-lpm-nccl"] = {"extends": "tp8-lpm", "env": {"NCCL_PROTO": "LL"}}
    assert errors_of(document) == [
        f"{SOURCE}: configs.tp8-lpm.args.schedule-policy: must be one of lpm, random, fcfs, dfs-weight, lof, "
        "priority, routing-key, hrrn, shortest-prefill-first, got 'fastest'"
    ]


def test_a_config_that_sets_a_valid_value_over_common_is_not_blamed() -> None:
    document = with_args({"schedule-policy": "fastest"}, where="common")
    document["configs"]["tp8"]["args"]["schedule-policy"] = "lpm"
    assert errors_of(document) == [
        f"{SOURCE}: common.args.schedule-policy: must be one of lpm, random, fcfs, dfs-weight, lof, "
        "priority, routing-key, hrrn, shortest-prefill-first, got 'fastest'"
    ]


def test_the_campaigns_own_rule_wins_over_the_flag_table() -> None:
    assert errors_of(with_args({"tp-size": "lots", "enable-ep-moe": True})) == [
        f"{SOURCE}: configs.tp8.args.tp-size: must be an integer from 1 to 4,096 GPUs, got 'lots'",
        f"{SOURCE}: configs.tp8.args.enable-ep-moe: SGLang 0.5.23 no longer has this flag: use ep-size",
    ]


def test_did_you_mean_never_suggests_a_flag_the_campaign_rejects() -> None:
    (message,) = errors_of(with_args({"tensor-parallel-siz": 8}))
    assert message.startswith(f"{SOURCE}: configs.tp8.args.tensor-parallel-siz: unknown SGLang 0.5.23 flag")
    assert "'tensor-parallel-size'" not in message


# --- what the table allows ------------------------------------------------------------------------

ACCEPTED = [
    pytest.param({"random-seed": -1}, id="negative-int"),
    pytest.param({"schedule-conservativeness": -0.5}, id="negative-float"),
    pytest.param({"schedule-conservativeness": "-.5"}, id="negative-float-without-leading-digit"),
    pytest.param({"chunked-prefill-size": 0}, id="zero"),
    pytest.param({"mem-fraction-static": 1}, id="integer-for-a-number"),
    pytest.param({"mem-fraction-static": "0.9"}, id="string-that-is-a-number"),
    pytest.param({"context-length": "25.6k"}, id="si-suffix"),
    pytest.param({"context-length": "256Ki"}, id="iec-suffix"),
    pytest.param({"log-requests-level": "3"}, id="integer-choice-as-string"),
    pytest.param({"monokernel-backend": "amd"}, id="retired-flag-value"),
    pytest.param({"served-model-name": ""}, id="empty-string"),
    pytest.param({"served-model-name": "-kimi k2"}, id="leading-dash-with-a-space"),
    pytest.param({"json-model-override-args": '{"vocab_size": 256}'}, id="json-string"),
    pytest.param({"cuda-graph-config": '{"decode": {"max_bs": 64}}'}, id="cuda-graph-config"),
    pytest.param({"cuda-graph-bs-decode": [1, 2, 4, 8]}, id="list"),
    pytest.param({"cuda-graph-bs-decode": 8}, id="one-value-for-a-list"),
    pytest.param({"lora-target-modules": ["q_proj", "all"]}, id="list-of-choices"),
    pytest.param({"model-checksum": True}, id="optional-value-left-out"),
    pytest.param({"model-checksum": "sha256"}, id="optional-value-given"),
    pytest.param({"lora-paths": True}, id="any-number-of-values-none"),
    pytest.param({"enable-tf32-matmul": True, "no-dcp-replicate-q-proj": True}, id="boolean-optional"),
    pytest.param({"enable-hicache": True}, id="alias"),
    pytest.param({"disable-radix-cache": False}, id="bare-flag-off"),
]


@pytest.mark.parametrize("args", ACCEPTED)
def test_values_the_table_allows_are_accepted(args: dict[str, Any]) -> None:
    parse(with_args(args))


def sample_value(option: dict[str, Any]) -> object:
    """A YAML value of ``option``'s kind that SGLang's parser accepts after the flag."""
    if option["action"] not in ("store", "store_const_value"):
        return True
    if option["choices"]:
        return option["choices"][-1]
    samples = {
        "int": 8,  # tp-size, ep-size: 8 as the config tp8 has
        "float": 0.5,
        "loads": '{"a": 1}',
        "json_list_type": "[1, 2]",
        "human_readable_int": "2k",
        "parse_cuda_graph_config_arg": '{"decode": {"max_bs": 8}}',
    }
    return samples.get(option["type"], "some-value")


def test_every_flag_of_the_table_is_known_by_every_spelling_the_campaign_allows() -> None:
    args = {
        spelling.removeprefix("--"): sample_value(option)
        for option in flag_table()["options"]
        for spelling in option["option_strings"]
        if spelling.removeprefix("--") not in flag_rules.REJECTED_ARGS
    }
    assert len(args) > 540
    assert parse(with_args(args, where="common")).common.args == args


@pytest.mark.parametrize("path", CAMPAIGNS, ids=[path.name for path in CAMPAIGNS])
def test_every_shipped_campaign_passes_the_flag_check(path: Path) -> None:
    assert load_campaign(path).configs


# --- the command ----------------------------------------------------------------------------------


def test_validate_prints_one_error_per_line_and_exits_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "x.yml"
    document = with_args({"tp-szie": 8, "mem-fraction-static": "lots"})
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    assert main(["validate", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"{path}: configs.tp8.args.tp-szie: unknown SGLang 0.5.23 flag (did you mean 'tp-size'?)",
        f"{path}: configs.tp8.args.mem-fraction-static: must be a number, got 'lots'",
    ]
    assert captured.out == ""
