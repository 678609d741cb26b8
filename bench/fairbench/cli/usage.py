"""``UsageError``: invalid command-line input, which ``fairbench`` reports in one line, exit status 2.

A module of its own, below ``main``: the commands raise it, and ``main``, which loads the commands,
catches it."""

from __future__ import annotations


class UsageError(Exception):
    """Invalid command-line input; the message names the argument and the rule."""
