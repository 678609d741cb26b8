"""A concurrency sweep: for each repeat and level, warm up, measure a closed loop, write the point.

At a level of concurrency C, C workers each send one request at a time and send
the next the moment theirs ends, until the level's prompts are used up. Points
are written one by one as they complete (see results.py), so an interrupted
sweep resumes where it stopped.

Which point comes next is decided from the points already written (``Sweep.next_point``), so a resumed
sweep takes up the same plan: each repeat's listed levels, then (with a search resolution) the probes
that bisect for the highest level meeting the SLO, then (with automatic repeats) further repeats of the
levels whose throughput interval is still wide.
"""

from __future__ import annotations

import math
import os
import platform
import secrets
import time
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from fairbench import __version__
from fairbench.measure.arrivals import achieved_rate, arrival_offsets_s
from fairbench.measure.client import (
    CONNECTION_FAILED,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    STALLED,
    ApiFormat,
    ServerUnreachable,
    StreamClient,
)
from fairbench.measure.client_processes import ClientProcesses, ClientSettings, shares
from fairbench.measure.closed_loop import PreparedRequest
from fairbench.measure.energy import (
    EnergySampler,
    EnergyUnavailable,
    GpuEnergy,
    optional_sampler,
    point_fields,
)
from fairbench.measure.event_loop import LAG_KEYS, collector_paused
from fairbench.measure.gpu_state import point_fields as gpu_state_fields
from fairbench.measure.load_phase import Phase, PhaseResult, drive
from fairbench.measure.machine_load import cpu_times, load_fields
from fairbench.measure.metrics import (
    NS_PER_MS,
    accept_length,
    cache_metrics,
    median,
    percentile,
    point_metrics,
    running_limit,
    slo_metrics,
    spec_metrics,
    steady_window,
    turn_metrics,
)
from fairbench.measure.point_flags import (
    client_flags,
    gpu_flags,
    gpu_observations,
    server_flags,
    server_observations,
)
from fairbench.measure.progress import Progress
from fairbench.measure.records import RequestRecord
from fairbench.measure.repeats import (
    DEFAULT_REPEATS,
    JUDGED_METRIC,
    AutoRepeats,
    Repeats,
    planned,
    repeats_to_json,
    stop_reason,
)
from fairbench.measure.results import TRACE_SHA256, ResultsDir, RunIdentity
from fairbench.measure.results_format import BISECT, LISTED, level_tag, load_of, point_id
from fairbench.measure.server_metrics import (
    METRICS_PATH,
    SAMPLE_INTERVAL_S,
    ServerMetricsSampler,
    role_fields,
)
from fairbench.measure.server_metrics import point_fields as server_fields
from fairbench.measure.slo import SloTarget, search_probe, slo_to_json
from fairbench.measure.trace_replay import TraceReplay, prompt_source
from fairbench.measure.vocabulary import Vocabulary, VocabularyError, explicit, from_model_info
from fairbench.measure.workload import (
    DEFAULT_API,
    DEFAULT_ARRIVAL,
    DEFAULT_BURSTINESS,
    DEFAULT_PROMPTS_PER_LEVEL,
    DEFAULT_WARMUP,
    GENERATED,
    MULTI_TURN,
    PRIMED,
    RANDOM_IDS,
    SHARED_PREFIX,
    LevelCount,
    MultiTurn,
    Prompt,
    PromptSource,
    WorkloadError,
    WorkloadSpec,
    level_count,
)

STREAMS_PER_CLIENT_PROCESS = 128
"""The default number of client processes gives each at most this many streams in flight (see
``default_client_processes``). One process reads one token per network read for about 20-26 us of CPU
(tests/perf/client_scaling.py): 128 streams of 200 tokens/s each, the fastest a GPU server decodes for
one stream, keep it near half of its core, well below point_flags' client_bound share."""

# sglang.bench_serving's name for each API, so its tooling reads our points.
BACKEND_NAMES = {"completions": "sglang-oai", "chat": "sglang-oai-chat", "generate": "sglang"}
REQUEST_RATE = "inf"
"""sglang.bench_serving's ``request_rate`` of every point: its ``--request-rate inf`` (no arrival schedule,
``max_concurrency`` requests in flight) is fairbench's closed loop. SGLang writes the float infinity, which
json.dumps spells ``Infinity``: not JSON. The string "inf" is, and ``float()`` reads it back (as SGLang's
other string value, "trace", shows, the key is a number or a string already)."""
DATASET_NAMES = {RANDOM_IDS: RANDOM_IDS, SHARED_PREFIX: "generated-shared-prefix", MULTI_TURN: MULTI_TURN}
"""sglang.bench_serving's ``--dataset-name`` of each dataset fairbench generates (a file is ``sharegpt``, a
trace its format: ``mooncake``, ``azure``); it has no multi-turn dataset, which keeps fairbench's name."""
DEFAULT_MAX_ERROR_RATE = 0.5
"""The share of a level's requests that may fail before the level is stopped."""


@dataclass(slots=True)
class SweepSpec:
    """Everything that decides what a sweep measures, and how it reaches the server."""

    url: str
    workload: WorkloadSpec
    concurrency: list[int]
    """The closed loop's levels; empty for an open loop, whose levels are ``request_rate``."""
    api: str = DEFAULT_API
    prompts_per_level: LevelCount = DEFAULT_PROMPTS_PER_LEVEL
    """Requests measured per level; given as its spelling (``"10x"``, ``16``), read as one."""
    warmup: LevelCount = DEFAULT_WARMUP
    repeats: Repeats = DEFAULT_REPEATS
    """A fixed count, or automatic repeats (``measure.repeats``)."""
    slo: tuple[SloTarget, ...] = ()
    """The objectives each point is judged against (``metrics.slo_metrics``); none: no SLO figures."""
    request_rate: list[float] = field(default_factory=list)
    """The open loop's levels, requests per second (arrivals.py); empty for a closed loop."""
    arrival: str = DEFAULT_ARRIVAL
    """The open loop's arrivals: ``poisson`` or ``gamma`` (``workload.ARRIVALS``)."""
    burstiness: float = DEFAULT_BURSTINESS
    """The gamma arrivals' shape; 1 is Poisson."""
    max_concurrency: int | None = None
    """The open loop's bound on requests in flight: a request due while this many are waits for one."""
    search_resolution: int | None = None
    """With an SLO: after a repeat's listed levels, bisect between its last level meeting the SLO and the
    first that does not until they are at most this many requests of concurrency apart."""
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    gpus: int | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    read_timeout: float = DEFAULT_READ_TIMEOUT_S
    energy: bool = True
    """Sample GPU energy during each point where NVML is available (see energy.py)."""
    energy_gpus: list[int] | None = None
    """The GPUs whose energy counts, by NVML index; None: every GPU. Like ``energy``, not one of the
    settings: energy is measured beside the point and does not change it, so a resume may differ here."""
    identity: RunIdentity = field(default_factory=RunIdentity)
    """What each point line names as its sweep (``Sweep.identity``); not one of the settings: a resume is
    checked against the identity of the lines already there instead."""
    only_repeats: list[int] | None = None
    """The repeats this call measures (a campaign job's share of them); None: all of them. Not one of the
    settings: the jobs of one config, each measuring its own repeats, write one results directory."""
    extend_repeats: bool = True
    """Whether this call adds automatic repeats to the levels whose interval is wide. A spread campaign's
    job measures its own repeat only: the campaign's queue judges the config's repeats over its jobs."""
    client_processes: int | None = None
    """The processes the client's streams are spread over (client_processes.py); None: chosen by
    ``default_client_processes``. Not one of the settings: how the client is run does not change what it
    sends, and each point records its processes' use."""
    server_metrics: bool = True
    """Scrape the server's ``/metrics`` around every point where it answers (server_metrics.py); not one
    of the settings, as ``energy`` is not."""
    server_metrics_interval_s: float = SAMPLE_INTERVAL_S
    """Seconds between two scrapes while a point runs."""
    role_servers: dict[str, str] = field(default_factory=dict)
    """A disaggregated config's prefill and decode servers, each URL by name (``prefill-0``): each one's
    ``/metrics`` is scraped around every point like the server's, into its ``server_roles``. Not one of
    the settings: measured beside the point (the sweep's server is their router)."""

    def __post_init__(self) -> None:
        self.prompts_per_level = level_count(self.prompts_per_level)
        self.warmup = level_count(self.warmup)
        if self.workload.multi_turn is not None:
            if self.open_loop:
                raise WorkloadError(
                    "request_rate: multi-turn conversations run in a closed loop (concurrency: the "
                    "conversations in flight)"
                )
            if self.workload.sends_token_ids and self.api != "generate":
                raise WorkloadError(
                    f"api: {self.api} answers a token-id conversation's turns with text, which the next "
                    "turn cannot send as ids: use generate (its replies are token ids) or chat (text)"
                )

    def settings(
        self, vocabulary: Vocabulary | None, model: str | None, replay: TraceReplay | None = None
    ) -> dict[str, Any]:
        """The inputs a resumed sweep must share with the original (see ResultsDir.prepare); ``vocabulary``
        is the one the token ids are drawn from, ``model`` the name the OpenAI APIs were asked for (None for
        ``generate``, which names none): a resume against another model is refused; ``replay`` the trace
        replayed, whose window's requests must be the same (``TRACE_SHA256``)."""
        return {
            "api": self.api,
            "model": model,
            # A workload's dict as it was before shared prefixes, where it has none; its cache state as
            # flush_cache was, and named only where it is primed: a directory swept before resumes.
            "workload": {
                key: value
                for key, value in asdict(self.workload).items()
                if key != "cache_state" and not (key in ("shared_prefix", "multi_turn") and value is None)
            },
            "vocabulary": vocabulary.to_json() if vocabulary else None,
            "concurrency": self.concurrency,
            # As text, as sweep.json has always held them: a directory swept before resumes.
            "prompts_per_level": str(self.prompts_per_level),
            "warmup": str(self.warmup),
            "repeats": repeats_to_json(self.repeats),
            "flush_cache": self.workload.flushes,
            **({"cache_state": PRIMED} if self.workload.cache_state == PRIMED else {}),
            "gpus": self.gpus,
            # Only where set: a directory swept before these existed resumes with the same settings.
            **({"slo": slo_to_json(self.slo)} if self.slo else {}),
            **({"search_resolution": self.search_resolution} if self.search_resolution is not None else {}),
            **({TRACE_SHA256: replay.sha256} if replay else {}),
            **(
                {
                    "request_rate": self.request_rate,
                    "arrival": self.arrival,
                    "burstiness": self.burstiness,
                    "max_concurrency": self.max_concurrency,
                }
                if self.open_loop
                else {}
            ),
        }

    @property
    def open_loop(self) -> bool:
        """Whether the levels are request rates (an open loop) rather than concurrencies."""
        return bool(self.request_rate)

    def levels(self) -> list[float]:
        """The listed levels, in order: request rates in an open loop, else concurrencies."""
        return list(self.request_rate) if self.open_loop else list(self.concurrency)

    def in_flight(self, level: float) -> int:
        """The most requests in flight at ``level``: the concurrency, or the open loop's bound."""
        if not self.open_loop:
            return int(level)
        if self.max_concurrency is None:
            raise ValueError("an open loop needs max_concurrency, its bound on requests in flight")
        return self.max_concurrency

    def point_id(self, level: float, repeat: int) -> str:
        return point_id(level, repeat, open_loop=self.open_loop)

    def most_in_flight(self) -> int:
        """The most requests any level has in flight: the size of the client's connection pool."""
        return max(self.in_flight(level) for level in self.levels())


def default_client_processes(most_in_flight: int, cores: int) -> int:
    """The client processes a sweep runs when the user names none: one per STREAMS_PER_CLIENT_PROCESS
    streams of its highest level, at most one fewer than the ``cores`` it may use (one is left to the
    sweep's own process and the server-metrics sampler), at least one."""
    return max(1, min(cores - 1, math.ceil(most_in_flight / STREAMS_PER_CLIENT_PROCESS)))


# The errors that, when every request of a point ended in one, say the server itself is gone or hung, so
# that each point after it would fail the same way (waiting out the read timeout, for a hung one).
_SERVER_GONE = {
    CONNECTION_FAILED: ("failed to connect", "the server is down"),
    STALLED: ("stalled", "the server stopped answering"),
}


def _stop_when_unreachable(pid: str, records: list[RequestRecord], *, left: int) -> None:
    """Raise ServerUnreachable when every request of the point just written failed to connect, or stalled:
    the ``left`` points after it are not tried."""
    for prefix, (failed, state) in _SERVER_GONE.items():
        if records and all(record.error.startswith(prefix) for record in records):
            rest = f"; {left} point(s) not measured" if left else ""
            raise ServerUnreachable(f"{pid}: every request {failed} ({records[0].error}): {state}{rest}")


class Sweep:
    """Runs a SweepSpec against one server into one ResultsDir."""

    def __init__(self, spec: SweepSpec, results: ResultsDir, progress: Progress) -> None:
        self.spec = spec
        self._workers: ClientProcesses | None = None
        self._server_metrics: ServerMetricsSampler | None = None
        self._role_metrics: dict[str, ServerMetricsSampler] = {}
        self.results = results
        self.progress = progress
        # Request ids differ between runs: a resumed sweep must not reuse the id of a
        # request that a killed run left in flight (SGLang rejects duplicate ids).
        self.run_nonce = secrets.token_hex(4)
        self.first_request_at: float | None = None
        """Epoch seconds: when the first point's first request (its warmup's, if any) went out."""
        self.last_point_ended_at: float | None = None
        """Epoch seconds: when the last point written by this call was on disk."""

    def prepare(
        self, workload: PromptSource, api: ApiFormat, level: float, repeat: int, count: int, *, phase: str
    ) -> tuple[list[Prompt], list[PreparedRequest]]:
        """The ``count`` prompts of one point's ``phase`` (as ``Prompt.kept`` keeps them) and their
        requests, made before the clock starts (``prepared``)."""
        tag = level_tag(level, open_loop=self.spec.open_loop)
        prompts = workload.each_prompt(count, level=tag, repeat=repeat, phase=phase)
        return self.prepared(prompts, api, level, repeat, phase=phase)

    def prepared(
        self, prompts: Iterable[Prompt], api: ApiFormat, level: float, repeat: int, *, phase: str
    ) -> tuple[list[Prompt], list[PreparedRequest]]:
        """``prompts`` as kept, with their request ids and bodies, made before the clock starts: one
        request per prompt, or per conversation, its first turn's body made and its later turns' left to
        be made with the replies (``PreparedRequest.later``). Each prompt's tokens are let go once its
        body holds them: a point of long contexts holds its bodies, not its prompts' lists as well."""
        prefix = f"fairbench-{self.run_nonce}-{self.spec.point_id(level, repeat)}-{phase}"
        kept: list[Prompt] = []
        prepared: list[PreparedRequest] = []
        for prompt in prompts:
            rid = f"{prefix}-{prompt.index}"
            light = prompt.kept()
            kept.append(light)
            if prompt.turn == 0:
                prepared.append(PreparedRequest(light, rid, api.body(prompt, rid)))
            else:
                first = prepared[-1]
                prepared[-1] = replace(first, later=(*first.later, (light, rid)))
        return kept, prepared

    def identity(self) -> RunIdentity:
        """The identity this sweep's point lines carry: the spec's, each field it leaves out taken from the
        lines already in the directory (ResultsError when one it gives differs from theirs), and the host
        else this machine's name."""
        identity = self.results.resumed_identity(self.spec.identity)
        return identity if identity.host else replace(identity, host=platform.node() or None)

    def todo(self, *, remeasure_failed: bool = False) -> list[tuple[float, int]]:
        """(level, repeat) of each point known to be measured: the listed levels of each repeat that
        the results directory lacks, and with ``remeasure_failed`` those with failed requests;
        repeat-major, so repeats are spread in time. Search probes and automatic repeats come on top,
        decided as the points come in (``next_point``)."""
        done = self.results.completed_ids()
        if remeasure_failed:
            done -= self.results.failed_ids()
        return [
            (level, repeat)
            for repeat in self.repeats()
            for level in self.spec.levels()
            if self.spec.point_id(level, repeat) not in done
        ]

    def repeats(self) -> list[int]:
        """The repeats this call measures whatever their points show, in order: all of a fixed count, the
        minimum of automatic repeats; a campaign job's share of them."""
        every = range(planned(self.spec.repeats))
        only = self.spec.only_repeats
        return list(every) if only is None else sorted(only)

    def next_point(self, points: list[dict[str, Any]], skip: set[str]) -> tuple[float, int, str] | None:
        """The next point to measure, as (level, repeat, level source), given the directory's
        ``points`` and the ids to ``skip`` (present, or measured by this call already); None when done.

        Repeat by repeat, its listed levels and then its search probes (``search_probe``); then, when this
        call may extend automatic repeats, the listed level with the fewest repeats among those whose
        throughput interval ``stop_reason`` finds too wide (level order breaks ties, so the extra repeats
        go round the levels instead of piling onto one).
        """
        for repeat in self.repeats():
            for level in self.spec.levels():
                if self.spec.point_id(level, repeat) not in skip:
                    return level, repeat, LISTED
            probe = self.search_probe([point for point in points if point.get("repeat") == repeat])
            if probe is not None and self.spec.point_id(probe, repeat) not in skip:
                return probe, repeat, BISECT
        policy = self._extending()
        if policy is None:
            return None
        wanting = []
        for level in self.spec.levels():
            measured = _listed_points(points, level)
            if len(measured) < policy.maximum and stop_reason(_throughputs(measured), policy) is None:
                wanting.append((len(measured), level, 1 + max((p["repeat"] for p in measured), default=-1)))
        if not wanting:
            return None
        _, level, repeat = min(wanting, key=lambda want: want[0])
        return level, repeat, LISTED

    def _extending(self) -> AutoRepeats | None:
        """The automatic repeats this call adds to, None when it adds none."""
        policy = self.spec.repeats
        return policy if isinstance(policy, AutoRepeats) and self.spec.extend_repeats else None

    def search_probe(self, points: list[dict[str, Any]]) -> int | None:
        """The next level to bisect at among one repeat's ``points``, None when the search is over.

        Going up the measured levels, the first whose point did not meet the SLO is F and the one below
        it L (it met, as did every level below it). While F - L exceeds the search resolution, the probe
        is (L + F) // 2. No search when the lowest level failed (no level meets it), when every level
        met it (the highest listed is the answer's lower bound), or before every listed level is in.
        """
        resolution = self.spec.search_resolution
        if resolution is None or not self.spec.slo or self.spec.open_loop:
            return None
        by_level = {int(point["max_concurrency"]): point for point in points}
        if any(level not in by_level for level in self.spec.concurrency):
            return None
        below = None
        for level in sorted(by_level):
            if by_level[level].get("slo_met") is not True:
                return None if below is None else search_probe(below, level, resolution)
            below = level
        return None

    async def run(self, *, resume: bool = False, remeasure_failed: bool = False) -> list[dict[str, Any]]:
        """Measure every point ``next_point`` names, holding the results directory's writer lock; returns
        the point lines written by this call.

        Raises ServerUnreachable when the server cannot be used, and once a point's every request failed
        to connect or stalled: the server is gone or hung, and each point after it would fail the same way.
        """
        with self.results.writer():
            skip = self.results.completed_ids()
            if remeasure_failed:
                skip -= self.results.failed_ids()
            if self.next_point(self.results.points(), skip) is None:
                return []
            return await self._measure_all(skip, resume=resume, remeasure_failed=remeasure_failed)

    async def _measure_all(
        self, skip: set[str], *, resume: bool, remeasure_failed: bool
    ) -> list[dict[str, Any]]:
        spec = self.spec
        written: list[dict[str, Any]] = []
        async with StreamClient(
            spec.url,
            ApiFormat(spec.api, spec.model or ""),
            # Every request in flight has its own connection: one queued in the pool would count as sent.
            concurrency=spec.most_in_flight(),
            api_key=spec.api_key,
            connect_timeout=spec.connect_timeout,
            read_timeout=spec.read_timeout,
        ) as client:
            model = await self.model(client)
            vocabulary = await self.vocabulary(client)
            workload = prompt_source(spec.workload, vocabulary)
            replay = workload if isinstance(workload, TraceReplay) else None
            self.results.prepare(spec.settings(vocabulary, model, replay), resume=resume)
            identity = self.identity()
            self.results.discard_partial()
            self._note_resumed(self.todo(remeasure_failed=remeasure_failed))
            # One sampler for the whole sweep: NVML starts once, not per point; so do the helper processes.
            with ExitStack() as helpers:
                energy = helpers.enter_context(
                    optional_sampler(spec.energy_gpus, self.progress.note, enabled=spec.energy)
                )
                self._workers = self._start_workers(client, helpers)
                self._server_metrics = await self._start_server_metrics(client, helpers)
                self._role_metrics = {
                    name: helpers.enter_context(
                        ServerMetricsSampler(url, client.headers, spec.server_metrics_interval_s)
                    )
                    for name, url in spec.role_servers.items()
                    if spec.server_metrics
                }
                self.first_request_at = time.time()
                points = self.results.points()
                while (step := self.next_point(points, skip)) is not None:
                    level, repeat, source = step
                    point, records = await self._measure_point(
                        client, workload, level, repeat, energy, identity=identity, source=source
                    )
                    point |= self._repeats_stopped(points, point)
                    written.append(self.results.write_point(point, records))
                    self.last_point_ended_at = time.time()
                    skip.add(point["point_id"])
                    points = self.results.points()
                    listed = [
                        spec.point_id(level, repeat) for repeat in self.repeats() for level in spec.levels()
                    ]
                    _stop_when_unreachable(
                        point["point_id"], records, left=sum(pid not in skip for pid in listed)
                    )
        return written

    def _start_workers(self, client: StreamClient, helpers: ExitStack) -> ClientProcesses | None:
        """The client's worker processes, None when it runs in this process alone (one process)."""
        spec = self.spec
        count = spec.client_processes or default_client_processes(
            spec.most_in_flight(), len(os.sched_getaffinity(0))
        )
        if count == 1:
            return None
        settings = ClientSettings(
            spec.url,
            spec.api,
            client.api.model,
            max(shares(spec.most_in_flight(), count)),  # the largest share of streams a worker gets
            spec.api_key,
            spec.connect_timeout,
            spec.read_timeout,
        )
        self.progress.note(f"client: {count} processes")
        return helpers.enter_context(ClientProcesses(count, settings))

    async def _start_server_metrics(
        self, client: StreamClient, helpers: ExitStack
    ) -> ServerMetricsSampler | None:
        """The sampler of the server's ``/metrics``, None when it is not wanted or not served (a note)."""
        if not self.spec.server_metrics:
            return None
        try:
            await client.get(METRICS_PATH)
        except ServerUnreachable as exc:
            self.progress.note(
                f"server metrics not scraped: {exc} (SGLang serves them with --enable-metrics)"
            )
            return None
        sampler = ServerMetricsSampler(client.base_url, client.headers, self.spec.server_metrics_interval_s)
        return helpers.enter_context(sampler)

    def _repeats_stopped(self, points: list[dict[str, Any]], point: dict[str, Any]) -> dict[str, str]:
        """``repeats_stopped`` for a listed level's point after which automatic repeats add none to it:
        why (``stop_reason`` over its repeats so far and this one); nothing while more will come, or for
        a fixed number of repeats, a probe, or a job whose repeats the campaign's queue judges."""
        policy = self._extending()
        if policy is None or point["level_source"] != LISTED:
            return {}
        level = load_of(point)
        earlier = [other for other in _listed_points(points, level) if other["point_id"] != point["point_id"]]
        reason = stop_reason(_throughputs([*earlier, point]), policy)
        return {} if reason is None else {"repeats_stopped": reason}

    async def model(self, client: StreamClient) -> str | None:
        """The model the OpenAI APIs ask for: the user's, else the server's; None for ``generate``, which
        names none (its server need only answer its health check)."""
        if self.spec.api == "generate":
            await client.get("/health")
            return None
        client.api.model = self.spec.model or await client.served_model()
        return client.api.model

    def _note_resumed(self, todo: list[tuple[float, int]]) -> None:
        spec = self.spec
        skipped = len(spec.levels()) * len(self.repeats()) - len(todo)
        if skipped:
            self.progress.note(f"resuming: {skipped} point(s) already in {self.results.points_path}")
        present = {point["point_id"]: point for point in self.results.points()}
        again = [
            present[pid] for pid in (spec.point_id(level, repeat) for level, repeat in todo) if pid in present
        ]
        for kind, points in (
            ("that completed no request", [point for point in again if not point.get("completed")]),
            ("with failed requests", [point for point in again if point.get("completed")]),
        ):
            if points:
                shown = ", ".join(point["point_id"] for point in points)
                self.progress.note(f"measuring again {len(points)} point(s) {kind}: {shown}")

    async def vocabulary(self, client: StreamClient) -> Vocabulary | None:
        """The ids random prompts may use (None when prompts are text): the user's size, else learned from
        the files of the model the server's ``/model_info`` names (see vocabulary.py)."""
        workload = self.spec.workload
        if not workload.sends_token_ids:
            return None
        if workload.vocab_size is not None:
            return explicit(workload.vocab_size, "vocab_size, set by the user")
        try:
            model_info = await client.get_json("/model_info")
        except ServerUnreachable as exc:  # a server or proxy without the route
            raise VocabularyError(
                f"{exc}; random token ids need the served model's vocabulary: give --vocab-size N"
            ) from None
        vocabulary = from_model_info(model_info if isinstance(model_info, dict) else {})
        self.progress.note(
            f"token ids: {vocabulary.size} less {len(vocabulary.excluded)} special, from {vocabulary.source}"
        )
        return vocabulary

    async def _measure_point(
        self,
        client: StreamClient,
        workload: PromptSource,
        level: float,
        repeat: int,
        energy: EnergySampler | None = None,
        *,
        identity: RunIdentity,
        source: str = "listed",
    ) -> tuple[dict[str, Any], list[RequestRecord]]:
        spec = self.spec
        pid = spec.point_id(level, repeat)
        count = workload.measured_count(spec.prompts_per_level, level)
        prompts, requests = self.prepare(workload, client.api, level, repeat, count, phase="measure")
        # A multi-turn workload's warmup is whole conversations too.
        warmups = self.prepare(workload, client.api, level, repeat, spec.warmup.at(level), phase="warmup")
        warmup_count = len(warmups[0])
        cache_state = spec.workload.cache_state
        if spec.workload.flushes:
            status, body = await client.post("/flush_cache")
            if status != 200:
                self.progress.note(f"{pid}: /flush_cache answered HTTP {status}: {body}")
        warmup_failed = 0
        if warmup_count:
            self.progress.start(f"{pid} warmup", warmup_count)
            warmup = await self._loop(
                client,
                warmups[1],
                level,
                workload,
                seed=f"{pid}-warmup",
                max_error_rate=None,
            )
            warmup_failed = sum(not record.success for record in warmup.records)
        primers_failed = 0
        if cache_state == PRIMED:
            primers_failed = await self._prime(client, workload, level, repeat, prompts)
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.progress.start(pid, count)
        with collector_paused():
            # Clocks start after the collection collector_paused runs (tens to hundreds of ms). The energy
            # window opens first: start() waits (milliseconds) for the sampler's first reading; then the
            # server's counters are read (the scrape waited for, a few milliseconds).
            if energy is not None:
                energy.start()
            cpu_before = cpu_times()
            for sampler in (self._server_metrics, *self._role_metrics.values()):
                if sampler is not None:
                    sampler.begin()
            measured = await self._loop(
                client, requests, level, workload, seed=pid, max_error_rate=spec.max_error_rate
            )
            scrapes = self._server_metrics.end() if self._server_metrics is not None else None
            role_scrapes = {name: sampler.end() for name, sampler in self._role_metrics.items()}
            cpu_after = cpu_times()
            gpu_energy = self._stop_energy(energy, pid)
            gpu_states = energy.states() if energy is not None else []
        records = sorted(measured.records, key=lambda record: record.index)
        duration_s = measured.duration_s
        in_flight = spec.in_flight(level)
        closed_loop = not spec.open_loop
        metrics = point_metrics(records, duration_s, in_flight, gpus=spec.gpus, closed_loop=closed_loop)
        objectives = slo_metrics(records, duration_s, spec.slo, gpus=spec.gpus)
        uses = [use.to_json() for use in measured.processes]
        window = steady_window(records, in_flight) if closed_loop else None
        server = server_fields(scrapes, window) if scrapes is not None else {}
        if role_scrapes:
            server["server_roles"] = {
                name: role_fields(taken, window) for name, taken in role_scrapes.items()
            }
        energy_fields = point_fields(gpu_energy, int(metrics["total_output_tokens"]))
        dataset = spec.workload.dataset
        sharegpt = dataset not in GENERATED
        replay = workload if isinstance(workload, TraceReplay) else None
        point: dict[str, Any] = {
            **identity.to_json(),
            "point_id": pid,
            "repeat": repeat,
            "level_source": source,
            # sglang.bench_serving's arguments, as it names them in its result line.
            "tag": None,  # its --tag, a label of the user's; fairbench takes none: the identity names the run
            "backend": BACKEND_NAMES[spec.api],
            # A trace's: its format, as sglang.bench_serving names a Mooncake replay ("mooncake").
            "dataset_name": "sharegpt" if sharegpt else replay.format if replay else DATASET_NAMES[dataset],
            "request_rate": level if spec.open_loop else REQUEST_RATE,
            "max_concurrency": in_flight,
            # Its override of every ShareGPT output length, as fairbench's output_len is; None otherwise.
            "sharegpt_output_len": spec.workload.output_len if sharegpt else None,
            # A trace's requests have their own lengths.
            "random_input_len": None if replay else spec.workload.input_len,
            "random_output_len": None if replay else spec.workload.output_len,
            "random_range_ratio": None if replay else spec.workload.range_ratio,
            **({"trace_speedup": replay.speedup(level)} if replay else {}),
            **metrics,
            **(open_loop_fields(records, spec) if spec.open_loop else {}),
            **objectives,
            # Not asked of a server that completed nothing: it may be gone or hung (each wait a timeout).
            **await self._server_info_fields(client, pid, ask=bool(metrics["completed"])),
            # Beside the server's accept_length: the same figure over this point's own requests (/generate).
            **spec_metrics(records),
            "num_prompts": count,
            "warmup_requests": warmup_count,
            "warmup_failed": warmup_failed,
            **cache_metrics(records, workload.designed_cached_tokens(prompts, cache_state), cache_state),
            **({"primers_failed": primers_failed} if cache_state == PRIMED else {}),
            **(multi_turn_fields(records, turns) if (turns := spec.workload.multi_turn) else {}),
            "stopped_early": measured.stopped_early,
            # With one process, includes the energy sampler thread's CPU (tests/perf/energy_check.py).
            "client_cpu_s": sum(use["cpu_s"] for use in uses),
            # The worst process's: the one whose times are least to be trusted.
            **{key: max(use[key] for use in uses) for key in LAG_KEYS},
            "client_processes": len(uses),
            "client_process_use": uses,
            **server,
            **energy_fields,
            **gpu_state_fields(gpu_states),
            **load_fields(cpu_before, cpu_after),
            "started_at": started_at,
            "fairbench_version": __version__,
        }
        self.progress.finish(
            f"{metrics['completed']}/{count} ok, {metrics['output_throughput']:,.0f} tok/s, "
            f"TTFT p50 {metrics['median_ttft_ms']:.1f} ms, TPOT p50 {metrics['median_tpot_ms']:.2f} ms"
            + (f", {per_joule:.2f} tok/J" if (per_joule := energy_fields.get("output_tokens_per_j")) else "")
            + ("" if not objectives else ", SLO met" if objectives["slo_met"] else ", SLO missed")
            + (" (search probe)" if source == BISECT else "")
            + (" (stopped early: error rate)" if measured.stopped_early else "")
        )
        point["flags"] = [
            *server_flags(point, api=spec.api, closed_loop=closed_loop),
            *client_flags(uses),
            *gpu_flags(point),
        ]
        point["observations"] = [
            *server_observations(point, closed_loop=closed_loop),
            *gpu_observations(point),
        ]
        for flag in point["flags"]:
            self.progress.note(f"{pid}: {flag['flag']}: {flag['reason']}")
        return point, records

    async def _prime(
        self, client: StreamClient, workload: PromptSource, level: float, repeat: int, prompts: list[Prompt]
    ) -> int:
        """Send each group's system prompt of ``prompts`` once, at most the level's requests in flight, so
        that the cache holds them when the point starts; the primers that failed (each with a note)."""
        _, primers = self.prepared(workload.primers(prompts), client.api, level, repeat, phase="prime")
        pid = self.spec.point_id(level, repeat)
        self.progress.start(f"{pid} priming", len(primers))
        phase = Phase(primers, min(self.spec.in_flight(level), len(primers)))
        primed = await self._run(client, phase)
        failed = [record for record in primed.records if not record.success]
        if failed:
            self.progress.note(f"{pid}: {len(failed)} of {len(primers)} primers failed: {failed[0].error}")
        return len(failed)

    async def _loop(
        self,
        client: StreamClient,
        requests: list[PreparedRequest],
        level: float,
        workload: PromptSource,
        *,
        seed: str,
        max_error_rate: float | None,
    ) -> PhaseResult:
        """One phase of a point: a closed loop at concurrency ``level``, or an open loop of arrivals at rate
        ``level``, a trace's (``TraceReplay.offsets_s``) or drawn from ``seed`` (the point's id and phase,
        with the workload's seed), in this process or over the client's worker processes."""
        spec = self.spec
        offsets = None
        if isinstance(workload, TraceReplay):
            offsets = workload.offsets_s(level, len(requests))
        elif spec.open_loop:
            offsets = arrival_offsets_s(
                len(requests),
                level,
                arrival=spec.arrival,
                burstiness=spec.burstiness,
                seed=int.from_bytes(f"{spec.workload.seed}/{seed}".encode(), "big") % 2**63,
            )
        turns = spec.workload.multi_turn
        think_time_s = 0.0 if turns is None else turns.think_time_s
        return await self._run(
            client, Phase(requests, spec.in_flight(level), offsets, max_error_rate, think_time_s)
        )

    async def _run(self, client: StreamClient, phase: Phase) -> PhaseResult:
        """``phase`` in this process or over the client's worker processes."""
        if self._workers is not None:
            return await self._workers.run(phase, self.progress)
        return await drive(client, phase, on_done=self.progress.request_done)

    async def _server_info_fields(self, client: StreamClient, pid: str, *, ask: bool) -> dict[str, Any]:
        """What the server's ``/server_info`` says once the point's loop ended: its speculative decoding
        acceptance, as sglang.bench_serving reads it after its run (``accept_length``), and the most
        requests it runs at once (``server_running_limit``, ``metrics.running_limit``); null where it does
        not say, does not answer (with a note), or is not ``ask``ed (a point where nothing completed)."""
        info = None
        try:
            info = await client.get_json("/server_info") if ask else None
        except ServerUnreachable as exc:
            self.progress.note(f"{pid}: /server_info not read (accept_length): {exc}")
        return {"accept_length": accept_length(info), "server_running_limit": running_limit(info)}

    def _stop_energy(self, energy: EnergySampler | None, pid: str) -> list[GpuEnergy]:
        """The point's GPU energy; none without a sampler or when a reading failed (with a note)."""
        if energy is None:
            return []
        try:
            return energy.stop()
        except EnergyUnavailable as exc:
            self.progress.note(f"{pid}: GPU energy not measured: {exc}")
            return []


def _listed_points(points: list[dict[str, Any]], level: float) -> list[dict[str, Any]]:
    """The points of one listed level, over its repeats (a probe at the same concurrency is none of them)."""
    return [
        point for point in points if load_of(point) == level and point.get("level_source", LISTED) == LISTED
    ]


def _throughputs(points: list[dict[str, Any]]) -> list[float]:
    return [float(point[JUDGED_METRIC]) for point in points if point.get(JUDGED_METRIC) is not None]


def multi_turn_fields(records: list[RequestRecord], turns: MultiTurn) -> dict[str, Any]:
    """A multi-turn point's own fields: its conversations' shape, how many it started (each sends its
    first turn once), how many a failed turn ended before their last (each such one failed once), and the
    figures by turn (``metrics.turn_metrics``)."""
    last = turns.turns - 1
    return {
        "turns": turns.turns,
        "think_time_s": turns.think_time_s,
        "conversations": sum(record.turn == 0 for record in records),
        "conversations_cut": sum(
            not record.success and record.turn is not None and record.turn < last for record in records
        ),
        **turn_metrics(records, turns.turns),
    }


def open_loop_fields(records: list[RequestRecord], spec: SweepSpec) -> dict[str, Any]:
    """An open-loop point's own fields: its arrivals, the rate its sends achieved (``arrivals.achieved_rate``
    over each request's send, its scheduled time plus its send delay; null with fewer than two sends), and
    the send delays' median, p99 and max in ms (how late the client sent: waiting for a slot or for the
    event loop)."""
    sends = sorted(record.start_ns + record.send_delay_ns for record in records)
    delays = sorted(record.send_delay_ns / NS_PER_MS for record in records)
    return {
        "arrival": spec.arrival,
        "burstiness": spec.burstiness,
        "achieved_request_rate": achieved_rate(sends) if len(sends) >= 2 else None,
        "median_send_delay_ms": median(delays),
        "p99_send_delay_ms": percentile(delays, 99),
        "max_send_delay_ms": delays[-1] if delays else 0.0,
    }
