"""The campaign files' JSON Schema: the committed file is the generated one, the shipped campaigns name it on
their first line, and it agrees with the loader: on the shipped campaigns, on broken ones, on every flag of
SGLang's table and at every range's ends."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import load_campaign, parse_campaign
from fairbench.campaign.model import LOADS, TRACE_SETS
from fairbench.campaign.schema import campaign_schema, main, schema_text
from fairbench.campaign.sglang_flags import sglang_flags

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "campaigns" / "campaign.schema.json"
SHIPPED = [*sorted((REPO / "campaigns").glob("*.yml")), REPO / "tests" / "lab" / "campaign-short.yml"]
MODELINE = re.compile(r"# yaml-language-server: \$schema=(\S+)")
SOURCE = "x.yml"

VALIDATOR = jsonschema.Draft202012Validator(campaign_schema())

VALID: dict[str, Any] = {
    "name": "k26",
    "engine": "sglang",
    "model": "moonshotai/Kimi-K2.6",
    "common": {"args": {"trust-remote-code": True}, "env": {"NCCL_DEBUG": "WARN"}},
    "configs": {"tp8": {"args": {"tp-size": 8}}, "tp8-ll": {"extends": "tp8", "env": {"NCCL_PROTO": "LL"}}},
    "workload": {
        "api": "completions",
        "dataset": "random-ids",
        "input_len": 1024,
        "output_len": 512,
        "concurrency": [1],
        "prompts_per_level": 16,
        "warmup": 0,
    },
}

KeyPath = list[str | int]

OPEN_LOOP: dict[str, Any] = {
    **VALID,
    "workload": {
        **{key: value for key, value in VALID["workload"].items() if key != "concurrency"},
        "request_rate": [1.0],
        "max_concurrency": 1,
    },
}
"""VALID as an open loop."""
TRACE: dict[str, Any] = {
    **VALID,
    "workload": {
        **{key: value for key, value in VALID["workload"].items() if key not in (*TRACE_SETS, *LOADS)},
        "dataset": "trace",
        "trace": {"path": "tests/fixtures/traces/sample.jsonl"},
        "trace_speedup": [1.0],
    },
}
"""VALID as a replayed trace (a sample written by ``fairbench trace sample``)."""


def without_workload_key(base: dict[str, Any], key: str) -> dict[str, Any]:
    return {**base, "workload": {name: value for name, value in base["workload"].items() if name != key}}


def loader_error_paths(document: object) -> list[KeyPath]:
    """The key path of every error the loader reports ([] for one about the whole file)."""
    try:
        parse_campaign(yaml.safe_dump(document, sort_keys=False), SOURCE, Path())
    except CampaignError as error:
        return [key_path(message) for message in error.messages]
    return []


def key_path(message: str) -> KeyPath:
    """``x.yml: configs.tp8.args.tp-size: rule`` -> ["configs", "tp8", "args", "tp-size"]."""
    match = re.match(rf"{re.escape(SOURCE)}: ([^ :]+): ", message)
    if match is None:
        return []
    return [
        int(part[1:-1]) if part.startswith("[") else part for part in re.findall(r"\[\d+\]|[^.\[]+", match[1])
    ]


def schema_error_paths(document: object) -> list[KeyPath]:
    """The key path of every error of the schema, and where a value fails all the alternatives of an
    ``anyOf``, of each alternative's own errors too: automatic repeats' ``min`` is refused at its key."""
    paths = []
    errors = list(VALIDATOR.iter_errors(document))
    while errors:
        error = errors.pop()
        paths.append(list(error.absolute_path))
        errors.extend(error.context or [])
    return paths


def edited(path: KeyPath, value: Any, base: dict[str, Any] = VALID) -> dict[str, Any]:
    """``base`` (VALID) with the value at ``path`` set (a list index replaces that item)."""
    document = copy.deepcopy(base)
    node: Any = document
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    node[path[-1]] = value
    return document


# --- the committed file and the shipped campaigns ----------------------------------------------------


def test_the_committed_schema_is_the_generated_one() -> None:
    assert SCHEMA.read_text(encoding="utf-8") == schema_text(), (
        "campaigns/campaign.schema.json is stale: .venv/bin/python -m fairbench.campaign.schema "
        "campaigns/campaign.schema.json"
    )


def test_the_schema_is_a_draft_2020_12_schema_with_its_identity() -> None:
    schema = campaign_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] and schema["title"] and "SGLang 0.5.23" in schema["description"]


def test_python_m_fairbench_campaign_schema_writes_the_committed_text(tmp_path: Path) -> None:
    assert main([str(tmp_path / "campaign.schema.json")]) == 0
    assert (tmp_path / "campaign.schema.json").read_text(encoding="utf-8") == SCHEMA.read_text(
        encoding="utf-8"
    )


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.name)
def test_a_shipped_campaign_names_the_schema_on_its_first_line(path: Path) -> None:
    first_line = path.read_text(encoding="utf-8").splitlines()[0]
    match = MODELINE.fullmatch(first_line)
    assert match is not None, first_line
    assert (path.parent / match[1]).resolve() == SCHEMA


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.name)
def test_a_shipped_campaign_passes_the_schema_and_the_loader(path: Path) -> None:
    assert load_campaign(path).configs
    assert schema_error_paths(yaml.safe_load(path.read_text(encoding="utf-8"))) == []


def test_yaml_errors_count_the_modeline_as_the_files_first_line(tmp_path: Path) -> None:
    campaign = tmp_path / "x.yml"
    campaign.write_text("# yaml-language-server: $schema=campaign.schema.json\nname: a\nname: b\n")
    with pytest.raises(CampaignError) as caught:
        load_campaign(campaign)
    assert caught.value.messages == [f"{campaign}:3: duplicate key 'name' (first at line 2)"]


# --- broken campaigns: the loader and the schema object at the same place ---------------------------


BROKEN: dict[str, Callable[[], dict[str, Any]]] = {
    "unknown top-level key": lambda: edited(["nmae"], "k26"),
    "unknown workload key": lambda: edited(["workload", "input_length"], 1024),
    "unknown config key": lambda: edited(["configs", "tp8", "argz"], {}),
    "unknown SGLang flag": lambda: edited(["configs", "tp8", "args", "tp-sise"], 8),
    "a flag the campaign refuses": lambda: edited(["common", "args", "model-path"], "/models/k2"),
    "an alias of a flag": lambda: edited(["common", "args", "tensor-parallel-size"], 8),
    "missing workload": lambda: {key: value for key, value in VALID.items() if key != "workload"},
    "a switch given a value": lambda: edited(["common", "args", "trust-remote-code"], "yes please"),
    "an integer flag given a word": lambda: edited(["common", "args", "stream-interval"], "often"),
    "a float flag given a list": lambda: edited(["common", "args", "mem-fraction-static"], [0.8, 0.9]),
    "a list for a flag of one value": lambda: edited(["common", "args", "stream-interval"], [1, 2]),
    "concurrency not a list": lambda: edited(["workload", "concurrency"], 4),
    "a variable holding a list": lambda: edited(["common", "env", "NCCL_PROTO"], ["LL"]),
    "a variable holding a boolean": lambda: edited(["common", "env", "NCCL_DEBUG"], True),
    "configs not a mapping": lambda: edited(["configs"], ["tp8"]),
    "no configs": lambda: edited(["configs"], {}),
    "unset not a list": lambda: edited(["configs", "tp8", "unset"], {"env": "NCCL_DEBUG"}),
    "input_len 0": lambda: edited(["workload", "input_len"], 0),
    "output_len beyond its range": lambda: edited(["workload", "output_len"], 10**8),
    "a level of 0": lambda: edited(["workload", "concurrency"], [0]),
    "a level twice": lambda: edited(["workload", "concurrency"], [1, 1]),
    "a negative seed": lambda: edited(["workload", "seed"], -1),
    "tp-size 0": lambda: edited(["configs", "tp8", "args", "tp-size"], 0),
    "max-running-requests beyond its range": lambda: edited(
        ["common", "args", "max-running-requests"], 10**7
    ),
    "start_timeout_s of a month": lambda: edited(["start_timeout_s"], 30 * 24 * 3600),
    "prompts_per_level neither N nor Nx": lambda: edited(["workload", "prompts_per_level"], "x10"),
    "an engine fairbench lacks": lambda: edited(["engine"], "vllm"),
    "an API fairbench lacks": lambda: edited(["workload", "api"], "rest"),
    "a dataset that is no JSON file": lambda: edited(["workload", "dataset"], "prompts.txt"),
    "an SGLang flag's value beyond its choices": lambda: edited(["common", "args", "schedule-policy"], "sjf"),
    "a unit name with a space": lambda: edited(["name"], "k2 6"),
    "a config name with a slash": lambda: edited(["configs", "tp/8"], {}),
    "an environment variable's name with a dash": lambda: edited(["common", "env", "NCCL-PROTO"], "LL"),
    "a flag spelled with '--'": lambda: edited(["common", "sim", "--sim-profile"], "k2"),
    "a model holding a line end": lambda: edited(["model"], "moonshotai/Kimi-K2.6\nExecStartPre=/bin/true"),
    "a blank model": lambda: edited(["model"], " "),
    "an objective of no metric": lambda: edited(["slo"], {"ttft_p99": 2000}),
    "an objective's limit of 0": lambda: edited(["slo"], {"ttft_p99_ms": 0}),
    "repeats neither a count nor auto": lambda: edited(["workload", "repeats"], "often"),
    "an unknown key of automatic repeats": lambda: edited(["workload", "repeats"], {"maxi": 3}),
    "automatic repeats' half-width of 0": lambda: edited(["workload", "repeats"], {"half_width_pct": 0}),
    "neither concurrency nor request_rate": lambda: without_workload_key(VALID, "concurrency"),
    "both concurrency and request_rate": lambda: edited(["workload", "concurrency"], [1], OPEN_LOOP),
    "request_rate without max_concurrency": lambda: without_workload_key(OPEN_LOOP, "max_concurrency"),
    "max_concurrency with concurrency": lambda: edited(["workload", "max_concurrency"], 4),
    "arrival with concurrency": lambda: edited(["workload", "arrival"], "gamma"),
    "a rate of 0": lambda: edited(["workload", "request_rate", 0], 0, OPEN_LOOP),
    "a rate twice": lambda: edited(["workload", "request_rate"], [2, 2.0], OPEN_LOOP),
    "an arrival fairbench lacks": lambda: edited(["workload", "arrival"], "uniform", OPEN_LOOP),
    "a burstiness of 0": lambda: edited(["workload", "burstiness"], 0, OPEN_LOOP),
    "a search over rates": lambda: edited(["workload", "search_resolution"], 4, OPEN_LOOP),
}


@pytest.mark.parametrize("make", BROKEN.values(), ids=BROKEN.keys())
def test_the_schema_rejects_a_structural_mistake_where_the_loader_names_it(
    make: Callable[[], dict[str, Any]],
) -> None:
    document = make()
    loader_paths = loader_error_paths(document)
    schema_paths = schema_error_paths(document)
    assert loader_paths and schema_paths
    # The schema names a key's mapping where the key is unknown or missing, the key itself otherwise.
    assert any(
        loader_path[: len(schema_path)] == schema_path and len(loader_path) - len(schema_path) <= 1
        for loader_path in loader_paths
        for schema_path in schema_paths
    ), (loader_paths, schema_paths)


# --- every flag of SGLang's table, and every range's ends --------------------------------------------


ARGS_SCHEMA: dict[str, Any] = campaign_schema()["$defs"]["args"]["properties"]
PARSED_FROM_TEXT = {"human_readable_int", "loads", "json_list_type", "parse_cuda_graph_config_arg"}
"""Converters that parse a string: the schema takes any, the loader only what the converter reads."""


def samples() -> dict[str, dict[str, Any]]:
    """Each kind of value for every flag the schema names, and each flag's own choices."""
    options = sglang_flags()
    with_choices = {flag: options[flag]["choices"] for flag in ARGS_SCHEMA if options[flag]["choices"]}
    return {
        **{repr(value): dict.fromkeys(ARGS_SCHEMA, value) for value in KINDS},
        "a choice": {flag: choices[0] for flag, choices in with_choices.items()},
        "two choices": {flag: choices[-2:] for flag, choices in with_choices.items()},
    }


KINDS = (True, False, 8, 0.5, "some-word", [1, 2], ["some", "words"])
SAMPLES = samples()


def refused_flags(paths: list[KeyPath]) -> set[str]:
    return {str(path[2]) for path in paths if path[:2] == ["common", "args"] and len(path) > 2}


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_schema_and_the_loader_agree_on_every_flag_of_the_table(sample: str) -> None:
    document = edited(["common", "args"], SAMPLES[sample])
    by_loader = refused_flags(loader_error_paths(document))
    by_schema = refused_flags(schema_error_paths(document))
    assert by_schema <= by_loader  # the schema never refuses what the loader takes
    options = sglang_flags()
    only_by_loader = {flag for flag in by_loader - by_schema if options[flag]["type"] not in PARSED_FROM_TEXT}
    assert only_by_loader == set()
    # Each kind of value is wrong for some flags (two choices for a flag of one value); a choice for none.
    assert bool(by_loader) is (sample != "a choice")


def numeric_ranges(
    schema: dict[str, Any], path: KeyPath, root: dict[str, Any]
) -> Iterator[tuple[KeyPath, Any]]:
    """Each range of integers or numbers of the schema, with the key path of its value, through properties,
    list items, alternatives and references (not the configs' names, which a path cannot hold)."""
    if "$ref" in schema:
        yield from numeric_ranges(root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], path, root)
    if schema.get("type") in ("integer", "number") and "minimum" in schema:
        yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from numeric_ranges(child, [*path, key], root)
    if "items" in schema:
        yield from numeric_ranges(schema["items"], [*path, 0], root)
    for alternative in schema.get("anyOf", []):
        yield from numeric_ranges(alternative, path, root)


RANGES = list(numeric_ranges(campaign_schema(), [], campaign_schema()))
RANGE_CONTEXT: dict[str, dict[str, Any]] = {
    "workload.request_rate.0": OPEN_LOOP,
    "workload.max_concurrency": OPEN_LOOP,
    "workload.burstiness": OPEN_LOOP,
    "workload.search_resolution": {**VALID, "slo": {"ttft_p99_ms": 2000}},
    "workload.trace.start_s": TRACE,
    "workload.trace.duration_s": TRACE,
    "workload.trace.count": TRACE,
    "workload.trace_speedup.0": TRACE,
    "workload.repeats.min": edited(["workload", "repeats"], {"max": 1000}),
    "workload.repeats.max": edited(["workload", "repeats"], {"min": 2}),
    # An accuracy task's keys, in a task that reads them: its count is problems, an lm-eval task's limit.
    **{
        f"accuracy.{key}": {**VALID, "accuracy": {"task": "arithmetic"}}
        for key in ("problems", "seed", "max_tokens", "concurrency", "max_drop_pct")
    },
    "accuracy.limit": {**VALID, "accuracy": {"lm_eval": "gsm8k"}},
}
"""The campaign in which a key's range is all that judges it: an open loop's keys in an open loop, a
search with an SLO, one end of automatic repeats with the other out of its way."""


def test_the_ranges_cover_the_workload_the_timeout_and_the_bounded_flags() -> None:
    paths = {".".join(map(str, path)) for path, _ in RANGES}
    assert {"workload.input_len", "workload.concurrency.0", "workload.warmup", "start_timeout_s"} <= paths
    assert {"common.args.tp-size", "common.args.max-running-requests"} <= paths
    assert {"workload.repeats", "workload.repeats.min", "workload.repeats.half_width_pct"} <= paths
    assert set(RANGE_CONTEXT) <= paths


@pytest.mark.parametrize(("path", "bounds"), RANGES, ids=[".".join(map(str, path)) for path, _ in RANGES])
def test_the_schema_and_the_loader_agree_at_each_ranges_ends(path: KeyPath, bounds: dict[str, Any]) -> None:
    low, high = bounds["minimum"], bounds["maximum"]
    base = RANGE_CONTEXT.get(".".join(map(str, path)), VALID)
    for value, accepted in ((low - 1, False), (low, True), (high, True), (high + 1, False)):
        document = edited(path, value, base)
        at_path = [p for p in loader_error_paths(document) if p[: len(path)] == path]
        assert (at_path == []) is accepted, (value, at_path)
        schema_at_path = [p for p in schema_error_paths(document) if p[: len(path)] == path]
        assert (schema_at_path == []) is accepted, (value, schema_at_path)
