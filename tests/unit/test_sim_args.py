"""The simulator's command line: SGLang's flags exactly, resolved the way SGLang resolves them."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from fairbench.sim.args import (
    CONVERTERS,
    ConfigError,
    SimConfig,
    add_sglang_arguments,
    add_sim_arguments,
    flag_table,
    human_readable_int,
    resolve,
)
from fairbench.sim.model import mean_accept_length


def parser() -> argparse.ArgumentParser:
    built = argparse.ArgumentParser(prog="fairbench sim")
    add_sglang_arguments(built)
    add_sim_arguments(built)
    return built


def config(*flags: str) -> SimConfig:
    return resolve(parser().parse_args(["--model-path", "org/model", *flags]))


def sample_value(option: dict[str, Any]) -> tuple[list[str], Any]:
    """Command-line words giving ``option`` a valid value, and the value argparse should store."""
    if option["choices"]:
        choice = option["choices"][-1]
        return [str(choice)], [choice] if option["nargs"] in ("+", "*") else choice
    samples = {
        "int": ("7", 7),
        "float": ("0.5", 0.5),
        "loads": ('{"a": 1}', {"a": 1}),
        "json_list_type": ("[1, 2]", [1, 2]),
        "human_readable_int": ("2k", 2000),
        "parse_cuda_graph_config_arg": ('{"decode": {"max_bs": 8}}', {"decode": {"max_bs": 8}}),
    }
    word, value = samples.get(option["type"], ("some-value", "some-value"))
    return [word], [value] if option["nargs"] in ("+", "*") else value


def test_the_flag_table_comes_from_sglang_0_5_23_and_uses_only_known_converters() -> None:
    table = flag_table()
    assert table["sglang_version"] == "0.5.23"
    assert len(table["options"]) > 500
    assert {option["type"] for option in table["options"]} - {None} <= set(CONVERTERS)
    assert "model_path" in table["fields"] and "stat_loggers" in table["fields"]  # a field with no flag


def test_every_sglang_flag_is_accepted_with_a_value_of_its_kind() -> None:
    built = parser()
    for option in flag_table()["options"]:
        flag = option["option_strings"][-1]
        base = [] if option["dest"] == "model_path" else ["--model-path", "m"]
        if option["action"] in ("store", "store_const_value"):
            words, expected = sample_value(option)
            if option["action"] == "store_const_value":
                expected = option["const"]
            parsed = built.parse_args([*base, flag, *words])
        elif option["action"] == "boolean_optional":
            parsed = built.parse_args([*base, flag])
            expected = flag.startswith("--") and not flag.startswith("--no-")
        else:
            parsed = built.parse_args([*base, flag])
            expected = True
        assert getattr(parsed, option["dest"]) == expected, flag


def test_an_unknown_flag_is_rejected_with_argparses_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parser().parse_args(["--model-path", "m", "--tp-sise", "8"])
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1]
        == "fairbench sim: error: unrecognized arguments: --tp-sise 8"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--tokenizer-mode", "fast"],
            "argument --tokenizer-mode: invalid choice: 'fast' (choose from 'auto', 'slow')",
        ),
        (["--tp-size", "eight"], "argument --tp-size/--tensor-parallel-size: invalid int value: 'eight'"),
        (["--context-length", "1.5Ki"], "Decimals are not allowed with IEC suffixes like 'Ki'."),
        (["--cuda-graph-backend-decode", "tc_piecewise"], "tc_piecewise was removed"),
        (["--cuda-graph-config", '{"decode": {"size": 1}}'], "unknown key 'size', expected one of"),
        (["--sim-fault", "explode-after=3"], "unknown fault 'explode-after'"),
    ],
)
def test_a_bad_value_is_rejected_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["--model-path", "m", *argv])
    assert message in capsys.readouterr().err


def test_model_path_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args([])
    assert "the following arguments are required: --model-path/--model" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "value"), [("512", 512), ("1k", 1000), ("25.6k", 25600), ("1Ki", 1024), ("2Mi", 2 * 1024 * 1024)]
)
def test_human_readable_int_reads_si_and_iec_suffixes(text: str, value: int) -> None:
    assert human_readable_int(text) == value


@pytest.mark.parametrize(
    ("flags", "layout"),
    [
        ([], "tp8"),
        (["--ep-size", "4"], "tp8-ep4"),
        (["--ep", "8"], "tp8-ep8"),
        (["--ep-size", "8", "--enable-eplb"], "tp8-ep8-eplb"),
    ],
)
def test_the_layout_follows_tp_ep_and_eplb(flags: list[str], layout: str) -> None:
    resolved = config("--sim-profile", "kimi-k2.6-8xpro6000", "--tp-size", "8", *flags)
    assert resolved.model.layout == layout
    assert resolved.model.cost == resolved.profile.layouts[layout]


def test_a_layout_missing_from_the_profile_is_a_config_error_listing_the_ones_it_has() -> None:
    with pytest.raises(ConfigError, match=r"no layout 'tp4'.*it has: tp8, tp8-ep4, tp8-ep8, tp8-ep8-eplb"):
        config("--sim-profile", "kimi-k2.6-8xpro6000", "--tp-size", "4")


def test_unset_flags_take_the_profiles_defaults_and_dp_ranks_split_the_running_limit() -> None:
    default = config()
    assert default.limits.max_running_requests == default.profile.max_running_requests
    assert default.limits.chunked_prefill_size == default.profile.chunked_prefill_size
    assert default.context_length == default.profile.context_length
    assert default.served_model_name == "org/model"
    split = config("--dp-size", "4", "--max-running-requests", "100", "--chunked-prefill-size", "-1")
    assert (split.dp_size, split.limits.max_running_requests, split.limits.chunked_prefill_size) == (
        4,
        25,
        -1,
    )


@pytest.mark.parametrize(
    ("flags", "max_bs"),
    [
        ([], 256),
        (["--disable-cuda-graph"], 0),
        (["--cuda-graph-backend-decode", "disabled"], 0),
        (["--disable-cuda-graph", "--cuda-graph-backend-decode", "full"], 256),  # the later switch wins
        (["--cuda-graph-bs-decode", "1", "2", "48"], 48),
        (["--cuda-graph-max-bs-decode", "64", "--cuda-graph-config", '{"decode": {"max_bs": 32}}'], 32),
    ],
)
def test_decode_cuda_graph_switches_resolve_with_sglangs_precedence(flags: list[str], max_bs: int) -> None:
    assert config(*flags).model.cuda_graph_max_bs == max_bs


def test_speculative_decoding_defaults_to_a_chain_draft_of_the_profiles_step_count() -> None:
    resolved = config("--speculative-algorithm", "EAGLE3")
    speculation = resolved.model.speculation
    assert speculation is not None
    assert (speculation.num_steps, speculation.num_draft_tokens) == (3, 4)
    assert speculation.accept_length == pytest.approx(mean_accept_length(resolved.profile.acceptance_rate, 3))
    assert resolved.effective_args["speculative_num_draft_tokens"] == 4
    assert config().model.speculation is None


def test_effective_args_list_every_field_with_given_values_over_defaults() -> None:
    resolved = config("--tp-size", "2", "--mem-fraction-static", "0.88", "--trust-remote-code")
    assert list(resolved.effective_args)[: len(flag_table()["fields"])] == list(flag_table()["fields"])
    assert resolved.effective_args["tp_size"] == 2
    assert resolved.effective_args["mem_fraction_static"] == 0.88
    assert resolved.effective_args["max_running_requests"] == resolved.profile.max_running_requests
    assert resolved.not_modelled == ["--trust-remote-code", "--mem-fraction-static"]
    json.dumps(resolved.effective_args)  # /server_info must be able to send it


def test_launch_command_spells_the_non_default_flags() -> None:
    resolved = config("--tp", "8", "--cuda-graph-bs-decode", "1", "2", "--enable-metrics")
    assert (
        resolved.launch_command
        == "--model-path org/model --tp-size 8 --enable-metrics --cuda-graph-bs-decode 1 2"
    )


def test_sglang_config_files_are_refused_rather_than_silently_ignored() -> None:
    with pytest.raises(ConfigError, match="--config"):
        config("--config", "server.yaml")


def test_faults_from_several_flags_combine() -> None:
    resolved = config("--sim-fault", "crash-after=5,http-500-rate=0.25", "--sim-fault", "slow-start=2")
    assert resolved.faults.describe() == {"crash-after": 5, "http-500-rate": 0.25, "slow-start": 2.0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sim-time-scale", "nan"], "argument --sim-time-scale: must be a finite number, got nan"),
        (
            ["--sim-time-scale", "0"],
            "argument --sim-time-scale: must be a number from 0.0001 to 10000 (a factor), got 0",
        ),
        (["--sim-load-seconds", "inf"], "argument --sim-load-seconds: must be a finite number, got inf"),
        (
            ["--sim-load-seconds", "-1"],
            "argument --sim-load-seconds: must be a number from 0 to 604800 seconds, got -1",
        ),
        (["--sim-noise", "nan"], "argument --sim-noise: must be a finite number, got nan"),
        (["--sim-noise", "51"], "argument --sim-noise: must be a number from 0 to 50 percent, got 51"),
        (["--sim-noise", "-1"], "argument --sim-noise: must be a number from 0 to 50 percent, got -1"),
        (
            ["--sim-seed", "-1"],
            "argument --sim-seed: must be an integer from 0 to 4,294,967,295 (a 32-bit seed), got -1",
        ),
        (
            ["--sim-fault", "slow-start=nan"],
            "argument --sim-fault: slow-start: must be a finite number, got nan",
        ),
        (
            ["--sim-fault", "crash-after=99999999999"],
            "argument --sim-fault: crash-after: must be an integer from 0 to 10,000,000 requests, "
            "got 99999999999",
        ),
        (
            ["--sim-predict", "16,99999999999"],
            "argument --sim-predict: '16,99999999999': OUTPUT_LEN must be an integer from 1 to 10,000,000 "
            "tokens, got 99999999999",
        ),
        (["--sim-trace", ""], "argument --sim-trace: an empty path: name the file to append to"),
    ],
)
def test_the_simulators_own_numbers_are_finite_and_within_a_real_runs_range(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parser().parse_args(["--model-path", "m", *argv])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"fairbench sim: error: {message}"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tp-size", "0"], "--tp-size: must be an integer from 1 to 4,096 GPUs, got 0"),
        (["--ep-size", "-1"], "--ep-size: must be an integer from 1 to 4,096 GPUs, got -1"),
        (["--dp-size", "5000"], "--dp-size: must be an integer from 1 to 4,096 GPUs, got 5000"),
        (
            ["--max-running-requests", "0"],
            "--max-running-requests: must be an integer from 1 to 1,000,000 requests, got 0",
        ),
        (["--port", "65536"], "--port: must be an integer from 1 to 65,535 (a TCP port), got 65536"),
        (
            ["--context-length", "0"],
            "--context-length: must be an integer from 1 to 10,000,000 tokens, got 0",
        ),
        (
            ["--chunked-prefill-size", "20000000"],
            "--chunked-prefill-size: must be an integer from 1 to 10,000,000 tokens, got 20000000 "
            "(or -1: no chunking)",
        ),
        (
            ["--num-continuous-decode-steps", "100000000"],
            "--num-continuous-decode-steps: must be an integer from 1 to 10,000,000 decode steps, "
            "got 100000000",
        ),
        (
            ["--decode-log-interval", "0"],
            "--decode-log-interval: must be an integer from 1 to 10,000,000 decode steps, got 0",
        ),
        (
            ["--max-total-tokens", "-1"],
            "--max-total-tokens: must be an integer from 1 to 1,000,000,000 tokens, got -1",
        ),
        (
            ["--cuda-graph-bs-decode", "8", "0"],
            "--cuda-graph-bs-decode: must be an integer from 1 to 1,000,000 requests, got 0",
        ),
        (
            ["--cuda-graph-config", '{"decode": {"max_bs": NaN}}'],
            "--cuda-graph-config['decode'].max_bs: must be a finite number, got nan",
        ),
        (
            ["--cuda-graph-config", '{"decode": {"bs": 8}}'],
            "--cuda-graph-config['decode'].bs: must be a list of batch sizes, got 8",
        ),
        (
            ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "0"],
            "--speculative-num-steps: must be an integer from 1 to 10,000,000 decode steps, got 0",
        ),
    ],
)
def test_sglang_flags_the_simulator_models_are_refused_outside_a_real_runs_range(
    flags: list[str], message: str
) -> None:
    # SGLang's parser takes these (they are integers), so the refusal comes when they are resolved.
    parser().parse_args(["--model-path", "m", *flags])
    with pytest.raises(ConfigError) as error:
        config(*flags)
    assert str(error.value) == message


def write_profile(tmp_path: Path, name: str, edit: Callable[[str], str]) -> str:
    path = tmp_path / f"{name}.yaml"
    generic = resources.files("fairbench.sim").joinpath("profiles", "generic.yaml").read_text()
    path.write_text(edit(generic))
    return str(path)


def test_a_profile_that_is_not_yaml_is_refused_in_one_line(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "broken", lambda _: ": : not [yaml\n")
    with pytest.raises(ConfigError) as error:
        config("--sim-profile", path)
    assert str(error.value) == (
        f"--sim-profile: {path}: not valid YAML: expected <block end>, but found ':' (line 1, column 1)"
    )


@pytest.mark.parametrize(
    ("pattern", "value", "message"),
    [
        (
            r"t0_ms: [0-9.]+",
            "t0_ms: .nan",
            "profile nan-step: layouts.default.t0_ms: must be a finite number, got nan",
        ),
        (
            r"draft_step_ms: [0-9.]+",
            "draft_step_ms: .inf",
            "profile nan-step: speculative.draft_step_ms: must be a finite number, got inf",
        ),
        (
            r"(?m)^context_length: [0-9]+",
            "context_length: .inf",
            "profile nan-step: context_length: must be a finite number, got inf",
        ),
    ],
)
def test_a_profile_number_that_is_nan_or_infinite_is_refused(
    tmp_path: Path, pattern: str, value: str, message: str
) -> None:
    path = write_profile(tmp_path, "nan-step", lambda text: re.sub(pattern, value, text, count=1))
    with pytest.raises(ConfigError) as error:
        config("--sim-profile", path)
    assert str(error.value) == "--sim-profile: " + message


@pytest.mark.parametrize(
    ("config_json", "problem"),
    [
        (
            {"max_position_embeddings": 4096, "rope_scaling": {"factor": float("nan")}},
            "rope_scaling.factor: must be a finite number, got nan",
        ),
        (
            {"max_position_embeddings": "4096"},
            "max_position_embeddings: a number is required, got '4096'",
        ),
        (
            {"max_position_embeddings": -5},
            "its context length must be an integer from 1 to 10,000,000 tokens, got -5",
        ),
    ],
)
def test_a_model_directory_whose_context_length_is_no_usable_number_is_refused(
    tmp_path: Path, config_json: dict[str, Any], problem: str
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config_json))
    with pytest.raises(ConfigError) as error:
        resolve(parser().parse_args(["--model-path", str(tmp_path)]))
    assert str(error.value) == f"--model-path: {tmp_path / 'config.json'}: {problem}"


# --- several nodes ----------------------------------------------------------------------------------------

MULTI_NODE = ("--tp-size", "2", "--nnodes", "2", "--dist-init-addr", "10.0.0.1:5000")


def test_a_single_node_meets_nobody_and_ignores_the_dist_init_address() -> None:
    nodes = config("--dist-init-addr", "not an address").nodes
    assert (nodes.nnodes, nodes.node_rank, nodes.rendezvous) == (1, 0, None)


@pytest.mark.parametrize(
    ("flags", "rank", "host", "port"),
    [
        ([*MULTI_NODE], 0, "10.0.0.1", 5000),
        ([*MULTI_NODE, "--node-rank", "1"], 1, "10.0.0.1", 5000),
        (
            ["--tp-size", "8", "--nnodes", "4", "--node-rank", "3", "--nccl-init-addr", "[::1]:29500"],
            3,
            "::1",
            29500,
        ),
        (["--tp-size", "1", "--pp-size", "2", "--nnodes", "2", "--dist-init-addr", "node0:1"], 0, "node0", 1),
    ],
)
def test_the_node_flags_resolve_into_the_rendezvous_of_rank_0(
    flags: list[str], rank: int, host: str, port: int
) -> None:
    resolved = config(*flags, "--sim-join-timeout-s", "7", "--sim-heartbeat-s", "0.5")
    nodes = resolved.nodes
    assert nodes.node_rank == rank
    assert nodes.rendezvous is not None
    assert (nodes.rendezvous.host, nodes.rendezvous.port) == (host, port)
    assert (nodes.join_timeout_s, nodes.heartbeat_s, nodes.silence_s) == (7, 0.5, 1.5)
    # The server's layout does not change: tp-size is the total over the nodes.
    assert resolved.effective_args["tp_size"] == int(flags[1])
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(resolved.not_modelled)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nnodes", "0"], "--nnodes: must be an integer from 1 to 64 hosts, got 0"),
        (
            [*MULTI_NODE, "--node-rank", "2"],
            "--node-rank: must be an integer from 0 to 1 (below --nnodes 2), got 2",
        ),
        (
            [*MULTI_NODE, "--node-rank", "-1"],
            "--node-rank: must be an integer from 0 to 1 (below --nnodes 2), got -1",
        ),
        (["--node-rank", "1"], "--node-rank: must be an integer from 0 to 0 (below --nnodes 1), got 1"),
        (
            ["--tp-size", "2", "--nnodes", "2"],
            "--dist-init-addr: required with --nnodes 2: rank 0's HOST:PORT, where the nodes meet",
        ),
        (
            ["--tp-size", "3", "--nnodes", "2", "--dist-init-addr", "10.0.0.1:5000"],
            "--tp-size: tp_size must be divisible by number of nodes: --tp-size 3 x --pp-size 1 over "
            "--nnodes 2",
        ),
        (
            [*MULTI_NODE, "--dp-size", "2"],
            "--dp-size: multi-node data-parallel replicas are not supported (--dp-size 2 with --nnodes 2); "
            "use attention DP (--attn-dp-size) across nodes",
        ),
        (
            ["--tp-size", "2", "--nnodes", "2", "--dist-init-addr", "10.0.0.1"],
            "--dist-init-addr: '10.0.0.1': expected HOST:PORT, e.g. 10.0.0.1:5000",
        ),
        (
            ["--tp-size", "2", "--nnodes", "2", "--dist-init-addr", ":5000"],
            "--dist-init-addr: ':5000': expected HOST:PORT, e.g. 10.0.0.1:5000",
        ),
        (
            ["--tp-size", "2", "--nnodes", "2", "--dist-init-addr", "::1:5000"],
            "--dist-init-addr: '::1:5000': an IPv6 host must be in brackets: [HOST]:PORT, e.g. 10.0.0.1:5000",
        ),
        (
            ["--tp-size", "2", "--nnodes", "2", "--dist-init-addr", "10.0.0.1:0"],
            "--dist-init-addr: '10.0.0.1:0': the port must be an integer from 1 to 65,535 (a TCP port), "
            "got 0",
        ),
        (
            ["--tp-size", "2", "--nnodes", "2", "--dist-init-addr", "10.0.0.1:http"],
            "--dist-init-addr: '10.0.0.1:http': the port must be an integer from 1 to 65,535 (a TCP port)",
        ),
    ],
)
def test_node_flags_that_cannot_be_served_are_refused_naming_the_flag(flags: list[str], message: str) -> None:
    parser().parse_args(["--model-path", "m", *flags])  # SGLang's parser takes them all
    with pytest.raises(ConfigError) as error:
        config(*flags)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--sim-join-timeout-s", "-1"],
            "argument --sim-join-timeout-s: must be a number from 0 to 604800 seconds, got -1",
        ),
        (
            ["--sim-heartbeat-s", "0"],
            "argument --sim-heartbeat-s: must be a number from 0.01 to 60 seconds, got 0",
        ),
    ],
)
def test_the_rendezvous_timings_are_refused_outside_their_range(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["--model-path", "m", *argv])
    assert capsys.readouterr().err.splitlines()[-1] == f"fairbench sim: error: {message}"
