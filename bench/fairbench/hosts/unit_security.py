"""A server unit's exposure as ``systemd-analyze security`` rates it, for host.json.

systemd scores each unit from 0.0 (every protection it knows applies) to 10.0 (none does) and names a rating
(OK, MEDIUM, EXPOSED, UNSAFE). The serving role's unit keeps what a GPU server needs (the network, the
NVIDIA devices, writable executable memory) and shuts the rest, so its score stays low; host.json records
the score of the unit each config really ran under, and a config whose unit got looser shows it there.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

OVERALL = re.compile(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)")
SECURITY_TIMEOUT_S = 30


def exposure(security_output: str) -> float | None:
    """The overall score in ``systemd-analyze security UNIT``'s output; None where it has none."""
    found = OVERALL.search(security_output)
    return float(found[1]) if found else None


def unit_security(unit: str) -> dict[str, Any]:
    """``{"exposure", "rating"}`` of a loaded unit; where systemd cannot rate it, both are null and ``reason``
    says why (a host's results are not lost over this fact). The unit's name is status.json's: kept out of
    here, where the report compares every config's host facts with the others'."""
    argv = ["systemd-analyze", "security", "--no-pager", unit]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SECURITY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"exposure": None, "rating": None, "reason": f"{' '.join(argv)}: {exc}"}
    rated = OVERALL.search(done.stdout)
    if rated is None:
        said = (done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").splitlines()
        return {"exposure": None, "rating": None, "reason": f"{' '.join(argv)}: {said[-1]}"}
    return {"exposure": float(rated[1]), "rating": rated[2]}
