"""Every broken rule of a campaign, collected rather than raised at the first one.

Each message starts with the file name, then the key path, then the rule::

    campaigns/x.yml: configs.ep4.args.ep-size: 3 does not divide tp-size 8

A check that finds a problem reports it here and goes on, so one run names every mistake of a file;
``raise_errors`` then raises them all as one ``CampaignError``. Warnings (a rule a campaign may break on
purpose) are kept with the campaign instead.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence

from fairbench.measure.bounds import unit_text_problem


class CampaignError(Exception):
    """A campaign broke one or more rules; ``messages`` holds every one, each starting with the file name."""

    def __init__(self, messages: Sequence[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = list(messages)


class Findings:
    """Errors and warnings, each formatted as ``<source>: <key path>: <rule>``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self._comparisons_left = _SUGGESTION_COMPARISONS

    def error(self, path: str, rule: str) -> None:
        self.errors.append(self._format(path, rule))

    def warn(self, path: str, rule: str) -> None:
        self.warnings.append(self._format(path, rule))

    def raise_errors(self) -> None:
        if self.errors:
            raise CampaignError(self.errors)

    def _format(self, path: str, rule: str) -> str:
        if (
            unit_text_problem(path) is not None
        ):  # a key holding a line end: quoted, the message stays one line
            path = repr(path)
        return f"{self.source}: {path}: {rule}" if path else f"{self.source}: {rule}"

    def did_you_mean(self, word: str, choices: Collection[str]) -> str:
        """The closest choice, as a message's ending; nothing once the comparisons are spent."""
        if len(choices) > self._comparisons_left:
            return ""
        self._comparisons_left -= len(choices)
        close = difflib.get_close_matches(word, list(choices), n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""


_SUGGESTION_COMPARISONS = 20_000
"""Comparing a word with a choice takes up to 10 us: dozens of suggestions among SGLang's 550 flags, or
among every config's name, and a file with thousands of unknown names is still checked in a moment."""


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def describe(value: object) -> str:
    """A value as the message shows it, in YAML's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__} value"
