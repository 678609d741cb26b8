"""The rules across keys, checked on each config's expanded settings and on the workload.

Errors: ``ep-size`` must divide ``tp-size``, ``enable-eplb`` needs ``ep-size`` > 1, a flag may not be
given both in ``sim`` and in ``args``, a config's ``nodes`` must divide its GPUs (each host runs the same
share), a server over several hosts holds no data-parallel replicas and needs ``placement: spread``, a
disaggregated config's servers share no GPU and its ``nodes`` stays 1, and
``workload.search_resolution`` needs an SLO to search for, and ``expected_start_s`` may not exceed
``start_timeout_s``.
Warnings: CUDA graph settings that differ from ``common`` (they make a comparison unfair unless that is
its point), ``sim`` flags of a campaign whose engine is sglang, requests in flight above a config's
``max-running-requests`` (the excess requests queue in the server: a closed loop's levels, an open loop's
``max_concurrency``), a closed loop's levels that get fewer prompts than their concurrency, and a
speculative config (``speculative-algorithm``) measured on random prompts, where its acceptance is not real
text's. A config is
blamed only for a problem its parent lacks, so a mistake in one config is not reported again for every
config that extends it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fairbench.campaign.disaggregation import gpu_sharing_problems
from fairbench.campaign.findings import Findings, join_path
from fairbench.campaign.model import (
    DISAGGREGATION_KEY,
    EVERY_HOST,
    PREFILL,
    ArgValue,
    ServingConfig,
    Settings,
    Workload,
    dp_size_counts_replicas,
    within,
)
from fairbench.campaign.structure import Layer
from fairbench.measure.bounds import GPUS, RUNNING_REQUESTS
from fairbench.measure.slo import SloTarget
from fairbench.measure.workload import CHAT, COMPLETIONS, GENERATED

_SGLANG_DEFAULTS = {"tp-size": 1, "ep-size": 1}


@dataclass(frozen=True)
class _Problem:
    key: str
    """Its path below the config, e.g. ``args.ep-size``."""
    rule: str
    warning: bool = False


def _parallelism_problems(args: Mapping[str, ArgValue]) -> list[_Problem]:
    tp_size = args.get("tp-size", _SGLANG_DEFAULTS["tp-size"])
    ep_size = args.get("ep-size", _SGLANG_DEFAULTS["ep-size"])
    default_note = "" if "tp-size" in args else " (SGLang's default)"
    problems = []
    if within(tp_size, GPUS) and within(ep_size, GPUS) and tp_size % ep_size:
        problems.append(
            _Problem("args.ep-size", f"{ep_size} does not divide tp-size {tp_size}{default_note}")
        )
    if args.get("enable-eplb") is True and within(ep_size, GPUS) and ep_size <= 1:
        problems.append(_Problem("args.enable-eplb", f"needs ep-size > 1, and ep-size is {ep_size}"))
    return problems


def _sim_flag_problems(config: ServingConfig) -> list[_Problem]:
    return [
        _Problem(f"sim.{key}", "is also an SGLang flag in args: give each flag once")
        for key in sorted(config.sim.keys() & config.args.keys())
    ]


def _node_problems(config: ServingConfig, placement: str) -> list[_Problem]:
    """A server over ``nodes`` hosts runs ``gpus / nodes`` GPUs on each, and holds no data-parallel
    replicas (SGLang's ``check_server_args`` refuses them); under ``every-host`` each job is one host, which
    such a server cannot fit."""
    problems = []
    dp_size = config.args.get("dp-size", 1)
    if config.nodes > 1 and dp_size_counts_replicas(config.args) and within(dp_size, GPUS) and dp_size > 1:
        problems.append(
            _Problem(
                "nodes",
                f"a server over {config.nodes} hosts cannot hold dp-size {dp_size} replicas: SGLang runs no "
                "multi-node data-parallel replicas (use attn-dp-size across the hosts)",
            )
        )
    if config.gpus % config.nodes:
        problems.append(
            _Problem(
                "nodes",
                f"{config.nodes} does not divide the server's {config.gpus} GPUs ({config.gpus_formula}): "
                "each of its hosts runs the same number",
            )
        )
    if placement == EVERY_HOST and config.nodes > 1:
        problems.append(
            _Problem(
                "nodes",
                f"a server over {config.nodes} hosts needs placement spread: every-host would run it on "
                "every host",
            )
        )
    return problems


def _disaggregation_problems(config: ServingConfig) -> list[_Problem]:
    """A disaggregated config's servers never share a GPU, and all run on the job's one host; its prefill
    servers use a transfer backend SGLang allows them."""
    if config.disaggregation is None:
        return []
    problems = [_Problem(DISAGGREGATION_KEY, rule) for rule in gpu_sharing_problems(config.disaggregation)]
    if any(
        server.role == PREFILL and server.args.get("disaggregation-transfer-backend") == "fake"
        for server in config.disaggregation.servers
    ):
        problems.append(
            _Problem(
                DISAGGREGATION_KEY,
                "its prefill servers would use disaggregation-transfer-backend fake, which SGLang 0.5.23 "
                "refuses for a prefill server (fake stands in for the transfer on a decode server alone)",
            )
        )
    if config.nodes > 1:
        problems.append(
            _Problem(
                "nodes",
                f"a disaggregated config runs its servers and router on one host, not {config.nodes}: "
                "give each server its GPUs on that host",
            )
        )
    return problems


def _cuda_graph_problems(config: ServingConfig) -> list[_Problem]:
    """CUDA graph settings must be the same for every config: a TP8 baseline once lacked the CUDA graphs
    its expert-parallel rivals had, and the comparison was unfair."""
    rule = "CUDA graph settings differ from common: the comparison is unfair unless that is its point"
    return [
        _Problem(f"args.{key}", rule, warning=True)
        for key in sorted({*config.declared.args, *config.unset.args})
        if "cuda-graph" in key
    ]


def report_problems(
    findings: Findings, configs: Mapping[str, ServingConfig], layers: Mapping[str, Layer], placement: str
) -> None:
    problems = {
        name: [
            *_parallelism_problems(config.args),
            *_sim_flag_problems(config),
            *_node_problems(config, placement),
            *_disaggregation_problems(config),
            *_cuda_graph_problems(config),
        ]
        for name, config in configs.items()
    }
    for name, config_problems in problems.items():
        parent = layers[name].extends
        inherited = set(problems[parent]) if parent is not None else set()
        for problem in config_problems:
            if problem not in inherited:
                report = findings.warn if problem.warning else findings.error
                report(f"configs.{name}.{problem.key}", problem.rule)


def warn_unused_sim_flags(findings: Findings, common: Settings, layers: Mapping[str, Layer]) -> None:
    if common.sim:
        findings.warn("common.sim", "ignored: the engine is sglang")
    for name, layer in layers.items():
        if layer.own.sim or layer.unset.sim:
            findings.warn(f"configs.{name}.sim", "ignored: the engine is sglang")


def warn_concurrency_above_capacity(
    findings: Findings, path: str, workload: Workload, configs: Mapping[str, ServingConfig]
) -> None:
    """Requests in flight above max-running-requests queue in the server: the client's concurrency is not
    the server's. A closed loop's levels are its requests in flight; an open loop's are at most its
    ``max_concurrency``."""
    in_flight: tuple[int, ...]
    if workload.open_loop:
        key = join_path(path, "max_concurrency")
        in_flight = () if workload.max_concurrency is None else (workload.max_concurrency,)
    else:
        key, in_flight = join_path(path, "concurrency"), workload.concurrency
    configs_by_limit: dict[int, list[str]] = {}
    largest = max(in_flight, default=0)
    for config in configs.values():
        limit = config.args.get("max-running-requests")
        if within(limit, RUNNING_REQUESTS) and largest > limit:
            configs_by_limit.setdefault(limit, []).append(config.name)
    for limit, names in configs_by_limit.items():
        above = ", ".join(str(level) for level in in_flight if level > limit)
        findings.warn(
            key,
            f"{above} above max-running-requests {limit} of {', '.join(names)}: the excess requests queue",
        )


def warn_levels_without_their_concurrency(findings: Findings, path: str, workload: Workload) -> None:
    """A closed loop's level with fewer prompts than its concurrency never has that many in flight. An open
    loop has no such level: how many are in flight follows from the rate and the server's pace, up to
    ``max_concurrency``."""
    short = [level for level in workload.concurrency if workload.prompts_at(level) < level]
    if short:
        findings.warn(
            join_path(path, "prompts_per_level"),
            f"fewer prompts than the concurrency at level {', '.join(map(str, short))}: "
            "such a level never has that many requests in flight",
        )


SPECULATIVE_ALGORITHM = "speculative-algorithm"


def speculates(config: ServingConfig) -> bool:
    """Whether the config's server decodes speculatively: its args set ``speculative-algorithm`` (SGLang
    reads ``NONE``, in any case, as none)."""
    algorithm = config.args.get(SPECULATIVE_ALGORITHM)
    return isinstance(algorithm, str) and algorithm.upper() != "NONE"


def random_prompts(workload: Workload) -> str | None:
    """What a workload's prompts are when no one wrote them, in words: random token ids (random words on
    the chat API), as every dataset fairbench generates sends them; None for real text, a ShareGPT-style
    file's (as the dataset, or a multi-turn workload's user turns)."""
    if workload.dataset not in GENERATED or (workload.multi_turn and workload.multi_turn.sharegpt):
        return None
    return "random words" if workload.api == CHAT else "random token ids"


def check_router_prompts(
    findings: Findings, path: str, workload: Workload, configs: Mapping[str, ServingConfig]
) -> None:
    """sglang-router 0.3.2 answers a token-id prompt on /v1/completions with 422 before any server sees
    it (its completion request takes text alone): a disaggregated config would fail every such request."""
    routed = [name for name, config in configs.items() if config.disaggregation is not None]
    if routed and workload.api == COMPLETIONS and random_prompts(workload) == "random token ids":
        findings.error(
            join_path(path, "api"),
            f"completions with random token ids: sglang-router refuses token-id prompts there (422), so "
            f"{', '.join(routed)} would answer none: use api generate (token ids) or chat (text)",
        )


def warn_speculation_on_random_prompts(
    findings: Findings, path: str, workload: Workload, configs: Mapping[str, ServingConfig]
) -> None:
    """A draft model's guesses are accepted as often as they match what the target model writes, which
    depends on the text: on random token ids (and on what a model writes after them, held past its end by
    ``ignore_eos``) the acceptance, and so the speed-up speculation gives, is not what real text gets."""
    what = random_prompts(workload)
    named = [
        f"{config.name} ({SPECULATIVE_ALGORITHM} {config.args[SPECULATIVE_ALGORITHM]})"
        for config in configs.values()
        if speculates(config)
    ]
    if what is None or not named:
        return
    text_key = "multi_turn.sharegpt" if workload.multi_turn else "dataset"
    findings.warn(
        join_path(path, "dataset"),
        f"{workload.dataset} sends {what}, and {', '.join(named)} "
        f"{'decodes' if len(named) == 1 else 'decode'} speculatively: a draft's acceptance on them is not "
        f"what real text gets, so neither is the speed-up; measure speculation on real text too "
        f"({text_key}: a ShareGPT-style file)",
    )


def check_expected_start(findings: Findings, expected_s: float | None, timeout_s: int | None) -> None:
    """A server expected to take longer to start than it may would never become healthy in time."""
    if expected_s is not None and timeout_s is not None and expected_s > timeout_s:
        findings.error(
            "expected_start_s",
            f"{expected_s:g} is above start_timeout_s {timeout_s}: every server would time out first",
        )


def check_search(findings: Findings, path: str, workload: Workload, slo: Sequence[SloTarget]) -> None:
    """A search bisects for the highest concurrency whose point meets the SLO: without one, none does. (An
    open loop's search is refused by the workload's own checks: it has no concurrency levels.)"""
    if workload.search_resolution is not None and not workload.open_loop and not slo:
        findings.error(
            join_path(path, "search_resolution"), "bisects for the highest load meeting the SLO: set slo"
        )
