"""``campaign.json`` in a run's directory on the control node: the expanded campaign as run, and what a
resume (the same run id again) may change of it.

A resume runs the campaign the run recorded: points measured under one campaign and points measured under
another would otherwise be reported as one run. A resume whose campaign differs in anything that changes
what is measured (``differences``) is refused before anything is deployed, naming the run's directory,
the key paths that differ and how to allow it. Allowed (``allow_changed``: ``fairbench run
--allow-changed-campaign``, the bench role's ``bench_resume_changed``), the campaign recorded before is
kept as ``campaign.<n>.json`` (``campaign.1.json`` the one the run started with, each later one the next
number) and the new one becomes campaign.json; the report says that the campaign changed during the run.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

from fairbench.measure.json_rules import parse_object
from fairbench.measure.results import CAMPAIGN_FILE

NOT_COMPARED = frozenset({"source", "warnings", "start_timeout_s"})
"""Top-level keys of campaign.json that do not change what is measured: how the campaign file was named,
the warnings fairbench's rules give about it, and how long a server may take to become healthy."""
SHOWN = 10
"""Differences a refusal lists; the rest are counted."""
VALUE_CHARS = 60
"""A value longer than this, as JSON, is cut in a listed difference."""
_STEM, _SUFFIX = CAMPAIGN_FILE.rsplit(".", 1)
EARLIER = re.compile(rf"{re.escape(_STEM)}\.([1-9][0-9]*)\.{re.escape(_SUFFIX)}")
"""An earlier campaign of the run, ``campaign.<n>.json``."""


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()
"""The side of a difference where the key is missing."""


@dataclass(frozen=True)
class Difference:
    path: str
    """The key path, ``configs.tp8.args.tp-size``; a list's element ``argv[3]``, a run of them
    ``argv[4:6]``."""
    old: Any
    """The recorded value, or ABSENT."""
    new: Any
    """The value now, or ABSENT."""

    def __str__(self) -> str:
        return f"{self.path}: {_shown(self.old)} -> {_shown(self.new)}"


class ResumeRefused(Exception):
    """The resume may not go on; the message says why, with what differs."""


@dataclass(frozen=True)
class Recorded:
    """What ``record`` did (or would do, dry)."""

    changed: bool
    """campaign.json was written."""
    kept_as: Path | None = None
    """Where the campaign recorded before was kept, when it differed."""
    differences: list[Difference] = field(default_factory=list)
    before: str | None = None
    """campaign.json's text before, None when there was none."""


def differences(recorded: Mapping[str, Any], campaign: Mapping[str, Any]) -> list[Difference]:
    """Every key path where ``campaign`` differs from ``recorded`` (both as campaign.json holds them), in
    ``campaign``'s key order, then the keys only ``recorded`` has; ``NOT_COMPARED`` left out. A mapping's
    key order does not count (``_list_differences`` says how lists are)."""
    return _differences(
        "",
        {key: value for key, value in recorded.items() if key not in NOT_COMPARED},
        {key: value for key, value in campaign.items() if key not in NOT_COMPARED},
    )


def _differences(path: str, old: Any, new: Any) -> list[Difference]:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [*new, *(key for key in old if key not in new)]
        found: list[Difference] = []
        for key in keys:
            found += _differences(
                f"{path}.{key}" if path else str(key), old.get(key, ABSENT), new.get(key, ABSENT)
            )
        return found
    if isinstance(old, list) and isinstance(new, list):
        return _list_differences(path, old, new)
    # true and 1 are equal in Python, not in a campaign.
    same = isinstance(old, bool) == isinstance(new, bool) and old == new
    return [] if same else [Difference(path, old, new)]


def _list_differences(path: str, old: list[Any], new: list[Any]) -> list[Difference]:
    """Lists of one length element by element; others whole where both are short, else each run of
    elements that differs as a slice (``argv[14:15]: ["--enable-eplb"] -> []``)."""
    if len(old) == len(new):
        return [
            d
            for i, pair in enumerate(zip(old, new, strict=True))
            for d in _differences(f"{path}[{i}]", *pair)
        ]
    if max(len(_json(old)), len(_json(new))) <= VALUE_CHARS:
        return [Difference(path, old, new)]
    matcher = SequenceMatcher(
        None, [_json(item) for item in old], [_json(item) for item in new], autojunk=False
    )
    return [
        Difference(f"{path}[{i1}:{i2}]", old[i1:i2], new[j1:j2])
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def _shown(value: Any) -> str:
    if value is ABSENT:
        return repr(value)
    text = _json(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def listed(found: list[Difference], indent: str = "  ") -> list[str]:
    """The first ``SHOWN`` differences, one a line, and how many more there are."""
    lines = [f"{indent}{difference}" for difference in found[:SHOWN]]
    if len(found) > SHOWN:
        lines.append(f"{indent}... and {len(found) - SHOWN} more")
    return lines


def render(campaign: Mapping[str, Any]) -> str:
    """campaign.json's text, indented by 4 as Ansible's to_nice_json wrote it before this module did, but
    its keys in the campaign's order: the report shows configs and workloads in the file's order. (A file
    written sorted is rewritten once by its next resume, its content the same.)"""
    return json.dumps(campaign, indent=4) + "\n"


def recorded(run_dir: Path) -> dict[str, Any] | None:
    """The campaign the run recorded, None for a new run; ResumeRefused when campaign.json cannot be read
    or is not a JSON object."""
    return _parsed(run_dir / CAMPAIGN_FILE, _text(run_dir / CAMPAIGN_FILE))


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        # No run's directory there: a new run (making it will say why it cannot be made).
        return None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ResumeRefused(f"{path}: cannot read the campaign the run recorded: {why}") from None


def _parsed(path: Path, text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        return parse_object(text.encode())
    except ValueError as exc:
        raise ResumeRefused(f"{path}: the campaign the run recorded: {exc}") from None


def check_resume(
    run_dir: Path, campaign: Mapping[str, Any], *, allow_changed: bool, allowed_by: str
) -> list[Difference]:
    """How ``campaign`` differs from the one ``run_dir`` recorded ([] for a new run, or the same
    campaign). ResumeRefused when it differs and ``allow_changed`` is false: the message names the run's
    directory, the differences and ``allowed_by``, the option that allows it."""
    return _checked(run_dir, recorded(run_dir), campaign, allow_changed=allow_changed, allowed_by=allowed_by)


def _checked(
    run_dir: Path,
    before: Mapping[str, Any] | None,
    campaign: Mapping[str, Any],
    *,
    allow_changed: bool,
    allowed_by: str,
) -> list[Difference]:
    found = [] if before is None else differences(before, campaign)
    if found and not allow_changed:
        raise ResumeRefused(
            "\n".join(
                [
                    f"{run_dir}: a resume of this run with another campaign: {len(found)} key(s) of the "
                    f"expanded campaign differ from the run's {CAMPAIGN_FILE} (recorded -> now):",
                    *listed(found),
                    "The run's points so far were measured under the recorded campaign. Use a new run id "
                    f"for this one, or resume with it on purpose: {allowed_by} (the recorded campaign is "
                    f"then kept as {earlier_name('<n>')}, and the report says the campaign changed).",
                ]
            )
        )
    return found


def earlier(run_dir: Path) -> list[Path]:
    """The run's earlier campaigns, ``campaign.<n>.json``, oldest first."""
    return [path for _, path in _numbered(run_dir)]


def _numbered(run_dir: Path) -> list[tuple[int, Path]]:
    try:
        found = [
            (int(match[1]), path) for path in run_dir.iterdir() if (match := EARLIER.fullmatch(path.name))
        ]
    except FileNotFoundError:
        return []
    return sorted(found)


def earlier_name(n: int | str) -> str:
    return f"{_STEM}.{n}.{_SUFFIX}"


def record(
    run_dir: Path, campaign: Mapping[str, Any], *, allow_changed: bool, allowed_by: str, dry_run: bool = False
) -> Recorded:
    """Write ``campaign`` as the run's campaign.json (``check_resume`` first). One that differs keeps the
    recorded one as the next ``campaign.<n>.json``; one that does not replaces it (a key of
    ``NOT_COMPARED`` may have changed), or leaves it as it is when its text is the same. ``dry_run``: say
    what would be done, writing nothing."""
    path = run_dir / CAMPAIGN_FILE
    before = _text(path)
    found = _checked(
        run_dir, _parsed(path, before), campaign, allow_changed=allow_changed, allowed_by=allowed_by
    )
    text = render(campaign)
    if before == text:
        return Recorded(changed=False, before=before)
    kept_as = None
    if found and before is not None:
        kept = _numbered(run_dir)
        # Kept already when an earlier resume stopped between keeping it and writing the new one.
        if kept and kept[-1][1].read_text(encoding="utf-8") == before:
            kept_as = kept[-1][1]
        else:
            kept_as = run_dir / earlier_name(kept[-1][0] + 1 if kept else 1)
            if not dry_run:
                _write(kept_as, before)
    if not dry_run:
        _write(path, text)
    return Recorded(changed=True, kept_as=kept_as, differences=found, before=before)


def _write(path: Path, text: str) -> None:
    """Through a temporary file and a rename: a reader sees the old file or the new one."""
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
