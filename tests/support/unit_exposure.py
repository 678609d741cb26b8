"""The serving unit's exposure as ``systemd-analyze security`` rates it (0 safest, 10 most exposed).

What keeps it above 0 is what a GPU server needs: the network, the NVIDIA devices, writable executable
memory (templates/sglang.service.j2 says why for each). Tests fail when a rendered or loaded unit rates
above ``UNIT_EXPOSURE``: lower it when the unit gets tighter.
"""

from __future__ import annotations

import re

UNIT_EXPOSURE = 1.9

_OVERALL = re.compile(r"Overall exposure level for \S+: (\d+\.\d+)")


def exposure(security_output: str) -> float | None:
    """The overall score from ``systemd-analyze security UNIT``'s output, or None when it has none."""
    found = _OVERALL.search(security_output)
    return float(found[1]) if found else None
