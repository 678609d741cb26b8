"""The simulator's HTTP server: SGLang's routes, its API-key rules, ``/server_info``, ``/metrics``, faults.

Routes and status codes follow SGLang 0.5.23's ``http_server.py``:

* ``/health`` and ``/health_generate``: 503 while loading (and while the slow-start fault lasts), else
  SGLang's generation check: 200 as soon as the engine produces any token after the call (a one-token
  probe is queued when the engine is idle), 503 if nothing comes within ``SGLANG_HEALTH_CHECK_TIMEOUT``
  seconds (20 by default). SGLang polls for that output once a second; the simulator answers at once.
* ``/generate``, ``/v1/completions``, ``/v1/chat/completions``: see ``api``.
* ``/server_info`` and the deprecated ``/get_server_info``; ``/model_info`` and ``/get_model_info``;
  ``/v1/models`` and ``/v1/models/{model}``; ``/flush_cache`` (GET or POST, 400 while requests run; it
  empties the prefix cache); ``/abort_request`` (POST ``{"rid": ...}`` ends every request whose rid starts
  with it, provided one has exactly that rid; ``{"abort_all": true}`` all of them; a queued one at once,
  a running one with its next token; 200 either way);
  ``/metrics`` (see ``metrics``) only with ``--enable-metrics``, as in SGLang.
* The plain responses (``/health*``, ``/flush_cache``, ``/abort_request``) carry no content-type, as
  Starlette's ``Response`` without a media type sends them.
* With ``--nnodes`` > 1 (see ``nodes``): rank 0 serves all of the above, but ``/health*`` and the
  generation routes answer 503 until every rank has joined, and the model loads only then; a rank >= 1
  serves SGLang's dummy health server instead; a lost rank ends the process with status 1.
* ``--api-key`` guards every route but ``/health*``, ``/ready*`` and ``/metrics*`` (Bearer token, 401
  ``{"error": "Unauthorized"}``); ``/flush_cache`` takes the ``--admin-api-key`` instead when one is set.
* With ``--disaggregation-mode prefill|decode`` the generation routes hand requests to the role in
  ``kv_transfer`` instead of the engine (a prefill server also runs its bootstrap server), the health
  probe is SGLang's fake-transfer one, and ``/metrics`` carries the role's ``engine_type`` and transfer
  metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import IO, Any

from fairbench.sim.api import (
    PARSERS,
    WRITERS,
    ApiError,
    GenerationRequest,
    ResponseWriter,
    ServingInfo,
    StreamHooks,
    compact_json,
    generate_stream_error,
    openai_error,
    plan_output,
    validation_error,
)
from fairbench.sim.args import MODELLED_FIELDS, SimConfig, flag_table, sglang_version
from fairbench.sim.engine import Engine, Scheduler, SimRequest, speed_noise
from fairbench.sim.faults import FaultAction, FaultState
from fairbench.sim.http import HttpExchange, HttpRequest, serve
from fairbench.sim.kv_transfer import PrefillRole, make_role
from fairbench.sim.metrics import (
    CONTENT_TYPE,
    Disaggregated,
    MetricsSource,
    QueueTimes,
    RequestCounters,
    render,
)
from fairbench.sim.nodes import Rendezvous, follow
from fairbench.sim.outputs import OutputModel, repetitiveness
from fairbench.sim.prefix_cache import PrefixCache

HEALTH_CHECK_TIMEOUT_S = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
FLUSH_CACHE_DONE = (
    b"Cache flushed.\nPlease check backend logs for more details. "
    b"(When there are running or waiting requests, the operation will not be performed.)\n"
)

# A replica's prefix cache holds at most its share of the KV pool, as SGLang's does; without
# --max-total-tokens the simulator's pool is notional (see max_total_num_tokens), so this caps it: some MB.
DEFAULT_PREFIX_CACHE_TOKENS = 1 << 18
# SGLang's scheduler reserves a few tokens of a request's length (tp_worker: max_req_len - 5).
RESERVED_INPUT_TOKENS = 5
# /server_info's CUDA graph phases, each with its capture time and memory (0 here: nothing is captured).
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")

Endpoint = Callable[[HttpRequest, HttpExchange], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Route:
    methods: tuple[str, ...]
    endpoint: Endpoint
    admin_optional: bool = False
    """SGLang's ``AuthLevel.ADMIN_OPTIONAL``: the admin key, when set, replaces the API key."""


class _LoopClock:
    """The engine's clock on the running asyncio loop (whose ``call_at`` also takes ``*args``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def time(self) -> float:
        return self._loop.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        self._loop.call_at(when, callback)


class _DiscardTokens:
    """The health probe's sink: its token only has to exist."""

    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        pass


class SimServer:
    def __init__(self, config: SimConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        cache_tokens = min(self.replica_kv_pool_tokens, DEFAULT_PREFIX_CACHE_TOKENS)
        schedulers = [
            Scheduler(config.model, config.limits, PrefixCache(cache_tokens)) for _ in range(config.dp_size)
        ]
        self.queue_times = QueueTimes()
        self.engine = Engine(
            schedulers,
            _LoopClock(loop),
            config.time_scale,
            config.decode_log_interval,
            speed_noise(config.noise_pct, config.seed),
            on_queue_exit=self.queue_times.observe,
        )
        self.faults = FaultState(config.faults, config.seed or 0)
        eos_token_id = config.checkpoint.eos_token_id
        speculation = config.model.speculation
        self.info = ServingInfo(
            context_length=config.context_length,
            eos_token_id=config.profile.eos_token_id if eos_token_id is None else eos_token_id,
            natural_output_tokens=config.profile.natural_output_tokens,
            weight_version=config.weight_version,
            default_include_usage=config.stream_response_default_include_usage,
            enable_metrics=config.enable_metrics,
            enable_cache_report=config.enable_cache_report,
            spec_num_draft_tokens=speculation.num_draft_tokens if speculation is not None else None,
        )
        self.outputs = OutputModel(config.numerics, config.faults.diverge_after)
        """What every response says: the numerics family's tokens, the diverge-after fault's."""
        self.started_at = loop.time()
        self.loaded = False
        self.requests_received = 0
        self.counters = RequestCounters()
        self.active: dict[str, tuple[SimRequest, ResponseWriter]] = {}
        """Requests being generated, by rid: what ``/abort_request`` can reach."""
        self.rendezvous: Rendezvous | None = None
        """Rank 0's rendezvous with the other nodes, when the server spans several."""
        self.disaggregation = make_role(config.disaggregation, self.engine, loop, config.time_scale)
        """With ``--disaggregation-mode prefill|decode``, what takes generation requests in instead of the
        engine (``kv_transfer``)."""
        # Line-buffered so a crash (the crash-after fault) loses no finished request; closed on shutdown.
        self.trace: IO[str] | None = None
        if config.trace_path:
            self.trace = open(config.trace_path, "a", buffering=1)  # noqa: SIM115
        self.routes: dict[str, Route] = {
            "/health": Route(("GET",), self.health),
            "/health_generate": Route(("GET",), self.health),
            "/generate": Route(("POST", "PUT"), self.generation_endpoint("generate")),
            "/v1/completions": Route(("POST",), self.generation_endpoint("completions")),
            "/v1/chat/completions": Route(("POST",), self.generation_endpoint("chat")),
            "/server_info": Route(("GET",), self.server_info),
            "/get_server_info": Route(("GET",), self.server_info),
            "/model_info": Route(("GET",), self.model_info),
            "/get_model_info": Route(("GET",), self.model_info),
            "/v1/models": Route(("GET",), self.list_models),
            "/flush_cache": Route(("GET", "POST"), self.flush_cache, admin_optional=True),
            "/abort_request": Route(("POST",), self.abort_request, admin_optional=True),
        }
        if config.enable_metrics:
            self.routes["/metrics"] = Route(("GET",), self.metrics)

    def finish_loading(self) -> None:
        self.loaded = True
        self.engine.start()

    # --- routing and auth -------------------------------------------------------------------------------

    async def handle(self, request: HttpRequest, exchange: HttpExchange) -> None:
        route = self.routes.get(request.path)
        if route is None and request.path.startswith("/v1/models/"):
            route = Route(("GET",), self.retrieve_model)
        # SGLang's API-key middleware runs before routing: an unknown path needs the key too.
        refusal = self._auth_refusal(request, admin_optional=route is not None and route.admin_optional)
        if refusal is not None:
            exchange.respond(
                refusal, compact_json({"error": "Unauthorized" if refusal == 401 else "Forbidden"})
            )
            return
        if route is None:
            exchange.respond(404, b'{"detail":"Not Found"}')
            return
        if request.method not in route.methods:
            exchange.respond(405, b'{"detail":"Method Not Allowed"}')
            return
        await route.endpoint(request, exchange)

    def _auth_refusal(self, request: HttpRequest, admin_optional: bool) -> int | None:
        """SGLang's ``decide_request_auth``: the status to refuse with, or None to allow."""
        path = request.path
        if request.method == "OPTIONS" or path.startswith(("/health", "/ready", "/metrics")):
            return None
        key = self.config.api_key
        if admin_optional and self.config.admin_api_key:
            key = self.config.admin_api_key
        if not key:
            return None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and secrets.compare_digest(token.encode(), key.encode()):
            return None
        return 401

    # --- health -----------------------------------------------------------------------------------------

    async def health(self, request: HttpRequest, exchange: HttpExchange) -> None:
        slow_start_over = self.loop.time() >= self.started_at + self.config.faults.slow_start_s
        if not (self.loaded and slow_start_over):
            exchange.respond(503, content_type=None)
            return
        output: asyncio.Future[None] = self.loop.create_future()

        def produced() -> None:
            if not output.done():
                output.set_result(None)

        self.engine.on_next_output(produced)
        if not (self.engine.num_running or self.engine.num_waiting):
            # In PD mode SGLang's probe goes to the fake bootstrap host: a decode server takes it prefilled.
            self.engine.submit(
                SimRequest(
                    prompt_tokens=1,
                    output_limit=1,
                    sink=_DiscardTokens(),
                    counted=False,
                    prefilled=self._role_is("decode"),
                )
            )
        try:
            await asyncio.wait_for(output, HEALTH_CHECK_TIMEOUT_S)
        except asyncio.TimeoutError:
            exchange.respond(503, content_type=None)
            return
        exchange.respond(200, content_type=None)

    # --- generation -------------------------------------------------------------------------------------

    def generation_endpoint(self, api: str) -> Endpoint:
        async def endpoint(request: HttpRequest, exchange: HttpExchange) -> None:
            try:
                self._serve_generation(api, request, exchange)
            except ApiError as error:
                exchange.respond(error.status, compact_json(error.body))

        return endpoint

    def _serve_generation(self, api: str, request: HttpRequest, exchange: HttpExchange) -> None:
        rendezvous = self.rendezvous
        if rendezvous is not None and not rendezvous.complete:
            # SGLang has no API before its nodes meet; the simulator listens already, and refuses.
            message = (
                f"Service unavailable: {rendezvous.joined_nodes} of {rendezvous.settings.nnodes} nodes "
                "have joined"
            )
            if api == "generate":
                raise ApiError(503, {"error": {"message": message}})
            raise openai_error(message, "ServiceUnavailableError", 503)
        content_type = request.headers.get("content-type")
        if api != "generate" and _media_type(content_type or "") != "application/json":
            raise validation_error("Unsupported Media Type: Only 'application/json' is allowed")
        if api == "generate" and content_type is not None and not _is_json_media(content_type):
            # FastAPI hands a body of another media type over as bytes, which GenerateReqInput refuses.
            raise validation_error("body: Input should be a dictionary or an instance of GenerateReqInput")
        try:
            body = json.loads(request.body)
        except ValueError as exc:
            raise validation_error(f"JSON decode error: {exc}") from None
        if not isinstance(body, dict):
            raise validation_error("Input should be a valid dictionary or object to extract fields from")
        action = self.faults.on_generation_request()
        if action is FaultAction.CRASH:
            print(
                f"fairbench sim: fault crash-after={self.config.faults.crash_after}: crashing",
                file=sys.stderr,
            )
            os._exit(1)
        if action is FaultAction.HANG:
            print(
                f"fairbench sim: fault hang-after={self.config.faults.hang_after}: hanging", file=sys.stderr
            )
            self.engine.halt()
        if action is FaultAction.HTTP_500:
            raise openai_error(
                "Internal server error: simulated fault http-500-rate", "InternalServerError", 500
            )
        generation = PARSERS[api](body, self.info)
        writer_type = WRITERS[api]
        try:
            output_limit, ends_on_eos = plan_output(generation, self.info)
        except ValueError as exc:
            if api == "generate" and generation.stream:
                exchange.start_stream()
                exchange.end_stream(generate_stream_error(str(exc)))
                return
            if api == "generate":
                raise ApiError(400, {"error": {"message": str(exc)}}) from None
            raise openai_error(str(exc)) from None
        self.requests_received += 1
        writer = writer_type(
            request=generation,
            info=self.info,
            exchange=exchange,
            ends_on_eos=ends_on_eos,
            tokens=self.outputs.response(generation.prompt, generation.query),
            hooks=StreamHooks(
                malformed=self._malformed_hook(), finished=self._finished, record_times=self.trace is not None
            ),
        )
        speculation = self.config.model.speculation
        accept_length = 0.0
        if speculation is not None:
            # A draft model guesses a prompt that repeats itself better (outputs.repetitiveness).
            accept_length = speculation.accept_length_for(repetitiveness(generation.prompt))
        decode = self._role_is("decode")
        sim_request = SimRequest(
            prompt_tokens=generation.prompt_tokens,
            # A prefill server computes the first token only; a decode server none of the prompt, and,
            # its radix cache off as SGLang turns it off there, caches nothing.
            output_limit=min(output_limit, 1) if self._role_is("prefill") else output_limit,
            sink=writer,
            prompt=None if decode else generation.prompt,
            output=None if decode else writer.output_tokens,
            accept_length=accept_length,
            prefilled=decode,
        )
        self.active[generation.rid] = (sim_request, writer)
        exchange.on_disconnect = lambda: self._disconnected(sim_request, writer)
        if generation.stream and writer.headers_before_first_token:
            exchange.start_stream()
        if self.disaggregation is not None:
            self.disaggregation.admit(generation, sim_request, writer)
        else:
            self.engine.submit(sim_request)

    def _role_is(self, mode: str) -> bool:
        return self.config.disaggregation is not None and self.config.disaggregation.mode == mode

    def _disconnected(self, sim_request: SimRequest, writer: ResponseWriter) -> None:
        """The client went away before its response was complete: SGLang aborts the request."""
        self.engine.abort(sim_request)
        self._forget(writer)
        self.counters.observe_aborted()
        self._count_finished(writer, sim_request)

    def _forget(self, writer: ResponseWriter) -> None:
        rid = writer.request.rid
        if rid in self.active and self.active[rid][1] is writer:
            del self.active[rid]

    def _malformed_hook(self) -> Callable[[bytes], bytes] | None:
        if self.config.faults.malformed_every is None:
            return None

        def maybe_break(event: bytes) -> bytes:
            # Cut the JSON in the middle but keep the SSE line ending, as a truncated write would look.
            return event[: len(event) // 2] + b"\n\n" if self.faults.next_event_is_malformed() else event

        return maybe_break

    def _count_finished(self, writer: ResponseWriter, sim_request: SimRequest) -> None:
        """SGLang's ``observe_one_finished_request``, which sees an aborted request only if it had left the
        queue (one aborted while waiting ends without a finished output). Its end-to-end latency runs from
        the writer's creation, SGLang's ``created_time``, to now."""
        if sim_request.admitted:
            generation = writer.request
            self.counters.observe_finished(
                generation.stream,
                generation.prompt_tokens,
                writer.completion_tokens,
                sim_request.cached_tokens,
                (time.perf_counter_ns() - writer.received_ns) / 1e9,
            )

    def _finished(self, writer: ResponseWriter, sim_request: SimRequest) -> None:
        self._forget(writer)
        self._count_finished(writer, sim_request)
        generation: GenerationRequest = writer.request
        if self.trace is not None:
            record = {
                "rid": generation.rid,
                "api": generation.api,
                "stream": generation.stream,
                "prompt_tokens": generation.prompt_tokens,
                "completion_tokens": writer.completion_tokens,
                "received_ns": writer.received_ns,
                "event_ns": writer.event_ns,
                "event_tokens": writer.event_tokens,
            }
            self.trace.write(json.dumps(record, separators=(",", ":")) + "\n")

    # --- information endpoints --------------------------------------------------------------------------

    async def server_info(self, request: HttpRequest, exchange: HttpExchange) -> None:
        exchange.respond(200, compact_json(self.server_info_body()))

    @property
    def max_total_num_tokens(self) -> int:
        """The KV pool's size in tokens: ``--max-total-tokens`` when given, else (the simulated model never
        runs out of KV cache) room for every running request at full context."""
        config = self.config
        given = config.effective_args.get("max_total_tokens")
        if given:
            return int(given)
        return config.limits.max_running_requests * config.dp_size * config.context_length

    @property
    def replica_kv_pool_tokens(self) -> int:
        """One data-parallel replica's share of the KV pool: what its prefix cache may hold and what its
        ``sglang:token_usage`` is a fraction of."""
        return self.max_total_num_tokens // self.config.dp_size

    def server_info_body(self) -> dict[str, Any]:
        """``build_server_info`` + start-up time + per-DP internal states + version, plus the ``sim`` part."""
        config = self.config
        capacity = self.max_total_num_tokens
        load_seconds = config.load_seconds
        scheduler_startup = {
            "load_weight": load_seconds,
            "kv_cache_allocation": 0.0,
            "scheduler_e2e": load_seconds,
            "cuda_graph": dict.fromkeys(GRAPH_PHASES, 0.0),
        }
        # The scheduler's reply leaves out the signal handler, which it could not serialize.
        args = {key: value for key, value in config.effective_args.items() if key != "custom_sigquit_handler"}
        internal_states = [
            {
                **args,
                "world_size": config.effective_args["tp_size"] * config.dp_size,
                "startup_time": scheduler_startup,
                "effective_max_running_requests_per_dp": config.limits.max_running_requests,
                "last_gen_throughput": load.gen_throughput,
                "memory_usage": {
                    "weight": 0.0,
                    "kvcache": 0.0,
                    "startup_available": 0.0,
                    "token_capacity": capacity,
                    "token_capacity_swa": None,
                    "graph": dict.fromkeys(GRAPH_PHASES, 0.0),
                },
                "decode_cuda_graph_bs": [],
                "decode_cuda_graph_memory_gb": 0.0,
                # SGLang's scheduler adds it under speculative decoding once a decode log interval ended.
                **(
                    {"avg_spec_accept_length": load.avg_spec_accept_length}
                    if load.avg_spec_accept_length is not None
                    else {}
                ),
            }
            for load in self.engine.replica_loads()
        ]
        return {
            **config.effective_args,
            "launch_command": config.launch_command,
            "status": "ready" if self.loaded else "starting",
            "max_total_num_tokens": capacity,
            "max_req_input_len": min(config.context_length - 1, capacity - 1) - RESERVED_INPUT_TOKENS,
            "startup_time": {**scheduler_startup, "tokenizer_e2e": load_seconds},
            "hicache_object_layout": {
                "enabled": False,
                "backend": None,
                "page_size": config.effective_args.get("page_size") or 1,
                "hicache_object_layout": {"pools": []},
                "reason": "Hierarchical cache is disabled",
            },
            "kv_events": None,
            "internal_states": internal_states,
            "version": sglang_version(),
            "frontend": "python",
            "sim": self.sim_description(),
        }

    def sim_description(self) -> dict[str, Any]:
        config = self.config
        model = config.model
        modelled = sorted(
            next(flag for flag in option["option_strings"] if flag.startswith("--"))
            for option in flag_table()["options"]
            if option["dest"] in MODELLED_FIELDS
        )
        return {
            "profile": config.profile.name,
            "profile_description": config.profile.description,
            "layout": model.layout,
            "performance_model": {
                "t0_ms": model.cost.t0_s * 1000,
                "k_ms": model.cost.k_s * 1000,
                "prefill_tokens_per_s": model.cost.prefill_tokens_per_s,
                "prefill_forward_ms": model.cost.prefill_forward_s * 1000,
                "decode_cuda_graph_max_bs": model.cuda_graph_max_bs,
                "eager_extra_ms": model.eager_extra_s * 1000,
                "tokens_per_step": model.tokens_per_step,
                "speculation": asdict(model.speculation) if model.speculation else None,
            },
            "scheduler": {**asdict(config.limits), "dp_size": config.dp_size},
            "time_scale": config.time_scale,
            "noise_pct": config.noise_pct,
            "load_seconds": config.load_seconds,
            "faults": config.faults.describe(),
            "numerics_family": config.numerics.describe(),
            "nodes": {
                "nnodes": config.nodes.nnodes,
                "node_rank": config.nodes.node_rank,
                "joined": self.rendezvous.joined_nodes if self.rendezvous is not None else 1,
            },
            "disaggregation": config.disaggregation.describe() if config.disaggregation else None,
            "modelled_flags": modelled,
            "not_modelled_flags": config.not_modelled,
        }

    async def model_info(self, request: HttpRequest, exchange: HttpExchange) -> None:
        config = self.config
        body = {
            "model_path": config.model_path,
            "served_model_name": config.served_model_name,
            "tokenizer_path": config.effective_args["tokenizer_path"] or config.model_path,
            "is_generation": True,
            "preferred_sampling_params": config.effective_args["preferred_sampling_params"],
            "weight_version": config.weight_version,
            "load_format": config.effective_args["load_format"],
            "reasoning_parser": config.effective_args["reasoning_parser"],
            "tool_call_parser": config.effective_args["tool_call_parser"],
            "disaggregation_mode": config.effective_args["disaggregation_mode"],
            "has_image_understanding": False,
            "has_audio_understanding": False,
            # From the model directory's config.json; null when --model-path is no local directory.
            "model_type": config.checkpoint.model_type,
            "architectures": config.checkpoint.architectures,
        }
        exchange.respond(200, compact_json(body))

    def _model_card(self, name: str) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": self.config.context_length,
        }

    async def list_models(self, request: HttpRequest, exchange: HttpExchange) -> None:
        body = {"object": "list", "data": [self._model_card(self.config.served_model_name)]}
        exchange.respond(200, compact_json(body))

    async def retrieve_model(self, request: HttpRequest, exchange: HttpExchange) -> None:
        name = request.path.removeprefix("/v1/models/")
        if name != self.config.served_model_name:
            error = {
                "message": f"The model '{name}' does not exist",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found",
            }
            exchange.respond(404, compact_json({"error": error}))
            return
        exchange.respond(200, compact_json(self._model_card(name)))

    async def flush_cache(self, request: HttpRequest, exchange: HttpExchange) -> None:
        if self.engine.num_running or self.engine.num_waiting:
            exchange.respond(400, b"Flush cache failed.\n", content_type=None)
            return
        self.engine.flush_prefix_caches()
        exchange.respond(200, FLUSH_CACHE_DONE, content_type=None)

    async def abort_request(self, request: HttpRequest, exchange: HttpExchange) -> None:
        """``TokenizerManager.abort_request`` with one tokenizer worker: a rid that names no request in
        flight is dropped (an empty one too, without ``abort_all``); else the scheduler ends every request
        whose rid starts with it (see ``Engine.stop``). Either way the answer is 200."""
        try:
            body = json.loads(request.body or b"{}")
        except ValueError as exc:
            exchange.respond(400, compact_json(validation_error(f"JSON decode error: {exc}").body))
            return
        if not isinstance(body, dict):
            exchange.respond(400, compact_json(validation_error("Input should be a valid dictionary").body))
            return
        given = body.get("rid")
        rid = given if isinstance(given, str) else ""
        abort_all = body.get("abort_all") is True
        # A request already aborted and not yet ended is not aborted again (nor counted again).
        if abort_all or (rid in self.active and not self.active[rid][1].aborted):
            self.counters.observe_aborted()
            for key, (sim_request, writer) in list(self.active.items()):
                if (abort_all or key.startswith(rid)) and not writer.aborted:
                    writer.abort(sim_request, now=self.engine.stop(sim_request))
        exchange.respond(200, content_type=None)

    # --- metrics ----------------------------------------------------------------------------------------

    async def metrics(self, request: HttpRequest, exchange: HttpExchange) -> None:
        exchange.respond(200, self.metrics_text().encode(), CONTENT_TYPE)

    def metrics_text(self) -> str:
        role = self.disaggregation
        return render(
            MetricsSource(
                model_name=self.config.served_model_name,
                kv_pool_tokens=self.replica_kv_pool_tokens,
                engine=self.engine,
                counters=self.counters,
                queue_times=self.queue_times,
                disaggregated=(
                    Disaggregated(role.settings.mode, role.queues(), role.counters) if role else None
                ),
            )
        )


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _is_json_media(content_type: str) -> bool:
    """FastAPI's test for a JSON body: ``application/json`` or any ``+json`` subtype."""
    media = _media_type(content_type)
    return media.endswith("/json") or media.endswith("+json")


async def serve_forever(config: SimConfig) -> int:
    """Listen, load for ``--sim-load-seconds``, serve until SIGINT or SIGTERM; returns the exit status.

    On a rank >= 1 of a multi-node server: join rank 0 and answer health checks (``nodes.follow``). On
    rank 0: also wait for the other ranks, load once all have joined, and end with status 1 when one
    is lost (after SIGTERM the ranks are told to shut down and the status is 0)."""
    nodes = config.nodes
    if nodes.node_rank > 0:
        return await follow(nodes, config.host, config.port, config.load_seconds)
    loop = asyncio.get_running_loop()
    try:
        server = SimServer(config, loop)
    except OSError as exc:  # the trace file is all it opens
        _start_error(f"--sim-trace: cannot append to {config.trace_path}: {exc.strerror or exc}")
        return 1
    try:
        listener = await serve(server.handle, config.host, config.port)
    except OSError as exc:
        flags = "--host" if isinstance(exc, socket.gaierror) else "--host/--port"
        _start_error(f"{flags}: cannot listen on {config.host}:{config.port}: {exc.strerror or exc}")
        return 1
    status: asyncio.Future[int] = loop.create_future()

    def end(code: int) -> None:
        if not status.done():
            status.set_result(code)

    role = server.disaggregation
    if isinstance(role, PrefillRole):
        try:
            await role.listen(config.host)
        except OSError as exc:
            address = f"{config.host}:{role.settings.bootstrap_port}"
            _start_error(
                f"--disaggregation-bootstrap-port: cannot listen on {address}: {exc.strerror or exc}"
            )
            listener.close()
            return 1
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, end, 0)
    print(
        f"fairbench sim: SGLang {sglang_version()} simulator, profile {config.profile.name}, "
        f"layout {config.model.layout}, Uvicorn running on http://{config.host}:{config.port}",
        file=sys.stderr,
        flush=True,
    )

    def load() -> None:
        loop.call_later(config.load_seconds, _announce_loaded, server)

    if nodes.nnodes > 1:
        server.rendezvous = Rendezvous(nodes, on_all_joined=load, on_end=end)
        try:
            await server.rendezvous.start()
        except OSError as exc:
            _start_error(f"--dist-init-addr: cannot listen on {nodes.rendezvous}: {exc.strerror or exc}")
            listener.close()
            return 1
    else:
        load()
    code = await status
    listener.close()
    if isinstance(role, PrefillRole):
        role.close()
    if server.rendezvous is not None:
        await server.rendezvous.close(shutdown=code == 0)
    if server.trace is not None:
        server.trace.close()
    return code


def _start_error(message: str) -> None:
    print(f"fairbench sim: error: {message}", file=sys.stderr)


def _announce_loaded(server: SimServer) -> None:
    server.finish_loading()
    print("fairbench sim: The server is fired up and ready to roll!", file=sys.stderr, flush=True)
