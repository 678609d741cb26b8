"""A tiny GPT-2 model directory that real SGLang serves on a CPU: built offline, the same bytes every time.

    python tests/support/tiny_model.py DIR   # writes DIR/config.json, tokenizer.json, tokenizer_config.json

Its weights (``model.safetensors``) are random, drawn from a fixed seed: what it generates is noise, but
the same noise for the same prompt under the same numerics, and every token passes through SGLang's real
tokenizer, scheduler, radix cache and HTTP layers. The embeddings are drawn wide enough that a greedy
answer is not a string of ties (SGLang's own ``--load-format dummy`` weights give every token the same
probability, so every answer is token 0 and no change of numerics could show). The tokenizer
is a byte-level BPE trained right here, in plain Python, on a fixed built-in text: no download, no
``tokenizers`` package, and a vocabulary of ``VOCAB_SIZE`` ids, far below what a real model has, so a client
that draws token ids from a fixed range (say up to 30000, below most real vocabularies) sends ids this model
does not have.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
import sys
from array import array
from collections import Counter
from pathlib import Path

# 256 byte tokens, the merges, and the one special token (last id).
VOCAB_SIZE = 512
END_OF_TEXT = "<|endoftext|>"
MERGES = VOCAB_SIZE - 256 - 1

# GPT-2's shape, shrunk: 2 layers of width 128 start in seconds and need a few MB for weights.
CONFIG = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": VOCAB_SIZE,
    "n_positions": 4096,
    "n_ctx": 4096,
    "n_embd": 128,
    "n_layer": 2,
    "n_head": 4,
    "n_inner": None,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
    "initializer_range": 0.02,
    "bos_token_id": VOCAB_SIZE - 1,
    "eos_token_id": VOCAB_SIZE - 1,
    "torch_dtype": "float32",
}

# Role-tagged turns, then the assistant's tag: enough for /v1/chat/completions.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

# The training text: plain English of the kind the chat and ShareGPT-style prompts carry.
_CORPUS = """
The quick brown fox jumps over the lazy dog. A benchmark is only as fair as its least tuned configuration.
Every server of a campaign gets the same prompts, the same output length and the same concurrency levels.
Tensor parallelism splits every layer across the GPUs; expert parallelism routes each token to the GPUs that
hold its experts. The scheduler batches running requests, the radix cache reuses shared prefixes, and the
tokenizer turns text into token ids and back. Time to first token, time per output token and inter-token
latency are measured from the client; throughput is tokens per second over the whole measured window.
What differed between two configurations must be written down before their numbers are compared.
"""

_WORD = re.compile(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+")


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each byte value, in byte order (ids 0-255 of the vocabulary)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\N{INVERTED EXCLAMATION MARK}"), ord("\N{NOT SIGN}") + 1),
        *range(ord("\N{REGISTERED SIGN}"), ord("\N{LATIN SMALL LETTER Y WITH DIAERESIS}") + 1),
    ]
    stand_in = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in stand_in:
            stand_in[byte] = chr(256 + extra)
            extra += 1
    return [stand_in[byte] for byte in range(256)]


def train_merges(text: str, count: int) -> list[tuple[str, str]]:
    """``count`` BPE merges learned from ``text``: the most frequent adjacent pair each time, ties broken by
    the pair itself, so the result depends on nothing but the text."""
    alphabet = byte_alphabet()
    words = Counter(tuple(alphabet[byte] for byte in piece.encode("utf-8")) for piece in _WORD.findall(text))
    merges: list[tuple[str, str]] = []
    while len(merges) < count:
        pairs: Counter[tuple[str, str]] = Counter()
        for word, freq in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] += freq
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        merges.append(best)
        merged: Counter[tuple[str, ...]] = Counter()
        for word, freq in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if word[i : i + 2] == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += freq
        words = merged
    return merges


def tokenizer_json() -> dict[str, object]:
    """A ``tokenizers`` byte-level BPE tokenizer: the bytes, the merges, and ``END_OF_TEXT``."""
    merges = train_merges(_CORPUS * 4, MERGES)
    if len(merges) != MERGES:
        raise RuntimeError(f"the training text yields {len(merges)} merges, not {MERGES}")
    vocab = {token: index for index, token in enumerate(byte_alphabet())}
    for left, right in merges:
        vocab[left + right] = len(vocab)
    if len(vocab) != VOCAB_SIZE - 1:
        raise RuntimeError(f"{len(vocab)} distinct tokens from the merges, not {VOCAB_SIZE - 1}")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": VOCAB_SIZE - 1,
                "content": END_OF_TEXT,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[left, right] for left, right in merges],
        },
    }


def tokenizer_config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": CONFIG["n_positions"],
        "bos_token": END_OF_TEXT,
        "eos_token": END_OF_TEXT,
        "unk_token": END_OF_TEXT,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(VOCAB_SIZE - 1): {
                "content": END_OF_TEXT,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
        },
    }


WEIGHTS_SEED = 20261206
# Standard deviations: embeddings wide enough for distinct logits, layers at GPT-2's own initial scale so
# every token's context still moves its next token.
EMBEDDING_STD = 0.3
POSITION_STD = 0.01
LAYER_STD = 0.1


Tensor = tuple[tuple[int, ...], array]
"""A tensor's shape and its float32 values, row-major."""


def weights() -> dict[str, Tensor]:
    """GPT-2's tensors under Hugging Face's names (Conv1D weights as ``[in, out]``), float32, drawn from
    ``WEIGHTS_SEED`` in plain Python: the model builds where only the standard library is."""
    draw = random.Random(WEIGHTS_SEED)
    width = int(CONFIG["n_embd"])  # type: ignore[call-overload]

    def normal(std: float, *shape: int) -> Tensor:
        return shape, array("f", (draw.gauss(0.0, std) for _ in range(math.prod(shape))))

    def constant(value: float, size: int) -> Tensor:
        return (size,), array("f", [value] * size)

    tensors = {
        "wte.weight": normal(EMBEDDING_STD, VOCAB_SIZE, width),
        "wpe.weight": normal(POSITION_STD, int(CONFIG["n_positions"]), width),  # type: ignore[call-overload]
        "ln_f.weight": constant(1.0, width),
        "ln_f.bias": constant(0.0, width),
    }
    for layer in range(int(CONFIG["n_layer"])):  # type: ignore[call-overload]
        prefix = f"h.{layer}."
        tensors |= {
            prefix + "ln_1.weight": constant(1.0, width),
            prefix + "ln_1.bias": constant(0.0, width),
            prefix + "attn.c_attn.weight": normal(LAYER_STD, width, 3 * width),
            prefix + "attn.c_attn.bias": constant(0.0, 3 * width),
            prefix + "attn.c_proj.weight": normal(LAYER_STD, width, width),
            prefix + "attn.c_proj.bias": constant(0.0, width),
            prefix + "ln_2.weight": constant(1.0, width),
            prefix + "ln_2.bias": constant(0.0, width),
            prefix + "mlp.c_fc.weight": normal(LAYER_STD, width, 4 * width),
            prefix + "mlp.c_fc.bias": constant(0.0, 4 * width),
            prefix + "mlp.c_proj.weight": normal(LAYER_STD, 4 * width, width),
            prefix + "mlp.c_proj.bias": constant(0.0, width),
        }
    return tensors


def safetensors_bytes(tensors: dict[str, Tensor]) -> bytes:
    """The safetensors file of ``tensors``: an 8-byte little-endian header length, the JSON header (padded
    to 8 bytes), then each tensor's little-endian bytes in the header's order."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset, blobs = 0, []
    for name, (shape, values) in tensors.items():
        data = array("f", values)
        if sys.byteorder != "little":
            data.byteswap()
        blob = data.tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def build(directory: Path) -> Path:
    """Writes the model directory (creating it) and returns it; files are rewritten only when they differ,
    so a build step that depends on them sees them change only when this file does."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "config.json": CONFIG,
        "tokenizer.json": tokenizer_json(),
        "tokenizer_config.json": tokenizer_config(),
    }
    contents = {
        name: (json.dumps(content, indent=1, ensure_ascii=False, sort_keys=True) + "\n").encode()
        for name, content in files.items()
    }
    contents["model.safetensors"] = safetensors_bytes(weights())
    for name, data in contents.items():
        path = directory / name
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
    return directory


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    print(build(Path(sys.argv[1])))
