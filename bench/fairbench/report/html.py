"""Blocks as one self-contained HTML page: the style inline, every plot embedded as a base64 PNG.

Inline text may hold Markdown's ``code`` and **bold** spans, links within the page (``[text](#anchor)``)
and to a report beside it (``[text](report.chat.md#anchor)``, its .html here),
the only markup the report writes.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path

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

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 80rem; padding: 0 1rem;
       color: #1b1b1b; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code { background: #f4f4f4; padding: 0 0.2rem; border-radius: 3px; }
pre { background: #f6f6f6; padding: 0.75rem; overflow-x: auto; font-size: 0.8rem; }
.alert { border-left: 0.4rem solid; padding: 0.5rem 1rem; margin: 1rem 0; border-radius: 4px; }
.alert.threat { border-color: #c62828; background: #fdecea; }
.alert.warning { border-color: #ef8f00; background: #fff4e0; }
.alert.note { border-color: #777; background: #f4f4f4; }
.alert p { margin: 0.2rem 0; font-weight: bold; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
"""

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\((?:([A-Za-z0-9_.-]+)\.md)?(#[A-Za-z0-9_-]+)?\)")


def _link(found: re.Match[str]) -> str:
    """A link within the page, or to another report beside it: its .md in Markdown is its .html here."""
    text, stem, anchor = found.groups()
    if stem is None and anchor is None:
        return found.group(0)
    return f'<a href="{f"{stem}.html" if stem else ""}{anchor or ""}">{text}</a>'


def inline(text: str) -> str:
    escaped = html.escape(text, quote=False)
    spans = _BOLD.sub(r"<strong>\1</strong>", _CODE.sub(r"<code>\1</code>", escaped))
    return _LINK.sub(_link, spans)


def _image(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _block(block: Block, base_dir: Path) -> str:
    match block:
        case Heading(level, text):
            return f"<h{level}>{inline(text)}</h{level}>"
        case Paragraph(text):
            return f"<p>{inline(text)}</p>"
        case Alert(kind, title, items):
            entries = "".join(f"<li>{inline(item)}</li>" for item in items)
            return f'<div class="alert {kind}"><p>{inline(title)}</p><ul>{entries}</ul></div>'
        case BulletList(items):
            return "<ul>" + "".join(f"<li>{inline(item)}</li>" for item in items) + "</ul>"
        case Notes(items):
            return (
                "<ul>" + "".join(f'<li id="{anchor}">{inline(text)}</li>' for anchor, text in items) + "</ul>"
            )
        case Table(header, rows, numeric):
            head = "".join(f"<th>{inline(text)}</th>" for text in header)
            body = "".join(
                "<tr>"
                + "".join(
                    f'<td class="num">{inline(text)}</td>' if right else f"<td>{inline(text)}</td>"
                    for text, right in zip(row, numeric, strict=True)
                )
                + "</tr>"
                for row in rows
            )
            return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        case Figure(path, caption):
            alt = html.escape(caption)
            return (
                f'<figure><img src="{_image(base_dir / path)}" alt="{alt}">'
                f"<figcaption>{inline(caption)}</figcaption></figure>"
            )
        case Preformatted(text):
            return f"<pre>{html.escape(text, quote=False)}</pre>"
    raise TypeError(f"not a report block: {block!r}")


def render_html(blocks: Sequence[Block], title: str, base_dir: Path) -> str:
    """The page; ``base_dir`` is where the figures' relative paths start."""
    body = "\n".join(_block(block, base_dir) for block in blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )
