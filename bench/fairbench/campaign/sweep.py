"""The sweep a campaign's workload asks for: the one builder of a ``SweepSpec`` from a typed ``Workload``.

``fairbench sweep`` builds its workload from its options, the sweep modules (``hosts.ansible_support``)
from the campaign's; both then get their sweep here, so the two cannot drift apart. Every setting left out
keeps ``SweepSpec``'s default, written there once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from fairbench.campaign.model import Workload
from fairbench.measure.results import RunIdentity
from fairbench.measure.slo import SloTarget
from fairbench.measure.sweep import SweepSpec
from fairbench.measure.workload import CHAT, DEFAULT_RANGE_RATIO, WorkloadSpec

if TYPE_CHECKING:
    # typing's own from Python 3.11; the hosts run 3.10, and annotations are not evaluated.
    from typing_extensions import Unpack


class SweepSettings(TypedDict, total=False):
    """A sweep's settings besides its workload: the ``SweepSpec`` fields of the same names."""

    model: str | None
    api_key: str | None
    gpus: int | None
    energy: bool
    energy_gpus: list[int] | None
    identity: RunIdentity
    extend_repeats: bool
    slo: tuple[SloTarget, ...]
    client_processes: int | None
    max_error_rate: float
    connect_timeout: float
    read_timeout: float
    server_metrics: bool
    server_metrics_interval_s: float


def sweep_spec(
    workload: Workload,
    url: str,
    *,
    range_ratio: float = DEFAULT_RANGE_RATIO,
    repeats: list[int] | None = None,
    **settings: Unpack[SweepSettings],
) -> SweepSpec:
    """The sweep that drives the server at ``url`` with ``workload``; ``range_ratio``: its lengths drawn
    from [ratio x length, length] (a campaign's are exact); ``repeats``: the repeats to measure, None for
    every one (``SweepSpec.only_repeats``). WorkloadError when the lengths break their rules."""
    return SweepSpec(
        url=url,
        workload=WorkloadSpec(
            input_len=workload.input_len,
            output_len=workload.output_len,
            dataset=workload.dataset,
            range_ratio=range_ratio,
            seed=workload.seed,
            as_text=workload.api == CHAT,
            vocab_size=workload.vocab_size,
            shared_prefix=workload.shared_prefix,
            cache_state=workload.cache_state,
            trace=workload.trace,
            multi_turn=workload.multi_turn,
        ),
        concurrency=list(workload.concurrency),
        request_rate=list(workload.request_rate),
        arrival=workload.arrival,
        burstiness=workload.burstiness,
        max_concurrency=workload.max_concurrency,
        api=workload.api,
        prompts_per_level=workload.prompts_per_level,
        warmup=workload.warmup,
        repeats=workload.repeats,
        search_resolution=workload.search_resolution,
        only_repeats=repeats,
        **settings,
    )
