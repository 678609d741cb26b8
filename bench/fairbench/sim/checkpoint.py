"""What the simulator reads from a local model directory: the few ``config.json`` values SGLang reports.

SGLang takes the context length, the model type and the architectures from the checkpoint's ``config.json``
(``hf_transformers.common.get_context_length``: the first of ``CONTEXT_LENGTH_KEYS`` that is set, times the
RoPE scaling factor). When ``--model-path`` is a local directory with that file, the simulator does the same,
so a request is refused at the same length as by SGLang serving that directory. It also reads the shape of
the KV cache (layers, KV heads, head size or MLA's latent size), which a disaggregated prefill server sends
per prompt token. Any other model path (a Hugging Face id, or the made-up names tests use) yields an empty
``Checkpoint``: the profile stands in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairbench.sim.finite import finite_number

CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
# transformers' attribute maps: GPT-2-style configs store max_position_embeddings as n_positions, and the
# layer count, head count and width as n_layer, n_head and n_embd.
KEY_ALIASES = {
    "max_position_embeddings": ("n_positions", "n_ctx"),
    "num_hidden_layers": ("n_layer",),
    "num_attention_heads": ("n_head",),
    "hidden_size": ("n_embd",),
}
SGLANG_DEFAULT_CONTEXT_LENGTH = 2048


class CheckpointError(ValueError):
    """The model directory's config.json cannot be read; SGLang would not start either."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    model_type: str | None = None
    architectures: list[str] | None = None
    context_length: int | None = None
    eos_token_id: int | None = None
    torch_dtype: str | None = None
    """The weights' dtype (``torch_dtype``, or ``dtype`` in newer configs): what ``--dtype auto`` loads."""
    kv_elements_per_token: int | None = None
    """KV cache elements one token holds over all layers (see the function of that name): what a
    prefill server sends a decode server per prompt token, in elements of the KV cache's dtype."""


def _lookup(config: dict[str, Any], key: str) -> tuple[str, Any]:
    """The first of ``key`` and its aliases that is set, and its value (None when none is)."""
    for name in (key, *KEY_ALIASES.get(key, ())):
        if config.get(name) is not None:
            return name, config[name]
    return key, None


def _number(value: Any, where: str) -> float:
    """A number SGLang computes the context length with: a string, NaN or an infinity would fail it."""
    try:
        return finite_number(value)
    except ValueError as exc:
        raise CheckpointError(f"{where}: {exc}") from None


def _rope_scaling_factor(config: dict[str, Any], where: str) -> float:
    """The factor SGLang scales the context length by: 1 where the length already includes it."""
    rope_scaling = config.get("rope_scaling") or {}
    if (
        not isinstance(rope_scaling, dict)
        or "original_max_position_embeddings" in rope_scaling
        or rope_scaling.get("rope_type") == "llama3"
    ):
        return 1.0
    return _number(rope_scaling.get("factor", 1), f"{where}rope_scaling.factor")


def context_length(config: dict[str, Any], where: str) -> int:
    """``get_context_length`` on a config read as plain JSON; ``where`` (the file, and ``text_config.``
    for a nested config) begins the key an error names."""
    factor = _rope_scaling_factor(config, where)
    for key in CONTEXT_LENGTH_KEYS:
        name, value = _lookup(config, key)
        if value is not None:
            length = factor * _number(value, f"{where}{name}")
            # Two large numbers can multiply to an infinity, which no integer holds.
            return int(_number(length, f"{where}{name} times rope_scaling.factor"))
    return SGLANG_DEFAULT_CONTEXT_LENGTH


def _positive_int(config: dict[str, Any], key: str) -> int | None:
    value = _lookup(config, key)[1]
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def kv_elements_per_token(config: dict[str, Any]) -> int | None:
    """The KV cache elements of one token over all layers, as SGLang's memory pools size them: with
    multi-head latent attention (``kv_lora_rank``, DeepSeek and Kimi) the compressed latent plus the
    rotary key per layer; else a key and a value per KV head. None when the config does not say (a
    value missing, or not a positive integer); sliding-window and hybrid layouts are not told apart."""
    layers = _positive_int(config, "num_hidden_layers")
    if layers is None:
        return None
    latent = _positive_int(config, "kv_lora_rank")
    if latent is not None:
        rope = _positive_int(config, "qk_rope_head_dim")
        return None if rope is None else layers * (latent + rope)
    heads = _positive_int(config, "num_attention_heads")
    width = _positive_int(config, "hidden_size")
    kv_heads = _positive_int(config, "num_key_value_heads") or heads
    head_dim = _positive_int(config, "head_dim") or (width // heads if width and heads else None)
    if kv_heads is None or not head_dim:
        return None
    return layers * 2 * kv_heads * head_dim


def read_checkpoint(model_path: str) -> Checkpoint:
    path = Path(model_path) / "config.json"
    try:
        found = path.is_file()
    except OSError as exc:  # a name too long for the file system, say: no model could live there
        raise CheckpointError(f"{path}: {exc.strerror or exc}") from None
    if not found:
        return Checkpoint()
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    # Multimodal checkpoints keep the language model's settings in text_config, as SGLang reads them.
    nested = config.get("text_config")
    section, text_config = ("text_config.", nested) if isinstance(nested, dict) else ("", config)
    eos = text_config.get("eos_token_id", config.get("eos_token_id"))
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    architectures = config.get("architectures")
    dtype = text_config.get("torch_dtype") or config.get("torch_dtype") or config.get("dtype")
    return Checkpoint(
        model_type=config.get("model_type") if isinstance(config.get("model_type"), str) else None,
        architectures=[str(name) for name in architectures] if isinstance(architectures, list) else None,
        context_length=context_length(text_config, f"{path}: {section}"),
        eos_token_id=eos if isinstance(eos, int) and not isinstance(eos, bool) else None,
        torch_dtype=dtype if isinstance(dtype, str) else None,
        kv_elements_per_token=kv_elements_per_token(text_config),
    )
