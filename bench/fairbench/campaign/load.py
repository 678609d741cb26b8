"""Loading a campaign: its file read, every rule checked, its configs expanded into a ``Campaign``.

``load_campaign`` returns a ``Campaign`` whose configs are fully expanded: ``common``, then each config of
its ``extends`` chain (root first), each level first removing the keys it ``unset``s and then setting its
own; every config's launch arguments and environment rendered. It runs nothing. The file's keys are
described in ``fairbench.campaign.model``.

Every broken rule is collected, and all are raised together as one ``CampaignError``. Each message starts
with the file name, then the key path, then the rule::

    campaigns/x.yml: configs.ep4.args.ep-size: 3 does not divide tp-size 8

The checks, in the order a file meets them: its path, size and YAML (``source``), the structure of every
key (``structure``, ``sglang_flags``, ``workload``, ``fleet``, ``objectives``), the configs' expansion
(``expand``), then the rules across keys (``rules``). A campaign's warnings are kept in
``Campaign.warnings``. A file beyond ``MAX_CAMPAIGN_BYTES``, ``MAX_CAMPAIGN_NODES`` (aliases expanded) or
``MAX_EXPANDED_VALUES`` is refused as no campaign: any input is judged within a second.
"""

from __future__ import annotations

from pathlib import Path

from fairbench.campaign.answers import check_accuracy, check_answers
from fairbench.campaign.checks import Fields, bounded, choice, mapping, number_in, unit_name_part, unit_string
from fairbench.campaign.decide import check_baseline, check_decide
from fairbench.campaign.expand import expand
from fairbench.campaign.findings import Findings
from fairbench.campaign.fleet import host_fact_names, isolated_hosts
from fairbench.campaign.model import (
    DEFAULT_ISOLATED_HOSTS,
    DEFAULT_PLACEMENT,
    ENGINES,
    PLACEMENTS,
    SINGLE_WORKLOAD,
    TOP_KEYS,
    TOP_REQUIRED,
    WORKLOAD_TOP_KEYS,
    Campaign,
    Settings,
    Workload,
    workload_path,
)
from fairbench.campaign.objectives import check_slo
from fairbench.campaign.rules import (
    check_expected_start,
    check_router_prompts,
    check_search,
    report_problems,
    warn_concurrency_above_capacity,
    warn_levels_without_their_concurrency,
    warn_speculation_on_random_prompts,
    warn_unused_sim_flags,
)
from fairbench.campaign.source import check_source, read_text, yaml_document
from fairbench.campaign.structure import Layer, common_settings, config_layers
from fairbench.campaign.workload import STAND_IN_WORKLOAD, check_workload, check_workloads
from fairbench.measure.bounds import EXPECTED_START_S, START_TIMEOUT_S
from fairbench.measure.slo import SloTarget
from fairbench.measure.workload import APIS


def load_campaign(path: str | Path) -> Campaign:
    """Read, check and expand a campaign file; raises ``CampaignError``."""
    source = str(path)
    check_source(source)
    return _parse(read_text(path), source, Path(path).parent)


def parse_campaign(text: str, source: str, base_dir: Path) -> Campaign:
    """Check and expand campaign YAML; ``source`` starts every message, ``base_dir`` anchors dataset paths."""
    check_source(source)
    return _parse(text, source, base_dir)


def _parse(text: str, source: str, base_dir: Path) -> Campaign:
    document = yaml_document(text, source)
    findings = Findings(source)
    campaign = _campaign(findings, document, base_dir)
    findings.raise_errors()
    return campaign


def _workloads(findings: Findings, top: Fields, base_dir: Path, *, in_mapping: bool) -> dict[str, Workload]:
    """``workload`` (the campaign's one, ``SINGLE_WORKLOAD``) or ``workloads``, exactly one of them; neither
    is missing where the document is no mapping (its own error says so)."""
    given = [key for key in WORKLOAD_TOP_KEYS if key in top]
    if not given and in_mapping:
        findings.error("workload", "required key is missing")
    elif len(given) > 1:
        findings.error("workloads", "and workload both given: give the one workload, or the named ones")
    if given == ["workloads"]:
        return top.get("workloads", lambda f, p, v: check_workloads(f, p, v, base_dir), {})
    workload = top.get("workload", lambda f, p, v: check_workload(f, p, v, base_dir), STAND_IN_WORKLOAD)
    return {SINGLE_WORKLOAD: workload}


def _campaign(findings: Findings, document: object, base_dir: Path) -> Campaign:
    top = mapping(findings, "", document, TOP_KEYS, required=TOP_REQUIRED)
    name = top.get("name", unit_name_part, "invalid")
    engine = top.get("engine", choice(ENGINES), ENGINES[0])
    model = top.get("model", unit_string, "")
    common = top.get("common", common_settings, Settings({}, {}, {}))
    layers: dict[str, Layer] = top.get("configs", config_layers, {})
    workloads = _workloads(findings, top, base_dir, in_mapping=isinstance(document, dict))
    start_timeout_s = top.get("start_timeout_s", bounded(START_TIMEOUT_S), None)
    expected_start_s = top.get("expected_start_s", number_in(EXPECTED_START_S, 0.0), None)
    check_expected_start(findings, expected_start_s, start_timeout_s)
    placement = top.get("placement", choice(PLACEMENTS), DEFAULT_PLACEMENT)
    no_facts: tuple[str, ...] = ()
    accept_host_differences = top.get("accept_host_differences", host_fact_names, no_facts)
    isolated = top.get("isolated_hosts", isolated_hosts, DEFAULT_ISOLATED_HOSTS)
    no_objectives: tuple[SloTarget, ...] = ()
    slo = top.get("slo", check_slo, no_objectives)
    decide = top.get("decide", check_decide, None)
    configs = expand(findings, name, engine, model, common=common, layers=layers)
    accuracy = top.get("accuracy", check_accuracy, None)
    first_api = next(iter(workloads.values())).api if workloads else APIS[0]
    answers = check_answers(
        findings,
        top.get("answers", lambda _findings, _path, value: value, None),
        base_dir=base_dir,
        configs=configs,
        first_api=first_api,
        accuracy=accuracy,
    )
    check_baseline(findings, decide, list(layers))
    report_problems(findings, configs, layers, placement)
    if engine == "sglang":
        warn_unused_sim_flags(findings, common, layers)
    for workload_name, workload in workloads.items():
        path = workload_path(workload_name)
        warn_concurrency_above_capacity(findings, path, workload, configs)
        warn_levels_without_their_concurrency(findings, path, workload)
        warn_speculation_on_random_prompts(findings, path, workload, configs)
        check_router_prompts(findings, path, workload, configs)
        check_search(findings, path, workload, slo)
    return Campaign(
        source=findings.source,
        name=name,
        engine=engine,
        model=model,
        start_timeout_s=start_timeout_s,
        common=common,
        configs=configs,
        workloads=workloads,
        slo=slo,
        warnings=tuple(findings.warnings),
        placement=placement,
        accept_host_differences=accept_host_differences,
        isolated_hosts=isolated,
        expected_start_s=expected_start_s,
        decide=decide,
        answers=answers,
    )
