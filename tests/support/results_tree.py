"""Results trees as the Ansible layer writes them, from real sweeps against ``fairbench sim``.

For each config of a campaign, as roles/bench/tasks/config.yml does on a host: start the server (the
simulator, with the config's argv and environment), wait for ``/health_generate``, save
``/server_info``, the host facts (``fairbench.hosts.ansible_support.host_facts``) and a unit file with its
``Environment=`` and ``ExecStart=`` lines, run ``python -m fairbench sweep``, stop the server, and write
journal.log and status.json. Nothing is hand-written: every number comes from a sweep.

A ``Deviation`` makes one server differ from what campaign.json declares (an extra flag or variable,
or a fault), which is what the report's fairness section exists to catch.

``build_run`` runs each config once on one host, as campaigns ran before they ran over fleets (its
status.json records no jobs; with ``fleet_keys=False`` campaign.json and status.json lack the keys
fleets added). ``build_fleet_run`` runs a campaign's jobs as a fleet does (fairbench.fleet.plan): under
``spread`` one job per config and repeat, each on the host(s) it is placed on, under ``every-host`` each
config on each host; a config over several nodes starts one simulator per node, rank 0 serving, the
others' files under ``<rank0-host>/<config>/ranks/<host>/``. Each job sweeps its repeats as the
fairbench_sweep module does (``fairbench.hosts.ansible_support.sweep``), and is recorded in its
directory's status.json as the bench role records it (``fairbench.measure.status.record_status``, with its
real timeline on this machine's clock). It writes the run's fleet.json (the queue as it ended, and the
pool's equivalence from the hosts' fleet facts). The jobs run one at a time, so the gap between two jobs of
a host includes the jobs other hosts ran in between.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from fairbench.answers.check import answers_path, write_answers
from fairbench.campaign.disaggregation import HostPorts, served_units
from fairbench.campaign.fleet_facts import REASONS
from fairbench.campaign.load import parse_campaign
from fairbench.campaign.model import Campaign, ServingConfig
from fairbench.fleet.equivalence import check_pools
from fairbench.fleet.plan import PLAY_POOL, Job, plan
from fairbench.fleet.queue import FLEET_FILE, RUNNING, QueueState, new_state
from fairbench.fleet.schedule import predict
from fairbench.hosts import ansible_support
from fairbench.hosts.ansible_support import SweepOutcome, host_facts
from fairbench.hosts.config_run import job_sweep, sweep_times, sweep_workloads
from fairbench.measure.client import ServerUnreachable
from fairbench.measure.results import CAMPAIGN_FILE, ResultsError, RunIdentity
from fairbench.measure.results_format import STATUS_FILE
from fairbench.measure.status import RANKS_DIR, Failure, JobRan, record_status

REPO = Path(__file__).resolve().parents[2]
FAIRBENCH = [sys.executable, "-m", "fairbench"]
# The serving role's serving_environment, which every unit gets before the config's own variables.
SERVING_ENVIRONMENT = {"HF_HOME": "/var/cache/fairbench-serving/huggingface", "PYTHONUNBUFFERED": "1"}
LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Deviation:
    """How one config's server departs from campaign.json."""

    flags: tuple[str, ...] = ()
    """Launch flags it ran with that the campaign does not declare."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables in its unit that the campaign does not declare."""
    fault: str | None = None
    """A ``--sim-fault`` spec: the server fails during the sweep."""


def one_workload(document: dict[str, Any]) -> dict[str, Any]:
    """A campaign document of several workloads with its first alone as its ``workload`` (the demo's
    random ids: the tests of one workload start from it); one of a single workload as it is."""
    named = document.pop("workloads", None)
    if named is not None:
        document["workload"] = next(iter(named.values()))
    return document


def campaign_from(
    path: Path,
    *,
    configs: list[str],
    workload: Mapping[str, Any],
    sim: Mapping[str, Any],
    fleet: Mapping[str, Any] | None = None,
    nodes: Mapping[str, int] | None = None,
) -> Campaign:
    """The campaign file at ``path``, keeping ``configs`` (parents included), with workload and common
    simulator flags overridden: the same configs, measured briefly. ``fleet``: top-level keys to set
    (``placement``, ``accept_host_differences``); ``nodes``: configs whose server spans that many hosts."""
    data = one_workload(yaml.safe_load(path.read_text(encoding="utf-8")))
    data["configs"] = {name: data["configs"][name] for name in configs}
    data["workload"] |= dict(workload)
    data["common"]["sim"] = data["common"].get("sim", {}) | dict(sim)
    data |= dict(fleet or {})
    for name, count in (nodes or {}).items():
        data["configs"][name]["nodes"] = count
    return parse_campaign(yaml.safe_dump(data, sort_keys=False), str(path), path.parent)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int | None, bytes]:
    try:
        with LOOPBACK.open(url, timeout=5) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return error.code, b""
    except OSError:
        return None, b""


def _unit(campaign: Campaign, config: ServingConfig, env: Mapping[str, str], exec_start: list[str]) -> str:
    environment = [f'Environment="{name}={value}"' for name, value in env.items()]
    return "\n".join(
        [
            f"# Campaign {campaign.name}, config {config.name}.",
            "[Unit]",
            f"Description=fairbench {campaign.name}/{config.name}: {campaign.engine} {campaign.model}",
            "",
            "[Service]",
            "Type=exec",
            *environment,
            f"ExecStart={shlex.join(exec_start)}",
            "Restart=no",
            "",
        ]
    )


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports (a disaggregated config's servers take
    consecutive ports, as ``campaign.disaggregation.served_units`` lays them out)."""
    while True:
        first = _free_port()
        if first + count < 65536 and all(_bindable(first + offset) for offset in range(1, count)):
            return first


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Served:
    """A config's server (a disaggregated config's router) as a job sweeps it: its URL and, for a
    disaggregated config, each prefill and decode server's, and what the unit would start."""

    url: str
    exec_start: list[str]
    roles: dict[str, str] = field(default_factory=dict)
    failure: dict[str, str] = field(default_factory=dict)
    server_info: dict[str, Any] = field(default_factory=dict)


@contextmanager
def _serving(
    config: ServingConfig, extra: Sequence[str], env: Mapping[str, str], journal: Path
) -> Iterator[Served]:
    """The config's processes started as its units would be (a disaggregated config's servers, then its
    router, the real sglang-router of this venv), waited on until healthy; stopped when the block ends."""
    port = _free_port()
    servers = len(config.disaggregation.servers) if config.disaggregation else 0
    ports = HostPorts(
        "127.0.0.1",
        port,
        _free_ports(servers) if servers else 0,
        _free_ports(servers) if servers else 0,
        _free_port(),
    )
    units = served_units(config.to_json(), ports)
    processes: list[subprocess.Popen[bytes]] = []
    served = Served(units[-1]["url"], [])
    with journal.open("wb") as output:
        for unit in units:
            if unit["program"] == "router":
                argv = [sys.executable, "-m", "sglang_router.launch_router", *unit["argv"]]
            else:
                argv = [*FAIRBENCH, "sim", *unit["argv"], *extra]
            served.exec_start = argv
            process = subprocess.Popen(
                argv, cwd=REPO, stdout=output, stderr=subprocess.STDOUT, env={**os.environ, **env}
            )
            processes.append(process)
            health = "/readiness" if unit["program"] == "router" else "/health_generate"
            deadline = time.monotonic() + 30
            while _get(unit["url"] + health)[0] != 200:
                if process.poll() is not None or time.monotonic() > deadline:
                    served.failure = {
                        "stage": "health",
                        "reason": f"{unit['url']}{health} never answered 200",
                    }
                    break
                time.sleep(0.05)
            if served.failure:
                break
            if unit["role"] in ("server", "decode") and not served.server_info:
                code, body = _get(unit["url"] + "/server_info")
                served.server_info = json.loads(body) if code == 200 else {}
            if unit["role"] in ("prefill", "decode"):
                served.roles[unit["name"]] = unit["url"]
    try:
        yield served
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=10)


def run_config(
    campaign: Campaign, config: ServingConfig, host: str, config_dir: Path, deviation: Deviation
) -> None:
    """One config on one host: serve, sweep, save every file the Ansible layer saves."""
    config_dir.mkdir(parents=True)
    fault = ["--sim-fault", deviation.fault] if deviation.fault else []
    env = {**SERVING_ENVIRONMENT, **config.env, **deviation.env}
    with _serving(config, [*deviation.flags, *fault], env, config_dir / "journal.log") as served:
        (config_dir / "unit.service").write_text(_unit(campaign, config, env, served.exec_start))
        failure = served.failure
        if not failure:
            (config_dir / "server_info.json").write_text(json.dumps(served.server_info, indent=2) + "\n")
            (config_dir / "host.json").write_text(json.dumps(host_facts(), indent=2) + "\n")
            _answers(campaign, served.url, config_dir, repeat=0)
            identity = RunIdentity(campaign.name, config_dir.parent.parent.name, host, config.name)
            # Every repeat, automatic ones added by the sweep itself, as one server's sweep measures them.
            failure, _, _ = _sweep(
                campaign,
                served.url,
                config_dir,
                identity,
                repeats=None,
                extend_repeats=True,
                roles=served.roles,
            )
    record_status(
        config_dir,
        host=host,
        config=config.name,
        unit=config.unit,
        run_id=config_dir.parent.parent.name,
        failure=Failure.from_json(failure) if failure else None,
    )


def _answers(campaign: Campaign, url: str, config_dir: Path, *, repeat: int) -> None:
    """What the server answers before its sweep, as the job does (fairbench.hosts.config_run)."""
    if campaign.answers is not None and (campaign.answers.probes or campaign.answers.accuracy):
        write_answers(campaign.answers, url, campaign.model, answers_path(config_dir, repeat))


FLEET_KEYS = ("placement", "accept_host_differences", "answers")
CONFIG_FLEET_KEYS = ("nodes", "gpus_per_node", "hosts")
STATUS_FLEET_KEYS = ("hosts", "jobs")
"""The keys campaign.json and status.json gained when campaigns began to run over fleets (and answers,
which came after)."""


def campaign_json(campaign: Campaign, *, fleet_keys: bool = True) -> dict[str, Any]:
    """campaign.json of ``campaign``; without ``fleet_keys``, as it was before campaigns had a placement."""
    data = campaign.to_json()
    if not fleet_keys:
        data = {key: value for key, value in data.items() if key not in FLEET_KEYS}
        data["configs"] = {
            name: {key: value for key, value in config.items() if key not in CONFIG_FLEET_KEYS}
            for name, config in data["configs"].items()
        }
    return data


def build_run(
    results_root: Path,
    campaign: Campaign,
    run_id: str,
    *,
    host: str = "lab1",
    deviations: Mapping[str, Deviation] | None = None,
    skip: tuple[str, ...] = (),
    fleet_keys: bool = True,
) -> Path:
    """``results_root/<campaign>/<run_id>``, every config swept in turn except ``skip`` (left missing);
    ``fleet_keys``: False writes campaign.json and status.json as they were before campaigns had a
    placement."""
    run_dir = results_root / campaign.name / run_id
    run_dir.mkdir(parents=True)
    campaign_text = json.dumps(campaign_json(campaign, fleet_keys=fleet_keys), indent=2) + "\n"
    (run_dir / CAMPAIGN_FILE).write_text(campaign_text)
    for name, config in campaign.configs.items():
        if name not in skip:
            deviation = (deviations or {}).get(name, Deviation())
            run_config(campaign, config, host, run_dir / host / name, deviation)
            if not fleet_keys:
                status_path = run_dir / host / name / STATUS_FILE
                status = json.loads(status_path.read_text())
                kept = {key: value for key, value in status.items() if key not in STATUS_FLEET_KEYS}
                status_path.write_text(json.dumps(kept, indent=2) + "\n")
    return run_dir


# --- a campaign run over a fleet ---------------------------------------------------------------------------

FLEET_FACTS: dict[str, Any] = {
    "gpu_model": "NVIDIA H200",
    "gpu_count": 8,
    "driver": "580.95.05",
    "cuda": "13.0",
    "cuda_toolkit": "12.9",
    "nccl": "2.28.3",
    "sglang": "0.5.23",
    "fairbench": "0.1.0",
    "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
    "cpus": 224,
    "memory_gib": 2016,
    REASONS: {},
}
"""The fleet facts (fairbench.hosts.fleet_facts) every host of a fleet run has unless told otherwise."""


@dataclass(frozen=True)
class Server:
    """One node's process of a job's server: rank 0 serves HTTP, ranks >= 1 only join it."""

    rank: int
    host: str
    directory: Path
    """Where its unit.service and journal.log go: the config's directory, or ranks/<host>/ in it."""
    exec_start: list[str]
    env: dict[str, str]


def _servers(
    campaign: Campaign, config: ServingConfig, hosts: Sequence[str], config_dir: Path, deviation: Deviation
) -> tuple[str, list[Server]]:
    """The URL rank 0 serves, and each node's process, as the serving role starts them on its host: the
    config's argv, with ``--nnodes``, ``--node-rank`` and ``--dist-init-addr`` over several nodes."""
    fault = ["--sim-fault", deviation.fault] if deviation.fault else []
    dist_init = f"127.0.0.1:{_free_port()}"
    env = {**SERVING_ENVIRONMENT, **config.env, **deviation.env}
    servers, url = [], ""
    for rank, host in enumerate(hosts):
        port = _free_port()
        url = url or f"http://127.0.0.1:{port}"
        nodes = (
            ["--nnodes", str(len(hosts)), "--node-rank", str(rank), "--dist-init-addr", dist_init]
            if len(hosts) > 1
            else []
        )
        exec_start = [
            *FAIRBENCH,
            "sim",
            *config.argv,
            *deviation.flags,
            *fault,
            *nodes,
            *("--host", "127.0.0.1", "--port", str(port)),
        ]
        directory = config_dir if rank == 0 else config_dir / RANKS_DIR / host
        servers.append(Server(rank, host, directory, exec_start, env))
    return url, servers


def _sweep_job(
    campaign: Campaign, job: Job, *, host: str, url: str, config_dir: Path
) -> tuple[dict[str, str], dict[str, float | None], list[dict[str, Any]]]:
    """The job's repeats of each workload swept into ``config_dir`` as the fairbench_config_run module
    sweeps them (``_sweep``)."""
    identity = RunIdentity(campaign.name, config_dir.parent.parent.name, host, job.config)
    return _sweep(
        campaign, url, config_dir, identity, repeats=list(job.repeats), extend_repeats=job.extends_repeats
    )


def _sweep(
    campaign: Campaign,
    url: str,
    config_dir: Path,
    identity: RunIdentity,
    *,
    repeats: list[int] | None,
    extend_repeats: bool,
    roles: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], dict[str, float | None], list[dict[str, Any]]]:
    """``repeats`` (None: every one) of each workload swept into ``config_dir`` as fairbench_config_run
    sweeps them (``config_run.sweep_workloads``), a disaggregated config's servers (``roles``) scraped
    beside it: the failure (none, or its stage and reason), when the first request went out and the last
    point ended, and the points as the module returns them (``levels``)."""
    specs = {
        name: replace(
            ansible_support.sweep_spec(
                workload,
                url,
                identity=identity,
                repeats=repeats,
                extend_repeats=extend_repeats,
                slo=campaign.slo,
                # The server's GPUs, as the bench role passes them: per-GPU figures where the counts differ.
                gpus=campaign.configs[identity.config].gpus or None if identity.config else None,
            ),
            role_servers=dict(roles or {}),
        )
        for name, workload in campaign.workloads.items()
    }
    outcomes: dict[str, SweepOutcome] = {}
    try:
        sweep_workloads(specs, config_dir, outcomes, remeasure_failed=False)
    except (ResultsError, ServerUnreachable) as exc:
        return {"stage": "sweep", "reason": f"fairbench sweep failed: {exc}"}, sweep_times(outcomes), []
    swept = job_sweep(outcomes)
    if swept["problems"]:
        return {"stage": "sweep", "reason": swept["problems"][0]}, sweep_times(outcomes), swept["levels"]
    return {}, sweep_times(outcomes), swept["levels"]


def run_job(
    campaign: Campaign, job: Job, hosts: Sequence[str], run_dir: Path, deviation: Deviation
) -> tuple[Failure | None, list[dict[str, Any]]]:
    """One job on ``hosts`` (rank 0 first): start its server's nodes, wait for rank 0's health, save its
    files, sweep the job's repeats, stop the nodes, save their journals, record it in status.json as the
    bench role does after its fetch. Returns its failure (None when it did not fail) and the points its
    sweep returned."""
    config = campaign.configs[job.config]
    config_dir = run_dir / hosts[0] / config.name
    url, servers = _servers(campaign, config, hosts, config_dir, deviation)
    processes = []
    unit_started_at = time.time()
    for server in servers:
        server.directory.mkdir(parents=True, exist_ok=True)
        (server.directory / "unit.service").write_text(_unit(campaign, config, server.env, server.exec_start))
        with (server.directory / "journal.log").open("wb") as output:
            processes.append(
                subprocess.Popen(
                    server.exec_start,
                    cwd=REPO,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **server.env},
                )
            )
    failure: dict[str, str] = {}
    times: dict[str, float | None] = {}
    points: list[dict[str, Any]] = []
    healthy_at = None
    try:
        deadline = time.monotonic() + 30
        while _get(url + "/health_generate")[0] != 200:
            if processes[0].poll() is not None or time.monotonic() > deadline:
                failure = {"stage": "health", "reason": f"{url}/health_generate never answered 200"}
                break
            time.sleep(0.05)
        if not failure:
            healthy_at = time.time()
            code, body = _get(url + "/server_info")
            info = json.loads(body) if code == 200 else {}
            (config_dir / "server_info.json").write_text(json.dumps(info, indent=2) + "\n")
            for server in servers:
                (server.directory / "host.json").write_text(json.dumps(host_facts(), indent=2) + "\n")
            _answers(campaign, url, config_dir, repeat=min(job.repeats))
            failure, times, points = _sweep_job(campaign, job, host=hosts[0], url=url, config_dir=config_dir)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=10)
    failed = Failure.from_json(failure) if failure else None
    timeline = {
        "unit_started_at": unit_started_at,
        "healthy_at": healthy_at,
        "first_request_at": times.get("first_request_at"),
        "last_point_ended_at": times.get("last_point_ended_at"),
    }
    record_status(
        config_dir,
        host=hosts[0],
        config=config.name,
        unit=config.unit,
        run_id=run_dir.name,
        failure=failed,
        job=JobRan(job.id, job.repeats, tuple(hosts), timeline),
    )
    return failed, points


def build_fleet_run(
    results_root: Path,
    campaign: Campaign,
    run_id: str,
    *,
    hosts: Sequence[str] = ("lab1", "lab2"),
    placed: Mapping[str, Sequence[str]] | None = None,
    facts: Mapping[str, Mapping[str, Any]] | None = None,
    deviations: Mapping[str, Deviation] | None = None,
) -> Path:
    """``results_root/<campaign>/<run_id>`` of a campaign run over ``hosts`` (one pool), each job of the
    plan run in its order on the hosts ``placed`` names for its id (rank 0 first), else on those the
    queue's own algorithm gives it (``fairbench.fleet.schedule.predict``); a job the queue adds (automatic
    repeats) on the first hosts it may take.
    ``facts``: fleet facts of a host that differ from FLEET_FACTS; a difference the campaign does not
    accept stops the run, as the fleet's check does (ValueError)."""
    run_dir = results_root / campaign.name / run_id
    run_dir.mkdir(parents=True)
    data = campaign_json(campaign)
    (run_dir / CAMPAIGN_FILE).write_text(json.dumps(data, indent=2) + "\n")
    pools = {PLAY_POOL: list(hosts)}
    facts_by_host = {host: {**FLEET_FACTS, **(facts or {}).get(host, {})} for host in hosts}
    equivalence = check_pools(facts_by_host, pools, campaign.accept_host_differences)
    if not equivalence.ok:
        raise ValueError(equivalence.message())
    jobs = plan(data, pools, placement=campaign.placement)
    queue = new_state(
        placement=campaign.placement,
        pools=pools,
        jobs=jobs,
        excluded={},
        equivalence=equivalence.to_json(),
        sticky={},
        repeats=next(iter(campaign.workloads.values())).repeats,
    )
    # Unless the test places a job, it runs where the queue would put it if every job took as long.
    predicted = {job["id"]: job["hosts"] for led in predict(queue, hosts).values() for job in led}
    state = QueueState(queue)
    index = 0
    while index < len(state.jobs):  # the queue's finish may add jobs (automatic repeats)
        queued = state.jobs[index]
        index += 1
        job = Job.from_json(queued)
        on = tuple((placed or {}).get(job.id, ()) or predicted.get(job.id, ()) or job.hosts[: job.nodes])
        queued |= {"state": RUNNING, "hosts": list(on), "claimed_at": time.time()}
        failed, points = run_job(campaign, job, on, run_dir, (deviations or {}).get(job.config, Deviation()))
        reason = failed.reason if failed else None
        state.finish(job.id, on[0], ok=not failed, reason=reason, now=time.time(), points=points)
    (run_dir / FLEET_FILE).write_text(json.dumps(queue, indent=2) + "\n")
    return run_dir


DEMO = REPO / "campaigns" / "demo.yml"
BRIEF_WORKLOAD = {
    "input_len": 32,
    "output_len": 16,
    "prompts_per_level": "1x",
    "warmup": 0,
    "concurrency": [1, 4],
    "repeats": 2,
}


def brief_run(results_root: Path, run_id: str = "brief") -> Path:
    """A run of the demo campaign's tp8 and ep4 in about a second: two short levels, two repeats each."""
    campaign = campaign_from(
        DEMO, configs=["tp8", "ep4"], workload=BRIEF_WORKLOAD, sim={"sim-time-scale": 0.02}
    )
    return build_run(results_root, campaign, run_id)


def brief_campaign(
    configs: list[str], *, fleet: Mapping[str, Any], nodes: Mapping[str, int] | None = None
) -> Campaign:
    """The demo campaign's ``configs``, measured as briefly as ``brief_run`` measures them, with the
    fleet keys given."""
    return campaign_from(
        DEMO, configs=configs, workload=BRIEF_WORKLOAD, sim={"sim-time-scale": 0.02}, fleet=fleet, nodes=nodes
    )


def fairbench_report(*args: Path | str) -> subprocess.CompletedProcess[str]:
    """``fairbench report ARGS`` as a user runs it, from the repository."""
    return subprocess.run(
        [sys.executable, "-m", "fairbench", "report", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
