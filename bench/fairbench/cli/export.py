"""``fairbench export RUN --csv [OUT] [--parquet [OUT]]``: every point of a run as one table.

One row per point the report uses (report/load.py reads the run: the latest line of each point, damaged
lines left out and named), by host, then config in the campaign's order, then in the order measured. The
columns: the identity first (measure.results.IDENTITY_KEYS, as the report places the point: campaign.json's
name, the run directory's name, the host and config directories), then every other key a point holds, in
the order first met. An object or a list (``gpu_energy_per_gpu_j``, ``supersedes``) is its JSON text; a key a
point lacks is an empty cell (CSV) or null (Parquet). A config whose repeats ran on several hosts
(``placement: spread``) has rows from each host directory, each row naming the host that measured it. A
campaign of several workloads has rows of each, in the campaign's order, with the column ``workload``
after the identity's.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from fairbench.campaign.model import SINGLE_WORKLOAD
from fairbench.cli.usage import UsageError
from fairbench.measure.results import IDENTITY_KEYS, ResultsError, RunIdentity
from fairbench.report.load import Run, load_runs

CSV_FILE = "points.csv"
PARQUET_FILE = "points.parquet"
"""Where each table goes when its option names no file: into the run directory."""
IN_RUN = object()
"""An option given alone (not a string: argparse would pass a string through the option's type)."""
STDOUT = "-"

Table = tuple[list[str], list[dict[str, Any]]]
"""The columns, and one row per point (a row lacks the keys its point lacks)."""


def _out(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("an empty path: name a file, or give the option alone")
    return text


DESCRIPTION = (
    "Write every point of a run as one table (--csv, --parquet or both), one row per point the report uses: "
    "every host, config and repeat, the latest line of each point. The columns campaign, run_id, host and "
    "config come first, then every key the points hold. Damaged lines are left out and named on standard "
    "error. It prints the path of each file written."
)
EPILOG = f"""\
examples:
  fairbench export results/demo/RUN_ID --csv                 # results/demo/RUN_ID/{CSV_FILE}
  fairbench export results/demo/RUN_ID --csv - | head -3
  fairbench export results/demo/RUN_ID --parquet points.parquet
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.add_argument("run", type=Path, metavar="RUN", help="a run: results/<campaign>/<run_id>")
    parser.add_argument(
        "--csv",
        nargs="?",
        const=IN_RUN,
        type=_out,
        metavar="OUT",
        help=f"write CSV to OUT (- for standard output; default RUN/{CSV_FILE})",
    )
    parser.add_argument(
        "--parquet",
        nargs="?",
        const=IN_RUN,
        type=_out,
        metavar="OUT",
        help=f"write Parquet to OUT (needs pyarrow; default RUN/{PARQUET_FILE})",
    )


WORKLOAD_COLUMN = "workload"


def table(runs: list[Run]) -> Table:
    """Every point of a run's workloads' ``runs`` (``load_runs``) as rows, with the columns (see the
    module docstring)."""
    named = [run.workload for run in runs] != [SINGLE_WORKLOAD]
    identity = [*IDENTITY_KEYS, *([WORKLOAD_COLUMN] if named else [])]
    rows = []
    for run in runs:
        for result in run.results:
            placed = RunIdentity(run.name, run.run_id, result.host, result.name).to_json()
            placed |= {WORKLOAD_COLUMN: run.workload} if named else {}
            rows += [{**point, **placed} for point in result.points]
    keys = dict.fromkeys(key for row in rows for key in row if key not in identity)
    return [*identity, *keys], rows


def _cell(value: object) -> object:
    """A value as one cell: an object or a list as its JSON text, anything else as it is."""
    return json.dumps(value) if isinstance(value, dict | list) else value


def write_csv(found: Table, handle: TextIO) -> None:
    columns, rows = found
    writer = csv.writer(handle)
    writer.writerow(columns)
    writer.writerows([_cell(row.get(column)) for column in columns] for row in rows)


def _pyarrow() -> tuple[ModuleType, ModuleType]:
    """pyarrow and pyarrow.parquet, or UsageError naming the package."""
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise UsageError(
            f"--parquet: needs the pyarrow package, which this Python lacks (pip install pyarrow): {exc}"
        ) from None


def write_parquet(found: Table, out: Path, notes: list[str]) -> None:
    """``found`` as a Parquet file; a column whose values are of several types (a line edited by hand)
    holds their JSON text, with a note."""
    pyarrow, parquet = _pyarrow()
    columns, rows = found
    arrays = {}
    for column in columns:
        values = [_cell(row.get(column)) for row in rows]
        try:
            arrays[column] = pyarrow.array(values)
        except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError):
            arrays[column] = pyarrow.array([None if value is None else json.dumps(value) for value in values])
            notes.append(f"{column}: values of several types, written as their JSON text")
    parquet.write_table(pyarrow.table(arrays), out)


def _target(given: object, run: Path, default: str) -> Path:
    return run / default if given is IN_RUN else Path(str(given))


def _write(found: Table, args: argparse.Namespace, notes: list[str]) -> list[Path]:
    written = []
    if args.csv == STDOUT:
        write_csv(found, sys.stdout)
    elif args.csv is not None:
        path = _target(args.csv, args.run, CSV_FILE)
        with path.open("w", encoding="utf-8", newline="") as handle:
            write_csv(found, handle)
        written.append(path)
    if args.parquet is not None:
        path = _target(args.parquet, args.run, PARQUET_FILE)
        write_parquet(found, path, notes)
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    if args.csv is None and args.parquet is None:
        raise UsageError("name a table to write: --csv [OUT], --parquet [OUT], or both")
    if args.parquet == STDOUT:
        raise UsageError("--parquet: a Parquet file cannot go to standard output: name a file")
    if args.parquet is not None:
        _pyarrow()  # before anything is written
    try:
        loaded = load_runs(args.run)
    except ResultsError as exc:
        raise UsageError(str(exc)) from None
    # A config's own files (status.json, ...) are read for each workload: each problem said once.
    notes = list(
        dict.fromkeys(
            problem
            for run in loaded
            for result in run.results
            for problem in (*result.problems, *result.notes)
        )
    )
    try:
        written = _write(table(loaded), args, notes)
    except OSError as exc:
        raise UsageError(f"{exc.filename or args.run}: cannot be written: {exc.strerror or exc}") from None
    for note in notes:
        print(f"fairbench export: note: {note}", file=sys.stderr)
    for path in written:  # beside the table when the table goes to standard output
        print(path, file=sys.stderr if args.csv == STDOUT else sys.stdout)
    return 0
