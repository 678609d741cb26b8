"""The JSON Schema of campaign files: an editor's aid while a campaign is typed, never its judge.

``campaign_schema()`` builds it from what the checks themselves read: the model's key lists and choices,
the ranges of ``fairbench.measure.bounds``, the name patterns, and SGLang's flag table through
``sglang_flags``, each flag with the shape and the type of value it takes. An editor with a YAML language
server (VS Code's YAML extension, neovim's yamlls) completes and checks a campaign file against it when
the file's first line names it, relative to the file::

    # yaml-language-server: $schema=campaign.schema.json

The loader (``fairbench validate``) stays the judge, naming the file, the key path and the rule. The
schema leaves to it the rules across keys (``nodes`` against the GPUs and the placement among them,
``search_resolution`` without ``slo``), the ``extends`` chains and the ``unset`` keys, whether an inventory
group exists, whether a dataset file exists, how many requests an ``Nx`` makes, automatic repeats' ``max``
against their ``min``, unit names' length and values that read as flags. Which load a workload has
(``concurrency`` or ``request_rate``) and the keys each allows, it does check.
It asks for each value in its plain YAML type, where the loader also takes what SGLang's converters read
(``tp-size: 8``, not ``"8"``; ``true``, not YAML 1.1's ``yes``), and it takes any string for a flag whose
converter parses one (``human_readable_int``, JSON).

The repository keeps the schema at ``campaigns/campaign.schema.json``, and a test checks that it is this
module's output. After a change to the model or to the flag table, write it again::

    .venv/bin/python -m fairbench.campaign.schema campaigns/campaign.schema.json
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fairbench.answers.plan import BUILT_IN_TASK
from fairbench.campaign.checks import UNIT_NAME_PART
from fairbench.campaign.flag_values import FLAG_NAME
from fairbench.campaign.fleet import GROUP_NAME
from fairbench.campaign.fleet_facts import FACTS
from fairbench.campaign.model import (
    CONFIG_KEYS,
    DATASET_SUFFIX,
    DEFAULT_ISOLATED_HOSTS,
    DEFAULT_NODES,
    DEFAULT_PLACEMENT,
    DISAGGREGATION_KEY,
    ENGINES,
    LOADS,
    OPEN_LOOP_KEYS,
    PLACEMENTS,
    ROLES,
    ROUTER,
    SECTIONS,
    TOP_KEYS,
    TOP_REQUIRED,
    TRACE_SETS,
    WORKLOAD_KEYS,
    WORKLOAD_REQUIRED,
    WORKLOAD_TOP_KEYS,
)
from fairbench.campaign.sglang_flags import BOUNDED_ARGS, DEPRECATED_ARGS, REJECTED_ARGS, sglang_flags
from fairbench.campaign.structure import ENV_NAME
from fairbench.campaign.workload import (
    AUTO_REPEATS_KEYS,
    BOUNDS,
    LEAST_REQUESTS,
    RESERVED_WORKLOAD_NAMES,
    TIMES_CONCURRENCY,
    WORKLOAD_NAME,
)
from fairbench.measure.bounds import (
    AUTO_REPEATS,
    BURSTINESS,
    CONCURRENCY,
    EXPECTED_START_S,
    HALF_WIDTH_PCT,
    MARGIN_PCT,
    NODES,
    PERCENT_POINTS,
    PREFIX_GROUPS,
    PROBES,
    PROMPTS_PER_GROUP,
    REPEATS,
    REQUEST_RATE,
    REQUESTS,
    ROLE_SERVERS,
    SEED,
    SHARE,
    SPEEDUP,
    START_TIMEOUT_S,
    SYSTEM_PROMPT_TOKENS,
    SYSTEM_PROMPTS,
    THINK_TIME_S,
    TOKENS,
    TRACE_DURATION_S,
    TRACE_REQUESTS,
    TRACE_SECONDS,
    TURNS,
    UNIT_LINE_ENDS,
    Bound,
)
from fairbench.measure.repeats import AUTO, AutoRepeats
from fairbench.measure.slo import SLO_KEY, SLO_KEY_RULE, SLO_LIMIT_RULE
from fairbench.measure.traces import TRACE_FORMATS
from fairbench.measure.workload import (
    APIS,
    ARRIVALS,
    CACHE_STATES,
    DEFAULT_ARRIVAL,
    DEFAULT_BURSTINESS,
    DEFAULT_CACHE_STATE,
    DEFAULT_MULTI_TURN,
    DEFAULT_SHARED_PREFIX,
    MULTI_TURN,
    MULTI_TURN_KEYS,
    ORDERS,
    PRIMED,
    RANDOM_IDS,
    SHARED_PREFIX,
    SHARED_PREFIX_KEYS,
    TRACE,
    TRACE_WINDOW_KEYS,
)
from fairbench.sim.args import VALUED_ACTIONS, sglang_version

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "urn:fairbench:campaign"

Schema = dict[str, Any]

_CONVERTED_TYPES: dict[str, tuple[str, ...]] = {
    "str": ("string", "number"),
    "nullable_str": ("string", "number"),
    "int": ("integer",),
    "float": ("number",),
    "human_readable_int": ("integer", "string"),
    "loads": ("string", "number"),
    "json_list_type": ("string", "number"),
    "parse_cuda_graph_backend_arg": ("string",),
    "parse_cuda_graph_config_arg": ("string",),
}
"""The plain YAML types of a value each of SGLang's converters (``fairbench.sim.args.CONVERTERS``) takes
once rendered: a YAML number is JSON text too, and text for ``str``."""

_LINE_END = "[" + "".join(f"\\x{ord(character):02x}" for character in UNIT_LINE_ENDS) + "]"
_TEXT: Schema = {"not": {"type": "string", "pattern": _LINE_END}}
"""No string that reaches a unit holds a line end (a pattern in both Python's and ECMA-262's syntax)."""


def campaign_schema() -> Schema:
    """The schema of a campaign file, draft 2020-12."""
    return {
        "$schema": DRAFT,
        "$id": SCHEMA_ID,
        "title": "fairbench campaign",
        "description": "The configs fairbench compares and the workload that drives them, served by "
        f"SGLang {sglang_version()} or its simulator. `fairbench validate FILE` checks every rule.",
        "type": "object",
        "properties": _properties(TOP_KEYS, _top_level()),
        "required": list(TOP_REQUIRED),
        "oneOf": [{"required": [key]} for key in WORKLOAD_TOP_KEYS],
        "additionalProperties": False,
        "$defs": {
            "workload": _workload(),
            "args": _args(),
            "env": _env(),
            "sim": {
                "description": "Flags of the simulator alone, as on its command line without '--'; "
                "appended to the command line when the engine is sim.",
                "type": "object",
                "propertyNames": {"pattern": _anchored(FLAG_NAME)},
                "additionalProperties": _any_flag_value(),
            },
            "config": _config(),
        },
    }


def schema_text() -> str:
    """The schema as the repository keeps it: indented JSON, one line end at its end."""
    return json.dumps(campaign_schema(), indent=2) + "\n"


def _properties(keys: Sequence[str], schemas: Mapping[str, Schema]) -> dict[str, Schema]:
    """The schemas of a mapping's keys, in the model's order; a key without its schema fails here."""
    if set(keys) != set(schemas):
        raise ValueError(f"the schema's keys {sorted(schemas)} are not the model's {sorted(keys)}")
    return {key: schemas[key] for key in keys}


def _anchored(pattern: re.Pattern[str]) -> str:
    """A pattern the checks apply with ``fullmatch``, as JSON Schema's search for it; a named group becomes
    a plain one, as ECMA-262 spells names otherwise than Python."""
    return f"^(?:{re.sub(r'[(][?]P<[A-Za-z_][A-Za-z0-9_]*>', '(', pattern.pattern)})$"


def _bounded(bound: Bound) -> Schema:
    return {
        "description": bound.describe(),
        "type": "integer" if bound.integer else "number",
        "minimum": bound.low,
        "maximum": bound.high,
    }


def _ref(name: str) -> Schema:
    return {"$ref": f"#/$defs/{name}"}


def _top_level() -> dict[str, Schema]:
    return {
        "name": {
            "description": "The campaign's name, part of every config's systemd unit name.",
            "type": "string",
            "pattern": _anchored(UNIT_NAME_PART),
        },
        "engine": {"description": "What serves each config.", "enum": list(ENGINES)},
        "model": {
            "description": "The model id or path every config serves (--model-path).",
            "type": "string",
            "pattern": "\\S",
            **_TEXT,
        },
        "configs": {
            "description": "The configs to compare, by name (part of their systemd unit names).",
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": _anchored(UNIT_NAME_PART)},
            "additionalProperties": _ref("config"),
        },
        "workload": {**_ref("workload"), "description": "How every config is driven."},
        "workloads": {
            "description": "Several workloads, by name: each config is measured on each by one server "
            "start, each with its own verdict; they share their repeats.",
            "type": "object",
            "minProperties": 1,
            "propertyNames": {
                "pattern": _anchored(WORKLOAD_NAME),
                "not": {"enum": list(RESERVED_WORKLOAD_NAMES)},
            },
            "additionalProperties": _ref("workload"),
        },
        "common": {
            "description": "What every config starts from.",
            "type": "object",
            "properties": {section: _ref(section) for section in SECTIONS},
            "additionalProperties": False,
        },
        "start_timeout_s": {
            **_bounded(START_TIMEOUT_S),
            "description": "How long a server may take to become healthy, "
            f"{START_TIMEOUT_S.describe()}; absent, the serving role's default applies.",
        },
        "expected_start_s": {
            **_bounded(EXPECTED_START_S),
            "description": "How long a server is expected to take to become healthy, "
            f"{EXPECTED_START_S.describe()}, at most start_timeout_s: the plan's estimate of the campaign's "
            "cost (fairbench validate --plan) counts it for each server start.",
        },
        "placement": {
            "description": "spread: each config, and each repeat of it, runs on one host of its pool, the "
            "next free host taking the next job; every-host: every config runs on every host of its pool.",
            "enum": list(PLACEMENTS),
            "default": DEFAULT_PLACEMENT,
        },
        "accept_host_differences": {
            "description": "Host facts that may differ between the hosts of a pool: reported as threats "
            "instead of stopping a spread campaign.",
            "type": "array",
            "uniqueItems": True,
            "items": {"enum": list(FACTS)},
            "default": [],
        },
        "isolated_hosts": {
            "description": "true: hosts found to share a machine (one kernel, one board, a GPU in common) do "
            "not disturb each other, and take jobs at the same time; false: they take them one at a time.",
            "type": "boolean",
            "default": DEFAULT_ISOLATED_HOSTS,
        },
        "decide": {
            "description": "How the verdict decides: margin_pct, the smallest difference that matters, in % "
            "of the lower config's mean; each comparison is then ahead, equivalent, below the margin or "
            "undecided. baseline: the config every other is compared with and whose drift between the "
            "first round and the last is watched; default the first config. Absent: significant or within "
            "noise.",
            "type": "object",
            "properties": {"margin_pct": _bounded(MARGIN_PCT), "baseline": {"type": "string"}},
            "required": ["margin_pct"],
            "additionalProperties": False,
        },
        "answers": {
            "description": "What each server start answers before its sweep: probes (16) of the probe set "
            "drawn from seed (1), or of probe_file's prompts, greedily, max_tokens (32) each, through api "
            "(the first workload's), concurrency (1) at a time; min_identical_share: the share every config "
            "must answer as the baseline does; match: {config: other}, configs that must answer as another "
            "exactly (a speculative config its base, by default). probes: 0 asks nothing.",
            "type": "object",
            "properties": {
                "probes": _bounded(PROBES),
                "probe_file": {"type": "string", "minLength": 1},
                "seed": _bounded(SEED),
                "max_tokens": _bounded(TOKENS),
                "api": {"enum": list(APIS)},
                "concurrency": _bounded(CONCURRENCY),
                "min_identical_share": _bounded(SHARE),
                "match": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "additionalProperties": False,
        },
        "accuracy": {
            "description": "A task with known answers each server start answers before its sweep: task: "
            "arithmetic (fairbench's own, problems of them from seed) or lm_eval: an lm-eval task's name "
            "(limit documents); through the chat API, greedy, max_tokens (256), concurrency (8). A config "
            "scoring below the baseline by more than max_drop_pct (2) points is not named best.",
            "type": "object",
            "properties": {
                "task": {"enum": [BUILT_IN_TASK]},
                "lm_eval": {"type": "string", "minLength": 1},
                "problems": _bounded(REQUESTS),
                "limit": _bounded(REQUESTS),
                "seed": _bounded(SEED),
                "max_tokens": _bounded(TOKENS),
                "concurrency": _bounded(CONCURRENCY),
                "max_drop_pct": _bounded(PERCENT_POINTS),
            },
            "oneOf": [{"required": ["task"]}, {"required": ["lm_eval"]}],
            "additionalProperties": False,
        },
        "slo": {
            "description": "Service-level objectives each point is judged against, <metric>_p<q>_ms: "
            "limit in ms (ttft_p99_ms: 2000); empty or absent, none.",
            "type": "object",
            "propertyNames": {"pattern": _anchored(SLO_KEY), "description": SLO_KEY_RULE},
            "additionalProperties": {"description": SLO_LIMIT_RULE, "type": "number", "exclusiveMinimum": 0},
            "default": {},
        },
    }


def _config() -> Schema:
    schemas: dict[str, Schema] = {
        "extends": {"description": "The config this one inherits from.", "type": "string"},
        **{section: _ref(section) for section in SECTIONS},
        "unset": {
            "description": "Keys this config removes from what it inherits.",
            "type": "object",
            "properties": {
                section: {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
                for section in SECTIONS
            },
            "additionalProperties": False,
        },
        "nodes": {
            **_bounded(NODES),
            "description": f"The hosts this config's server spans, {NODES.describe()}; they must divide its "
            "GPUs. Inherited through extends.",
            "default": DEFAULT_NODES,
        },
        "hosts": {
            "description": "The inventory group this config is pinned to; null: the campaign's pool. "
            "Inherited through extends.",
            "anyOf": [{"type": "string", "pattern": _anchored(GROUP_NAME)}, {"type": "null"}],
            "default": None,
        },
        DISAGGREGATION_KEY: _disaggregation(),
    }
    return {"type": "object", "properties": _properties(CONFIG_KEYS, schemas), "additionalProperties": False}


def _disaggregation() -> Schema:
    group = {
        "type": "object",
        "properties": {
            "servers": {**_bounded(ROLE_SERVERS), "description": "Servers of this role.", "default": 1},
            "args": {
                **_ref("args"),
                "description": "SGLang flags over the config's own, for each server of this role.",
            },
            "sim": {**_ref("sim"), "description": "The simulator's flags over the config's own."},
        },
        "additionalProperties": False,
    }
    return {
        "description": "Prefill servers and decode servers on GPUs of their own (each a unit, "
        "--disaggregation-mode set per role, --base-gpu-id taken in turn unless a role sets it) behind "
        "sglang-router (--pd-disaggregation, router.args its own flags); null: one server. Inherited "
        "through extends.",
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    **{role: {**group, "description": f"The {role} servers."} for role in ROLES},
                    ROUTER: {
                        "type": "object",
                        "properties": {
                            "args": {"type": "object", "description": "sglang-router's flags, without --."}
                        },
                        "additionalProperties": False,
                    },
                },
                "required": list(ROLES),
                "additionalProperties": False,
            },
            {"type": "null"},
        ],
    }


def _workload() -> Schema:
    def level_count(key: str) -> Schema:
        return {
            "description": "Requests per level: N, or Nx (N times the level).",
            "anyOf": [
                {"type": "integer", "minimum": LEAST_REQUESTS[key], "maximum": REQUESTS.high},
                {"type": "string", "pattern": _anchored(TIMES_CONCURRENCY)},
            ],
        }

    schemas: dict[str, Schema] = {
        "api": {"description": "The API every request goes to.", "enum": list(APIS)},
        "dataset": {
            "description": f"{RANDOM_IDS}, {SHARED_PREFIX} (with shared_prefix), {TRACE} (with trace and "
            f"trace_speedup), {MULTI_TURN} (with multi_turn), or the path of a local ShareGPT-style "
            f"{DATASET_SUFFIX} file, relative to the campaign file's directory.",
            "anyOf": [
                {"const": RANDOM_IDS},
                {"const": SHARED_PREFIX},
                {"const": TRACE},
                {"const": MULTI_TURN},
                {"type": "string", "pattern": re.escape(DATASET_SUFFIX) + "$"},
            ],
        },
        "shared_prefix": _shared_prefix(),
        "multi_turn": _multi_turn(),
        "trace": _trace(),
        "trace_speedup": {
            "description": "A replayed trace's levels: how much faster than recorded (2: twice as fast); "
            "each is the window's own request rate times it.",
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": _bounded(SPEEDUP),
        },
        "cache_state": {
            "description": "What the prefix cache holds when each point's measurement starts: carried (what "
            "the previous point left), flushed (/flush_cache before its warmup), primed (flushed, then each "
            f"group's system prompt sent once; {SHARED_PREFIX} and {MULTI_TURN} only).",
            "enum": list(CACHE_STATES),
            "default": DEFAULT_CACHE_STATE,
        },
        "concurrency": {
            "description": "A closed loop's levels, requests in flight, each measured in turn.",
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": _bounded(CONCURRENCY),
        },
        "request_rate": {
            "description": "An open loop's levels, requests per second, each measured in turn.",
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": _bounded(REQUEST_RATE),
        },
        "arrival": {
            "description": "How an open loop's requests are spaced: poisson (exponential gaps) or gamma "
            "(gaps of shape burstiness).",
            "enum": list(ARRIVALS),
            "default": DEFAULT_ARRIVAL,
        },
        "burstiness": {
            **_bounded(BURSTINESS),
            "description": "The shape of gamma arrivals' gaps: below 1 burstier than poisson, above 1 more "
            "even; no effect with poisson.",
            "default": DEFAULT_BURSTINESS,
        },
        **{key: level_count(key) for key in LEAST_REQUESTS},
        "repeats": _repeats(),
        **{key: _bounded(bound) for key, bound in BOUNDS.items()},
        "max_concurrency": {
            **_bounded(BOUNDS["max_concurrency"]),
            "description": "An open loop's bound on requests in flight; required with request_rate, with "
            "trace_speedup the window's requests where left out.",
        },
        "search_resolution": {
            **_bounded(BOUNDS["search_resolution"]),
            "description": "After the concurrency levels, bisect for the highest meeting the SLO until the "
            "last that met it and the first that did not are this close; needs slo.",
        },
    }
    return {
        "description": "How every config is driven: the same requests at the same levels, of concurrency "
        "or of request rate.",
        "type": "object",
        "properties": _properties(WORKLOAD_KEYS, schemas),
        "required": [key for key in WORKLOAD_REQUIRED if key not in TRACE_SETS],
        "oneOf": [{"required": [load]} for load in LOADS],
        # A shared-prefix or multi-turn workload's input_len follows from its lengths, and only they have
        # system prompts to prime; each one's keys are its own, and conversations run in a closed loop. A
        # trace sets its own lengths, count and arrivals; a trace's keys belong to it alone.
        "if": {"properties": {"dataset": {"enum": [SHARED_PREFIX, MULTI_TURN]}}, "required": ["dataset"]},
        "then": {
            "required": [key for key in TRACE_SETS if key in WORKLOAD_REQUIRED and key != "input_len"],
            "properties": {"trace": False, "trace_speedup": False},
            "if": {"properties": {"dataset": {"const": SHARED_PREFIX}}},
            "then": {"properties": {"multi_turn": False}},
            "else": {"properties": {"shared_prefix": False}, "required": ["concurrency"]},
        },
        "else": {
            "properties": {
                "shared_prefix": False,
                "multi_turn": False,
                "cache_state": {"not": {"const": PRIMED}},
            },
            "if": {"properties": {"dataset": {"const": TRACE}}, "required": ["dataset"]},
            "then": {
                "required": ["trace", "trace_speedup"],
                "properties": {key: False for key in TRACE_SETS},
            },
            "else": {
                "required": [key for key in TRACE_SETS if key in WORKLOAD_REQUIRED],
                "properties": {"trace": False, "trace_speedup": False},
            },
        },
        "dependentRequired": {"request_rate": ["max_concurrency"]},
        "dependentSchemas": {
            # Both loads at once are oneOf's to refuse; the other open-loop keys are refused by name.
            "concurrency": {"properties": {key: False for key in OPEN_LOOP_KEYS if key not in LOADS}},
            "request_rate": {"properties": {"search_resolution": False}},
            "trace_speedup": {"properties": {"search_resolution": False}},
        },
        "additionalProperties": False,
    }


def _trace() -> Schema:
    schemas: dict[str, Schema] = {
        "path": {
            "description": "The trace file, relative to the campaign file's directory: Mooncake's JSON "
            "Lines (.jsonl) or an Azure LLM inference trace (.csv).",
            "type": "string",
            "pattern": "(" + "|".join(re.escape(suffix) for suffix in TRACE_FORMATS) + ")$",
        },
        "start_s": {
            **_bounded(TRACE_SECONDS),
            "description": "Replay from this many seconds after the trace's first request.",
            "default": 0,
        },
        "duration_s": {
            **_bounded(TRACE_DURATION_S),
            "description": "Replay this many seconds of the trace; left out, to its end.",
        },
        "count": {**_bounded(TRACE_REQUESTS), "description": "Replay at most this many requests."},
    }
    return {
        "description": "The window of the trace replayed (dataset trace).",
        "type": "object",
        "properties": _properties(TRACE_WINDOW_KEYS, schemas),
        "required": ["path"],
        "additionalProperties": False,
    }


def _multi_turn() -> Schema:
    default = DEFAULT_MULTI_TURN
    schemas: dict[str, Schema] = {
        "turns": {**_bounded(TURNS), "description": "Turns of each conversation.", "default": default.turns},
        "user_len": {
            **_bounded(BOUNDS["input_len"]),
            "description": "Tokens of each user turn (unused with sharegpt).",
            "default": default.user_len,
        },
        "system_prompt_len": {
            **_bounded(SYSTEM_PROMPT_TOKENS),
            "description": "Tokens of each conversation's system prompt; 0: none.",
            "default": default.system_prompt_len,
        },
        "system_prompts": {
            **_bounded(SYSTEM_PROMPTS),
            "description": "Distinct system prompts, conversation j having the (j mod N)-th.",
            "default": default.system_prompts,
        },
        "think_time_s": {
            **_bounded(THINK_TIME_S),
            "description": "Seconds between a reply's end and the conversation's next turn.",
            "default": default.think_time_s,
        },
        "sharegpt": {
            "description": "A local ShareGPT-style file, relative to the campaign file's directory, whose "
            "conversations' human turns are the user turns (text prompts).",
            "type": "string",
            "pattern": re.escape(DATASET_SUFFIX) + "$",
        },
    }
    return {
        "description": f"The {MULTI_TURN} dataset's conversations: every turn sends the conversation so "
        "far, the server's own replies included.",
        "type": "object",
        "properties": _properties(MULTI_TURN_KEYS, schemas),
        "additionalProperties": False,
    }


def _shared_prefix() -> Schema:
    default = DEFAULT_SHARED_PREFIX
    schemas: dict[str, Schema] = {
        "groups": {
            **_bounded(PREFIX_GROUPS),
            "description": "System prompts, each shared by a group of requests.",
            "default": default.groups,
        },
        "prompts_per_group": {
            **_bounded(PROMPTS_PER_GROUP),
            "description": "Requests per system prompt.",
            "default": default.prompts_per_group,
        },
        "system_prompt_len": {
            **_bounded(BOUNDS["input_len"]),
            "description": "Tokens of each system prompt.",
            "default": default.system_prompt_len,
        },
        "question_len": {
            **_bounded(BOUNDS["input_len"]),
            "description": "Tokens of each request's question, after its system prompt.",
            "default": default.question_len,
        },
        "order": {
            "description": "shuffled (from the seed) or grouped (each group's requests together).",
            "enum": list(ORDERS),
            "default": default.order,
        },
    }
    return {
        "description": f"The {SHARED_PREFIX} dataset's groups, as sglang.bench_serving's "
        "generated-shared-prefix.",
        "type": "object",
        "properties": _properties(SHARED_PREFIX_KEYS, schemas),
        "additionalProperties": False,
    }


def _repeats() -> Schema:
    default = AutoRepeats()
    return {
        "description": f"How often every level is measured: a count, or automatic repeats ({AUTO}, or any "
        "of min, max and half_width_pct): until the 95 % interval of the throughput is within "
        "half_width_pct % of its mean, from min to max times.",
        "anyOf": [
            _bounded(REPEATS),
            {"const": AUTO},
            {
                "type": "object",
                "properties": _properties(
                    AUTO_REPEATS_KEYS,
                    {
                        "min": {**_bounded(AUTO_REPEATS), "default": default.minimum},
                        "max": {**_bounded(AUTO_REPEATS), "default": default.maximum},
                        "half_width_pct": {**_bounded(HALF_WIDTH_PCT), "default": default.half_width_pct},
                    },
                ),
                "additionalProperties": False,
            },
        ],
        "default": 1,
    }


def _env() -> Schema:
    return {
        "description": "The server's environment variables.",
        "type": "object",
        "propertyNames": {"pattern": _anchored(ENV_NAME)},
        "additionalProperties": {"type": ["string", "number"], **_TEXT},
    }


def _args() -> Schema:
    """SGLang's flags, each by every spelling the campaign allows, in the order of their names."""
    flags = {
        name: _flag(name, option)
        for name, option in sorted(sglang_flags().items())
        if name not in REJECTED_ARGS and FLAG_NAME.fullmatch(name)
    }
    return {
        "description": f"SGLang {sglang_version()}'s launch flags, as on its command line without '--'.",
        "type": "object",
        "properties": flags,
        "additionalProperties": False,
    }


def _flag(name: str, option: Mapping[str, Any]) -> Schema:
    """One flag: its spelling, SGLang's default and the values it takes."""
    default = option["default"]
    notes = [f"--{name}", *([] if default is None else [f"SGLang's default: {json.dumps(default)}"])]
    if name in BOUNDED_ARGS:
        notes.append(BOUNDED_ARGS[name].describe())
    if name in DEPRECATED_ARGS:
        notes.append(DEPRECATED_ARGS[name])
    deprecated = {"deprecated": True} if name in DEPRECATED_ARGS else {}
    return {"description": "; ".join(notes), **deprecated, **_flag_values(name, option)}


def _flag_values(name: str, option: Mapping[str, Any]) -> Schema:
    """A switch takes true or false; a valued flag the shapes of its ``nargs``, as ``render_flags`` renders
    them: true the bare flag, false nothing, a list several values."""
    if option["action"] not in VALUED_ACTIONS:
        return {"type": "boolean"}
    if name in BOUNDED_ARGS:
        return {key: value for key, value in _bounded(BOUNDED_ARGS[name]).items() if key != "description"}
    value = _flag_value(option)
    values = {"type": "array", "minItems": 1, "items": value}
    shapes = {None: [value], "?": [{"type": "boolean"}, value], "+": [value, values]}
    choices = shapes.get(option["nargs"], [{"type": "boolean"}, value, values])
    return choices[0] if len(choices) == 1 else {"anyOf": choices}


def _flag_value(option: Mapping[str, Any]) -> Schema:
    """One rendered value: one of the flag's choices, or of the types its converter takes."""
    if option["choices"] is not None:
        return {"enum": list(option["choices"])}
    kind = option["type"] or "str"
    if kind not in _CONVERTED_TYPES:
        raise ValueError(f"the flag table's type {kind!r} has no JSON type here")
    types = list(_CONVERTED_TYPES[kind])
    return {"type": types[0] if len(types) == 1 else types, **(_TEXT if "string" in types else {})}


def _any_flag_value() -> Schema:
    value: Schema = {"type": ["string", "number"], **_TEXT}
    return {"anyOf": [{"type": "boolean"}, value, {"type": "array", "minItems": 1, "items": value}]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fairbench.campaign.schema", description="Write the JSON Schema of campaign files."
    )
    parser.add_argument("path", nargs="?", help="the file to write (default: standard output)")
    path = parser.parse_args(argv).path
    if path is None:
        print(schema_text(), end="")
    else:
        Path(path).write_text(schema_text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
