"""Malformed campaigns, generated: every one gets a CampaignError naming the file, never another exception."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import Campaign
from fairbench.campaign.workload import AUTO_REPEATS_KEYS
from fairbench.measure import bounds
from fairbench.measure.bounds import UNIT_LINE_ENDS, Bound, unit_text_problem
from fairbench.measure.repeats import AUTO

SOURCE = "campaigns/fuzz.yml"
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's when present: the same YAML, faster

VALID: dict[str, Any] = {
    "name": "k26",
    "engine": "sim",
    "model": "moonshotai/Kimi-K2.6",
    "start_timeout_s": 600,
    "common": {
        "args": {"trust-remote-code": True, "max-running-requests": 64, "cuda-graph-bs-decode": [1, 2]},
        "env": {"NCCL_DEBUG": "WARN"},
        "sim": {"sim-profile": "kimi-k2.6"},
    },
    "configs": {
        "tp8": {"args": {"tp-size": 8}},
        "tp8-nccl": {"extends": "tp8", "env": {"NCCL_PROTO": "LL"}, "unset": {"env": ["NCCL_DEBUG"]}},
        "ep8-eplb": {"args": {"tp-size": 8, "ep-size": 8, "enable-eplb": True}},
    },
    "workload": {
        "api": "chat",
        "dataset": "random-ids",
        "input_len": 256,
        "output_len": 64,
        "concurrency": [1, 4, 16],
        "prompts_per_level": "2x",
        "warmup": 0,
        "repeats": 2,
        "seed": 7,
    },
}
KNOWN_KEYS = sorted(
    {"name", "engine", "model", "configs", "workload", "common", "start_timeout_s", "extends", "unset"}
    | {"args", "env", "sim", "api", "dataset", "input_len", "output_len", "concurrency"}
    | {"prompts_per_level", "warmup", "repeats", "seed", "tp-size", "ep-size", "enable-eplb", "tp8"}
    | {"slo", "ttft_p99_ms", "request_rate", "arrival", "burstiness", "max_concurrency", "search_resolution"}
    | {"min", "max", "half_width_pct"}
)

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12)
keys = st.sampled_from(KNOWN_KEYS) | st.text(max_size=8) | st.integers(-3, 3) | st.booleans()
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=24,
)


def outcome(document: object) -> Campaign | CampaignError:
    """The campaign, or the error; any other exception fails the test."""
    text = yaml.dump(document, Dumper=DUMPER, sort_keys=False, allow_unicode=True)
    try:
        return parse_campaign(text, SOURCE, Path())
    except CampaignError as error:
        return error


def assert_named_after_the_file(result: Campaign | CampaignError) -> None:
    messages = result.messages if isinstance(result, CampaignError) else list(result.warnings)
    assert all(message.startswith(f"{SOURCE}: ") for message in messages), messages
    if isinstance(result, CampaignError):
        assert result.messages


def paths(node: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path and list index of a document."""
    found: list[tuple[Any, ...]] = []
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in children:
        found.append((*prefix, key))
        found.extend(paths(child, (*prefix, key)))
    return found


def parent_of(document: Any, path: tuple[Any, ...]) -> Any:
    node = document
    for key in path[:-1]:
        node = node[key]
    return node


def test_the_valid_base_document_is_valid() -> None:
    assert isinstance(outcome(VALID), Campaign)


@FAST
@given(values)
def test_random_structures(document: object) -> None:
    assert_named_after_the_file(outcome(document))


@FAST
@given(st.fixed_dictionaries({key: values for key in ("name", "engine", "model", "configs", "workload")}))
def test_random_values_under_the_top_level_keys(document: dict[str, Any]) -> None:
    result = outcome(document)
    assert isinstance(result, CampaignError)
    assert_named_after_the_file(result)


YAML_PIECES = ["name: x", "configs:", "tp8:", "- ", ": ", "\n", "  ", "[", "]", "{", "}", ",", "'", '"', "? "]
YAML_PIECES += [
    "!!int ",
    "!!float ",
    "!!binary ",
    "!!timestamp ",
    "!!set ",
    "!!omap ",
    "!unknown ",
    "&a ",
    "*a",
]
YAML_PIECES += ["<<: ", "|", ">", "#", "---", "...", "%YAML 1.1\n", "\t", "\x00", "2001-13-45", "1e999", "~"]
yaml_like_text = st.lists(st.sampled_from(YAML_PIECES) | st.text(max_size=3), max_size=40).map("".join)


@FAST
@given(st.text(max_size=200) | yaml_like_text)
def test_random_text(text: str) -> None:
    try:
        result: Campaign | CampaignError = parse_campaign(text, SOURCE, Path())
    except CampaignError as error:
        result = error
    assert isinstance(result, CampaignError)  # no text short of a whole campaign is one
    assert all(re.match(rf"{re.escape(SOURCE)}(:\d+)?: ", message) for message in result.messages)


@FAST
@given(st.data())
def test_a_value_replaced_anywhere(data: st.DataObject) -> None:
    document = copy.deepcopy(VALID)
    path = data.draw(st.sampled_from(paths(document)))
    parent_of(document, path)[path[-1]] = data.draw(values)
    assert_named_after_the_file(outcome(document))


@FAST
@given(st.data())
def test_a_key_added_anywhere(data: st.DataObject) -> None:
    document = copy.deepcopy(VALID)
    mappings = [path for path in paths(document) if isinstance(parent_of(document, (*path, 0)), dict)]
    target = parent_of(document, (*data.draw(st.sampled_from(mappings)), None))
    target[data.draw(keys)] = data.draw(values)
    assert_named_after_the_file(outcome(document))


REQUIRED = [("name",), ("engine",), ("model",), ("configs",), ("workload",)] + [
    ("workload", key) for key in ("api", "dataset", "input_len", "output_len", "prompts_per_level", "warmup")
]
NO_LOAD = (
    f"{SOURCE}: workload: needs concurrency (a closed loop), request_rate (an open loop) or trace_speedup (a "
    "replayed trace)"
)
"""Without concurrency, a workload has no load: request_rate would be the other."""


@FAST
@given(st.data())
def test_a_key_removed_anywhere(data: st.DataObject) -> None:
    document = copy.deepcopy(VALID)
    path = data.draw(st.sampled_from(paths(document)))
    del parent_of(document, path)[path[-1]]
    result = outcome(document)
    assert_named_after_the_file(result)
    if path in REQUIRED:
        assert isinstance(result, CampaignError)
        assert f"{SOURCE}: {'.'.join(path)}: required key is missing" in result.messages
    if path == ("workload", "concurrency"):
        assert isinstance(result, CampaignError)
        assert NO_LOAD in result.messages


# Each typed key with values of every other type: always an error, at that key's path.
not_strings = st.none() | st.booleans() | st.integers() | st.floats() | st.lists(scalars, max_size=3)
not_ints = (
    st.none() | st.booleans() | st.floats() | st.text(max_size=5) | st.dictionaries(keys, scalars, max_size=2)
)
WRONG_TYPES = {
    ("name",): not_strings,
    ("engine",): not_strings,
    ("model",): not_strings,
    ("configs", "tp8", "extends"): not_strings,
    ("common", "args", "tp-size"): not_ints,
    ("configs", "tp8", "args", "ep-size"): not_ints,
    ("configs", "tp8", "args", "enable-eplb"): st.none() | st.integers() | st.text(max_size=5),
    ("workload", "input_len"): not_ints,
    ("workload", "output_len"): not_ints,
    # auto and a mapping of automatic repeats' keys (an empty one too) are repeats.
    ("workload", "repeats"): not_ints.filter(
        lambda value: value != AUTO and not (isinstance(value, dict) and set(value) <= set(AUTO_REPEATS_KEYS))
    ),
    ("workload", "seed"): not_ints,
    ("workload", "concurrency"): not_ints | st.lists(not_ints, min_size=1, max_size=3),
    ("common", "env", "NCCL_PROTO"): st.none() | st.booleans() | st.lists(scalars, max_size=3),
    ("configs", "tp8", "unset"): not_strings,
    ("common",): not_strings,
    ("configs",): not_strings,
    ("workload",): not_strings,
}


@FAST
@given(st.data())
def test_wrong_types(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(sorted(WRONG_TYPES)))
    document = copy.deepcopy(VALID)
    parent = document
    for key in path[:-1]:
        parent = parent.setdefault(key, {})
    parent[path[-1]] = data.draw(WRONG_TYPES[path])
    result = outcome(document)
    assert isinstance(result, CampaignError)
    assert_named_after_the_file(result)
    # A key path holding an odd key below it (a mapping of repeats with a newline for a key) is quoted.
    named = ".".join(path)
    assert any(
        message.startswith((f"{SOURCE}: {named}", f"{SOURCE}: '{named}")) for message in result.messages
    )


NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@FAST
@given(st.text(max_size=20))
def test_config_and_campaign_names(name: str) -> None:
    document = copy.deepcopy(VALID)
    document["name"] = name
    document["configs"][name] = {"args": {"tp-size": 8}}
    result = outcome(document)
    assert_named_after_the_file(result)
    assert isinstance(result, Campaign) == bool(NAME_PART.fullmatch(name))


def has_cycle(parents: dict[str, str | None]) -> bool:
    for start in parents:
        seen: set[str] = set()
        node: str | None = start
        while node is not None:
            if node in seen:
                return True
            seen.add(node)
            node = parents[node]
    return False


@FAST
@given(st.lists(st.none() | st.integers(0, 5), min_size=1, max_size=6))
def test_extends_graphs(parent_indexes: list[int | None]) -> None:
    names = [f"c{index}" for index in range(len(parent_indexes))]
    parents = {
        name: None if index is None else names[index % len(names)]
        for name, index in zip(names, parent_indexes, strict=True)
    }
    document = copy.deepcopy(VALID)
    document["configs"] = {
        name: {} if parent is None else {"extends": parent} for name, parent in parents.items()
    }
    result = outcome(document)
    assert_named_after_the_file(result)
    if has_cycle(parents):
        assert isinstance(result, CampaignError)
        assert all(": cycle: " in message for message in result.messages)
    else:
        assert isinstance(result, Campaign)
        assert list(result.configs) == names


# What reaches a systemd unit (roles/serving/templates/config_server.service.j2): each such field, holding a
# line end anywhere.
UNIT_FIELDS: dict[tuple[Any, ...], str] = {
    ("name",): "name",
    ("model",): "model",
    ("common", "args", "served-model-name"): "common.args.served-model-name",
    ("common", "args", "cuda-graph-bs-decode", 1): "common.args.cuda-graph-bs-decode[1]",
    ("common", "env", "NCCL_DEBUG"): "common.env.NCCL_DEBUG",
    ("configs", "tp8-nccl", "env", "NCCL_PROTO"): "configs.tp8-nccl.env.NCCL_PROTO",
    ("common", "sim", "sim-profile"): "common.sim.sim-profile",
    ("configs", "tp8", "sim", "sim-profile"): "configs.tp8.sim.sim-profile",
}
with_a_line_end = st.tuples(st.text(max_size=6), st.sampled_from(UNIT_LINE_ENDS), st.text(max_size=6)).map(
    "".join
)


def set_at(document: Any, path: tuple[Any, ...], value: object) -> None:
    node = document
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def assert_refused_at(result: Campaign | CampaignError, path: str, rule: str) -> None:
    assert isinstance(result, CampaignError)
    assert_named_after_the_file(result)
    assert any(message.startswith(f"{SOURCE}: {path}: {rule}") for message in result.messages), result


@FAST
@given(st.sampled_from(list(UNIT_FIELDS)), with_a_line_end)
def test_a_line_end_in_a_field_of_the_unit(path: tuple[Any, ...], text: str) -> None:
    document = copy.deepcopy(VALID)
    set_at(document, path, text)
    assert_refused_at(outcome(document), UNIT_FIELDS[path], "holds ")


@FAST
@given(with_a_line_end)
def test_a_line_end_in_a_config_name(name: str) -> None:
    document = copy.deepcopy(VALID)
    document["configs"][name] = {}
    assert_refused_at(outcome(document), repr(f"configs.{name}"), "holds ")


@FAST
@given(with_a_line_end)
def test_a_line_end_in_the_campaigns_path(source: str) -> None:
    with pytest.raises(CampaignError) as caught:
        parse_campaign(yaml.dump(VALID, Dumper=DUMPER), source, Path())
    assert caught.value.messages == [f"{source!r}: the campaign's path {unit_text_problem(source)}"]


# Each number of the campaign with its bound: valid exactly when an integer inside it.
BOUNDED: dict[tuple[Any, ...], Bound] = {
    ("start_timeout_s",): bounds.START_TIMEOUT_S,
    ("workload", "input_len"): bounds.TOKENS,
    ("workload", "output_len"): bounds.TOKENS,
    ("workload", "repeats"): bounds.REPEATS,
    ("workload", "seed"): bounds.SEED,
    ("workload", "vocab_size"): bounds.VOCABULARY,
    ("workload", "warmup"): bounds.REQUESTS,
    ("common", "args", "max-running-requests"): bounds.RUNNING_REQUESTS,
    ("configs", "tp8", "args", "tp-size"): bounds.GPUS,
    ("configs", "tp8", "args", "pp-size"): bounds.GPUS,
    ("configs", "tp8", "args", "dp-size"): bounds.GPUS,
}


def numbers_about(bound: Bound) -> st.SearchStrategy[int | float]:
    low, high = int(bound.low), int(bound.high)
    integers = st.integers() | st.integers(low - 3, low + 3) | st.integers(high - 3, high + 3)
    return integers | st.floats() | st.sampled_from([1e23, 10**23, 10**400])


@FAST
@given(st.data())
def test_numbers_outside_their_bounds(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(sorted(BOUNDED)))
    bound = BOUNDED[path]
    value = data.draw(numbers_about(bound))
    document = copy.deepcopy(VALID)
    set_at(document, path, value)
    result = outcome(document)
    if isinstance(value, int) and bound.low <= value <= bound.high:
        assert isinstance(result, Campaign)
    else:
        assert_refused_at(result, ".".join(path), "must be ")


@FAST
@given(
    st.sampled_from([1, 16, 100_000]), st.integers(1, 10**6), st.sampled_from(["prompts_per_level", "warmup"])
)
def test_request_counts_of_nx_at_the_largest_level(level: int, factor: int, key: str) -> None:
    document = copy.deepcopy(VALID)
    document["workload"]["concurrency"] = [level]
    document["workload"][key] = f"{factor}x"
    result = outcome(document)
    if factor <= bounds.COUNT_FACTOR.high and factor * level <= bounds.REQUESTS.high:
        assert isinstance(result, Campaign)
    else:
        assert_refused_at(result, f"workload.{key}", "")


# A float where one is taken: valid exactly when finite.
FLOATS = [
    ("common", "args", "mem-fraction-static"),
    ("common", "sim", "sim-time-scale"),
    ("common", "env", "NCCL_DEBUG"),
    ("configs", "tp8", "args", "watchdog-timeout"),
]


@FAST
@given(st.sampled_from(FLOATS), st.floats(min_value=0) | st.sampled_from([math.nan, math.inf, -math.inf]))
def test_floats_must_be_finite(path: tuple[str, ...], value: float) -> None:
    document = copy.deepcopy(VALID)
    set_at(document, path, value)
    result = outcome(document)
    if math.isfinite(value):
        assert isinstance(result, Campaign)
    else:
        assert_refused_at(result, ".".join(path), "must be a finite number")
