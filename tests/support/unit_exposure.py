"""The serving unit's exposure as ``systemd-analyze security`` rates it (0 safest, 10 most exposed).

What keeps it above 0 is what a GPU server needs: the network, the NVIDIA devices, writable executable
memory (roles/serving/templates/config_server.service.j2 says why for each). Tests fail when a rendered or
loaded unit rates above ``UNIT_EXPOSURE``: lower it when the unit gets tighter.
"""

from __future__ import annotations

UNIT_EXPOSURE = 1.9
