"""Campaigns over a fleet, on the control node: which host runs which job (placement), the work queue the
hosts take jobs from, and whether the hosts of a pool are equivalent."""
