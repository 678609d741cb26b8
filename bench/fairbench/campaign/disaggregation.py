"""A disaggregated config: prefill servers and decode servers on GPUs of their own, a router in front.

A config's ``disaggregation`` key (inherited through ``extends``; null in a child makes it one server again):

- ``prefill`` and ``decode`` (both required): ``servers``, how many of that role (default 1), and ``args``,
  SGLang flags over the config's own for each server of the role (``tp-size: 4``, say). fairbench adds
  ``--disaggregation-mode`` with the role, and ``--base-gpu-id`` where the role's args do not set it:
  the servers take the host's GPUs in turn, prefill first, so that no GPU serves two of them;
- ``router``: ``args``, flags of ``sglang-router`` (``fairbench.campaign.router_flags``), for the router
  that fairbench starts in front of them with ``--pd-disaggregation``.

Each server and the router is a systemd unit of its own (``unit``: the config's unit is the router's, so the
sweep's URL and the unit that ends a job are the same as a single server's). Ports are the host's
(``served_units``): the router takes the config's port, server k the serving role's first worker port plus
k, and prefill server i offers its KV cache on the first bootstrap port plus i. The servers are all on the
job's one host: a config's ``nodes`` stays 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fairbench.campaign.checks import bounded, mapping
from fairbench.campaign.findings import Findings, describe, join_path
from fairbench.campaign.flag_values import flags, sglang_args
from fairbench.campaign.model import (
    DECODE,
    PREFILL,
    ROLES,
    ROUTER,
    UNIT_PREFIX,
    ArgValue,
    Disaggregation,
    RoleServer,
    gpus_needed,
    render_flags,
)
from fairbench.campaign.router_flags import check_router_arg
from fairbench.measure.bounds import ROLE_SERVERS

DISAGGREGATION_KEYS = (*ROLES, ROUTER)
GROUP_KEYS = ("servers", "args", "sim")
ROUTER_KEYS = ("args",)
BASE_GPU_ID = "base-gpu-id"
"""SGLang's first GPU of a server: where a role's args do not set it, the servers take the GPUs in turn."""


@dataclass(frozen=True)
class RoleGroup:
    """One role's servers as a config writes them."""

    servers: int
    args: dict[str, ArgValue]
    sim: dict[str, ArgValue]
    """The simulator's flags over the config's, with ``engine: sim`` (a fault in one role, say)."""


@dataclass(frozen=True)
class OwnDisaggregation:
    """A config's ``disaggregation`` entry."""

    prefill: RoleGroup
    decode: RoleGroup
    router_args: dict[str, ArgValue]

    def group(self, role: str) -> RoleGroup:
        return self.prefill if role == PREFILL else self.decode


# --- the campaign file ----------------------------------------------------------------------------------


def _group(findings: Findings, path: str, value: object) -> RoleGroup:
    fields = mapping(findings, path, value, GROUP_KEYS)
    return RoleGroup(
        servers=fields.get("servers", bounded(ROLE_SERVERS), 1),
        args=fields.get("args", sglang_args, {}),
        sim=fields.get("sim", flags, {}),
    )


def router_args(findings: Findings, path: str, value: object) -> dict[str, ArgValue]:
    """The router's flags, each judged against sglang-router's own parser."""
    args = flags(findings, path, value)
    for key, item in args.items():
        check_router_arg(findings, join_path(path, key), key, item)
    return args


def _router(findings: Findings, path: str, value: object) -> dict[str, ArgValue]:
    return mapping(findings, path, value, ROUTER_KEYS).get("args", router_args, {})


def own_disaggregation(findings: Findings, path: str, value: object) -> OwnDisaggregation | None:
    """A config's ``disaggregation``: null for one server (undoing a parent's)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        findings.error(
            path, f"must be a mapping of prefill, decode and router, or null, got {describe(value)}"
        )
        return None
    fields = mapping(findings, path, value, DISAGGREGATION_KEYS)
    for role in ROLES:
        if role not in fields:
            findings.error(
                path,
                f"has no {role} group: a disaggregated config needs prefill servers and decode servers "
                "(servers, args)",
            )
    return OwnDisaggregation(
        prefill=fields.get(PREFILL, _group, RoleGroup(1, {}, {})),
        decode=fields.get(DECODE, _group, RoleGroup(1, {}, {})),
        router_args=fields.get(ROUTER, _router, {}),
    )


# --- expanded ---------------------------------------------------------------------------------------------


def role_unit_name(campaign: str, config: str, role: str, index: int) -> str:
    return f"{UNIT_PREFIX}{campaign}-{config}-{role}-{index}.service"


def disaggregate(
    campaign: str,
    config: str,
    own: OwnDisaggregation,
    *,
    args: Mapping[str, ArgValue],
    model: str,
    sim: Mapping[str, ArgValue] | None,
) -> Disaggregation:
    """The config's servers: each role's args over the config's ``args`` (and its simulator flags over the
    config's ``sim``, None unless the engine is the simulator), GPUs taken in turn."""
    servers: list[RoleServer] = []
    next_gpu = 0
    for role in ROLES:
        group = own.group(role)
        for index in range(group.servers):
            server_args = {**args, **group.args, "disaggregation-mode": role}
            sim_argv = [] if sim is None else render_flags({**sim, **group.sim})
            gpus, _ = gpus_needed(server_args)
            base = server_args.get(BASE_GPU_ID)
            first = base if isinstance(base, int) and not isinstance(base, bool) else next_gpu
            server_args.setdefault(BASE_GPU_ID, first)
            next_gpu = max(next_gpu, first + gpus)
            sglang_argv = ("--model-path", model, *render_flags(server_args))
            servers.append(
                RoleServer(
                    role=role,
                    index=index,
                    unit=role_unit_name(campaign, config, role, index),
                    args=dict(sorted(server_args.items())),
                    sglang_argv=sglang_argv,
                    argv=(*sglang_argv, *sim_argv),
                    gpus=gpus,
                    gpu_ids=tuple(range(first, first + gpus)),
                )
            )
    return Disaggregation(servers=tuple(servers), router_args=dict(own.router_args))


def gpu_sharing_problems(disaggregation: Disaggregation) -> list[str]:
    """Each pair of servers whose GPUs overlap (a role's ``base-gpu-id`` put them there): a GPU serves one
    server of one role."""
    problems = []
    for position, server in enumerate(disaggregation.servers):
        for other in disaggregation.servers[:position]:
            shared = sorted(set(server.gpu_ids) & set(other.gpu_ids))
            if shared:
                problems.append(
                    f"{server.name} and {other.name} would share GPU {', '.join(map(str, shared))}: "
                    "each GPU serves one server (set base-gpu-id apart, or leave it to fairbench)"
                )
    return problems


# --- on the host ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostPorts:
    """The serving role's ports on one host: the router's (the config's), the first prefill or decode
    server's, the first prefill server's KV bootstrap port, and the router's Prometheus port (always on in
    sglang-router, so two routers on one machine need their own)."""

    host: str
    port: int
    worker_port: int
    bootstrap_port: int
    router_metrics_port: int

    def url(self, port: int) -> str:
        return f"http://{self.host}:{port}"


def served_units(config: Mapping[str, Any], ports: HostPorts) -> list[dict[str, Any]]:
    """Every unit of a config (campaign.json's entry) in start order, each with its ``role`` (``server``
    for a single server), its ``program`` (``engine`` or ``router``), the arguments after the program's
    command, the ``url`` it answers on, and the GPUs it takes (``gpu_ids``; empty: the config's)."""
    listen = ["--host", ports.host]
    disaggregation = config.get("disaggregation")
    if not disaggregation:
        return [
            {
                "unit": config["unit"],
                "name": "server",
                "role": "server",
                "program": "engine",
                "argv": [*config["argv"], *listen, "--port", str(ports.port)],
                "url": ports.url(ports.port),
                "gpu_ids": [],
            }
        ]
    units = []
    router_workers: list[str] = []
    prefills = 0
    for number, server in enumerate(disaggregation["servers"]):
        port = ports.worker_port + number
        extra = ["--port", str(port)]
        if server["role"] == PREFILL:
            bootstrap = ports.bootstrap_port + prefills
            prefills += 1
            extra += ["--disaggregation-bootstrap-port", str(bootstrap)]
            router_workers += ["--prefill", ports.url(port), str(bootstrap)]
        else:
            router_workers += ["--decode", ports.url(port)]
        units.append(
            {
                "unit": server["unit"],
                "name": server["name"],
                "role": server["role"],
                "program": "engine",
                "argv": [*server["argv"], *listen, *extra],
                "url": ports.url(port),
                "gpu_ids": server["gpu_ids"],
            }
        )
    router_flags = render_flags(
        {
            key: tuple(value) if isinstance(value, list) else value
            for key, value in disaggregation["router"]["args"].items()
        }
    )
    units.append(
        {
            "unit": config["unit"],
            "name": ROUTER,
            "role": ROUTER,
            "program": ROUTER,
            "argv": [
                "--pd-disaggregation",
                *router_workers,
                *listen,
                "--port",
                str(ports.port),
                "--prometheus-host",
                ports.host,
                "--prometheus-port",
                str(ports.router_metrics_port),
                *router_flags,
            ],
            "url": ports.url(ports.port),
            "gpu_ids": [],
        }
    )
    return units


def worker_units(config: Mapping[str, Any], ports: HostPorts) -> list[dict[str, str]]:
    """A disaggregated config's prefill and decode servers as a job starts them before its router (each
    ``unit``, ``name`` and ``url``); none for a single server."""
    return [
        {"unit": unit["unit"], "name": unit["name"], "url": unit["url"]}
        for unit in served_units(config, ports)
        if unit["role"] in ROLES
    ]
