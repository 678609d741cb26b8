"""Blocks as GitHub-flavoured Markdown."""

from __future__ import annotations

from collections.abc import Sequence

from fairbench.report.blocks import (
    Alert,
    Block,
    BulletList,
    Figure,
    Heading,
    Notes,
    Paragraph,
    Preformatted,
    Table,
)

ALERT_MARKERS = {"threat": "CAUTION", "warning": "WARNING", "note": "NOTE"}
"""GitHub's alert names, which it draws as coloured boxes (a plain quote elsewhere)."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _block(block: Block) -> list[str]:
    match block:
        case Heading(level, text):
            return ["#" * level + " " + text]
        case Paragraph(text):
            return [text]
        case Alert(kind, title, items):
            return [f"> [!{ALERT_MARKERS[kind]}]", f"> **{title}**", *(f"> - {item}" for item in items)]
        case BulletList(items):
            return [f"- {item}" for item in items]
        case Notes(items):
            return [f'- <a id="{anchor}"></a>{text}' for anchor, text in items]
        case Table(header, rows, numeric):
            return [
                "| " + " | ".join(map(_cell, header)) + " |",
                "|" + "|".join("---:" if right else "---" for right in numeric) + "|",
                *("| " + " | ".join(map(_cell, row)) + " |" for row in rows),
            ]
        case Figure(path, caption):
            return [f"![{caption}]({path.as_posix()})"]
        case Preformatted(text):
            fence = "````" if "```" in text else "```"
            return [fence, text, fence]
    raise TypeError(f"not a report block: {block!r}")


def render_markdown(blocks: Sequence[Block]) -> str:
    return "\n\n".join("\n".join(_block(block)) for block in blocks) + "\n"
