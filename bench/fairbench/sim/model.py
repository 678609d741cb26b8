"""The performance model: how long a prefill forward and a decode step take, from a profile.

A profile (``profiles/<name>.yaml``, documented field by field in the files themselves) gives, per
parallel layout, the decode step time ``t(b) = t0 + k * b`` for a batch of ``b`` running requests and
the prefill cost ``prefill_forward + tokens / prefill_rate``. Switches that change those costs are
applied here, once: decode steps without a CUDA graph pay ``eager_extra`` on top of ``t0``, and a
speculative step drafts and verifies several tokens, costing more and yielding the mean accepted length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fairbench.sim.finite import finite_number


class ProfileError(ValueError):
    """A profile file is missing, malformed, or lacks the layout asked for; the message says which."""


@dataclass(frozen=True, slots=True)
class LayoutCost:
    """The measured-and-fitted costs of one parallel layout (e.g. ``tp8``, ``tp8-ep4``)."""

    t0_s: float
    """Fixed decode step time: weights read once per step, launch and communication latency."""
    k_s: float
    """Added decode step time per running request: its KV cache reads and its share of the MoE work."""
    prefill_tokens_per_s: float
    """Prefill throughput: a forward over ``n`` input tokens costs ``n / prefill_tokens_per_s``..."""
    prefill_forward_s: float
    """...plus this fixed cost per prefill forward pass."""


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    context_length: int
    eos_token_id: int
    natural_output_tokens: int
    max_running_requests: int
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    eager_extra_s: float
    speculative_num_steps: int
    acceptance_rate: float
    draft_step_s: float
    verify_token_cost: float
    layouts: dict[str, LayoutCost]
    kv_bytes_per_token: int | None = None
    """The model's KV cache per token, in bytes (optional): what a disaggregated prefill server sends per
    prompt token when ``--model-path`` is no model directory that says."""

    def layout(self, key: str) -> tuple[str, LayoutCost]:
        """The cost of layout ``key``, else of the profile's ``default`` layout; names the key found."""
        for candidate in (key, "default"):
            if candidate in self.layouts:
                return candidate, self.layouts[candidate]
        raise ProfileError(
            f"profile {self.name}: no layout {key!r} and no 'default' layout; "
            f"it has: {', '.join(sorted(self.layouts))}"
        )


def layout_key(tp_size: int, ep_size: int, enable_eplb: bool) -> str:
    """The profile key of a parallel layout: ``tp8``, ``tp8-ep4``, ``tp8-ep8-eplb``."""
    key = f"tp{tp_size}"
    if ep_size > 1:
        key += f"-ep{ep_size}"
    if enable_eplb:
        key += "-eplb"
    return key


def builtin_profile_names() -> list[str]:
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in resources.files("fairbench.sim").joinpath("profiles").iterdir()
        if entry.name.endswith(".yaml")
    )


def load_profile(name_or_path: str) -> Profile:
    """A built-in profile by name (``generic``), or a profile file by path; every error in one line."""
    if name_or_path in builtin_profile_names():
        source = resources.files("fairbench.sim") / "profiles" / f"{name_or_path}.yaml"
        name, text = name_or_path, source.read_text()
    else:
        name, text = Path(name_or_path).stem, _profile_file_text(name_or_path)
    return parse_profile(name, _load_yaml(name_or_path, text))


def _profile_file_text(name_or_path: str) -> str:
    """The text of a profile file; a ProfileError naming it when there is none to read."""
    path = Path(name_or_path)
    try:
        if path.is_file():
            return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:  # unreadable, a name too long, not UTF-8
        raise ProfileError(f"{name_or_path}: {getattr(exc, 'strerror', None) or exc}") from None
    raise ProfileError(
        f"no profile {name_or_path!r}: not a file, and the built-in ones are "
        f"{', '.join(builtin_profile_names())}"
    )


def _load_yaml(source: str, text: str) -> Any:
    """The YAML of profile ``source``; ValueError is a value YAML cannot build (10**5000, 2024-13-01)."""
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as exc:
        raise ProfileError(f"{source}: not valid YAML: {_yaml_problem(exc)}") from None


def _yaml_problem(exc: Exception) -> str:
    """YAML's message in one line: its own spans several, quoting the line at fault."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def parse_profile(name: str, data: Any) -> Profile:
    reader = _Reader(name, data)
    layouts_data = reader.section("layouts")
    if not layouts_data:
        raise ProfileError(f"profile {name}: layouts: at least one layout is required")
    layouts = {}
    for key in layouts_data:
        layout = reader.section("layouts", key)
        layouts[key] = LayoutCost(
            t0_s=reader.positive(layout, f"layouts.{key}.t0_ms") / 1000,
            k_s=reader.non_negative(layout, f"layouts.{key}.k_ms") / 1000,
            prefill_tokens_per_s=reader.positive(layout, f"layouts.{key}.prefill_tokens_per_s"),
            prefill_forward_s=reader.non_negative(layout, f"layouts.{key}.prefill_forward_ms") / 1000,
        )
    defaults = reader.section("defaults")
    cuda_graph = reader.section("cuda_graph")
    speculative = reader.section("speculative")
    acceptance_rate = reader.non_negative(speculative, "speculative.acceptance_rate")
    if acceptance_rate >= 1:
        raise ProfileError(
            f"profile {name}: speculative.acceptance_rate: must be below 1, got {acceptance_rate}"
        )
    return Profile(
        name=name,
        description=str(reader.top.get("description", "")),
        context_length=reader.count(reader.top, "context_length"),
        eos_token_id=int(reader.non_negative(reader.top, "eos_token_id")),
        natural_output_tokens=reader.count(reader.top, "natural_output_tokens"),
        max_running_requests=reader.count(defaults, "defaults.max_running_requests"),
        chunked_prefill_size=reader.count(defaults, "defaults.chunked_prefill_size"),
        cuda_graph_max_bs=reader.count(defaults, "defaults.cuda_graph_max_bs"),
        speculative_num_steps=reader.count(defaults, "defaults.speculative_num_steps"),
        eager_extra_s=reader.non_negative(cuda_graph, "cuda_graph.eager_extra_ms") / 1000,
        acceptance_rate=acceptance_rate,
        draft_step_s=reader.non_negative(speculative, "speculative.draft_step_ms") / 1000,
        verify_token_cost=reader.non_negative(speculative, "speculative.verify_token_cost"),
        layouts=layouts,
        kv_bytes_per_token=(
            reader.count(reader.top, "kv_bytes_per_token") if "kv_bytes_per_token" in reader.top else None
        ),
    )


class _Reader:
    """Typed access to a profile's YAML with errors that name the profile and the key path."""

    def __init__(self, name: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise ProfileError(f"profile {name}: the file must hold a mapping")
        self.name = name
        self.top: dict[str, Any] = data

    def section(self, *path: str) -> dict[str, Any]:
        node: Any = self.top
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise ProfileError(f"profile {self.name}: {'.'.join(path)}: a mapping is required")
        return node

    def number(self, mapping: dict[str, Any], path: str) -> float:
        """The number at ``path``, the key as the file spells it; never NaN or an infinity."""
        try:
            return finite_number(mapping.get(path.rsplit(".", 1)[-1]))
        except ValueError as exc:
            raise ProfileError(f"profile {self.name}: {path}: {exc}") from None

    def non_negative(self, mapping: dict[str, Any], path: str) -> float:
        value = self.number(mapping, path)
        if value < 0:
            raise ProfileError(f"profile {self.name}: {path}: must not be negative, got {value}")
        return value

    def positive(self, mapping: dict[str, Any], path: str) -> float:
        value = self.number(mapping, path)
        if value <= 0:
            raise ProfileError(f"profile {self.name}: {path}: must be positive, got {value}")
        return value

    def count(self, mapping: dict[str, Any], path: str) -> int:
        value = self.positive(mapping, path)
        if value != int(value):
            raise ProfileError(f"profile {self.name}: {path}: must be a whole number, got {value}")
        return int(value)


@dataclass(frozen=True, slots=True)
class Speculation:
    """Speculative decoding as the model sees it: what a step costs and how many tokens it yields."""

    num_steps: int
    """Draft model steps per decode step (``--speculative-num-steps``)."""
    num_draft_tokens: int
    """Tokens the target model verifies per request and step (``--speculative-num-draft-tokens``)."""
    accept_length: float
    """Mean tokens a step yields per request: the verified prefix of the draft plus the bonus token."""
    acceptance_rate: float | None = None
    """The profile's ``speculative.acceptance_rate``: that of a prompt of ``REFERENCE_REPETITIVENESS``.
    None: every request yields ``accept_length``."""

    def accept_length_for(self, repetitiveness: float) -> float:
        """The mean accepted length of a request whose prompt has this ``outputs.repetitiveness``: a draft
        model guesses text that repeats itself better. The acceptance rate moves by
        ``REPETITIVENESS_SLOPE`` logits per unit of repetitiveness away from the reference, so random token
        ids (0) get a little less than the profile's rate and a prompt that repeats itself throughout
        nearly every draft; the length is bounded by the draft tokens verified."""
        if self.acceptance_rate is None:
            return self.accept_length
        if repetitiveness == REFERENCE_REPETITIVENESS:
            return self.accept_length
        rate = min(max(self.acceptance_rate, 1e-6), 1 - 1e-6)
        logit = math.log(rate / (1 - rate)) + REPETITIVENESS_SLOPE * (
            repetitiveness - REFERENCE_REPETITIVENESS
        )
        shifted = 1 / (1 + math.exp(-logit))
        return min(mean_accept_length(shifted, self.num_steps), float(self.num_draft_tokens))


REFERENCE_REPETITIVENESS = 0.1
"""The repetitiveness (share of a prompt's tokens that end a 3-gram seen before in it) whose requests
accept drafts at the profile's rate: about that of ordinary prose."""
REPETITIVENESS_SLOPE = 4.0
"""Logits of acceptance rate per unit of repetitiveness: 0.7 at the reference is 0.61 for random ids, 0.92
at 0.5 and 0.99 for a prompt that only repeats itself."""


def mean_accept_length(acceptance_rate: float, num_steps: int) -> float:
    """Each drafted token is accepted with probability ``a`` if all before it were: 1 + a + ... + a^s."""
    return float(sum(acceptance_rate**i for i in range(num_steps + 1)))


@dataclass(frozen=True, slots=True)
class PerformanceModel:
    """Durations, in model seconds, of the forwards one scheduler runs."""

    layout: str
    cost: LayoutCost
    cuda_graph_max_bs: int
    """Largest decode batch that runs as a CUDA graph; 0 when decode CUDA graphs are off."""
    eager_extra_s: float
    speculation: Speculation | None
    draft_step_s: float
    verify_token_cost: float

    @property
    def tokens_per_step(self) -> float:
        return self.speculation.accept_length if self.speculation else 1.0

    def decode_step_seconds(self, batch_size: int) -> float:
        """``t(b) = t0 + k * b``; speculation adds the draft steps and verifies more tokens per request."""
        fixed = self.cost.t0_s
        per_request = self.cost.k_s
        if self.speculation is not None:
            fixed += self.speculation.num_steps * self.draft_step_s
            per_request *= 1 + self.verify_token_cost * (self.speculation.num_draft_tokens - 1)
        if batch_size > self.cuda_graph_max_bs:
            fixed += self.eager_extra_s
        return fixed + per_request * batch_size

    def prefill_seconds(self, tokens: int, forwards: int) -> float:
        return forwards * self.cost.prefill_forward_s + tokens / self.cost.prefill_tokens_per_s
