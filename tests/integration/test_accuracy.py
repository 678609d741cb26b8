"""tests/perf/accuracy.py's measurement, small enough for every test run: `fairbench sweep`'s TTFT, TPOT and
ITL against the test server's own send times (tests/support/sweep_accuracy.py), server and sweep pinned to
a core each."""

from __future__ import annotations

import pytest
from tests.support.sweep_accuracy import TARGET_SHARE, measure, misses

# Timing-sensitive (it holds the client's timestamps to the server's within a millisecond): make test runs
# these alone.
pytestmark = pytest.mark.timing

OUTPUT_LEN = 8
"""190 ms a request (50 ms to the first token, then 7 gaps of 20 ms): C=1's 16 requests take 3 s."""
PROMPTS_PER_LEVEL = "8x"
"""Eight waves at C=16 and C=64. A wave's first chunks reach the sweep together; one late wake-up of the
sweep during that burst then moves an eighth of the requests' errors, not their median."""

MEDIAN_BOUND_MS = {1: 2.0, 16: 3.0, 64: 3.0}
"""The bound on the median |error| of TTFT, TPOT and ITL at each level: twice the worst median seen on a
2-core machine (the full run's target is 1 ms). At C=1 the sweep has nothing to do between two chunks and
its errors are its wake-ups: worst 1.06 ms (TTFT) in 140 runs, idle, running the unit tests, with both
cores busy, both at once, and some while other test suites ran. At C=16 and C=64 the sweep reads other
streams' chunks first: worst 1.5 ms (ITL at C=64 with both loads at once; TTFT 1.4 ms, TPOT 0.5 ms) in 80
runs, 20 under each of the four loads; 0.6 ms on the idle machine."""


def test_the_sweeps_ttft_tpot_and_itl_stay_within_bounds_of_the_servers_send_times() -> None:
    rows = measure(list(MEDIAN_BOUND_MS), OUTPUT_LEN, prompts_per_level=PROMPTS_PER_LEVEL, warmup="1x")
    assert [level for level, _ in rows] == list(MEDIAN_BOUND_MS)
    missed = [
        miss
        for level, errors in rows
        for miss in misses(level, errors, 50, MEDIAN_BOUND_MS[level], TARGET_SHARE)
    ]
    assert not missed, missed
