"""The simulator's "model": which tokens a response holds, their log-probabilities, the sums it gets right.

There are no weights. A response's tokens are a pure function of three things, so that two servers can be
compared token by token:

- the prompt's tokens (its token ids, or the words of a text prompt or of all chat messages), through a
  stable hash (BLAKE2b, not Python's per-process salted ``hash``);
- the server's *numerics family* (``NumericsFamily``): the launch flags that change a model's arithmetic
  (``NUMERICS_FLAGS``: dtype, KV cache dtype, quantization, ...). Layout, parallelism, scheduling,
  speculative decoding and chunked prefill do not enter it, so servers that differ only in those answer
  identically; a non-default family follows the default family's tokens up to a position ``d`` of its own
  per prompt (0 to ``DIVERGENCE_WINDOW - 1``) and its own tokens from there on (at ``d`` always another
  token);
- the ``diverge-after=K`` fault: from output position K on every token differs from the family's.

Output tokens are words of ``VOCABULARY`` (one token per word, ids from ``FIRST_TOKEN_ID``) and number
tokens (``" 42"``, id ``NUMBER_FIRST_ID`` + the number zigzag-encoded). The "model" knows one piece of
arithmetic: where a request is text and its prompt (the last user message of a chat) holds integers, the
first output token is their sum, whatever the operators, so a task of mixed +, -, x problems scores about
its share of sums. A non-default family and the fault at position 0 answer another number.

Log-probabilities are deterministic per prompt, position and family: the chosen token is the most likely,
the alternatives follow in a fixed order per position with geometrically falling probabilities, and a
non-default family moves every value slightly even where it chooses the same token. Values are rounded to
float32, as SGLang's are.

``repetitiveness`` is what speculative decoding's acceptance depends on (``model.Speculation``).
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Plain lower-case words: no character in them needs escaping in JSON, so events embed them as they are.
VOCABULARY = (
    *("the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from"),
    *("his", "an", "were", "are", "which", "this", "be", "or", "has", "had", "not", "first", "one"),
    *("their", "its", "new", "after", "who", "they", "have", "her", "she", "two", "been", "other"),
    *("when", "there", "all", "during", "into", "school", "time", "may", "years", "more", "most"),
    *("only", "over", "city", "some", "world", "would", "where", "later", "up"),
)
FIRST_TOKEN_ID = 1000
NUMBER_FIRST_ID = 100_000
"""Number tokens' ids start here, past the words'; a number ``n`` is ``NUMBER_FIRST_ID + zigzag(n)``."""
TOKEN_TEXTS = tuple(" " + word for word in VOCABULARY)
TOKEN_IDS = tuple(str(FIRST_TOKEN_ID + index) for index in range(len(VOCABULARY)))
WORDS = len(VOCABULARY)

_STRIDES = tuple(stride for stride in range(1, WORDS) if math.gcd(stride, WORDS) == 1)

DIVERGENCE_WINDOW = 8
"""A non-default numerics family leaves the default family's tokens at a position below this."""

NUMERICS_FLAGS = (
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "quantization_param_path",
    "modelopt_quant",
    "enable_fp32_lm_head",
    "mamba_ssm_dtype",
    "flashinfer_mxfp4_moe_precision",
    "deepep_dispatcher_output_dtype",
    "enable_quant_communications",
    "triton_attention_reduce_in_fp32",
    "revision",
)
"""SGLang's launch flags (ServerArgs fields) that change what the model computes, not only how fast: the
weights' and activations' precision, the KV cache's, quantization and its scales, the LM head's precision,
reductions in lower precision, another revision of the weights."""

_SYNONYMS = {"half": "float16", "float": "float32", "bf16": "bfloat16"}
_MASK = (1 << 64) - 1
_PROB_SALT, _JITTER_SALT, _FAULT_SALT, _NUMBER_SALT, _DIVERGE_SALT = 1, 2, 3, 4, 5
_INTEGER = re.compile(r"(?<!\w)-?\d+")
"""An integer in a prompt: a minus sign counts only where it starts a word (``-3``, not ``5-3``)."""
LOGPROB_FLOOR = -60.0
"""The least log-probability reported: far past any top-k, as a real model's bottom tokens are."""


def _mix(value: int) -> int:
    """SplitMix64's finalizer: 64 well-mixed bits from any integer, the same in every process."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def stable_hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def prompt_seed(prompt: Sequence[Hashable]) -> int:
    """The prompt's identity: ids and words hashed apart, so ``[1, 2]`` and ``"1 2"`` differ."""
    if prompt and isinstance(prompt[0], int):
        return stable_hash(b"ids\0" + ",".join(map(str, prompt)).encode())
    return stable_hash(b"words\0" + "\x1f".join(map(str, prompt)).encode())


def arithmetic_answer(query: str | None) -> int | None:
    """The sum of the integers in ``query``; None for a request of token ids or a text without one."""
    if query is None:
        return None
    numbers = _INTEGER.findall(query)
    return sum(int(number) for number in numbers) if numbers else None


def number_token_id(number: int) -> int:
    return NUMBER_FIRST_ID + (2 * number if number >= 0 else -2 * number - 1)


def number_of_token_id(token_id: int) -> int | None:
    """The number a number token's id stands for; None for any other id."""
    if token_id < NUMBER_FIRST_ID:
        return None
    code = token_id - NUMBER_FIRST_ID
    return code // 2 if code % 2 == 0 else -(code + 1) // 2


def float32(value: float) -> float:
    """``value`` as the float32 SGLang's logits hold, read back as a Python float."""
    rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    return rounded


def repetitiveness(prompt: Sequence[Hashable], window: int = 8192) -> float:
    """The share of the prompt's tokens (its last ``window``) that end a 3-gram seen earlier in it: near 0
    for random token ids, towards 1 for text that repeats itself."""
    tokens = list(prompt[-window:])
    grams = len(tokens) - 2
    if grams <= 0:
        return 0.0
    return (grams - len(set(zip(tokens, tokens[1:], tokens[2:], strict=False)))) / grams


@dataclass(frozen=True, slots=True)
class NumericsFamily:
    """The numerics flags set away from what the model computes by default, normalized and in
    ``NUMERICS_FLAGS`` order; empty for the default family."""

    settings: tuple[tuple[str, str], ...] = ()

    @property
    def is_default(self) -> bool:
        return not self.settings

    @property
    def name(self) -> str:
        return ",".join(f"{flag}={value}" for flag, value in self.settings) or "default"

    @property
    def key(self) -> int:
        """The family's own stream of tokens and jitter; 0 for the default family."""
        return 0 if self.is_default else stable_hash(b"family\0" + self.name.encode())

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "flags": dict(self.settings)}


def numerics_family(args: Mapping[str, Any], checkpoint_dtype: str | None = None) -> NumericsFamily:
    """The family of a server's effective launch arguments. ``--dtype auto`` is the checkpoint's dtype
    (``torch_dtype`` of its config.json when float16 or bfloat16, else bfloat16), so an explicit
    ``--dtype bfloat16`` on a bfloat16 model is the default family; ``--kv-cache-dtype auto`` is the
    model's dtype, and a KV cache dtype equal to it is no setting of its own."""
    model_dtype = _SYNONYMS.get(checkpoint_dtype or "", checkpoint_dtype)
    if model_dtype not in ("float16", "bfloat16"):
        model_dtype = "bfloat16"
    settings: list[tuple[str, str]] = []
    dtype = _SYNONYMS.get(str(args.get("dtype") or "auto"), str(args.get("dtype") or "auto"))
    dtype = model_dtype if dtype == "auto" else dtype
    for flag in NUMERICS_FLAGS:
        value = args.get(flag)
        if flag == "dtype":
            shown: str | None = None if dtype == model_dtype else dtype
        elif flag == "kv_cache_dtype":
            kv = _SYNONYMS.get(str(value or "auto"), str(value or "auto"))
            shown = None if kv in ("auto", dtype) else kv
        elif flag == "quantization":
            shown = None if value in (None, "unquant") else str(value)
        elif flag in ("flashinfer_mxfp4_moe_precision", "deepep_dispatcher_output_dtype"):
            shown = None if value in (None, "default", "auto") else str(value)
        elif isinstance(value, bool):
            shown = "true" if value else None
        else:
            shown = None if value is None else str(value)
        if shown is not None:
            settings.append((flag, shown))
    return NumericsFamily(tuple(settings))


@dataclass(frozen=True, slots=True)
class OutputModel:
    """A server's outputs: its numerics family and the ``diverge-after`` fault."""

    family: NumericsFamily = NumericsFamily()
    diverge_after: int | None = None

    def response(self, prompt: Sequence[Hashable], query: str | None) -> ResponseTokens:
        return ResponseTokens(self, prompt, query)


class ResponseTokens:
    """One response's tokens, worked out as far as they are read: the writer asks for them in order, at up
    to tens of thousands a second, so each is computed once and kept as the id, the id's JSON and the text
    the formats need."""

    def __init__(self, model: OutputModel, prompt: Sequence[Hashable], query: str | None) -> None:
        self.seed = prompt_seed(prompt)
        self.as_ids = bool(prompt) and isinstance(prompt[0], int)
        self.answer = arithmetic_answer(query)
        self.family_key = model.family.key
        self.diverge_after = model.diverge_after
        self.divergence = 0
        """Where a non-default family leaves the default family's tokens (0 for a sum: its number)."""
        if self.family_key and self.answer is None:
            self.divergence = _mix(self.seed ^ self.family_key ^ _DIVERGE_SALT) % DIVERGENCE_WINDOW
        self.ids: list[int] = []
        self.id_texts: list[str] = []
        self.texts: list[str] = []
        self.words: list[str] = []
        self._rows: list[tuple[float, float]] = []

    def ensure(self, count: int) -> None:
        """Work out the tokens up to position ``count`` (exclusive)."""
        for position in range(len(self.ids), count):
            if position == 0 and self.answer is not None:
                self._append_number(self._number())
            else:
                index = self._word(position)
                self.ids.append(FIRST_TOKEN_ID + index)
                self.id_texts.append(TOKEN_IDS[index])
                self.texts.append(TOKEN_TEXTS[index])
                self.words.append(VOCABULARY[index])

    def text(self, start: int, count: int) -> str:
        self.ensure(start + count)
        return self.texts[start] if count == 1 else "".join(self.texts[start : start + count])

    def keys(self, count: int) -> list[Hashable]:
        """The first ``count`` tokens as the prefix cache keys them: ids where the prompt is ids, else
        words (a client sends a reply back as it got it: ``output_ids`` or text)."""
        self.ensure(count)
        return list(self.ids[:count]) if self.as_ids else list(self.words[:count])

    def _position_hash(self, salt: int, position: int) -> int:
        return _mix((self.seed ^ salt) + position * 0x9E3779B97F4A7C15)

    def _word(self, position: int) -> int:
        index = self._position_hash(0, position) % WORDS
        if self.family_key and position >= self.divergence:
            own = self._position_hash(self.family_key, position) % WORDS
            index = (own + 1) % WORDS if position == self.divergence and own == index else own
        if self.diverge_after is not None and position >= self.diverge_after:
            # Any word but the family's: a wrong token at every position from K on.
            index = (index + 1 + self._position_hash(_FAULT_SALT, position) % (WORDS - 1)) % WORDS
        return index

    def _number(self) -> int:
        assert self.answer is not None
        number = self.answer
        if self.family_key:
            number += self._offset(self.family_key ^ _NUMBER_SALT)
        if self.diverge_after == 0:
            number += self._offset(_FAULT_SALT ^ _NUMBER_SALT)
        return number

    def _offset(self, salt: int) -> int:
        """A small non-zero difference: an answer that is off, not absurd."""
        bits = self._position_hash(salt, 0)
        return (1 + bits % 9) * (1 if bits & 1 << 40 else -1)

    def _append_number(self, number: int) -> None:
        token_id = number_token_id(number)
        self.ids.append(token_id)
        self.id_texts.append(str(token_id))
        self.texts.append(f" {number}")
        self.words.append(str(number))

    # --- log-probabilities ------------------------------------------------------------------------------

    def _shape(self, position: int) -> tuple[float, float]:
        """The position's distribution: the chosen token's probability (0.4 to 0.99) and the ratio each
        next alternative's share falls by (0.35 to 0.6). A non-default family moves both a little."""
        while len(self._rows) <= position:
            at = len(self._rows)
            bits = self._position_hash(_PROB_SALT, at)
            first, ratio = (bits & 0xFFFF) / 0x10000, (bits >> 16 & 0xFFFF) / 0x10000
            if self.family_key:
                jitter = self._position_hash(self.family_key ^ _JITTER_SALT, at)
                first = _nudge(first, jitter & 0xFFFF)
                ratio = _nudge(ratio, jitter >> 16 & 0xFFFF)
            self._rows.append((0.4 + 0.59 * first, 0.35 + 0.25 * ratio))
        return self._rows[position]

    def _step(self, position: int) -> int:
        """The stride of the alternatives' order over the words: prime to their count, so it visits all."""
        return _STRIDES[self._position_hash(_PROB_SALT ^ 0xA5A5, position) % len(_STRIDES)]

    def _logprob_of_rank(self, position: int, rank: int) -> float:
        chosen, ratio = self._shape(position)
        if rank == 0:
            return float32(math.log(chosen))
        value = math.log(1 - chosen) + math.log(1 - ratio) + (rank - 1) * math.log(ratio)
        return float32(max(value, LOGPROB_FLOOR))

    def _alternative(self, position: int, rank: int) -> int:
        """The token id at ``rank`` (1 on) among the position's alternatives: the other words in the
        position's order, then numbers from 0 up (past the chosen one)."""
        chosen = self.ids[position]
        step = self._step(position)
        word = chosen - FIRST_TOKEN_ID
        if 0 <= word < WORDS:
            if rank < WORDS:
                return FIRST_TOKEN_ID + (word + rank * step) % WORDS
            number = rank - WORDS
        else:
            if rank <= WORDS:
                return (
                    FIRST_TOKEN_ID + (self._position_hash(_PROB_SALT, position) + (rank - 1) * step) % WORDS
                )
            number = rank - WORDS - 1
            chosen_number = number_of_token_id(chosen)
            if chosen_number is not None and 0 <= chosen_number <= number:
                number += 1
        return number_token_id(number)

    def _rank(self, position: int, token_id: int) -> int | None:
        """``_alternative``'s inverse; None for an id outside the simulated vocabulary."""
        chosen = self.ids[position]
        if token_id == chosen:
            return 0
        step = self._step(position)
        inverse = pow(step, -1, WORDS)
        word = token_id - FIRST_TOKEN_ID
        chosen_word = chosen - FIRST_TOKEN_ID
        chosen_is_word = 0 <= chosen_word < WORDS
        if 0 <= word < WORDS:
            if chosen_is_word:
                return (word - chosen_word) * inverse % WORDS
            start = self._position_hash(_PROB_SALT, position) % WORDS
            return (word - start) * inverse % WORDS + 1
        number = number_of_token_id(token_id)
        if number is None or number < 0:
            return None
        if chosen_is_word:
            return WORDS + number
        chosen_number = number_of_token_id(chosen)
        skipped = chosen_number is not None and 0 <= chosen_number < number
        return WORDS + 1 + number - skipped

    def token_text(self, token_id: int) -> str:
        word = token_id - FIRST_TOKEN_ID
        if 0 <= word < WORDS:
            return TOKEN_TEXTS[word]
        number = number_of_token_id(token_id)
        return f" {number}" if number is not None else ""

    def logprob(self, position: int) -> float:
        """The chosen token's log-probability at ``position``."""
        self.ensure(position + 1)
        return self._logprob_of_rank(position, 0)

    def top_logprobs(self, position: int, count: int) -> list[tuple[float, int]]:
        """The ``count`` most likely tokens at ``position``, most likely (the chosen one) first."""
        self.ensure(position + 1)
        return [
            (
                self._logprob_of_rank(position, rank),
                self.ids[position] if rank == 0 else self._alternative(position, rank),
            )
            for rank in range(count)
        ]

    def logprob_of(self, position: int, token_id: int) -> float:
        """Any token's log-probability at ``position`` (``token_ids_logprob``)."""
        self.ensure(position + 1)
        rank = self._rank(position, token_id)
        return LOGPROB_FLOOR if rank is None else self._logprob_of_rank(position, rank)


def _nudge(value: float, bits: int) -> float:
    """``value`` (0 to 1) moved by 0.005 to 0.02, away from the edge it is near: another value, never
    the same."""
    step = 0.005 + 0.015 * bits / 0x10000
    return value - step if value + step >= 1 else value + step
