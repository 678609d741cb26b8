"""The campaign's own overhead per config, and a run's wall time against another's, from results trees.

    make demo                                  # or any campaign run that recorded job timelines
    .venv/bin/python tests/perf/campaign_overhead.py results/demo/RUN [results/demo/OTHER_RUN]

For each host, each job's overhead: from the end of the host's previous job's last point to this job's
first request, less this job's server load (unit start to healthy), as the report defines it
(``fairbench.fleet.timeline``, timed on each job's rank-0 host). The run's wall time is its ansible.log's
first to last line; given a second run (of the same campaign, measured on the same machine in the same
session: these machines' speed varies between days), the ratio of the two.

Targets: every job's overhead under 5 s on the lab hosts (TARGET_OVERHEAD_S); a spread demo on two hosts
within 60 % of the wall time of the same campaign run on every host (TARGET_WALL_RATIO). Exits 1 naming
each target missed.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

from fairbench.report.fleet_blocks import run_overheads
from fairbench.report.load import load_run

TARGET_OVERHEAD_S = 5.0
TARGET_WALL_RATIO = 0.60
LOG_TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"
"""Ansible's log lines start with their time (``2026-12-01 21:43:08,157``)."""


def wall_s(run_dir: Path) -> float:
    """Seconds from the first to the last line of the run's ansible.log."""
    stamps = [line[:23] for line in (run_dir / "ansible.log").read_text().splitlines() if line[:2] == "20"]
    first, last = (datetime.strptime(stamp, LOG_TIME_FORMAT) for stamp in (stamps[0], stamps[-1]))
    return (last - first).total_seconds()


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    per_host, _ = run_overheads(load_run(run_dir))
    missed = []
    print(f"{'host':<10} {'job':<24} {'load s':>7} {'gap s':>7} {'overhead s':>10}")
    for host, overheads in per_host.items():
        for item in overheads:
            load = item.timeline.load_s
            cells = [
                f"{value:.2f}" if value is not None else "-" for value in (load, item.gap_s, item.overhead_s)
            ]
            print(f"{host:<10} {item.job:<24} {cells[0]:>7} {cells[1]:>7} {cells[2]:>10}")
            if item.overhead_s is not None and item.overhead_s >= TARGET_OVERHEAD_S:
                missed.append(
                    f"{host} {item.job}: overhead {item.overhead_s:.2f} s >= {TARGET_OVERHEAD_S:g} s"
                )
    wall = wall_s(run_dir)
    print(f"wall time: {wall:.1f} s ({run_dir})")
    if len(argv) == 2:
        other = wall_s(Path(argv[1]))
        ratio = wall / other
        print(f"against {other:.1f} s ({argv[1]}): {ratio:.0%}")
        if ratio > TARGET_WALL_RATIO:
            missed.append(f"wall time {ratio:.0%} of the other run's, over {TARGET_WALL_RATIO:.0%}")
    for line in missed:
        print(f"MISSED: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
