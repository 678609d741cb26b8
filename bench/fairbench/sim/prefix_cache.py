"""SGLang's radix cache reduced to what a response reports and what a prefill skips: cached prompt tokens.

Every prefix of every prompt prefilled is kept as a rolling hash in one table, bounded in tokens (one
entry per token, as SGLang's cache with ``--page-size 1`` holds one KV slot per token) and evicted least
recently used first. A prompt's cached tokens are its longest prefix in the table, at most all but its
last token: SGLang always computes the last prompt token again, for the logits of the first output
token. Within a prompt the shorter prefixes count as the more recently used, so a shared stem outlives
the tails that branch off it, as leaves go first in a radix tree.

The scheduler matches a prompt when it admits the request and inserts it when its prefill is done, as
SGLang does: requests prefilled together do not share. A finished request's prompt and output are
inserted together, all but its last output token (whose KV SGLang never computes), so a conversation's
next turn, which sends the reply back, finds both.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

POSITION_BITS = 32
"""Bits of a stamp below the insertion's tick: room for a prompt's positions."""


def prefix_keys(tokens: Sequence[Hashable], after: Sequence[int] = ()) -> list[int]:
    """One key per prefix of ``tokens``: a rolling hash, so equal prefixes have equal keys. ``after``: the
    keys of the tokens before them, which the result continues."""
    keys: list[int] = list(after)
    running = keys[-1] if keys else 0
    for token in tokens:
        running = hash((running, token))
        keys.append(running)
    return keys


class PrefixCache:
    """Prefix keys with the time they were last used; when it is full the least recently used quarter goes.

    A key's stamp is the insertion's tick, high bits, minus its position in the prompt, so within one prompt
    the shorter prefixes count as the more recent. One ``dict.update`` per insertion keeps the cost per
    prompt token to a few tens of nanoseconds: the scheduler calls it on every prefill.
    """

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self._stamps: dict[int, int] = {}
        self._tick = 0

    def __len__(self) -> int:
        return len(self._stamps)

    def match(self, keys: Sequence[int]) -> int:
        """Cached tokens of the prompt whose ``prefix_keys`` are ``keys``."""
        stamps = self._stamps
        matched = 0
        for key in keys:
            if key not in stamps:
                break
            matched += 1
        return min(matched, len(keys) - 1) if keys else 0

    def insert(self, keys: Sequence[int]) -> None:
        if self.capacity_tokens <= 0 or not keys:
            return
        self._tick += 1
        newest = self._tick << POSITION_BITS
        self._stamps.update(zip(keys, range(newest, newest - len(keys), -1), strict=True))
        if len(self._stamps) > self.capacity_tokens:
            keep = self.capacity_tokens - self.capacity_tokens // 4
            recent = sorted(self._stamps.items(), key=lambda item: item[1])[-keep:]
            self._stamps = dict(recent)

    def clear(self) -> None:
        self._stamps.clear()
