"""The flags of the measurement checks, shown next to the figures they cast doubt on.

A point's ``flags`` (measure/point_flags.py) each name the keys of the point they doubt (``on``). A
level's figure is flagged when a flag of any of its points (repeats) names its key, or a key it is
computed from (``figures.DERIVED_FROM``). Each flag raised at a level of a config has one note, numbered
over the whole report (``FlagMarks``), and each figure it doubts a mark that links to the note:
``12,345.6 [⚑3](#flag-3)``. A point without ``flags`` was not checked, which is no flag.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fairbench.report.blocks import Notes
from fairbench.report.figures import DERIVED_FROM, FLAGS
from fairbench.report.formatting import Label, figure
from fairbench.report.summary import Headline, Level

MARK = "⚑"

DOUBTS = {
    "client_bound": "its throughput may be the client's limit, not the server's",
    "running_below_concurrency": "the server ran fewer requests than C: it measured a lower load than named",
    "server_tokens_differ": "the server generated other tokens than the client received over the point",
}
"""What a flag means for a throughput the verdict compares (the flags whose ``on`` names it)."""
DOUBT_UNKNOWN = "its note says why"


@dataclass(frozen=True)
class Raised:
    """One flag at one level: the keys it doubts, and each point (repeat) it was raised on, with why."""

    flag: str
    on: tuple[str, ...]
    reasons: tuple[tuple[str, str], ...]
    """``(point_id, reason)``, in the points' order."""


def doubts(on: Sequence[str], key: str) -> bool:
    """Whether a flag on the keys ``on`` casts doubt on the figure ``key``."""
    return key in on or any(source in on for source in DERIVED_FROM.get(key, ()))


def raised(level: Level, key: str | None = None) -> list[Raised]:
    """The flags raised on the level's points, each name once in the order first raised; with ``key``,
    only those that doubt it."""
    found: dict[str, tuple[list[str], list[tuple[str, str]]]] = {}
    for point in level.points:
        for flag in point.get(FLAGS, []):
            if key is not None and not doubts(flag["on"], key):
                continue
            on, reasons = found.setdefault(flag["flag"], ([], []))
            on += [name for name in flag["on"] if name not in on]
            reasons.append((point["point_id"], flag["reason"]))
    return [Raised(name, tuple(on), tuple(reasons)) for name, (on, reasons) in found.items()]


def checked(level: Level) -> bool:
    """Whether any point of the level went through the checks (points from before them did not)."""
    return any(FLAGS in point for point in level.points)


@dataclass(frozen=True)
class FlagNote:
    """One flag at one level of one config, numbered."""

    number: int
    line: Headline
    level: Level
    raised: Raised

    @property
    def anchor(self) -> str:
        return f"flag-{self.number}"

    @property
    def link(self) -> str:
        """``[⚑3](#flag-3)``: the mark, linking to the note."""
        return f"[{MARK}{self.number}](#{self.anchor})"

    def text(self, label: Label) -> str:
        """``⚑3 **ep4** at C=64: `client_bound` on `output_throughput`, ...; raised on `c64-r0`: why.``"""
        on = ", ".join(f"`{key}`" for key in self.raised.on)
        reasons = "; ".join(f"`{point_id}`: {reason}" for point_id, reason in self.raised.reasons)
        return (
            f"{MARK}{self.number} **{label(self.line.result)}** at {self.level.label}: `{self.raised.flag}` "
            f"on {on}; raised on {reasons}."
        )


class FlagMarks:
    """Every flag raised at a level of the report's configs, numbered in the order of the configs, their
    levels and the flags; the marks that link to them."""

    def __init__(self, lines: Iterable[Headline]) -> None:
        self.notes: list[FlagNote] = []
        self._by_key: dict[tuple[int, tuple[bool, float], str], FlagNote] = {}
        for line in lines:
            for level in line.levels:
                for found in raised(level):
                    note = FlagNote(len(self.notes) + 1, line, level, found)
                    self.notes.append(note)
                    self._by_key[(id(line.result), level.key, found.flag)] = note

    def note(self, line: Headline, level: Level, flag: str) -> FlagNote:
        return self._by_key[(id(line.result), level.key, flag)]

    def mark(self, line: Headline, level: Level | None, key: str | None) -> str:
        """`` [⚑3](#flag-3)``, one link per flag at ``level`` that doubts ``key`` (every flag there, for
        None); nothing where none does."""
        if level is None:
            return ""
        return "".join(f" {self.note(line, level, found.flag).link}" for found in raised(level, key))

    def figure(self, line: Headline, level: Level | None, key: str, digits: int = 1) -> str:
        """The level's figure of ``key`` (``formatting.figure``), with the marks of the flags that doubt
        it; none beside a figure that was not measured."""
        value = level.estimate(key) if level else None
        return figure(value, digits) + (self.mark(line, level, key) if value is not None else "")

    def notes_block(self, lines: Sequence[Headline], label: Label) -> Notes | None:
        """The notes of the flags raised at ``lines``' levels; None where there are none."""
        mine = {id(line.result) for line in lines}
        items = [(note.anchor, note.text(label)) for note in self.notes if id(note.line.result) in mine]
        return Notes(items) if items else None


def doubt_text(flag: str) -> str:
    """What ``flag`` means for a compared throughput (``DOUBTS``)."""
    return DOUBTS.get(flag, DOUBT_UNKNOWN)
