"""The report as a list of blocks, rendered once as Markdown and once as HTML from the same content."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Alert:
    """A box the reader must not miss: ``threat`` (red), ``warning`` (amber), ``note`` (grey)."""

    kind: str
    title: str
    items: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BulletList:
    items: list[str]


@dataclass(frozen=True)
class Notes:
    """A list whose items are link targets: each ``(anchor, text)``, what ``[mark](#anchor)`` links to."""

    items: list[tuple[str, str]]


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]
    numeric: list[bool]
    """Per column: right-aligned figures."""


@dataclass(frozen=True)
class Figure:
    path: Path
    """The PNG, relative to the report's directory."""
    caption: str


@dataclass(frozen=True)
class Preformatted:
    text: str


Block = Heading | Paragraph | Alert | BulletList | Notes | Table | Figure | Preformatted
