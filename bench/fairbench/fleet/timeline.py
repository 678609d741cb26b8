"""A job's timeline, and the campaign's overhead between one job and the next on a host.

Each job of a campaign run (status.json's ``jobs``, ``fairbench.measure.status``) records four instants,
epoch seconds on its rank-0 host's clock, each null where the job never got there:

- ``unit_started_at``: its server's unit was started;
- ``healthy_at``: the server first answered its health check;
- ``first_request_at``: the sweep sent its first request (a warmup's, if any);
- ``last_point_ended_at``: the sweep's last point was on disk.

A host runs its jobs one after the other. Between one job's last point and the next job's first request
the host measures nothing: part of that time is the next server loading (its unit start to healthy),
which any server needs; the rest (stopping the previous server, fetching its files, claiming the next job,
deploying and starting the unit) is the campaign's overhead, which ``overhead_s`` defines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from fairbench.measure.results_format import TIMELINE_KEYS


@dataclass(frozen=True)
class Timeline:
    """One job's instants (the module docstring); None where it never got there, or did not record it."""

    unit_started_at: float | None = None
    healthy_at: float | None = None
    first_request_at: float | None = None
    last_point_ended_at: float | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Timeline:
        """A timeline object whose values are numbers or null; any other value counts as null."""
        values = {key: data.get(key) for key in TIMELINE_KEYS}
        return cls(
            **{
                key: float(value)
                if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
                else None
                for key, value in values.items()
            }
        )

    @property
    def started(self) -> float | None:
        """When the job began on its host, as far as it recorded: its first instant that is known."""
        return next(
            (value for value in (getattr(self, key) for key in TIMELINE_KEYS) if value is not None), None
        )

    @property
    def load_s(self) -> float | None:
        """healthy_at - unit_started_at: how long its server took to load; None without either."""
        if self.healthy_at is None or self.unit_started_at is None:
            return None
        return self.healthy_at - self.unit_started_at


def gap_s(previous: Timeline, job: Timeline) -> float | None:
    """first_request_at of ``job`` - last_point_ended_at of ``previous``: the host's time between
    measuring one job and the next; None without either."""
    if job.first_request_at is None or previous.last_point_ended_at is None:
        return None
    return job.first_request_at - previous.last_point_ended_at


def overhead_s(previous: Timeline, job: Timeline) -> float | None:
    """The campaign's overhead before ``job``, the job that ran on a host right after ``previous``::

        overhead_k = (first_request_at_k - last_point_ended_at_(k-1)) - (healthy_at_k - unit_started_at_k)

    the gap between one job's last point and the next job's first request on the same host, minus the
    next server's load. None where an instant it needs is missing. The first job on a host has none.
    """
    gap, load = gap_s(previous, job), job.load_s
    return None if gap is None or load is None else gap - load


@dataclass(frozen=True)
class JobOverhead:
    """One job of a host, in the order the host ran them, with what came before it."""

    job: str
    """The job's id (``tp8#r0``)."""
    timeline: Timeline
    gap_s: float | None
    """``gap_s`` from the job before it on the host; None for the host's first job."""
    overhead_s: float | None
    """``overhead_s`` from the job before it on the host; None for the host's first job."""


def host_overheads(jobs: Sequence[tuple[str, Timeline]]) -> list[JobOverhead]:
    """The jobs one host ran (id, timeline), in the order they ran (by ``Timeline.started``, a tie in the
    given order), each with its gap and overhead from the one before it. A timeline without any instant
    cannot be placed: leave it out."""
    ordered = sorted(
        (job for job in jobs if job[1].started is not None), key=lambda job: job[1].started or 0.0
    )
    found = []
    for index, (job, timeline) in enumerate(ordered):
        previous = ordered[index - 1][1] if index else None
        found.append(
            JobOverhead(
                job=job,
                timeline=timeline,
                gap_s=None if previous is None else gap_s(previous, timeline),
                overhead_s=None if previous is None else overhead_s(previous, timeline),
            )
        )
    return found


@dataclass(frozen=True)
class OverheadSummary:
    mean_s: float
    max_s: float
    count: int
    """How many overheads they summarise."""


def summary(overheads: Sequence[JobOverhead]) -> OverheadSummary | None:
    """The mean and the largest of the overheads that are known; None when none is."""
    known = [item.overhead_s for item in overheads if item.overhead_s is not None]
    if not known:
        return None
    return OverheadSummary(mean_s=fmean(known), max_s=max(known), count=len(known))
