"""Prompts for a sweep point: exact-length random token ids, a local ShareGPT-style file, groups of
prompts that share a system prompt, or conversations of several turns. (A request trace's are built by
``measure.trace_replay``; a conversation's later turns, which hold the server's replies, by
``measure.conversation`` as the replies come.)

Every point gets its own prompts, derived from (seed, phase, concurrency, repeat)
alone: a campaign is reproducible bit for bit, and no two points (nor a point and
its warmup) share a prompt, so a server's prefix cache cannot serve one point from
another's work. Within a shared-prefix point, the requests of a group share their
system prompt, and only that: the reuse the workload is designed for.
"""

from __future__ import annotations

import json
import math
import random
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from fractions import Fraction
from pathlib import Path
from typing import Protocol

from fairbench.measure.bounds import COUNT_FACTOR, REQUESTS
from fairbench.measure.vocabulary import Vocabulary

CHAT = "chat"
"""The API whose prompts are text (its messages' content)."""
COMPLETIONS = "completions"
APIS = (COMPLETIONS, CHAT, "generate")
"""SGLang's generation APIs a workload's requests may go to (``measure.client`` speaks each)."""
DEFAULT_API = APIS[0]
RANDOM_IDS = "random-ids"
"""The dataset of random token ids of exact lengths."""
SHARED_PREFIX = "shared-prefix"
"""The dataset of groups of prompts sharing a system prompt (``SharedPrefix``)."""
TRACE = "trace"
"""The dataset of a request trace's window (``TraceWindow``): its requests' lengths and shared blocks, each
sent at its time in the trace (``measure.trace_replay``)."""
MULTI_TURN = "multi-turn"
"""The dataset of conversations (``MultiTurn``) whose every turn sends the conversation so far, the
server's own replies included. Any other dataset than these four is a ShareGPT-style file."""
GENERATED = (RANDOM_IDS, SHARED_PREFIX, TRACE, MULTI_TURN)
"""The datasets fairbench generates, of exact lengths in tokens (a multi-turn workload's user turns may
come from a ShareGPT-style file: ``MultiTurn.sharegpt``)."""
GROUPED = "grouped"
"""A shared-prefix point sends each group's prompts one after another, group after group."""
SHUFFLED = "shuffled"
"""A shared-prefix point sends its prompts in an order shuffled from the point's seed."""
ORDERS = (GROUPED, SHUFFLED)
FLUSHED = "flushed"
"""A point starts from an empty prefix cache: ``/flush_cache`` before its warm-up."""
PRIMED = "primed"
"""A point starts from a flushed cache that holds its shared prefixes: each group's system prompt is sent
once (one output token) after the warm-up, before the clock starts."""
CARRIED = "carried"
"""A point starts from whatever the previous point and its warm-up left in the cache (nothing of its own
prompts, which are drawn for it alone)."""
CACHE_STATES = (FLUSHED, PRIMED, CARRIED)
"""What a point's prefix cache holds when its measurement starts."""
DEFAULT_CACHE_STATE = CARRIED
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
    """The request's input after its ``system`` prompt, if it has one."""
    prompt_len: int
    """The whole input's, system prompt included. Exact for token ids; an estimate for text (the server's
    count replaces it)."""
    output_len: int
    system: list[int] | str | None = None
    """The system prompt the request shares with its group, the start of its input; None: a prompt of its
    own."""
    group: int | None = None
    """The shared-prefix group of the prompt; None outside a shared-prefix workload."""
    hash_ids: tuple[int, ...] = ()
    """A trace's blocks of the prompt's content, in order (``measure.traces.TraceRequest.hash_ids``)."""
    conversation: int | None = None
    """The multi-turn conversation the prompt is a turn of; None outside a multi-turn workload."""
    turn: int = 0
    """The prompt's turn in its conversation, from 0."""
    earlier: tuple[tuple[list[int] | str, list[int] | str], ...] = ()
    """The conversation's earlier turns, each its user turn and the server's reply, in order: what the
    request sends between its system prompt and ``prompt``. Filled in as the replies come
    (``measure.conversation``)."""

    @property
    def shared_len(self) -> int:
        """The tokens of the system prompt (an estimate for text: one per word)."""
        if self.system is None:
            return 0
        return len(self.system) if isinstance(self.system, list) else len(self.system.split())

    def kept(self) -> Prompt:
        """The prompt as a sweep keeps it once its body is made: without its content (a long context's
        tokens live on in its body alone), but for a conversation's turn, whose content the later turns
        send again."""
        if self.conversation is not None:
            return self
        return replace(self, prompt=[] if isinstance(self.prompt, list) else "")

    def primer(self) -> Prompt:
        """A request of the system prompt alone, one output token: after it, the server's prefix cache
        holds the system prompt for every request of the group."""
        assert self.system is not None, "only a prompt with a system prompt has a primer"
        empty: list[int] | str = [] if isinstance(self.system, list) else ""
        return Prompt(self.index, empty, self.shared_len, 1, self.system, self.group)

    def whole_input(self) -> list[int] | str:
        """The request's input as one prompt: its system prompt, its conversation's earlier turns (each
        user turn followed by its reply), then ``prompt``. Text parts are joined by a blank line, as
        sglang.bench_serving's shared-prefix prompts are (``f"{system}\n\n{question}"``), except that a
        reply follows its user turn directly: the next turn then starts with exactly the text the server
        saw and wrote, which its prefix cache holds. (A primer's is the system prompt alone.)"""
        if self.system is None and not self.earlier:
            return self.prompt
        earlier = [part for turn in self.earlier for part in turn]
        ids = [part for part in earlier if isinstance(part, list)]
        system = self.system
        if isinstance(self.prompt, list) and len(ids) == len(earlier) and not isinstance(system, str):
            return [*(system or ()), *(token for part in ids for token in part), *self.prompt]
        parts = [] if system is None else [_text(system)]
        parts += [_text(user) + _text(reply) for user, reply in self.earlier]
        if self.prompt or not parts:
            parts.append(_text(self.prompt))
        return "\n\n".join(parts)


def _text(tokens: list[int] | str) -> str:
    return tokens if isinstance(tokens, str) else " ".join(map(str, tokens))


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """Groups of prompts sharing a system prompt, as sglang.bench_serving's ``generated-shared-prefix``
    dataset (its ``--gsp-*`` options): ``groups`` system prompts of ``system_prompt_len`` tokens, each
    followed by questions of ``question_len`` tokens. A point of N requests puts request i in group
    (i // prompts_per_group) mod groups: with N = groups x prompts_per_group it is sglang's set. Lengths
    are exact, as ``random-ids``' are; ``order`` is one of ``ORDERS``."""

    groups: int
    prompts_per_group: int
    system_prompt_len: int
    question_len: int
    order: str = SHUFFLED

    def __post_init__(self) -> None:
        for name in ("groups", "prompts_per_group", "system_prompt_len", "question_len"):
            if (value := getattr(self, name)) < 1:
                raise WorkloadError(f"shared_prefix.{name}: {value} must be a positive integer")
        if self.order not in ORDERS:
            raise WorkloadError(f"shared_prefix.order: {self.order!r} is not one of {', '.join(ORDERS)}")

    @property
    def input_len(self) -> int:
        return self.system_prompt_len + self.question_len

    def group_of(self, index: int) -> int:
        return (index // self.prompts_per_group) % self.groups

    def to_json(self) -> dict[str, int | str]:
        """The campaign file's spelling: ``SHARED_PREFIX_KEYS``."""
        return {key: getattr(self, key) for key in SHARED_PREFIX_KEYS}


DEFAULT_SHARED_PREFIX = SharedPrefix(
    groups=64, prompts_per_group=16, system_prompt_len=2048, question_len=128
)
"""sglang.bench_serving's ``--gsp-*`` defaults, each key's where it is left out."""
SHARED_PREFIX_KEYS = tuple(field.name for field in fields(SharedPrefix))
"""A shared-prefix workload's keys, as a campaign file and ``SharedPrefix.to_json`` spell them."""


@dataclass(frozen=True, slots=True)
class MultiTurn:
    """Conversations of ``turns`` turns each. Turn k sends the conversation's system prompt, its user turns
    0 to k and the server's own replies to turns 0 to k - 1, as they came back (not canned ones): what a
    chat server's prefix cache sees in production. A point at concurrency C holds C conversations in
    flight, each sending its next turn ``think_time_s`` after its last reply ended.

    A user turn is ``user_len`` random tokens, or, with ``sharegpt``, the k-th human turn of one of that
    file's conversations (those with fewer human turns are left out). The system prompt is
    ``system_prompt_len`` tokens (0: none), one of ``system_prompts`` distinct ones, conversation j's being
    j mod ``system_prompts``: a long system prompt shared by every conversation is an agent's."""

    turns: int
    user_len: int = 128
    system_prompt_len: int = 0
    system_prompts: int = 1
    think_time_s: float = 0.0
    sharegpt: str | None = None

    def __post_init__(self) -> None:
        for name in ("turns", "user_len", "system_prompts"):
            if (value := getattr(self, name)) < 1:
                raise WorkloadError(f"multi_turn.{name}: {value} must be a positive integer")
        if self.system_prompt_len < 0:
            raise WorkloadError(f"multi_turn.system_prompt_len: {self.system_prompt_len} must be 0 or more")
        if not (math.isfinite(self.think_time_s) and self.think_time_s >= 0):
            raise WorkloadError(f"multi_turn.think_time_s: {self.think_time_s} must be seconds >= 0")

    @property
    def first_input_len(self) -> int:
        """A synthetic conversation's first turn: its system prompt and one user turn."""
        return self.system_prompt_len + self.user_len

    def conversations(self, requests: int) -> int:
        """The conversations of a point measuring at least ``requests`` turns."""
        return -(-requests // self.turns)

    def to_json(self) -> dict[str, int | float | str]:
        """The campaign file's spelling: ``MULTI_TURN_KEYS``, ``sharegpt`` only where set."""
        return {key: value for key in MULTI_TURN_KEYS if (value := getattr(self, key)) is not None}


DEFAULT_MULTI_TURN = MultiTurn(turns=4)
"""Each key's value where a multi-turn workload leaves it out."""
MULTI_TURN_KEYS = tuple(field.name for field in fields(MultiTurn))
"""A multi-turn workload's keys, as a campaign file and ``MultiTurn.to_json`` spell them."""


@dataclass(frozen=True, slots=True)
class TraceWindow:
    """The part of a request trace a sweep replays: the requests from ``start_s`` seconds after the trace's
    first, for ``duration_s`` seconds, at most ``count`` of them (None: no end, no bound). ``path`` is a
    Mooncake ``.jsonl`` or an Azure ``.csv`` trace (``measure.traces``)."""

    path: str
    start_s: float = 0.0
    duration_s: float | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise WorkloadError(f"trace.start_s: {self.start_s} must be a number of seconds >= 0")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise WorkloadError(f"trace.duration_s: {self.duration_s} must be a number of seconds > 0")
        if self.count is not None and self.count < 2:
            raise WorkloadError(f"trace.count: {self.count} must be at least 2 (a replay's rate needs two)")


TRACE_WINDOW_KEYS = tuple(field.name for field in fields(TraceWindow))
"""A replayed trace's keys, as a campaign file spells them."""


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """How to build prompts. ``dataset`` is ``random-ids``, ``shared-prefix`` (with ``shared_prefix``, whose
    lengths make ``input_len``) or a path to a ShareGPT-style JSON file."""

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
    shared_prefix: SharedPrefix | None = None
    """The groups of the ``shared-prefix`` dataset; None for any other."""
    cache_state: str = DEFAULT_CACHE_STATE
    """What the prefix cache holds when each point's measurement starts: one of ``CACHE_STATES``."""
    trace: TraceWindow | None = None
    """The window of the ``trace`` dataset, whose requests set their own lengths (``input_len`` and
    ``output_len`` are unused); None for any other."""
    multi_turn: MultiTurn | None = None
    """The conversations of the ``multi-turn`` dataset, whose first turn's input ``input_len`` is (unused
    where the user turns come from a file); None for any other."""

    def __post_init__(self) -> None:
        for dataset, key in ((SHARED_PREFIX, "shared_prefix"), (TRACE, "trace"), (MULTI_TURN, "multi_turn")):
            if (self.dataset == dataset) != (getattr(self, key) is not None):
                raise WorkloadError(f"{key}: given exactly when the dataset is {dataset}")
        if self.shared_prefix is not None and self.input_len != self.shared_prefix.input_len:
            raise WorkloadError(
                f"input_len: {self.input_len} must be the shared prefix's system_prompt_len + question_len, "
                f"{self.shared_prefix.input_len}"
            )
        turns = self.multi_turn
        if turns is not None and turns.sharegpt is None and self.input_len != turns.first_input_len:
            raise WorkloadError(
                f"input_len: {self.input_len} must be the first turn's, multi_turn's system_prompt_len + "
                f"user_len, {turns.first_input_len}"
            )
        if self.cache_state not in CACHE_STATES:
            raise WorkloadError(f"cache_state: {self.cache_state!r} is not one of {', '.join(CACHE_STATES)}")
        if self.cache_state == PRIMED and not self.has_system_prompts:
            raise WorkloadError(
                f"cache_state: {PRIMED} primes shared system prompts: the dataset must be {SHARED_PREFIX}, "
                f"or {MULTI_TURN} with a system_prompt_len"
            )
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
        from_file = self.multi_turn is not None and self.multi_turn.sharegpt is not None
        return self.dataset in GENERATED and not self.as_text and not from_file

    @property
    def has_system_prompts(self) -> bool:
        """Whether the prompts share system prompts, which ``cache_state: primed`` sends before a point."""
        turns = self.multi_turn
        return self.shared_prefix is not None or (turns is not None and turns.system_prompt_len > 0)

    @property
    def flushes(self) -> bool:
        """Whether each point starts with ``/flush_cache``."""
        return self.cache_state in (FLUSHED, PRIMED)


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


class Tokens:
    """Draws a prompt's content: random token ids from ``ids``, or words where prompts are text."""

    def __init__(self, as_text: bool, ids: array[int]) -> None:
        self.as_text = as_text
        self._ids = ids

    def draw(self, rng: random.Random, length: int) -> list[int] | str:
        return _random_text(rng, length) if self.as_text else _random_ids(rng, length, self._ids)


def usable_ids(spec: WorkloadSpec, vocabulary: Vocabulary | None) -> array[int]:
    """The ids a spec's random prompts are drawn from (none where it sends text); WorkloadError when it
    sends token ids and no vocabulary was given."""
    if spec.sends_token_ids and vocabulary is None:
        raise WorkloadError("random-ids prompts need the served model's vocabulary (none was given)")
    return array("I", vocabulary.usable_ids() if vocabulary and spec.sends_token_ids else ())


def _read_sharegpt(path: Path) -> list[object]:
    """A ShareGPT-style file's list of conversations."""
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
    return data


def _turns_of(item: object) -> list[object]:
    turns = item.get("conversations", item.get("conversation")) if isinstance(item, dict) else None
    return turns if isinstance(turns, list) else []


def _load_sharegpt(path: Path) -> list[str]:
    """First turn of every conversation with at least two turns."""
    prompts = []
    for item in _read_sharegpt(path):
        turns = _turns_of(item)
        if len(turns) >= 2 and isinstance(turns[0], dict):
            text = turns[0].get("value")
            if isinstance(text, str) and text:
                prompts.append(text)
    if not prompts:
        raise WorkloadError(f"dataset: {path}: no conversation with two or more turns")
    return prompts


HUMAN_ROLES = ("human", "user")
"""A ShareGPT turn's ``from`` where the user speaks."""


def _load_user_turns(path: Path, turns: int) -> list[list[str]]:
    """The first ``turns`` human turns of every conversation that has that many (non-empty)."""
    conversations = []
    for item in _read_sharegpt(path):
        said = [
            turn["value"]
            for turn in _turns_of(item)
            if isinstance(turn, dict)
            and turn.get("from") in HUMAN_ROLES
            and isinstance(turn.get("value"), str)
            and turn["value"]
        ]
        if len(said) >= turns:
            conversations.append(said[:turns])
    if not conversations:
        raise WorkloadError(f"multi_turn.sharegpt: {path}: no conversation with {turns} human turns or more")
    return conversations


def point_seed(seed: int, phase: str, level: str, repeat: int) -> str:
    """The seed of one point's prompts (a string: random.Random hashes it with SHA-512, stable across runs
    and versions)."""
    return f"fairbench/{seed}/{phase}/{level}/r{repeat}"


class PromptSource(Protocol):
    """What builds a sweep's prompts: ``Workload``, or a trace's ``trace_replay.TraceReplay``."""

    def measured_count(self, per_level: LevelCount, level: float) -> int:
        """The requests a point at ``level`` measures."""
        ...

    def each_prompt(self, count: int, *, level: str, repeat: int, phase: str = "measure") -> Iterator[Prompt]:
        """The ``count`` prompts of one point, in the order they are sent, one at a time: a point of long
        prompts never holds all their tokens at once."""
        ...

    def primers(self, prompts: list[Prompt]) -> list[Prompt]:
        """What ``cache_state: primed`` sends before the point's clock starts."""
        ...

    def designed_cached_tokens(self, prompts: list[Prompt], cache_state: str) -> dict[int, int]:
        """Each prompt's cached tokens by design, by index."""
        ...


class Workload:
    """Builds the prompts of each point of a sweep; random token ids come from ``vocabulary``, which a
    spec that sends token ids must be given."""

    def __init__(self, spec: WorkloadSpec, vocabulary: Vocabulary | None = None) -> None:
        self.spec = spec
        self._texts = None if spec.dataset in GENERATED else _load_sharegpt(Path(spec.dataset))
        turns = spec.multi_turn
        self._user_turns = (
            None
            if turns is None or turns.sharegpt is None
            else _load_user_turns(Path(turns.sharegpt), turns.turns)
        )
        self._ids = usable_ids(spec, vocabulary)
        self._tokens = Tokens(spec.as_text, self._ids)

    def prompts(self, count: int, *, level: str, repeat: int, phase: str = "measure") -> list[Prompt]:
        """``each_prompt``'s, all at once."""
        return list(self.each_prompt(count, level=level, repeat=repeat, phase=phase))

    def each_prompt(self, count: int, *, level: str, repeat: int, phase: str = "measure") -> Iterator[Prompt]:
        """The ``count`` prompts of one point at ``level`` (its tag, ``results.level_tag``: ``c16``);
        ``phase`` separates warmup from measurement. Each is drawn when it is taken."""
        spec = self.spec
        rng = random.Random(point_seed(spec.seed, phase, level, repeat))
        if spec.shared_prefix is not None:
            yield from self._shared_prefix_prompts(spec.shared_prefix, count, rng)
            return
        if spec.multi_turn is not None:
            yield from self._conversation_prompts(spec.multi_turn, count, rng)
            return
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
            yield Prompt(index, prompt, input_len, output_len)

    def _shared_prefix_prompts(self, shared: SharedPrefix, count: int, rng: random.Random) -> list[Prompt]:
        """``count`` prompts in ``shared``'s groups: the groups' system prompts drawn first, then each
        prompt's question, then (shuffled order) the order; each prompt keeps its index in the point."""
        groups = min(shared.groups, -(-count // shared.prompts_per_group))
        systems = [self._tokens.draw(rng, shared.system_prompt_len) for _ in range(groups)]
        output_len = self.spec.output_len
        prompts = []
        for index in range(count):
            group = shared.group_of(index)
            question = self._tokens.draw(rng, shared.question_len)
            prompts.append(Prompt(index, question, shared.input_len, output_len, systems[group], group))
        if shared.order == SHUFFLED:
            rng.shuffle(prompts)
            prompts = [replace(prompt, index=index) for index, prompt in enumerate(prompts)]
        return prompts

    def _conversation_prompts(self, turns: MultiTurn, count: int, rng: random.Random) -> list[Prompt]:
        """The turns of enough conversations for ``count`` requests, conversation after conversation:
        the system prompts drawn first, then each conversation's user turns. Each turn's ``prompt_len``
        counts the earlier turns' replies at their requested length; its ``group`` is its system
        prompt's."""
        conversations = turns.conversations(count)
        shared = min(turns.system_prompts, conversations) if turns.system_prompt_len else 0
        systems = [self._tokens.draw(rng, turns.system_prompt_len) for _ in range(shared)]
        output_len = self.spec.output_len
        prompts: list[Prompt] = []
        for conversation in range(conversations):
            group = conversation % shared if shared else None
            system = None if group is None else systems[group]
            if self._user_turns is not None:
                users: list[list[int] | str] = list(self._user_turns[rng.randrange(len(self._user_turns))])
            else:
                users = [self._tokens.draw(rng, turns.user_len) for _ in range(turns.turns)]
            context = turns.system_prompt_len if shared else 0
            for turn, user in enumerate(users):
                prompt_len = context + (len(user) if isinstance(user, list) else len(user.split()))
                prompts.append(
                    Prompt(
                        len(prompts),
                        user,
                        prompt_len,
                        output_len,
                        system,
                        group,
                        conversation=conversation,
                        turn=turn,
                    )
                )
                context = prompt_len + output_len
        return prompts

    def measured_count(self, per_level: LevelCount, level: float) -> int:
        """``prompts_at`` the level; a multi-turn workload's whole conversations of at least as many."""
        count = prompts_at(per_level, level)
        turns = self.spec.multi_turn
        return count if turns is None else turns.conversations(count) * turns.turns

    def designed_cached_tokens(self, prompts: list[Prompt], cache_state: str) -> dict[int, int]:
        return designed_cached_tokens(prompts, cache_state)

    def primers(self, prompts: list[Prompt]) -> list[Prompt]:
        """One request per group of ``prompts`` (its system prompt alone), in the order the groups first
        appear: what ``cache_state: primed`` sends before a point's clock starts."""
        firsts: dict[int, Prompt] = {}
        for prompt in prompts:
            if prompt.group is not None and prompt.group not in firsts:
                firsts[prompt.group] = prompt
        return [prompt.primer() for prompt in firsts.values()]


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


def designed_cached_tokens(prompts: list[Prompt], cache_state: str) -> dict[int, int]:
    """Each prompt's cached tokens by design, by index, with ``prompts`` in the order they are sent.

    A conversation's later turn: its previous turn's input and reply less the reply's last token, P(k-1)
    + O(k-1) - 1 (SGLang caches a finished request's tokens but the last it generated, whose KV was never
    computed). Any other prompt: its system prompt where the cache holds it when the prompt arrives.
    Primed, every such prompt's; flushed or carried, every one's but the first of its group (the point's
    prefixes are its own, so nothing else cached matches them): an upper bound there, as requests of a
    group in flight together all miss (a prefix is cached once its prefill is done)."""
    seen: set[int] = set()
    designed = {}
    previous: dict[int, Prompt] = {}
    for prompt in prompts:
        if prompt.conversation is not None and prompt.turn > 0:
            before = previous[prompt.conversation]
            designed[prompt.index] = before.prompt_len + before.output_len - 1
        else:
            hit = cache_state == PRIMED or prompt.group in seen
            designed[prompt.index] = prompt.shared_len if hit else 0
        if prompt.group is not None:
            seen.add(prompt.group)
        if prompt.conversation is not None:
            previous[prompt.conversation] = prompt
    return designed
