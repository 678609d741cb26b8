"""The structure of ``common`` and of each config's own entry: their keys, and the shape of every value in
their ``args``, ``env``, ``sim`` and ``unset`` sections.

A flag's name is spelled as on its command line without ``--``: lowercase words joined by ``-``
(``FLAG_NAME``); an environment variable's name is letters, digits and ``_`` (``ENV_NAME``). Each ``args``
flag is then judged by ``fairbench.campaign.sglang_flags``; ``sim`` flags only by their shape, as the
simulator judges its own. A config's ``extends`` is not followed here: ``fairbench.campaign.expand`` does
that, and a config's ``nodes`` and ``hosts`` are checked by ``fairbench.campaign.fleet``. ``common`` takes
neither: they place one config's server, they are no part of the baseline every config starts from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fairbench.campaign.checks import (
    Fields,
    fits_a_unit,
    is_scalar,
    keyed,
    mapping,
    named_entries,
    unit_name_part,
)
from fairbench.campaign.disaggregation import OwnDisaggregation, own_disaggregation
from fairbench.campaign.findings import Findings, describe, join_path
from fairbench.campaign.flag_values import flags, sglang_args
from fairbench.campaign.fleet import OwnScheduling, own_scheduling
from fairbench.campaign.model import (
    CONFIG_KEYS,
    DISAGGREGATION_KEY,
    SCHEDULING_KEYS,
    SECTIONS,
    Settings,
    UnsetKeys,
)

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env(findings: Findings, path: str, value: object) -> dict[str, str]:
    """Environment variables; numbers become strings."""
    env: dict[str, str] = {}
    for key, item in keyed(findings, path, value).items():
        key_path = join_path(path, key)
        if not ENV_NAME.fullmatch(key):
            findings.error(key_path, "is not an environment variable name: letters, digits and '_'")
        elif is_scalar(item):
            if fits_a_unit(findings, key_path, item):
                env[key] = str(item)
        else:
            findings.error(
                key_path,
                f"must be a string or a number, got {describe(item)} "
                "(quote words YAML reads as booleans: yes, no, on, off)",
            )
    return env


def _settings(fields: Fields) -> Settings:
    return Settings(
        args=fields.get("args", sglang_args, {}),
        env=fields.get("env", _env, {}),
        sim=fields.get("sim", flags, {}),
    )


def common_settings(findings: Findings, path: str, value: object) -> Settings:
    if isinstance(value, dict):
        for key in SCHEDULING_KEYS:
            if key in value:
                findings.error(
                    join_path(path, key),
                    "is a config's key, not common's: set it in the configs it places "
                    "(a config passes it on to those that extend it)",
                )
        value = {key: item for key, item in value.items() if key not in SCHEDULING_KEYS}
    return _settings(mapping(findings, path, value, SECTIONS))


def _key_list(findings: Findings, path: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        findings.error(path, f"must be a list of keys, got {describe(value)}")
        return ()
    keys: dict[str, None] = {}  # ordered, and a repeat is found at once
    for index, item in enumerate(value):
        if not isinstance(item, str):
            findings.error(f"{path}[{index}]", f"must be a key, got {describe(item)}")
        elif item in keys:
            findings.error(f"{path}[{index}]", f"{item!r} is listed twice")
        else:
            keys[item] = None
    return tuple(keys)


def _unset(findings: Findings, path: str, value: object) -> UnsetKeys:
    sections = mapping(findings, path, value, SECTIONS)
    return UnsetKeys(
        args=sections.get("args", _key_list, ()),
        env=sections.get("env", _key_list, ()),
        sim=sections.get("sim", _key_list, ()),
    )


@dataclass(frozen=True)
class Layer:
    """What one config's own entry says."""

    extends: str | None
    own: Settings
    unset: UnsetKeys
    scheduling: OwnScheduling
    disaggregation: OwnDisaggregation | None = None
    sets_disaggregation: bool = False
    """Whether the entry has ``disaggregation``: null there makes a disaggregated parent's child one
    server."""


def _parent_name(findings: Findings, path: str, value: object) -> str | None:
    if isinstance(value, str):
        return value
    findings.error(path, f"must name a config, got {describe(value)}")
    return None


def _layer(findings: Findings, path: str, value: object) -> Layer:
    fields = mapping(findings, path, value, CONFIG_KEYS)
    return Layer(
        extends=fields.get("extends", _parent_name, None),
        own=_settings(fields),
        unset=fields.get("unset", _unset, UnsetKeys()),
        scheduling=own_scheduling(fields),
        disaggregation=fields.get(DISAGGREGATION_KEY, own_disaggregation, None),
        sets_disaggregation=DISAGGREGATION_KEY in fields,
    )


def config_layers(findings: Findings, path: str, value: object) -> dict[str, Layer]:
    entries = named_entries(findings, path, value, "config")
    layers: dict[str, Layer] = {}
    for name, entry in entries.items():
        config_path = join_path(path, name)
        unit_name_part(findings, config_path, name)
        layers[name] = _layer(findings, config_path, entry)
    return layers
