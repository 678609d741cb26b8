"""The probe set: real English prompts every config's server answers greedily (``probes.yaml``, shipped
with fairbench, or a campaign's own file of the same layout), drawn for a campaign from its seed.

A probe's id is its place in its file (``p00``, ``p01``...), so the report can line answers up however
many were drawn. The draw is ``random.Random(seed).sample``: the same seed gives the same probes in the
same order on every machine.
"""

from __future__ import annotations

import random
from importlib import resources
from pathlib import Path

import yaml

from fairbench.answers.plan import Probe

SHIPPED = "probes.yaml"


class ProbeFileError(ValueError):
    """A probe file fairbench cannot use: the message names the file, the key and the rule."""


def shipped_prompts() -> list[str]:
    """The prompts of fairbench's own probe set."""
    text = resources.files("fairbench.answers").joinpath(SHIPPED).read_text(encoding="utf-8")
    return _prompts(yaml.safe_load(text), SHIPPED)


def file_prompts(path: Path) -> list[str]:
    """The prompts of a campaign's probe file: a mapping whose ``prompts`` is a list of non-empty
    strings; ProbeFileError naming the file, the key and the rule otherwise."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProbeFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ProbeFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise ProbeFileError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    return _prompts(document, str(path))


def _prompts(document: object, source: str) -> list[str]:
    if not isinstance(document, dict) or "prompts" not in document:
        raise ProbeFileError(f"{source}: prompts: required: a mapping with a list of prompts under `prompts`")
    prompts = document["prompts"]
    if not isinstance(prompts, list) or not prompts:
        raise ProbeFileError(f"{source}: prompts: must be a non-empty list of strings")
    for index, prompt in enumerate(prompts):
        if not isinstance(prompt, str) or not prompt.strip():
            raise ProbeFileError(f"{source}: prompts[{index}]: must be a non-empty string, got {prompt!r}")
    return prompts


def draw(prompts: list[str], count: int, seed: int) -> tuple[Probe, ...]:
    """``count`` of ``prompts`` (all of them where it is larger) in an order drawn from ``seed``, each
    with its id."""
    width = len(str(len(prompts) - 1))
    chosen = random.Random(seed).sample(range(len(prompts)), min(count, len(prompts)))
    return tuple(Probe(f"p{index:0{max(width, 2)}d}", prompts[index]) for index in chosen)
