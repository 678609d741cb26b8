"""The results of one sweep on disk: ``points.jsonl``, ``requests/``, ``sweep.json``.

points.jsonl's lines and what a usable one is are ``measure.results_format``'s; this module writes them.
Durability rules: a point's request records are written to a temporary file and
renamed into place before its line is appended to ``points.jsonl``; the line is
flushed and fsynced at once. So a crash leaves either a whole point or none, and
a resumed sweep skips exactly the points whose line is present.

One writer at a time: whoever runs a sweep (``fairbench sweep``, the bench role's module) holds an
exclusive ``flock`` on LOCK_FILE in the directory for the sweep's whole life (``ResultsDir.writer``). Two
writers would measure the same missing points twice; the kernel drops the lock when its process ends,
however it ends, so a killed sweep never leaves the directory locked.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from fairbench.measure.json_rules import NotJson, json_value, rule_errors
from fairbench.measure.records import RequestRecord
from fairbench.measure.results_format import (
    LINE_NEEDS,
    LINE_RULES,
    POINTS_FILE,
    SUPERSEDES,
    Numbered,
    current_lines,
    encode_line,
    has_failed_requests,
    split_lines,
    whole_lines,
)

REQUESTS_DIR = "requests"
SWEEP_FILE = "sweep.json"
LOCK_FILE = ".sweep.lock"
"""Hidden: the bench role fetches a results directory's files without its hidden ones."""
# A campaign run (results/<campaign>/<run_id>/) holds CAMPAIGN_FILE, and one sweep directory per
# host and config with a status.json (fairbench.measure.results_format) beside the sweep's own files.
CAMPAIGN_FILE = "campaign.json"


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A run's id names its directory (results/<campaign>/<run_id>/) and is recorded in every point line."""
RUN_ID_RULE = "must be letters, digits, '_', '.' and '-', starting with a letter or digit"
RUN_ID_TIME = "%Y%m%dT%H%M%SZ"
"""A run given no id is named by its start time, UTC: runs of a campaign sort by when they began."""


def run_id_problem(given: str) -> str | None:
    """Why ``given`` cannot be a run's id, or None when it can."""
    return None if RUN_ID.fullmatch(given) else f"{given!r} {RUN_ID_RULE}"


def new_run_id() -> str:
    """The id of a run that starts now and was given none."""
    return datetime.now(timezone.utc).strftime(RUN_ID_TIME)


class ResultsError(ValueError):
    """The results directory cannot be used as asked; the message names the file and the rule."""


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """Which sweep a point belongs to, written into each of its lines under these field names: lines of
    several runs concatenated still say where each came from. A campaign run sets every field (``host``:
    Ansible's inventory_hostname); a sweep run by hand may leave any out (None). Not in sweep.json: the
    report compares sweep.json between configs as settings, and identities differ between them."""

    campaign: str | None = None
    run_id: str | None = None
    host: str | None = None
    config: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {name: getattr(self, name) for name in IDENTITY_KEYS}

    def described(self) -> str:
        return ", ".join(f"{name} {getattr(self, name)!r}" for name in IDENTITY_KEYS)


IDENTITY_KEYS = tuple(item.name for item in fields(RunIdentity))
"""The keys of a point line that name its sweep, in the order the line holds them: first."""


def _identity_of(point: dict[str, Any]) -> RunIdentity | None:
    """The identity a point line carries; None for a line written before lines carried one."""
    if not any(name in point for name in IDENTITY_KEYS):
        return None
    return RunIdentity(**{name: point.get(name) for name in IDENTITY_KEYS})


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _point(path: Path, number: int, line: bytes) -> dict[str, Any]:
    """Line ``number`` of points.jsonl as a point (``LINE_RULES``)."""
    try:
        point = json_value(line)
    except NotJson as exc:
        raise ResultsError(f"{path}:{number}: not a JSON line ({exc.detail})") from None
    if not isinstance(point, dict):
        raise ResultsError(f"{path}:{number}: not a point (a JSON object)")
    if rule_errors(point, LINE_RULES):
        raise ResultsError(f"{path}:{number}: {LINE_NEEDS}")
    return point


TRACE_SHA256 = "trace_sha256"
"""sweep.json's key for a replay's window of requests (``trace_replay.window_sha256``)."""


def _check_resumable(sweep_path: Path, settings: dict[str, Any]) -> None:
    """Refuse to resume a directory whose sweep.json is unreadable or holds other settings."""
    try:
        previous = json.loads(sweep_path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ResultsError(f"{sweep_path}: cannot be read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{sweep_path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ResultsError(f"{sweep_path}: not valid JSON ({exc})") from None
    if not isinstance(previous, dict):
        raise ResultsError(f"{sweep_path}: not a sweep's settings (a JSON object)")
    # sweep.json files written before the model was recorded have none: their points are resumed unchecked.
    if "model" in previous and previous["model"] != settings.get("model"):
        raise ResultsError(
            f"{sweep_path}: cannot resume against another model: the points there are of "
            f"{previous['model']!r}, this sweep's is {settings.get('model')!r}"
        )
    # Likewise a replay's window recorded before its digest was: resumed unchecked.
    if TRACE_SHA256 in previous and previous[TRACE_SHA256] != settings.get(TRACE_SHA256):
        raise ResultsError(
            f"{sweep_path}: cannot resume with another trace: the requests of the window replayed there "
            f"(sha256 {str(previous[TRACE_SHA256])[:12]}...) differ from this sweep's "
            f"({str(settings.get(TRACE_SHA256))[:12]}...): the trace file changed since"
        )
    changed = [
        f"{key} {previous.get(key)!r} -> {value!r}"
        for key, value in settings.items()
        if key not in ("model", TRACE_SHA256) and previous.get(key) != value
    ]
    # A setting recorded only where set (cache_state: primed, slo) that this sweep does not set; a key no
    # sweep writes (a file edited by hand) quoted, so that the message stays one line.
    changed += [
        f"{key if key.isidentifier() else repr(key)} {value!r} -> unset"
        for key, value in previous.items()
        if key not in settings and value is not None
    ]
    if changed:
        raise ResultsError(f"{sweep_path}: cannot resume with other settings: {'; '.join(changed)}")


class ResultsDir:
    """Append-only store of a sweep's points in one directory.

    A point with failed requests can be measured again on request (``--remeasure-failed``), and
    points.jsonl stays append-only all the same: the new point is appended with SUPERSEDES naming the
    line it replaces, and the failed point's request records are kept beside it under another name. The
    failed line stays in the file, so nothing measured is lost and a crash at any moment leaves either
    the failed point or its successor. ``points()``, ``completed_ids()`` and ``failed_ids()`` see each
    point's current line only: a superseded line is history, not a point of the sweep.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.points_path = root / POINTS_FILE
        self.requests_dir = root / REQUESTS_DIR
        self._lock: IO[bytes] | None = None

    @contextmanager
    def writer(self) -> Iterator[None]:
        """Hold the directory's writer lock (creating the directory), or raise ResultsError when another
        process holds it. Taken again inside its own hold, it is already held: the bench role's module
        holds it around the sweep, which takes it too."""
        if self._lock is not None:
            yield
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            lock = (self.root / LOCK_FILE).open("ab")
        except FileExistsError:
            raise ResultsError(f"{self.root}: cannot be a results directory: it is a file") from None
        except OSError as exc:
            raise ResultsError(f"{self.root}: cannot be a results directory: {exc.strerror}") from None
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ResultsError(f"{self.root}: another sweep is still writing here") from None
            except OSError as exc:  # a file system without locks
                raise ResultsError(f"{lock.name}: cannot be locked: {exc.strerror}") from None
            self._lock = lock
            try:
                yield
            finally:
                self._lock = None

    def prepare(self, settings: dict[str, Any], *, resume: bool) -> None:
        """Create the directory, or check that a resumed one was made with the same settings.

        ``settings`` are the inputs that decide what a point measures (URL excluded:
        a server may move); resuming with others would mix incomparable points.
        """
        sweep_path = self.root / SWEEP_FILE
        if self.points_path.exists() and not resume:
            raise ResultsError(
                f"{self.points_path}: already has points; pass --resume to continue, or another --out"
            )
        if resume and sweep_path.exists():
            _check_resumable(sweep_path, settings)
        try:
            self.requests_dir.mkdir(parents=True, exist_ok=True)
            tmp = sweep_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
            tmp.replace(sweep_path)
        except OSError as exc:
            raise ResultsError(f"{exc.filename}: cannot be written: {exc.strerror}") from None
        self._drop_torn_tail()
        self.points()  # a line that is not a point is named now, before anything is measured

    def _drop_torn_tail(self) -> None:
        """A crash during an append can leave a partial last line: cut it off."""
        if not self.points_path.exists():
            return
        data = self._read_points()
        end = whole_lines(data)
        if end != len(data):
            with self.points_path.open("r+b") as handle:
                handle.truncate(end)

    def _read_points(self) -> bytes:
        try:
            return self.points_path.read_bytes()
        except OSError as exc:
            raise ResultsError(f"{self.points_path}: cannot be read: {exc.strerror}") from None

    def _lines(self) -> list[Numbered]:
        """Every point line of points.jsonl with its line number (from 1), superseded ones included; a torn
        tail (prepare cuts it) is not a line yet."""
        if not self.points_path.exists():
            return []
        lines, _ = split_lines(self._read_points())
        return [(number, _point(self.points_path, number, line)) for number, line in lines]

    def _current(self) -> dict[str, Numbered]:
        """Each point's current line, with its number (``results_format.current_lines``)."""
        return current_lines(self._lines())[0]

    def points(self) -> list[dict[str, Any]]:
        """Every point, its latest line only, in the order the points were first measured."""
        return [point for _, point in self._current().values()]

    def completed_ids(self) -> set[str]:
        """The points measured, failed ones included."""
        return set(self._current())

    def failed_ids(self) -> set[str]:
        """The points with failed requests (``has_failed_requests``): those ``--remeasure-failed`` measures
        again."""
        return {pid for pid, (_, point) in self._current().items() if has_failed_requests(point)}

    def identity(self) -> RunIdentity | None:
        """The identity the point lines here carry, superseded ones included; None when none carries one
        (lines written before lines carried one). ResultsError when two lines carry different ones."""
        found: tuple[int, RunIdentity] | None = None
        for number, point in self._lines():
            identity = _identity_of(point)
            if identity is None:
                continue
            if found is not None and identity != found[1]:
                raise ResultsError(
                    f"{self.points_path}:{number}: a point of another sweep ({identity.described()}) "
                    f"than line {found[0]}'s ({found[1].described()})"
                )
            found = found or (number, identity)
        return found[1] if found else None

    def resumed_identity(self, given: RunIdentity) -> RunIdentity:
        """``given``, each field it leaves None taken from the point lines already here. ResultsError naming
        each field given another value than theirs: the points of two sweeps never share a directory."""
        recorded = self.identity()
        if recorded is None:
            return given
        changed = [
            f"{name} {getattr(recorded, name)!r} -> {value!r}"
            for name, value in given.to_json().items()
            if value is not None and value != getattr(recorded, name)
        ]
        if changed:
            raise ResultsError(
                f"{self.points_path}: cannot resume as another sweep: {'; '.join(changed)} "
                f"(the points there are of {recorded.described()}); measure into another directory"
            )
        return replace(given, **{name: value for name, value in recorded.to_json().items() if value})

    def requests_path(self, pid: str) -> Path:
        return self.requests_dir / f"{pid}.jsonl.gz"

    def write_point(self, point: dict[str, Any], records: Iterable[RequestRecord]) -> dict[str, Any]:
        """Persist one finished point: its records first, then its line in points.jsonl; returns the line.

        A point already there must have failed entirely: the new line supersedes it (see the class).
        """
        pid = point["point_id"]
        previous = self._current().get(pid)
        if previous is not None:
            point = {**point, SUPERSEDES: self._keep_records(pid, previous)}
        try:
            self._append(point, records)
        except OSError as exc:  # a full disk, a quota, a file gone read-only
            where = exc.filename or self.root
            raise ResultsError(
                f"{where}: cannot write point {pid}: {exc.strerror or exc}; the points before it are kept"
            ) from None
        return point

    def _append(self, point: dict[str, Any], records: Iterable[RequestRecord]) -> None:
        final = self.requests_path(point["point_id"])
        tmp = final.with_name(final.name + ".tmp")
        # compresslevel 1: records are mostly integers; level 9 costs 5x the CPU for ~10 % less.
        with gzip.open(tmp, "wt", compresslevel=1) as handle:
            for record in records:
                handle.write(json.dumps(record.to_json(), separators=(",", ":")))
                handle.write("\n")
        tmp.replace(final)
        _fsync_dir(self.requests_dir)
        with self.points_path.open("a") as handle:
            handle.write(encode_line(point))
            handle.flush()
            os.fsync(handle.fileno())

    def _keep_records(self, pid: str, previous: Numbered) -> dict[str, Any]:
        """Give the records of the point on line ``number`` a name of their own before its successor's
        records take its name; a hard link, so that until they do, the old name still holds them."""
        number, point = previous
        if not has_failed_requests(point):
            raise ResultsError(
                f"{self.points_path}:{number}: {pid} was measured; only a failed point is redone"
            )
        kept = self.requests_dir / f"{pid}.line{number}.jsonl.gz"
        if self.requests_path(pid).exists() and not kept.exists():
            os.link(self.requests_path(pid), kept)
        return {"line": number, "requests": f"{REQUESTS_DIR}/{kept.name}"}

    def read_requests(self, pid: str) -> list[RequestRecord]:
        with gzip.open(self.requests_path(pid), "rt") as handle:
            return [RequestRecord.from_json(json.loads(line)) for line in handle]

    def discard_partial(self) -> None:
        """Remove temporary files left by an interrupted write."""
        if self.requests_dir.exists():
            for tmp in self.requests_dir.glob("*.tmp"):
                tmp.unlink()
