"""A campaign's ``answers`` and ``accuracy`` keys: what each server start answers before its sweep, and what
its answers must hold (``fairbench.answers.plan`` owns the shape campaign.json keeps).

``answers`` (every key optional; absent, the defaults below; ``answers: {probes: 0}`` asks nothing):

- ``probes`` (16): how many of the probe set's prompts each start answers, drawn from ``seed`` (1);
- ``probe_file``: a YAML file of the campaign's own prompts (``prompts: [...]``), relative to the campaign
  file; absent, fairbench's own set (``answers/probes.yaml``);
- ``max_tokens`` (32): each answer's limit; ``api``: the first workload's; ``concurrency`` (1);
- ``min_identical_share``: the share of probes every config must answer exactly as the baseline does;
- ``match``: ``{config: other}``, configs that must answer every probe exactly as another. A speculative
  config (``speculative-algorithm`` set) that extends one without it must match it by default: under
  greedy decoding speculation may change the speed, never the answer.

``accuracy`` (absent: no task): ``task: arithmetic`` (fairbench's own, ``problems`` of them from ``seed``)
or ``lm_eval: <task>`` (``limit`` documents); ``max_tokens`` (256), ``concurrency`` (8), ``max_drop_pct``
(2): a config scoring below the baseline by more than this many points is not named best.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fairbench.answers.plan import (
    BUILT_IN_TASK,
    DEFAULT_MAX_DROP_PCT,
    DEFAULT_PROBE_TOKENS,
    DEFAULT_PROBES,
    DEFAULT_PROBLEMS,
    DEFAULT_SEED,
    DEFAULT_TASK_CONCURRENCY,
    DEFAULT_TASK_TOKENS,
    AccuracyPlan,
    AnswersPlan,
)
from fairbench.answers.probes import ProbeFileError, draw, file_prompts, shipped_prompts
from fairbench.campaign.checks import bounded, choice, keyed, mapping, number_in, unit_name_part, unit_string
from fairbench.campaign.findings import Findings, join_path
from fairbench.campaign.model import ServingConfig
from fairbench.measure.bounds import (
    CONCURRENCY,
    PERCENT_POINTS,
    PROBES,
    REQUESTS,
    SEED,
    SHARE,
    TOKENS,
)
from fairbench.measure.workload import APIS

ANSWERS_KEYS = (
    *("probes", "probe_file", "seed", "max_tokens", "api", "concurrency", "min_identical_share", "match"),
)
ACCURACY_KEYS = ("task", "lm_eval", "problems", "limit", "seed", "max_tokens", "concurrency", "max_drop_pct")
SPECULATIVE_FLAG = "speculative-algorithm"


def check_answers(
    findings: Findings,
    value: object,
    *,
    base_dir: Path,
    configs: Mapping[str, ServingConfig],
    first_api: str,
    accuracy: AccuracyPlan | None,
) -> AnswersPlan:
    """``answers`` (``value``: None where the campaign has none) with the configs it names checked, and the
    speculative configs' default ``match``."""
    fields = mapping(findings, "answers", {} if value is None else value, ANSWERS_KEYS)
    count = fields.get("probes", bounded(PROBES), DEFAULT_PROBES)
    seed = fields.get("seed", bounded(SEED), DEFAULT_SEED)
    probe_file = fields.get("probe_file", unit_string, None)
    prompts: list[str] = []
    if count:
        try:
            prompts = shipped_prompts() if probe_file is None else file_prompts(base_dir / probe_file)
        except ProbeFileError as exc:
            findings.error("answers.probe_file", str(exc))
    no_match: dict[str, str] = {}
    match = fields.get("match", lambda f, p, v: _match(f, p, v, list(configs)), no_match)
    return AnswersPlan(
        probes=draw(prompts, count, seed) if prompts else (),
        max_tokens=fields.get("max_tokens", bounded(TOKENS), DEFAULT_PROBE_TOKENS),
        api=fields.get("api", choice(APIS), first_api),
        concurrency=fields.get("concurrency", bounded(CONCURRENCY), 1),
        min_identical_share=fields.get("min_identical_share", number_in(SHARE, 1.0), None),
        match={**speculative_bases(configs), **match},
        accuracy=accuracy,
    )


def _match(findings: Findings, path: str, value: object, configs: Sequence[str]) -> dict[str, str]:
    found = {}
    for name, other in keyed(findings, path, value).items():
        where = join_path(path, name)
        other_name = unit_name_part(findings, where, other)
        for named in (name, other_name):
            if named not in configs:
                findings.error(where, f"{named!r} is not a config of the campaign ({', '.join(configs)})")
        if name == other_name:
            findings.error(where, "a config matched against itself checks nothing")
        found[name] = other_name
    return found


def speculative_bases(configs: Mapping[str, ServingConfig]) -> dict[str, str]:
    """Each speculative config whose nearest parent is not speculative, and that parent."""
    return {
        name: config.extends[0]
        for name, config in configs.items()
        if SPECULATIVE_FLAG in config.args
        and config.extends
        and config.extends[0] in configs
        and SPECULATIVE_FLAG not in configs[config.extends[0]].args
    }


def check_accuracy(findings: Findings, path: str, value: object) -> AccuracyPlan:
    """``accuracy``: fairbench's own task or an lm-eval task, one of ``task`` or ``lm_eval``."""
    fields = mapping(findings, path, value, ACCURACY_KEYS)
    task = fields.get("task", choice((BUILT_IN_TASK,)), None)
    lm_eval = fields.get("lm_eval", unit_string, None)
    if (task is None) == (lm_eval is None):
        findings.error(path, f"give one of task ({BUILT_IN_TASK}) or lm_eval (an lm-eval task's name)")
    if lm_eval is not None and "problems" in fields:
        findings.error(join_path(path, "problems"), "the count of fairbench's own task: lm_eval takes limit")
    if task is not None and "limit" in fields:
        findings.error(join_path(path, "limit"), "the count of an lm-eval task: task takes problems")
    count_key = "limit" if lm_eval is not None else "problems"
    return AccuracyPlan(
        task=lm_eval or task or BUILT_IN_TASK,
        lm_eval=lm_eval is not None,
        problems=fields.get(count_key, bounded(REQUESTS), DEFAULT_PROBLEMS),
        seed=fields.get("seed", bounded(SEED), DEFAULT_SEED),
        max_tokens=fields.get("max_tokens", bounded(TOKENS), DEFAULT_TASK_TOKENS),
        concurrency=fields.get("concurrency", bounded(CONCURRENCY), DEFAULT_TASK_CONCURRENCY),
        max_drop_pct=fields.get("max_drop_pct", number_in(PERCENT_POINTS, 2.0), DEFAULT_MAX_DROP_PCT),
    )
