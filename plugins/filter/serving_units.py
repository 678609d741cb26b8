"""``serving_units``: every systemd unit of a campaign's configs on one host, in each config's start order;
``serving_workers``: a disaggregated config's prefill and decode servers, which a job starts before its
router.

A single-server config has one unit; a disaggregated one a unit per prefill and decode server, then its
router's (``fairbench.campaign.disaggregation.served_units``, which owns the ports and arguments). Runs on
the control node, in the Python running ansible-playbook, which imports fairbench like the modules there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from fairbench.campaign.disaggregation import HostPorts, served_units, worker_units
except ImportError as exc:  # pragma: no cover - only without fairbench
    IMPORT_ERROR: ImportError | None = exc
else:
    IMPORT_ERROR = None


def _host_ports(ports: Mapping[str, Any]) -> HostPorts:
    """The serving role's ``host``, ``port``, ``worker_port``, ``bootstrap_port`` and
    ``router_metrics_port``."""
    if IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            f"the serving filters need fairbench in the Python running ansible-playbook: {IMPORT_ERROR}"
        )
    return HostPorts(
        host=str(ports["host"]),
        port=int(ports["port"]),
        worker_port=int(ports["worker_port"]),
        bootstrap_port=int(ports["bootstrap_port"]),
        router_metrics_port=int(ports["router_metrics_port"]),
    )


def serving_units(configs: Iterable[Mapping[str, Any]], ports: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each config's units (campaign.json's configs), each naming its ``config``."""
    host_ports = _host_ports(ports)
    return [
        {"config": config["name"], **unit} for config in configs for unit in served_units(config, host_ports)
    ]


def serving_workers(config: Mapping[str, Any], ports: Mapping[str, Any]) -> list[dict[str, str]]:
    """A config's prefill and decode servers (``unit``, ``name``, ``url``); none for a single server."""
    return worker_units(config, _host_ports(ports))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"serving_units": serving_units, "serving_workers": serving_workers}
