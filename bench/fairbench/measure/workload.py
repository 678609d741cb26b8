"""Prompts for a sweep point: exact-length random token ids, or a local ShareGPT-style file.

Every point gets its own prompts, derived from (seed, phase, concurrency, repeat)
alone: a campaign is reproducible bit for bit, and no two points (nor a point and
its warmup) share a prompt, so a server's prefix cache cannot serve one point from
another's work.
"""

from __future__ import annotations

import json
import math
import random
from array import array
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from fairbench.measure.bounds import COUNT_FACTOR, REQUESTS
from fairbench.measure.vocabulary import Vocabulary

CHAT = "chat"
"""The API whose prompts are text (its messages' content)."""
APIS = ("completions", CHAT, "generate")
"""SGLang's generation APIs a workload's requests may go to (``measure.client`` speaks each)."""
DEFAULT_API = APIS[0]
RANDOM_IDS = "random-ids"
"""The dataset of random token ids of exact lengths; any other dataset is a ShareGPT-style file."""
DEFAULT_RANGE_RATIO = 1.0
"""Exact lengths (``WorkloadSpec.range_ratio``)."""
DEFAULT_SEED = 1
MIN_PROMPTS_PER_LEVEL = 16
"""A level sends at least this many prompts, however few ``prompts_per_level`` asks for: fewer give no
percentile worth reporting."""
POISSON = "poisson"
"""Open-loop arrivals with exponential gaps: the gamma process of shape 1, whatever ``burstiness`` says."""
GAMMA = "gamma"
"""Gamma-distributed gaps of shape ``burstiness`` and mean 1 / rate: below 1 burstier than poisson, above
1 more even."""
ARRIVALS = (POISSON, GAMMA)
"""How an open loop's requests are spaced (``measure.arrivals``)."""
DEFAULT_ARRIVAL = POISSON
DEFAULT_BURSTINESS = 1.0
"""Gamma's shape that is poisson."""

# Chat prompts must be text. Without a tokenizer, random-ids prompts for chat are
# built from short common words, about one token each; the server's count is used.
_WORDS = (  # noqa: SIM905 - a word list reads better as text
    "the of and to in is was for on with as by at from that this which are be or an "
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program"
).split()


class WorkloadError(ValueError):
    """The workload cannot be built: the message names the input and the rule."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's input. ``prompt`` is token ids, or text for chat and text datasets."""

    index: int
    prompt: list[int] | str
    prompt_len: int
    """Exact for token ids; an estimate for text (the server's count replaces it)."""
    output_len: int


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """How to build prompts. ``dataset`` is ``random-ids`` or a path to a ShareGPT-style JSON file."""

    input_len: int
    output_len: int
    dataset: str = RANDOM_IDS
    range_ratio: float = DEFAULT_RANGE_RATIO
    """Lengths are drawn uniformly from [max(1, int(len * ratio)), len]; 1.0 means exact."""
    seed: int = DEFAULT_SEED
    as_text: bool = False
    """Prompts must be text (the chat API)."""
    vocab_size: int | None = None
    """Token ids come from ``[0, vocab_size)``; None: from the served model's vocabulary (vocabulary.py)."""

    def __post_init__(self) -> None:
        if self.input_len < 1:
            raise WorkloadError(f"input_len: {self.input_len} must be a positive integer")
        if self.output_len < 1:
            raise WorkloadError(f"output_len: {self.output_len} must be a positive integer")
        if not 0.0 < self.range_ratio <= 1.0:
            raise WorkloadError(f"range_ratio: {self.range_ratio} must be in (0, 1]")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise WorkloadError(f"vocab_size: {self.vocab_size} must be a positive integer")

    @property
    def sends_token_ids(self) -> bool:
        """Whether prompts are random token ids, which must exist in the served model's vocabulary."""
        return self.dataset == RANDOM_IDS and not self.as_text


def _draw_length(rng: random.Random, full: int, ratio: float) -> int:
    return full if ratio >= 1.0 else rng.randint(max(1, int(full * ratio)), full)


def _random_ids(rng: random.Random, length: int, ids: array[int]) -> list[int]:
    # randbytes + array is ~20x faster than randrange per id: prompt preparation
    # must not delay the first request of a large point. The modulo's bias is below
    # len(ids) / 2**32: nothing for any vocabulary.
    raw = array("I", rng.randbytes(4 * length))
    span = len(ids)
    return [ids[value % span] for value in raw]


def _random_text(rng: random.Random, length: int) -> str:
    return " ".join(rng.choices(_WORDS, k=length))


def _load_sharegpt(path: Path) -> list[str]:
    """First human turn of every conversation with at least two turns."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkloadError(f"dataset: cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"dataset: {path}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"dataset: {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except RecursionError:
        raise WorkloadError(f"dataset: {path}: nested too deeply to be a list of conversations") from None
    if not isinstance(data, list):
        raise WorkloadError(f"dataset: {path}: must be a JSON list of conversations")
    prompts = []
    for item in data:
        turns = item.get("conversations", item.get("conversation")) if isinstance(item, dict) else None
        if isinstance(turns, list) and len(turns) >= 2 and isinstance(turns[0], dict):
            text = turns[0].get("value")
            if isinstance(text, str) and text:
                prompts.append(text)
    if not prompts:
        raise WorkloadError(f"dataset: {path}: no conversation with two or more turns")
    return prompts


class Workload:
    """Builds the prompts of each point of a sweep; random token ids come from ``vocabulary``, which a
    spec that sends token ids must be given."""

    def __init__(self, spec: WorkloadSpec, vocabulary: Vocabulary | None = None) -> None:
        self.spec = spec
        self._texts = None if spec.dataset == RANDOM_IDS else _load_sharegpt(Path(spec.dataset))
        if spec.sends_token_ids and vocabulary is None:
            raise WorkloadError("random-ids prompts need the served model's vocabulary (none was given)")
        self._ids = array("I", vocabulary.usable_ids() if vocabulary and spec.sends_token_ids else ())

    def prompts(self, count: int, *, level: str, repeat: int, phase: str = "measure") -> list[Prompt]:
        """The ``count`` prompts of one point at ``level`` (its tag, ``results.level_tag``: ``c16``);
        ``phase`` separates warmup from measurement."""
        spec = self.spec
        # A string seed is hashed with SHA-512 by random.Random: stable across runs and versions.
        rng = random.Random(f"fairbench/{spec.seed}/{phase}/{level}/r{repeat}")
        prompts = []
        for index in range(count):
            input_len = _draw_length(rng, spec.input_len, spec.range_ratio)
            output_len = _draw_length(rng, spec.output_len, spec.range_ratio)
            prompt: list[int] | str
            if self._texts is not None:
                prompt = self._texts[rng.randrange(len(self._texts))]
                input_len = len(prompt.split())
            elif spec.as_text:
                prompt = _random_text(rng, input_len)
            else:
                prompt = _random_ids(rng, input_len, self._ids)
            prompts.append(Prompt(index, prompt, input_len, output_len))
        return prompts


def times_level(factor: float, level: float) -> int:
    """``Nx`` at a level: ceil(N x level), each counted as the decimal it is written as (``10x`` of 0.7
    req/s is 7 requests, not the 8 of the float just above 7 that 10 * 0.7 gives)."""
    return math.ceil(Fraction(repr(factor)) * Fraction(repr(level)))


@dataclass(frozen=True, slots=True)
class LevelCount:
    """Requests per level: ``count``, or ``count`` times the level (``"10x"``), the concurrency or the
    request rate."""

    count: int | float
    """A number of requests, or the factor N of ``Nx`` (an integer where it is one: ``10x``, not
    ``10.0x``)."""
    times_concurrency: bool
    """Whether ``count`` is a factor of the level (the name is older than open loops: the level may be a
    rate)."""

    def at(self, level: float) -> int:
        """``count``, or ceil(count x level): at a request rate, N seconds of arrivals. The rate counts as
        the decimal it is written as (``0.7``, not the float just below it), so ``10x`` of 0.7 req/s is 7
        requests, not 8."""
        return times_level(self.count, level) if self.times_concurrency else int(self.count)

    def to_json(self) -> int | str:
        """The campaign file's spelling, which ``fairbench sweep`` also takes."""
        return f"{self.count}x" if self.times_concurrency else int(self.count)

    def __str__(self) -> str:
        return str(self.to_json())


DEFAULT_PROMPTS_PER_LEVEL = LevelCount(10, times_concurrency=True)
DEFAULT_WARMUP = LevelCount(2, times_concurrency=True)


def prompts_at(count: LevelCount, level: float) -> int:
    """The requests measured at a level: ``count`` there, at least ``MIN_PROMPTS_PER_LEVEL``."""
    return max(count.at(level), MIN_PROMPTS_PER_LEVEL)


def level_count(value: LevelCount | str | int) -> LevelCount:
    """A request count: a LevelCount as it is, else its spelling, an integer or ``Nx`` (N times the level,
    a decimal), read within the bounds of bounds.py (``infx`` or ``1e9x`` is a typo)."""
    if isinstance(value, LevelCount):
        return value
    text = str(value).strip()
    times = text.endswith("x")
    try:
        number = float(text[:-1]) if times else int(text)
    except ValueError:
        raise WorkloadError(
            f"{value!r} is not a count (an integer, or Nx for N times the concurrency)"
        ) from None
    if (problem := (COUNT_FACTOR if times else REQUESTS).problem(number)) is not None:
        raise WorkloadError(f"{value!r}: {'N ' if times else ''}{problem}")
    return LevelCount(int(number) if float(number).is_integer() else number, times_concurrency=times)


def parse_count(value: LevelCount | str | int, concurrency: float, *, minimum: int = 0) -> int:
    """A request count (:func:`level_count`) at a level, at least ``minimum``. The level is a concurrency,
    or a request rate: N seconds of its arrivals. Within REQUESTS at the level."""
    count = level_count(value).at(concurrency)
    if (problem := REQUESTS.problem(count)) is not None:
        shown = str(value) if isinstance(value, LevelCount) else value
        raise WorkloadError(f"{shown!r} at concurrency {concurrency}: {problem}")
    return max(count, minimum)
