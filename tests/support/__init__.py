"""Test helpers shared by tests/unit, tests/integration and tests/perf.

Nothing here may import ``fairbench``: the test server is the client's
independent counterpart, and a shared helper would hide a shared bug.
"""
