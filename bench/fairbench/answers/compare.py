"""Two servers' greedy answers to the same probes, compared position by position.

For each probe answered by both (``ProbeComparison``):

- identical: the two sequences are equal (token ids where both servers gave them, else the tokens' texts,
  else the texts' characters: ``unit``);
- first divergence d: the least position p with a_p != b_p, or the shorter one's length where one is a
  prefix of the other (one stopped earlier); None where identical;
- log-probability gap at d: |lp_a(d) - lp_b(d)|, each server's log-probability of the token it chose there,
  where both gave log-probabilities that far. A small gap is a near tie that the numerics tipped the other
  way; a large one, a server that computes something else.

Over the probes (``Equivalence``): the identical share = identical / compared, the divergence positions,
and the largest gap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fairbench.answers.requests import CHARACTERS, TOKENS


@dataclass(frozen=True)
class ProbeComparison:
    id: str
    identical: bool
    divergence: int | None
    logprob_gap: float | None
    unit: str


@dataclass(frozen=True)
class Equivalence:
    compared: tuple[ProbeComparison, ...]
    unanswered: tuple[str, ...]
    """Probe ids one side or the other has no answer to (an error, or a probe set that differs)."""

    @property
    def identical(self) -> int:
        return sum(1 for probe in self.compared if probe.identical)

    @property
    def share(self) -> float | None:
        """identical / compared; None where nothing was compared."""
        return self.identical / len(self.compared) if self.compared else None

    @property
    def divergences(self) -> list[int]:
        return sorted(probe.divergence for probe in self.compared if probe.divergence is not None)

    @property
    def largest_gap(self) -> float | None:
        gaps = [probe.logprob_gap for probe in self.compared if probe.logprob_gap is not None]
        return max(gaps, default=None)

    @property
    def unit(self) -> str:
        units = {probe.unit for probe in self.compared}
        return CHARACTERS if CHARACTERS in units else TOKENS


def _sequence(answer: Mapping[str, Any], other: Mapping[str, Any]) -> tuple[Sequence[object], str]:
    """What ``answer`` is compared by, given what ``other`` has too."""
    for key in ("token_ids", "tokens"):
        if answer.get(key) is not None and other.get(key) is not None:
            return answer[key], TOKENS
    return str(answer.get("text", "")), CHARACTERS


def compare_probe(probe_id: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> ProbeComparison:
    seq_a, unit = _sequence(a, b)
    seq_b, _ = _sequence(b, a)
    divergence = next(
        (position for position, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)) if x != y),
        None if len(seq_a) == len(seq_b) else min(len(seq_a), len(seq_b)),
    )
    gap = None
    logprobs_a, logprobs_b = a.get("logprobs"), b.get("logprobs")
    if (
        divergence is not None
        and unit == TOKENS
        and divergence < min(len(logprobs_a or ()), len(logprobs_b or ()))
    ):
        gap = abs(float(logprobs_a[divergence]) - float(logprobs_b[divergence]))  # type: ignore[index]
    return ProbeComparison(probe_id, divergence is None, divergence, gap, unit)


def answered(found: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A start's answered probes by id (those with an error left out)."""
    return {str(entry["id"]): entry for entry in found.get("probes", []) if "error" not in entry}


def compare(reference: Mapping[str, Any], other: Mapping[str, Any]) -> Equivalence:
    """Every probe of two starts' answers files (``answers.check``), by id, in the reference's order."""
    ours, theirs = answered(reference), answered(other)
    ids = [str(entry["id"]) for entry in reference.get("probes", [])]
    ids += [str(entry["id"]) for entry in other.get("probes", []) if str(entry["id"]) not in ids]
    return Equivalence(
        tuple(
            compare_probe(probe, ours[probe], theirs[probe])
            for probe in ids
            if probe in ours and probe in theirs
        ),
        tuple(probe for probe in ids if probe not in ours or probe not in theirs),
    )
