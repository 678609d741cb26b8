"""A run's results tree read into memory: ``results/<campaign>/<run_id>/`` (docs/results.md).

Every config the campaign names appears on every host that ran any config, even when its directory is
missing or holds no points: a report never drops a config silently. Nor does it drop a damaged file
silently: what cannot be used of a config's files is named (file, and line of points.jsonl) in its
``problems``, and the rest is read; so is what cannot be used of a host's nccl.json (file, and key path).
A campaign.json the report cannot use is a ``ResultsError``.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from fairbench.hosts.journal import excerpt
from fairbench.measure.results import (
    CAMPAIGN_FILE,
    POINTS_FILE,
    SUPERSEDES,
    SWEEP_FILE,
    ResultsError,
    point_id,
)
from fairbench.measure.status import JOURNAL_EXCERPT_LINES, JOURNAL_FILE, STATUS_FILE
from fairbench.nccl.runner import DECODE, PREFILL
from fairbench.nccl.runner import RESULT_FILE as NCCL_FILE
from fairbench.report.figures import FIGURES, THROUGHPUT, non_finite_text

SERVER_INFO_FILE = "server_info.json"
HOST_FILE = "host.json"
UNIT_FILE = "unit.service"
NO_HOST = "(no host)"
MISSING = "missing"
"""The status of a config the campaign names but the tree has no status.json for."""
UNREADABLE = "unreadable"
"""The status of a config whose status.json cannot be used."""


@dataclass(frozen=True)
class ConfigResult:
    """One config on one host, as fetched; a file that is absent or unusable is None (or empty)."""

    host: str
    name: str
    path: Path
    status: dict[str, Any]
    points: list[dict[str, Any]]
    server_info: dict[str, Any] | None
    host_info: dict[str, Any] | None
    environment: dict[str, str] | None
    """The unit's Environment= assignments."""
    sweep_settings: dict[str, Any] | None
    journal_excerpt: list[str]
    problems: tuple[str, ...] = ()
    """What of its files could not be used, or holds a figure that is not a finite number: each names
    the file (and the line of points.jsonl). The run's first config also carries those of the hosts'
    nccl.json files (``load_run``)."""
    notes: tuple[str, ...] = ()
    """An incomplete last line of points.jsonl, skipped: what an interrupted write leaves."""
    unreadable: frozenset[str] = field(default_factory=frozenset)
    """The files present but unusable; any other that gave None is missing."""

    @property
    def ok(self) -> bool:
        return self.status.get("status") == "ok"

    @property
    def state(self) -> str:
        return str(self.status.get("status") or UNREADABLE)


@dataclass(frozen=True)
class Run:
    path: Path
    campaign: dict[str, Any]
    """campaign.json, with every key the report reads checked (``CAMPAIGN_RULES``)."""
    results: list[ConfigResult]
    """By host, then in the campaign's config order, then configs the campaign does not name."""
    nccl: dict[str, dict[str, Any]]
    """Each host's nccl.json (``fairbench nccl``), by host, holding only what is well-formed of it
    (``load_nccl``)."""

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def name(self) -> str:
        return str(self.campaign["name"])

    def declared(self, config: str) -> dict[str, Any]:
        """The config's entry in campaign.json (``declared``, ``unset``, ``args``, ...); {} if not named."""
        entry: dict[str, Any] = self.campaign["configs"].get(config, {})
        return entry


# --- the shapes the report reads -------------------------------------------------------------------------


def is_whole(value: object, least: int = 0) -> bool:
    """An integer (not a boolean) of at least ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _is_number(value: object) -> bool:
    """A JSON number the report can compute with: not a boolean, nor an integer too large for a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _is_positive(value: object) -> bool:
    """A number above 0, or one that is not finite (shown as such, compared with nothing)."""
    return isinstance(value, int | float) and _is_number(value) and (not math.isfinite(value) or value > 0)


def _is_byte_count(value: object) -> bool:
    return is_whole(value, 1) and _is_number(value)


def _is_text(value: object) -> bool:
    return isinstance(value, str)


def _is_mapping(value: object) -> bool:
    return isinstance(value, dict)


def _is_list(value: object) -> bool:
    return isinstance(value, list)


def _list_of(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, list) and all(map(check, value))


def _object_of(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, dict) and all(map(check, value.values()))


def _whole(least: int) -> Callable[[object], bool]:
    return lambda value: is_whole(value, least)


def _or_null(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or check(value)


class Rule(NamedTuple):
    key: str
    """Dotted when nested: ``workload.repeats``."""
    expected: str
    """What the value must be, as the error says it: ``a string``."""
    check: Callable[[object], bool]
    required: bool


_SECTIONS = ("args", "env", "sim")
CAMPAIGN_RULES: tuple[Rule, ...] = (
    Rule("name", "a string", _is_text, True),
    Rule("engine", "a string", _is_text, True),
    Rule("model", "a string", _is_text, True),
    Rule("configs", "an object", _is_mapping, True),
    Rule("workload", "an object", _is_mapping, True),
    Rule("workload.api", "a string", _is_text, True),
    Rule("workload.input_len", "a whole number", _whole(0), True),
    Rule("workload.output_len", "a whole number", _whole(0), True),
    Rule("workload.concurrency", "a list of whole numbers of at least 1", _list_of(_whole(1)), True),
    Rule("workload.repeats", "a whole number of at least 1", _whole(1), False),
    Rule("warnings", "a list of strings", _list_of(_is_text), False),
)
CONFIG_RULES: tuple[Rule, ...] = (
    *(Rule(section, "an object", _is_mapping, False) for section in _SECTIONS),
    Rule("declared", "an object", _is_mapping, False),
    *(Rule(f"declared.{section}", "an object", _is_mapping, False) for section in _SECTIONS),
    Rule("unset", "an object", _is_mapping, False),
    *(Rule(f"unset.{section}", "a list of strings", _list_of(_is_text), False) for section in _SECTIONS),
)
"""What each entry of campaign.json's ``configs`` must hold where it holds it."""
_COUNTS = {"max_concurrency": 1, "repeat": 0, "completed": 0, "failed": 0}
POINT_RULES: tuple[Rule, ...] = (
    Rule("point_id", "a string", _is_text, True),
    *(
        Rule(key, f"a whole number of at least {least}", _whole(least), True)
        for key, least in _COUNTS.items()
    ),
    Rule(THROUGHPUT, "a number", _is_number, True),
    *(Rule(key, "a number", _is_number, False) for key in sorted(FIGURES - _COUNTS.keys() - {THROUGHPUT})),
    Rule(SUPERSEDES, "an object", _is_mapping, False),
    Rule(f"{SUPERSEDES}.line", "a whole number of at least 1", _whole(1), True),
)
"""Every point the sweep writes has the required keys; without them a point cannot be placed or counted."""
STATUS_RULES: tuple[Rule, ...] = (Rule("status", "a string", _is_text, True),)
SWEEP_RULES: tuple[Rule, ...] = (
    Rule("gpus", "null or a whole number of at least 1", _or_null(_whole(1)), False),
)
# nccl.json as fairbench/nccl/runner.py's ``assemble`` writes it, as far as the report reads it.
NCCL_RULES: tuple[Rule, ...] = (Rule("variants", "a list", _is_list, True),)
NCCL_FACT_RULES: tuple[Rule, ...] = (
    *(
        Rule(key, "a whole number of at least 1", _whole(1), False)
        for key in ("gpus", "hidden_size", "iters")
    ),
    Rule("graph_ops", "null or a whole number of at least 1", _or_null(_whole(1)), False),
    *(Rule(key, "null or a string", _or_null(_is_text), False) for key in ("device", "torch", "nccl")),
)
"""What the section's heading paragraph says of the measurement; a key that breaks its rule is left out."""
NCCL_VARIANT_RULES: tuple[Rule, ...] = (
    Rule("name", "a string", _is_text, True),
    Rule("env", "an object of strings", _object_of(_is_text), True),
    Rule("configs", "a list of strings", _list_of(_is_text), True),
    Rule("error", "null or a string", _or_null(_is_text), False),
    Rule("sizes", "a list", _is_list, True),
)
NCCL_SIZE_RULES: tuple[Rule, ...] = (
    Rule("bytes", "a whole number of at least 1", _is_byte_count, True),
    Rule("scale", f"{DECODE} or {PREFILL}", lambda value: value in (DECODE, PREFILL), True),
    Rule("tokens", "null or a whole number of at least 1", _or_null(_whole(1)), True),
)
NCCL_MODES = ("eager", "graph")
"""The launch modes of a size: each an object of figures, or null where not measured so."""
NCCL_TIMING_KEYS = ("median_us", "p10_us", "p90_us", "busbw_gbps")
NCCL_TIMING_RULES: tuple[Rule, ...] = tuple(
    Rule(key, "a positive number", _is_positive, True) for key in NCCL_TIMING_KEYS
)


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _rule_errors(data: Mapping[str, Any], rules: Sequence[Rule], prefix: str = "") -> list[str]:
    """What breaks ``rules`` in ``data``, a key under a parent that is absent or broken not checked."""
    errors = []
    for key, expected, check, required in rules:
        *parents, last = key.split(".")
        holder: object = data
        for parent in parents:
            holder = holder.get(parent) if isinstance(holder, dict) else None
        if not isinstance(holder, dict):
            continue
        if last not in holder:
            if required:
                errors.append(f"{prefix}{key}: required key is missing")
        elif not check(holder[last]):
            errors.append(f"{prefix}{key}: {_shown(holder[last])} is not {expected}")
    return errors


def _parse_object(data: bytes) -> dict[str, Any]:
    """``data`` as a JSON object; ``ValueError`` saying why it is not one."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{_shown(value)} is not a JSON object")
    return value


# --- one config's files ----------------------------------------------------------------------------------


def unit_environment(unit_text: str) -> dict[str, str]:
    """The variables a systemd unit's ``Environment=`` lines set, later lines winning as in systemd.

    Each line holds space-separated ``NAME=value`` words, each possibly quoted; ``%%`` is a literal %.
    """
    environment: dict[str, str] = {}
    for line in unit_text.splitlines():
        key, _, value = line.strip().partition("=")
        if key != "Environment":
            continue
        for word in shlex.split(value.replace("%%", "%")):
            name, _, assigned = word.partition("=")
            environment[name] = assigned
    return environment


def _journal_excerpt(status: dict[str, Any], journal: Path) -> list[str]:
    tail = status.get("journal_tail")
    if isinstance(tail, list) and tail:
        return [str(line) for line in tail]
    try:
        lines = journal.read_text(encoding="utf-8", errors="replace").splitlines()
        return excerpt(lines, JOURNAL_EXCERPT_LINES)
    except OSError:
        return []


class _Files:
    """One config directory's files as read, with what could not be used of them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.unreadable: set[str] = set()

    def _unusable(self, name: str, what: str) -> None:
        self.problems.append(f"{self.path / name}: {what}")
        self.unreadable.add(name)

    def read(self, name: str) -> bytes | None:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._unusable(name, f"cannot read: {exc.strerror or exc}")
            return None

    def json_object(self, name: str, rules: Sequence[Rule] = ()) -> dict[str, Any] | None:
        """The file's JSON object; None when it is missing or unusable: not a JSON object, or breaking a
        required rule. A broken optional rule is a problem, and the file is still used."""
        data = self.read(name)
        if data is None:
            return None
        try:
            found = _parse_object(data)
        except ValueError as exc:
            self._unusable(name, str(exc))
            return None
        fatal = _rule_errors(found, [rule for rule in rules if rule.required])
        if fatal:
            self._unusable(name, "; ".join(fatal))
            return None
        optional = _rule_errors(found, [rule for rule in rules if not rule.required])
        self.problems += [f"{self.path / name}: {error}" for error in optional]
        return found

    def environment(self) -> dict[str, str] | None:
        data = self.read(UNIT_FILE)
        if data is None:
            return None
        try:
            return unit_environment(data.decode("utf-8"))
        except ValueError as exc:  # not UTF-8, or an Environment= line shlex cannot split
            self._unusable(UNIT_FILE, f"cannot read its Environment= lines: {exc}")
            return None

    def points(self, placed: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Every usable point, its latest line only (measure.results.SUPERSEDES), in the order the points
        were first measured. A point_id seen before that does not supersede it (two writers) counts once.
        ``placed``: the identity keys (measure.results.RunIdentity) the tree gives these points, checked
        against those their lines name (``_named_elsewhere``).
        """
        path = self.path / POINTS_FILE
        kept: dict[str, tuple[int, dict[str, Any]]] = {}
        for number, point in self._point_lines(path):
            pid = point["point_id"]
            if pid in kept and point.get(SUPERSEDES, {}).get("line") != kept[pid][0]:
                self.problems.append(
                    f"{path}:{number}: point {pid} again (first on line {kept[pid][0]}); not counted"
                )
                continue
            kept[pid] = (number, point)
        for number, point in kept.values():
            self.problems += _non_finite(path, number, point)
        self.problems += _named_elsewhere(path, list(kept.values()), placed or {})
        return [point for _, point in kept.values()]

    def _point_lines(self, path: Path) -> list[tuple[int, dict[str, Any]]]:
        """Each line of points.jsonl that is a point, with its number. An incomplete last line is what an
        interrupted write leaves: the sweep's --resume drops it too."""
        data = self.read(POINTS_FILE)
        if data is None:
            return []
        *lines, tail = data.split(b"\n")
        if tail.strip():
            self.notes.append(
                f"{path}:{len(lines) + 1}: incomplete last line skipped (an interrupted write; "
                "`fairbench sweep --resume` measures that point again)"
            )
        found = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                found.append((number, _point(line)))
            except ValueError as exc:
                self.problems.append(f"{path}:{number}: {exc}; line skipped")
        return found


def _non_finite(path: Path, number: int, point: dict[str, Any]) -> list[str]:
    return [
        f"{path}:{number}: point {point['point_id']}: {key} is {non_finite_text(point[key])}, shown as such"
        for key in sorted(FIGURES & point.keys())
        if not math.isfinite(point[key])
    ]


def _named_elsewhere(
    path: Path, points: list[tuple[int, dict[str, Any]]], placed: Mapping[str, str]
) -> list[str]:
    """For each key of ``placed`` that lines name otherwise, one problem naming the first: the points are
    shown where they lie. Lines from before lines named their sweep name nothing, and pass."""
    problems = []
    for key, expected in placed.items():
        other = [(number, point[key]) for number, point in points if point.get(key) not in (None, expected)]
        if other:
            number, named = other[0]
            problems.append(
                f"{path}:{number}: {len(other)} point(s) name {key} {_shown(named)} where the tree says "
                f"{_shown(expected)}; shown as the tree says"
            )
    return problems


def _point(line: bytes) -> dict[str, Any]:
    """One line of points.jsonl as a point; ``ValueError`` saying why it is not one."""
    point = _parse_object(line)
    errors = _rule_errors(point, POINT_RULES)
    if errors:
        raise ValueError("; ".join(errors))
    expected = point_id(point["max_concurrency"], point["repeat"])
    if point["point_id"] != expected:
        raise ValueError(
            f"point_id {_shown(point['point_id'])} is not {expected}, "
            f"as max_concurrency {point['max_concurrency']} and repeat {point['repeat']} make it"
        )
    return point


def _status(files: _Files) -> dict[str, Any]:
    status = files.json_object(STATUS_FILE, STATUS_RULES)
    if status is not None:
        return status
    return {"status": UNREADABLE if STATUS_FILE in files.unreadable else MISSING}


def load_config(host: str, name: str, path: Path, *, campaign: str | None = None) -> ConfigResult:
    """One config directory; ``campaign``: the run's campaign name, which its point lines must name too.
    The host is not checked against theirs: a sweep run by hand names the machine it ran on."""
    files = _Files(path)
    status = _status(files)
    placed = {"config": name} | ({"campaign": campaign} if campaign is not None else {})
    return ConfigResult(
        host=host,
        name=name,
        path=path,
        status=status,
        points=files.points(placed),
        server_info=files.json_object(SERVER_INFO_FILE),
        host_info=files.json_object(HOST_FILE),
        environment=files.environment(),
        sweep_settings=files.json_object(SWEEP_FILE, SWEEP_RULES),
        journal_excerpt=_journal_excerpt(status, path / JOURNAL_FILE) if status.get("status") != "ok" else [],
        problems=tuple(files.problems),
        notes=tuple(files.notes),
        unreadable=frozenset(files.unreadable),
    )


# --- a host's nccl.json ---------------------------------------------------------------------------------


def _nccl_element(
    value: object, rules: Sequence[Rule], where: str, what: str, problems: list[str]
) -> dict[str, Any] | None:
    """``value`` when it is an object keeping ``rules``; else None, with a problem naming ``where``."""
    if not isinstance(value, dict):
        problems.append(f"{where}: {_shown(value)} is not an object; {what} not shown")
        return None
    errors = _rule_errors(value, rules, f"{where}.")
    if errors:
        problems.append(f"{'; '.join(errors)}; {what} not shown")
        return None
    return value


def _nccl_timing(value: object, where: str, problems: list[str]) -> dict[str, Any] | None:
    """One launch mode's figures of one size; None where unmeasured (null) or unusable (named)."""
    if value is None:
        return None
    timing = _nccl_element(value, NCCL_TIMING_RULES, where, "measurement", problems)
    if timing is not None:
        problems += [
            f"{where}.{key} is {non_finite_text(timing[key])}, shown as such"
            for key in NCCL_TIMING_KEYS
            if not math.isfinite(timing[key])
        ]
    return timing


def _nccl_size(value: object, where: str, problems: list[str]) -> dict[str, Any] | None:
    size = _nccl_element(value, NCCL_SIZE_RULES, where, "size", problems)
    if size is None:
        return None
    timings = {mode: _nccl_timing(size.get(mode), f"{where}.{mode}", problems) for mode in NCCL_MODES}
    return {**size, **timings}


def _nccl_variant(value: object, where: str, problems: list[str]) -> dict[str, Any] | None:
    variant = _nccl_element(value, NCCL_VARIANT_RULES, where, "variant", problems)
    if variant is None:
        return None
    sizes = [
        _nccl_size(size, f"{where}.sizes[{index}]", problems) for index, size in enumerate(variant["sizes"])
    ]
    return {**variant, "sizes": [size for size in sizes if size is not None]}


def _nccl_facts(document: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """``document`` without the facts that break their rule, each named."""
    kept = dict(document)
    for rule in NCCL_FACT_RULES:
        errors = _rule_errors(document, [rule])
        if errors:
            problems += [f"{error}; not shown" for error in errors]
            del kept[rule.key]
    return kept


def load_nccl(host_dir: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """A host's nccl.json holding only its well-formed facts, variants, sizes and measurements (None when
    the file cannot be used at all), and the problems naming the file and the key path of the rest."""
    files = _Files(host_dir)
    document = files.json_object(NCCL_FILE, NCCL_RULES)
    if document is None:
        return None, files.problems
    problems: list[str] = []
    checked = _nccl_facts(document, problems)
    variants = [
        _nccl_variant(value, f"variants[{index}]", problems)
        for index, value in enumerate(document["variants"])
    ]
    checked["variants"] = [variant for variant in variants if variant is not None]
    return checked, [f"{host_dir / NCCL_FILE}: {problem}" for problem in problems]


def _run_nccl(run_dir: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every host's usable nccl.json, by host, and the problems of them all."""
    found: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for path in sorted(run_dir.glob(f"*/{NCCL_FILE}")):
        document, named = load_nccl(path.parent)
        problems += named
        if document is not None:
            found[path.parent.name] = document
    return found, problems


# --- the run ---------------------------------------------------------------------------------------------


def _listing(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such directory") from None
    except NotADirectoryError:
        raise ResultsError(f"{path}: not a directory: a run is results/<campaign>/<run_id>") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _campaign(run_dir: Path) -> dict[str, Any]:
    path = run_dir / CAMPAIGN_FILE
    try:
        campaign = _parse_object(path.read_bytes())
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing: is {run_dir} a run (results/<campaign>/<run_id>)?") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ResultsError(f"{path}: {exc}") from None
    errors = _rule_errors(campaign, CAMPAIGN_RULES)
    configs = campaign.get("configs")
    for name, entry in configs.items() if isinstance(configs, dict) else ():
        prefix = f"configs.{name}"
        errors += (
            _rule_errors(entry, CONFIG_RULES, prefix + ".")
            if isinstance(entry, dict)
            else [f"{prefix}: {_shown(entry)} is not an object"]
        )
    if errors:
        raise ResultsError(f"{path}: {'; '.join(errors)}")
    return campaign


def _is_config_dir(path: Path) -> bool:
    try:
        return path.is_dir() and any((path / name).exists() for name in (STATUS_FILE, POINTS_FILE))
    except OSError:
        return True  # unreadable: loading it names what cannot be read


def load_run(path: Path) -> Run:
    """Read ``results/<campaign>/<run_id>``; ``ResultsError`` naming the path when it is not a run, or its
    campaign.json cannot be used."""
    children = _listing(path)
    campaign = _campaign(path)
    named = list(campaign["configs"])
    config_dirs = {
        child.name: [grandchild.name for grandchild in _listing(child) if _is_config_dir(grandchild)]
        for child in children
        if child.is_dir()
    }
    hosts = [host for host, present in config_dirs.items() if present]
    results = []
    # With no host directory at all, the configs still appear, each as missing.
    for host in hosts or [NO_HOST]:
        present = config_dirs.get(host, [])
        for name in [*named, *(name for name in present if name not in named)]:
            results.append(load_config(host, name, path / host / name, campaign=campaign["name"]))
    nccl, nccl_problems = _run_nccl(path)
    if results and nccl_problems:
        # The first screen names the problems of the configs' files; nccl.json lies beside them.
        results[0] = replace(results[0], problems=(*results[0].problems, *nccl_problems))
    return Run(path=path, campaign=campaign, results=results, nccl=nccl)
