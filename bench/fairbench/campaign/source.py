"""Reading a campaign file into its YAML document, and refusing what is no campaign file at all.

The campaign's path goes into each unit's comment, so it must be one line of UTF-8 text. The file must be
a regular file of UTF-8 text of at most ``MAX_CAMPAIGN_BYTES``, and its YAML at most
``MAX_CAMPAIGN_NODES`` nodes, aliases expanded; every YAML error, a repeated key included, names its line.
Together with ``fairbench.campaign.expand.MAX_EXPANDED_VALUES`` these limits keep the answer to any input
within a second.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from fairbench.campaign.findings import CampaignError
from fairbench.measure.bounds import unit_text_problem

MAX_CAMPAIGN_BYTES = 256 * 1024
"""Campaign files are a few KB. PyYAML's pure-Python parser reads about 1 MiB a second: this limit leaves
a hundred times a real campaign's size and keeps any file's answer well under a second."""
MAX_CAMPAIGN_NODES = 10_000
"""The shipped campaigns have about a hundred YAML nodes. An alias counts as every node it repeats, so
aliases of aliases (a "billion laughs") are refused here instead of expanding into billions of values."""


def check_source(source: str) -> None:
    """The serving role writes the campaign's path into each unit's comment: it must be one line of text.
    The message quotes it, as the path itself would break the message's line."""
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:  # a file name of bytes that are not UTF-8, as Python passes them on
        problem: str | None = "is not UTF-8 text"
    else:
        problem = unit_text_problem(source)
    if problem is not None:
        raise CampaignError([f"{source!r}: the campaign's path {problem}"])


def read_text(path: str | Path) -> str:
    """The text of the campaign file at ``path``; raises ``CampaignError``."""
    source = str(path)
    try:
        # Without a writer, a FIFO would block the open (and the read) forever: O_NONBLOCK, then only
        # a regular file is read.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise CampaignError([f"{source}: not a regular file"])
            data = file.read(MAX_CAMPAIGN_BYTES + 1)  # no more: a huge file is refused unread
    except OSError as exc:
        raise CampaignError([f"{source}: cannot read: {exc.strerror or exc}"]) from None
    if len(data) > MAX_CAMPAIGN_BYTES:
        raise _too_large(source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CampaignError([f"{source}: not UTF-8 text: {exc.reason} at byte {exc.start}"]) from None
    return text


def yaml_document(text: str, source: str) -> object:
    """The YAML document of a campaign's text; raises ``CampaignError``."""
    # Each character takes at least a byte: only a text that may fit is encoded to be measured.
    if len(text) > MAX_CAMPAIGN_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_CAMPAIGN_BYTES:
        raise _too_large(source)
    return _parse_yaml(text, source)


def _too_large(source: str) -> CampaignError:
    return CampaignError([f"{source}: larger than {MAX_CAMPAIGN_BYTES // 1024} KiB: not a campaign file"])


class _CampaignLoader(yaml.SafeLoader):
    """PyYAML's safe loader, where every failure is a YAML error with a line, a repeated key included, and
    a document of more than ``MAX_CAMPAIGN_NODES`` nodes, aliases expanded, is one."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._expanded_sizes: dict[yaml.Node, int] = {}  # by node, aliases expanded: what an alias adds

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        """Each node counts as it is composed, an alias as every node it repeats."""
        alias = self.check_event(yaml.AliasEvent)
        event = self.current_event  # the one check_event peeked at: the node's first
        start = self._nodes
        node = super().compose_node(parent, index)  # its children are counted as they are composed
        if node is None:
            return None
        if not alias:
            self._nodes += 1
            self._expanded_sizes[node] = self._nodes - start
        elif node in self._expanded_sizes:
            self._nodes += self._expanded_sizes[node]
        else:
            raise yaml.composer.ComposerError(
                problem=f"alias {event.anchor!r} inside the node it names: the value would hold itself",
                problem_mark=event.start_mark,
            )
        if self._nodes > MAX_CAMPAIGN_NODES:
            raise yaml.composer.ComposerError(
                problem=f"more than {MAX_CAMPAIGN_NODES:,} YAML nodes, an alias counted as every node it "
                "repeats: not a campaign file",
                problem_mark=event.start_mark,
            )
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """An explicit tag can fail in Python (``!!int x``, ``!!int`` alone): a YAML error with its line."""
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # PyYAML's constructors fail on odd tagged values in many ways
            raise yaml.constructor.ConstructorError(
                problem=f"invalid {node.tag.rsplit(':', 1)[-1]} value: {exc}", problem_mark=node.start_mark
            ) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        first_line: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else []:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            identity = (key_node.tag, key_node.value)
            if identity in first_line:
                raise yaml.constructor.ConstructorError(
                    problem=f"duplicate key {key_node.value!r} (first at line {first_line[identity]})",
                    problem_mark=key_node.start_mark,
                )
            first_line[identity] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def _parse_yaml(text: str, source: str) -> object:
    try:
        return yaml.load(text, Loader=_CampaignLoader)
    except yaml.MarkedYAMLError as exc:
        raise CampaignError([_yaml_error_message(source, exc)]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise CampaignError([f"{source}:{line}: character #x{exc.character:04x}: {exc.reason}"]) from None
    except RecursionError:
        raise CampaignError([f"{source}: nested too deeply"]) from None


def _yaml_error_message(source: str, exc: yaml.MarkedYAMLError) -> str:
    where = f"{source}:{exc.problem_mark.line + 1}" if exc.problem_mark else source
    message = f"{where}: {exc.problem or 'invalid YAML'}"
    if exc.context:
        context_line = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
        message += f" ({exc.context}{context_line})"
    return message
