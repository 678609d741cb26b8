"""The report's blocks about the fleet a run ran on: where each config ran (the headline's hosts), the
hardware comparison (every-host), the campaign's overhead per host (fleet.timeline), and what fleet.json
says the comparisons must take into account (accepted and refused host differences, hosts that share a
machine, jobs never finished).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fairbench.fleet.queue import FAILED, OK
from fairbench.fleet.timeline import JobOverhead, Timeline, host_overheads, summary
from fairbench.report.blocks import Alert, Block, Heading, Paragraph, Table
from fairbench.report.differences import AcceptedDifference, PairDifferences, accepted_threats
from fairbench.report.figures import THROUGHPUT
from fairbench.report.flags import FlagMarks
from fairbench.report.fleet_file import Fleet, HostDifference
from fairbench.report.formatting import Label, change, seconds, setting_values
from fairbench.report.load import Run
from fairbench.report.summary import Headline, HostComparison, Level, host_comparisons, loop_of
from fairbench.report.tree import ConfigRun, Job

ACCEPTED_SOURCE = "fleet (accepted)"
"""The source an accepted host difference is listed under in a pair's table."""


# --- where a config ran ----------------------------------------------------------------------------------


def hosts_cell(config: ConfigRun) -> str:
    """The hosts of each of its servers: ``lab1``, ``lab1, lab2`` (repeats on two hosts), ``lab1 + lab2 (2
    nodes)`` (one server over two); ``-`` where it never ran."""
    servers = list(dict.fromkeys(job.hosts for job in config.jobs)) or [(host,) for host in config.hosts]

    def one(hosts: tuple[str, ...]) -> str:
        nodes = max(len(hosts), config.nodes)
        return " + ".join(hosts) + (f" ({nodes} nodes)" if nodes > 1 else "")

    return ", ".join(map(one, servers)) or "-"


def repeats_note(config: ConfigRun) -> str | None:
    """What a config's intervals hold when its repeats ran on more than one host; None when they did not."""
    hosts = config.repeat_hosts
    if len(hosts) < 2:
        return None
    return f"repeats on {len(hosts)} hosts: the interval includes host-to-host variation"


def judged_note(fleet: Fleet | None, config: str) -> str | None:
    """How many repeats the run's queue gave a config under automatic repeats, and why no more (fleet.json's
    ``judged``); None where it judged none (fixed repeats, every-host, or a fleet.json from before)."""
    judged = fleet.judged.get(config) if fleet else None
    if judged is None:
        return None
    return (
        f"Automatic repeats, judged by the run's queue over its jobs (fleet.json): {judged.count} repeat(s); "
        f"why no more: {judged.stopped}."
    )


# --- accepted and refused host differences ----------------------------------------------------------------


def _by_value(values: dict[str, Any]) -> str:
    """``lab1, lab3: `580.95`; lab2: `580.159```: each value once, with its hosts."""
    shown = setting_values(list(values.values()))
    hosts: dict[str, list[str]] = {}
    for host, value in zip(values, shown, strict=True):
        hosts.setdefault(value, []).append(host)
    return "; ".join(f"{', '.join(names)}: `{value}`" for value, names in hosts.items())


def accepted_alert(pairs: Sequence[PairDifferences], label: Label) -> Alert | None:
    """The host differences the campaign accepted that touch any compared pair, with the pairs."""
    found = accepted_threats(pairs)
    if not found:
        return None
    items = [
        f"host fact `{threat.fact}` (pool `{threat.pool}`): {_by_value(threat.values)}. Touches "
        + ", ".join(f"{label(pair.a)} vs {label(pair.b)}" for pair in threat.pairs)
        for threat in found
    ]
    return Alert(
        "threat",
        f"{len(found)} host difference(s) that the campaign accepted (accept_host_differences) touch the "
        "comparisons: the pairs named measured their configs on hosts that differ in them.",
        items,
    )


def _side(values: dict[str, Any]) -> str:
    """One side's value of an accepted difference: the value, or each host's where its hosts differ."""
    if not values:
        return "(absent)"
    shown = setting_values(list(values.values()))
    if len(set(shown)) == 1:
        return shown[0]
    return "; ".join(f"{host}: {value}" for host, value in zip(values, shown, strict=True))


def accepted_rows(accepted: Sequence[AcceptedDifference]) -> list[list[str]]:
    """A pair's accepted host differences as rows of its table of differences."""
    return [
        ["THREAT", ACCEPTED_SOURCE, f"`{item.fact}`", _side(item.values_a), _side(item.values_b)]
        for item in accepted
    ]


def _difference_item(difference: HostDifference) -> str:
    return f"pool `{difference.pool}`, `{difference.fact}`: {_by_value(difference.values)}"


def sharing_alert(fleet: Fleet) -> Alert | None:
    """The hosts found to share a machine (fleet.json's ``machines``), and what the run did about it: a
    note where their jobs ran one at a time, a threat where the campaign declared them isolated; None where
    no host shared."""
    if not fleet.shared_machines:
        return None
    items = [machine.text for machine in fleet.shared_machines]
    if fleet.isolated:
        return Alert(
            "threat",
            "Hosts share a machine (fleet.json), and the campaign declared its hosts isolated "
            "(`isolated_hosts: true`): their jobs ran at the same time, so a figure measured on one may "
            "include the load of another's job.",
            items,
        )
    return Alert(
        "note",
        "Hosts share a machine (fleet.json): the hosts of each took their jobs one at a time, so no job "
        "was measured while another of them ran one (`isolated_hosts: true` in the campaign would run "
        "them at the same time).",
        items,
    )


def fleet_alerts(run: Run) -> list[Alert]:
    """What fleet.json says went wrong: differences in host facts the campaign did not accept, hosts that
    share a machine, and jobs that never ended (their points are missing); none for a run without
    fleet.json."""
    fleet = run.fleet
    if fleet is None:
        return []
    alerts = []
    shared = sharing_alert(fleet)
    if shared is not None:
        alerts.append(shared)
    if fleet.refused:
        alerts.append(
            Alert(
                "threat",
                "The hosts of a pool differ in facts the campaign did not accept (fleet.json): its configs "
                "were measured on hosts that are not equivalent.",
                [_difference_item(difference) for difference in fleet.refused],
            )
        )
    unfinished = [job for job in fleet.jobs if job.state not in (OK, FAILED)]
    if unfinished:
        alerts.append(
            Alert(
                "warning",
                f"{len(unfinished)} job(s) of the run never ran to an end (fleet.json): their points are "
                "missing.",
                [
                    f"`{job.id}` ({job.config}, repeats {', '.join(map(str, job.repeats)) or 'none'}): "
                    f"{job.state}" + (f": {job.reason}" if job.reason else "")
                    for job in unfinished
                ],
            )
        )
    return alerts


# --- the hardware comparison -------------------------------------------------------------------------------


def hardware_blocks(headlines: Sequence[Headline], label: Label, marks: FlagMarks) -> list[Block]:
    """Every-host: each config on each pair of its hosts, output throughput at every level both measured,
    with the marks of the flags that doubt it."""
    comparisons = host_comparisons(headlines)
    blocks: list[Block] = [
        Heading(2, "Hardware"),
        Paragraph(
            "Each config on every pair of the hosts that ran it: output tok/s at every level both measured, "
            "the first host against the second, with the same test as between configs (What differed "
            "lists how the hosts differ). A config that did not finish on a host is left out there."
        ),
    ]
    if not comparisons:
        return [*blocks, Paragraph("No config finished on two hosts.")]
    by_config: dict[str, list[HostComparison]] = {}
    for item in comparisons:
        by_config.setdefault(item.a.result.name, []).append(item)
    for config, items in by_config.items():
        lines = list({id(line): line for item in items for line in (item.a, item.b)}.values())
        pairs = list({(id(item.a), id(item.b)): (item.a, item.b) for item in items}.values())
        found = {(id(item.a), id(item.b), item.level.key): item.comparison for item in items}
        compared: dict[tuple[bool, float], Level] = {item.level.key: item.level for item in items}
        loop = loop_of(compared.values())
        header = [
            loop.symbol,
            *(f"out tok/s, {line.result.host}" for line in lines),
            *(f"{a.result.host} vs {b.result.host}" for a, b in pairs),
        ]
        rows = []
        for key in sorted(compared):
            levels = [{level.key: level for level in line.levels}.get(key) for line in lines]
            rows.append(
                [
                    loop.cell(compared[key]),
                    *(
                        marks.figure(line, level, THROUGHPUT)
                        for line, level in zip(lines, levels, strict=True)
                    ),
                    *(
                        change(found[(id(a), id(b), key)]) if (id(a), id(b), key) in found else "-"
                        for a, b in pairs
                    ),
                ]
            )
        blocks += [Heading(3, config), Table(header, rows, [True] * len(header))]
    left_out = [label(line.result) for line in headlines if not line.result.ok]
    if left_out:
        blocks.append(Paragraph("Left out (did not finish): " + ", ".join(left_out) + "."))
    return blocks


# --- the campaign's overhead -------------------------------------------------------------------------------


OVERHEAD_INTRO = (
    "Per host, the jobs it took part in, in the order they ran (by their timelines in status.json, epoch "
    "seconds on each job's rank-0 host). A job's overhead is the host's time between the previous job's "
    "last point and this job's first request, less this job's server load (unit start to healthy): "
    "(first_request_at - previous last_point_ended_at) - (healthy_at - unit_started_at) "
    "(`fairbench.fleet.timeline`). `-`: the host's first job, or an instant the job did not record. Hosts "
    "that share a machine and took their jobs one at a time (fleet.json) are timed as one: a job's gap runs "
    "from the machine's previous job, whichever of them led it."
)


def _run_jobs(run: Run) -> list[tuple[str, Job]]:
    """Every job of the run with its config, each id once."""
    found: dict[str, tuple[str, Job]] = {}
    for result in run.results:
        for job in result.jobs:
            found.setdefault(job.id, (result.name, job))
    return list(found.values())


def _timed_as(run: Run) -> Callable[[str], str]:
    """What a host's jobs are timed against: the host, or where hosts of one machine took their jobs one
    at a time, the machine (``lab1, lab2 (one machine)``), whose jobs follow each other whichever host
    leads them."""
    owners: dict[str, str] = {}
    if run.fleet is not None and not run.fleet.isolated:
        for machine in run.fleet.shared_machines:
            owners |= dict.fromkeys(machine.hosts, f"{', '.join(machine.hosts)} (one machine)")
    return lambda host: owners.get(host, host)


def run_overheads(run: Run) -> tuple[dict[str, list[JobOverhead]], dict[str, tuple[str, Job]]]:
    """The campaign's overhead of each host's jobs in the order they ran (``fleet.timeline``; hosts of one
    machine that took jobs one at a time as one, ``_timed_as``), and the config and job of each timed job
    id; a job that recorded no timeline is left out of both."""
    timed = [
        (config, job) for config, job in _run_jobs(run) if job.timeline and job.timeline.started is not None
    ]
    timed_as = _timed_as(run)
    by_host: dict[str, list[tuple[str, Timeline]]] = {}
    for _, job in timed:
        for host in dict.fromkeys(map(timed_as, job.hosts)):
            by_host.setdefault(host, []).append((job.id, job.timeline or Timeline()))
    per_host = {host: host_overheads(host_jobs) for host, host_jobs in by_host.items()}
    return per_host, {job.id: (config, job) for config, job in timed}


def overhead_blocks(run: Run) -> list[Block]:
    """The campaign's overhead per host; nothing when no job recorded a timeline (runs from before jobs
    recorded one)."""
    jobs = _run_jobs(run)
    per_host, config_of = run_overheads(run)
    if not config_of:
        return []
    totals = []
    for host, overheads in per_host.items():
        summed = summary(overheads)
        totals.append(
            [
                host,
                str(len(overheads)),
                seconds(summed.mean_s if summed else None),
                seconds(summed.max_s if summed else None),
            ]
        )
    blocks: list[Block] = [
        Heading(2, "Campaign overhead"),
        Paragraph(OVERHEAD_INTRO),
        Table(["host", "jobs", "mean overhead s", "max overhead s"], totals, [False, True, True, True]),
    ]
    for host, overheads in per_host.items():
        rows = [
            [
                f"`{item.job}`",
                config_of[item.job][0],
                " + ".join(config_of[item.job][1].hosts),
                seconds(item.timeline.load_s),
                seconds(item.gap_s),
                seconds(item.overhead_s),
            ]
            for item in overheads
        ]
        header = ["job", "config", "hosts", "server load s", "gap s", "overhead s"]
        blocks += [Heading(3, host), Table(header, rows, [False, False, False, True, True, True])]
    untimed = [job.id for _, job in jobs if job.id not in config_of]
    if untimed:
        blocks.append(
            Paragraph(
                "Not timed (status.json records no timeline for them), so left out: "
                + ", ".join(f"`{job}`" for job in untimed)
                + ". Where one ran between two timed jobs of a host, the later one's overhead includes it."
            )
        )
    return blocks
