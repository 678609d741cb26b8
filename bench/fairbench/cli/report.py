"""``fairbench report RESULTS_DIR [RESULTS_DIR_B] [--out DIR]``: the fair comparison of a run, or of two runs.

With one run directory (``results/<campaign>/<run_id>``) the report compares its configs and is written
into that directory; with two runs of one campaign it compares each config of the second run with the
same config of the first, and is written into ``<RESULTS_DIR_B>/against-<run_id of A>``. A campaign of
several workloads gets a report per workload and an index of their verdicts (``report.build.write_reports``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fairbench.cli.usage import UsageError
from fairbench.measure.results import ResultsError
from fairbench.report.build import write_reports
from fairbench.report.load import load_runs

DESCRIPTION = (
    "Compare the configs of one run fairly: whether their servers differed only as the campaign says, each "
    "config's throughput and latency at every level with its interval across repeats, and a verdict for the "
    "lowest load, the peak and the highest load under the SLO: which config is best, by how much, and "
    "whether that is more than noise. It writes report.md, report.html and plots/ into the run's directory "
    "and prints their paths. Given two runs of one campaign, it compares each config of the second run with "
    "the same config of the first, into RESULTS_DIR_B/against-RUN_ID_A."
)
EPILOG = """\
examples:
  fairbench report results/demo/20250101T120000Z
  fairbench report results/demo/RUN_A results/demo/RUN_B     # B against A
  fairbench report /mnt/shared/results/demo/RUN_ID --out report-copy

What each section and figure means: docs/results.md and docs/metrics.md.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.add_argument(
        "results_dir", type=Path, metavar="RESULTS_DIR", help="a run: results/<campaign>/<run_id>"
    )
    parser.add_argument(
        "results_dir_b",
        type=Path,
        nargs="?",
        metavar="RESULTS_DIR_B",
        help="a second run of the same campaign, compared against the first",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write the report into DIR instead, e.g. when the run's directory is read-only",
    )


def run(args: argparse.Namespace) -> int:
    paths = [path for path in (args.results_dir, args.results_dir_b) if path is not None]
    try:
        # Each run as its workloads' runs, one for a campaign of one workload.
        runs = [load_runs(path) for path in paths]
    except ResultsError as exc:
        raise UsageError(str(exc)) from None
    names = [workloads[0].name for workloads in runs]
    if len(runs) == 2 and names[0] != names[1]:
        raise UsageError(
            f"{paths[0]} and {paths[1]} are runs of different campaigns ({names[0]}, {names[1]})"
        )
    out = args.out or (paths[0] if len(runs) == 1 else paths[1] / f"against-{runs[0][0].run_id}")
    try:
        written = write_reports(runs, out)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise UsageError(
            f"{out}: cannot write the report there ({where}{exc.strerror or exc}); "
            "--out DIR writes it elsewhere"
        ) from None
    for path in written:
        print(path)
    return 0
