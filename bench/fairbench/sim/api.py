"""SGLang's request bodies in, SGLang's responses and stream events out, for the three generation APIs.

Shapes follow SGLang 0.5.23's source: ``/generate`` from ``http_server.serve_generate_request`` and
``tokenizer_manager`` (cumulative ``text`` and ``output_ids``, ``meta_info`` in its key order);
``/v1/completions`` from ``serving_completions`` and ``/v1/chat/completions`` from ``serving_chat`` and
``sse_utils`` (pydantic and msgspec field order, ``null`` where those serializers write it, usage per chunk
with ``stream_options.continuous_usage_stats``, a usage-only chunk with ``choices: []`` with
``include_usage``). JSON is compact as orjson, pydantic and msgspec write it, except SGLang's streamed
error events, which it writes with ``json.dumps`` and its default separators.

The simulator has no tokenizer. A text prompt counts one token per whitespace-separated word, a prompt
of token ids one per id (what a benchmark's random-ids dataset sends). Output tokens are words of a
small fixed vocabulary and numbers, each with its own token id, so text and ids stay consistent; which
ones, and their log-probabilities, is ``outputs``'s model.

Log-probabilities come as SGLang's do when asked for: ``/generate``'s ``return_logprob`` (with
``top_logprobs_num``, ``token_ids_logprob``, ``return_text_in_logprobs``) as ``meta_info`` lists of
``[logprob, token_id, text]``; ``/v1/completions``' ``logprobs: N`` as the legacy ``LogProbs`` object;
``/v1/chat/completions``' ``logprobs``/``top_logprobs`` as ``ChoiceLogprobs``, streamed on the chunk
that carries the tokens. Prompt-token log-probabilities (``logprob_start_len``, ``echo``) are refused.
Under speculative decoding a finished ``/generate`` output carries the request's ``spec_*`` counts
(``TokenizerManager._calculate_spec_decoding_metrics``), and the OpenAI routes give them as
``sglext.spec_tokens_details`` with ``return_spec_tokens_details`` (chat also in ``choices[].meta_info``
with ``return_meta_info``).

Every API takes the fields a disaggregation router adds (``bootstrap_host``, ``bootstrap_port``,
``bootstrap_room``, kept as ``BootstrapFields``; ``model: null``, ``background``, ``no_logs`` and the like,
ignored as SGLang's ``GenerateReqInput`` ignores what it does not use). A disaggregated prefill server's
response finishes with ``{"type": "length", "length": 0}`` (``ResponseWriter.handoff``); a request a
scheduler fails (``ResponseWriter.fail``) ends with SGLang's error for its API and its streaming.

Without ``ignore_eos`` a request "meets EOS" after the profile's ``natural_output_tokens`` tokens (when
that is below its limit) and finishes with ``stop`` and the EOS id as ``matched``: a client that forgets
``ignore_eos`` gets short responses, as it would from a real model.
"""

from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from fairbench.sim.disaggregation import Failure
from fairbench.sim.engine import SimRequest
from fairbench.sim.http import HttpExchange
from fairbench.sim.outputs import ResponseTokens

DONE_EVENT = b"data: [DONE]\n\n"


def realtime_offset_s() -> float:
    """Epoch seconds less ``perf_counter`` seconds, read now: SGLang's ``global_diff_realtime_monotonic``,
    which turns its ``perf_counter`` readings into the epoch timestamps of ``meta_info`` and which it
    re-reads as each request comes in, so a step of the wall clock shows from the next request on."""
    return time.time() - time.perf_counter()


def compact_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class ApiError(Exception):
    """A request SGLang would refuse: ``status`` and the JSON body SGLang sends for it."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.status = status
        self.body = body


def openai_error(message: str, err_type: str = "BadRequestError", status: int = 400) -> ApiError:
    """``OpenAIServingBase.create_error_response``."""
    return ApiError(
        status, {"object": "error", "message": message, "type": err_type, "param": None, "code": status}
    )


def validation_error(message: str) -> ApiError:
    """The 400 SGLang's ``RequestValidationError`` handler sends for a body that does not parse."""
    return ApiError(
        400, {"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400}
    )


@dataclass(frozen=True, slots=True)
class LogprobRequest:
    """What a request asks of the output tokens' log-probabilities."""

    top: int = 0
    """Alternatives per position: ``top_logprobs_num``, completions' ``logprobs``, chat's ``top_logprobs``."""
    text: bool = False
    """Each entry's token text (``return_text_in_logprobs``; always on the OpenAI routes)."""
    token_ids: tuple[int, ...] | None = None
    """``/generate``'s ``token_ids_logprob``: these tokens' log-probabilities at every position."""


@dataclass(frozen=True, slots=True)
class BootstrapFields:
    """The disaggregation fields a router adds to a request (``GenerateReqInput``'s and the OpenAI routes'
    ``PDRoutingFields``' ``bootstrap_*``): the prefill server's bootstrap host and port and the room its
    KV goes by. A server that does both phases keeps and ignores them, as SGLang's does."""

    host: str | None = None
    port: int | None = None
    room: int | None = None


@dataclass(slots=True)
class GenerationRequest:
    api: str
    """``generate``, ``completions`` or ``chat``."""
    rid: str
    model: str
    prompt: Sequence[Hashable]
    """The prompt's tokens as the prefix cache keys them: token ids, or the words of a text prompt."""
    max_new_tokens: int | None
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    query: str | None = None
    """A text request's prompt, or its last user message: where the model finds the integers to add."""
    logprobs: LogprobRequest | None = None
    spec_details: bool = False
    """``return_spec_tokens_details`` (OpenAI routes): speculative decoding's counts in ``sglext``."""
    meta_info: bool = False
    """Chat's ``return_meta_info``: the choice carries ``/generate``'s ``meta_info``."""
    token_ids: bool = False
    """``return_token_ids`` (OpenAI routes, not streamed here): the choice carries the output's token ids
    (completions' ``token_ids``, chat's ``response_token_ids``). SGLang adds the prompt's too, which a
    simulator without a tokenizer has none of: serialized as SGLang does a None, it is left out."""
    bootstrap: BootstrapFields = BootstrapFields()

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)


@dataclass(frozen=True, slots=True)
class ServingInfo:
    """What the formats need from the server's configuration."""

    context_length: int
    eos_token_id: int
    natural_output_tokens: int
    weight_version: str
    default_include_usage: bool
    enable_metrics: bool
    """``--enable-metrics``: SGLang then adds the request's time stats to ``/generate``'s meta_info."""
    enable_cache_report: bool = False
    """``--enable-cache-report``: the OpenAI APIs' final usage reports the prompt's cached tokens."""
    spec_num_draft_tokens: int | None = None
    """``--speculative-num-draft-tokens`` under speculative decoding, else None (no ``spec_*`` counts)."""


def text_tokens(text: str) -> list[str]:
    return text.split()


def _int_field(body: dict[str, Any], name: str, default: int | None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise validation_error(f"{name}: Input should be a valid integer")
    return value


def _bool_field(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise validation_error(f"{name}: Input should be a valid boolean")
    return value


def _query(prompt: Any) -> str | None:
    """The text the model reads a sum from: a text prompt (one of a one-prompt batch); None for ids."""
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else None


def _logprob_request(top: int | None, text: bool, token_ids: Any = None) -> LogprobRequest:
    if token_ids is not None and (
        not isinstance(token_ids, list)
        or not all(isinstance(token, int) and not isinstance(token, bool) for token in token_ids)
    ):
        raise validation_error("token_ids_logprob: Input should be a valid list of integers")
    # SGLang reads a missing or empty token_ids_logprob as none, and any top count below 1 as none.
    return LogprobRequest(top=max(top or 0, 0), text=text, token_ids=tuple(token_ids) if token_ids else None)


def _prompt_tokens(prompt: Any, what: str) -> Sequence[Hashable]:
    """Tokens of one prompt given as text or as token ids; batches are not simulated."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return text_tokens(prompt)
    if isinstance(prompt, list) and all(
        isinstance(token, int) and not isinstance(token, bool) for token in prompt
    ):
        return prompt
    if isinstance(prompt, list):
        raise openai_error(f"{what}: the simulator serves one prompt per request, not a batch")
    raise validation_error(f"{what}: Input should be a valid string or list of token ids")


def _bootstrap_fields(body: dict[str, Any]) -> BootstrapFields:
    """``bootstrap_host``, ``bootstrap_port`` and ``bootstrap_room``, each may be null; lists (a batch's)
    are refused as batches are."""
    values: list[Any] = []
    for name, kind, what in (
        ("bootstrap_host", str, "a valid string"),
        ("bootstrap_port", int, "a valid integer"),
        ("bootstrap_room", int, "a valid integer"),
    ):
        value = body.get(name)
        if isinstance(value, list):
            raise openai_error(f"{name}: the simulator serves one prompt per request, not a batch")
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise validation_error(f"{name}: Input should be {what}")
        values.append(value)
    host, port, room = values
    return BootstrapFields(host, port, room)


def _usage_options(body: dict[str, Any], info: ServingInfo) -> tuple[bool, bool]:
    """``should_include_usage``: (final usage chunk, usage on every chunk)."""
    options = body.get("stream_options")
    if not options:
        return info.default_include_usage, False
    if not isinstance(options, dict):
        raise validation_error("stream_options: Input should be a valid dictionary")
    return bool(options.get("include_usage")) or info.default_include_usage, bool(
        options.get("continuous_usage_stats")
    )


def _single_choice(count: Any) -> None:
    """``n`` (or ``sampling_params.n``): SGLang runs that many generations per prompt; the simulator one."""
    if count is not None and count != 1:
        raise openai_error(f"n={count}: the simulator generates one choice per request (n=1)")


def parse_generate(body: dict[str, Any], info: ServingInfo) -> GenerationRequest:
    if ("text" in body) == ("input_ids" in body) and "input_embeds" not in body:
        raise ApiError(
            400, {"error": {"message": "Either text, input_ids or input_embeds should be provided."}}
        )
    prompt = body.get("text", body.get("input_ids"))
    sampling = body.get("sampling_params") or {}
    if not isinstance(sampling, dict):
        raise validation_error("sampling_params: Input should be a valid dictionary")
    _single_choice(sampling.get("n"))
    rid = body.get("rid")
    logprobs = None
    if _bool_field(body, "return_logprob"):
        start = _int_field(body, "logprob_start_len", None)
        if start is not None and start != -1:
            raise ApiError(
                400,
                {
                    "error": {
                        "message": f"logprob_start_len={start}: the simulator computes no log-probabilities "
                        "of prompt tokens; leave logprob_start_len unset (or -1)"
                    }
                },
            )
        logprobs = _logprob_request(
            _int_field(body, "top_logprobs_num", None),
            _bool_field(body, "return_text_in_logprobs"),
            body.get("token_ids_logprob"),
        )
    return GenerationRequest(
        api="generate",
        rid=rid if isinstance(rid, str) else uuid.uuid4().hex,
        model="",
        prompt=_prompt_tokens(prompt, "text" if "text" in body else "input_ids"),
        # SamplingParams' default max_new_tokens.
        max_new_tokens=_int_field(sampling, "max_new_tokens", 128),
        ignore_eos=_bool_field(sampling, "ignore_eos"),
        stream=_bool_field(body, "stream"),
        include_usage=False,
        continuous_usage=False,
        query=_query(body.get("text")),
        logprobs=logprobs,
        bootstrap=_bootstrap_fields(body),
    )


def parse_completion(body: dict[str, Any], info: ServingInfo) -> GenerationRequest:
    if "prompt" not in body:
        raise validation_error(
            "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required'}"
        )
    prompt = body["prompt"]
    if not prompt or (isinstance(prompt, list) and all(not part for part in prompt)):
        raise openai_error("Prompt cannot be empty")
    max_tokens = _int_field(body, "max_tokens", 16)
    if max_tokens is not None and max_tokens <= 0:
        raise validation_error("max_tokens: Value error, max_tokens must be positive")
    _single_choice(body.get("n"))
    include_usage, continuous_usage = _usage_options(body, info)
    top = _int_field(body, "logprobs", None)
    if top and _bool_field(body, "echo"):
        # SGLang then returns the prompt's log-probabilities too (logprob_start_len 0).
        raise openai_error("echo with logprobs: the simulator computes no log-probabilities of prompt tokens")
    return GenerationRequest(
        api="completions",
        rid=body["rid"] if isinstance(body.get("rid"), str) else uuid.uuid4().hex,
        model=str(body.get("model", "default")),
        prompt=_prompt_tokens(prompt, "prompt"),
        max_new_tokens=max_tokens,
        ignore_eos=_bool_field(body, "ignore_eos"),
        stream=_bool_field(body, "stream"),
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        query=_query(prompt),
        logprobs=None if top is None else _logprob_request(top, text=True),
        spec_details=_bool_field(body, "return_spec_tokens_details"),
        token_ids=_bool_field(body, "return_token_ids"),
        bootstrap=_bootstrap_fields(body),
    )


def _message_text(message: Any) -> str:
    if not isinstance(message, dict) or "role" not in message:
        raise validation_error("messages: each message needs a role")
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _last_user_message(messages: list[Any]) -> str | None:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _message_text(message)
    return None


def parse_chat(body: dict[str, Any], info: ServingInfo) -> GenerationRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise validation_error("messages: Field required")
    # ChatCompletionRequest.to_sampling_params: max_completion_tokens or max_tokens (a 0 falls through).
    max_tokens = _int_field(body, "max_completion_tokens", None) or _int_field(body, "max_tokens", None)
    _single_choice(body.get("n"))
    include_usage, continuous_usage = _usage_options(body, info)
    stream = _bool_field(body, "stream")
    meta_info = _bool_field(body, "return_meta_info")
    if stream and _bool_field(body, "return_token_ids"):
        # OpenAIServingChat._convert_to_internal_request's ValueError, answered as a 400.
        raise openai_error(
            "return_token_ids is not supported with streaming on /v1/chat/completions. Please set "
            "stream=false when using return_token_ids=true."
        )
    if stream and meta_info:
        # OpenAIServingChat._convert_to_internal_request's ValueError, answered as a 400.
        raise openai_error(
            "return_meta_info is not supported with streaming. "
            "Please set stream=false when using return_meta_info=true."
        )
    top = _int_field(body, "top_logprobs", None)
    texts = [_message_text(message) for message in messages]
    return GenerationRequest(
        api="chat",
        rid=body["rid"] if isinstance(body.get("rid"), str) else uuid.uuid4().hex,
        model=str(body.get("model", "default")),
        prompt=[word for text in texts for word in text_tokens(text)],
        max_new_tokens=max_tokens,
        ignore_eos=_bool_field(body, "ignore_eos"),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        query=_last_user_message(messages),
        logprobs=_logprob_request(top, text=True) if _bool_field(body, "logprobs") else None,
        spec_details=_bool_field(body, "return_spec_tokens_details"),
        meta_info=meta_info,
        token_ids=_bool_field(body, "return_token_ids"),
        bootstrap=_bootstrap_fields(body),
    )


PARSERS: dict[str, Callable[[dict[str, Any], ServingInfo], GenerationRequest]] = {
    "generate": parse_generate,
    "completions": parse_completion,
    "chat": parse_chat,
}


def plan_output(request: GenerationRequest, info: ServingInfo) -> tuple[int, bool]:
    """(tokens to generate, whether it ends on EOS); raises SGLang's context-length errors."""
    prompt = request.prompt_tokens
    context = info.context_length
    if prompt >= context:
        raise ValueError(
            f"The input ({prompt} tokens) is longer than the model's context length ({context} tokens)."
        )
    wanted = request.max_new_tokens
    if wanted is not None and wanted + prompt > context:
        raise ValueError(
            f"Requested token count exceeds the model's maximum context length of {context} tokens. "
            f"You requested a total of {wanted + prompt} tokens: {prompt} tokens from the input messages "
            f"and {wanted} tokens for the completion. Please reduce the number of tokens in the input "
            "messages or the completion to fit within the limit."
        )
    if wanted is not None and wanted < 0:
        # SamplingParams.verify, which runs after the length checks.
        raise ValueError(f"max_new_tokens must be at least 0, got {wanted}.")
    limit = wanted if wanted is not None else context - prompt
    if not request.ignore_eos and info.natural_output_tokens < limit:
        return info.natural_output_tokens, True
    return limit, False


@dataclass(slots=True)
class StreamHooks:
    """What the server attaches to every writer."""

    malformed: Callable[[bytes], bytes] | None
    """The malformed-every fault: may break an event before it is sent."""
    finished: Callable[[ResponseWriter, SimRequest], None]
    record_times: bool
    """Keep each event's send time and token count (for ``--sim-trace``)."""


class ResponseWriter(ABC):
    """A request's tokens turned into SGLang's events on its connection; the engine's ``TokenSink``.

    The response's tokens (``outputs.ResponseTokens``) are worked out as events need them, so a writer
    only counts tokens and spells them when an event needs them. ``deliver`` runs once per request per
    round at up to tens of thousands of times a second: it avoids every avoidable step.
    """

    headers_before_first_token = False
    """``/generate`` returns its StreamingResponse at once; the OpenAI routes wait for the first chunk."""
    first_output_ns = 0
    """When the engine handed over the request's first output (its prefill's end), ``perf_counter_ns``."""
    first_sent_ts: str | None = None
    """``response_sent_to_client_ts`` as written, once the first event (or the whole response) has gone."""
    handoff = False
    """A disaggregated prefill server's response: its one token is handed to a decode server, and SGLang
    finishes it with ``FINISH_LENGTH(length=0)`` once the KV transfer succeeded."""
    failure: Failure | None = None
    """The error the request ended with (SGLang's ``prepare_abort`` with a status), if it did."""

    def __init__(
        self,
        *,
        request: GenerationRequest,
        info: ServingInfo,
        exchange: HttpExchange,
        ends_on_eos: bool,
        tokens: ResponseTokens,
        hooks: StreamHooks,
    ) -> None:
        self.request = request
        self.info = info
        self.exchange = exchange
        self.ends_on_eos = ends_on_eos
        self.tokens = tokens
        self.hooks = hooks
        self.created = int(time.time())
        self.received_ns = time.perf_counter_ns()
        self.realtime_offset_s = realtime_offset_s()
        self.completion_tokens = 0
        self.scheduled: SimRequest | None = None
        """The engine's request, from its first delivery on: its cached tokens and its time in the queue."""
        self.aborted = False
        """Ended by ``/abort_request``: it finishes with SGLang's abort reason."""
        self.event_ns: list[int] = []
        self.event_tokens: list[int] = []
        self.rid_json = json.dumps(request.rid)
        self.model_json = json.dumps(request.model)
        self._logprob_json: dict[str, list[str]] = {}
        """``/generate``'s log-probability lists as JSON entries, by key, kept as the output grows."""

    def abort(self, sim_request: SimRequest, *, now: bool) -> None:
        """``/abort_request``: the response ends as SGLang's does, a graceful abort (the finish reason says
        ``abort``, the status stays 200): ``now`` with what was generated so far, else with the tokens of
        the request's last round."""
        if self.exchange.closed:
            return
        self.aborted = True
        if now:
            self.deliver(sim_request, 0, True)

    def fail(self, sim_request: SimRequest, failure: Failure) -> None:
        """End the request with ``failure``, as SGLang answers a request its scheduler aborts with a
        status: a whole response becomes the error (``/generate``'s 400 a ``ValueError``'s body, any other
        the ``ErrorResponse``); a stream carries it in its last event (``/generate``'s finish reason, the
        OpenAI routes' error chunk)."""
        if self.exchange.closed:
            return
        self.failure = failure
        if self.request.stream:
            self.deliver(sim_request, 0, True)
            return
        if self.request.api == "generate" and failure.status == HTTPStatus.BAD_REQUEST:
            error = ApiError(failure.status, {"error": {"message": failure.message}})
        else:
            kind = (
                "BadRequestError" if failure.status == HTTPStatus.BAD_REQUEST else str(failure.status.value)
            )
            error = openai_error(failure.message, kind, failure.status.value)
        self.exchange.respond(error.status, compact_json(error.body))
        self.hooks.finished(self, sim_request)

    def failure_events(self, object_name: str) -> list[bytes]:
        """An OpenAI stream's end after a failure: the error chunk (``create_streaming_error_response``,
        ``json.dumps``' separators, the status's name as its type), then the usage chunk if asked for."""
        assert self.failure is not None
        status = self.failure.status
        error = {
            "object": "error",
            "message": self.failure.message,
            "type": status.name,
            "param": None,
            "code": status.value,
        }
        events = [f"data: {json.dumps({'error': error})}\n\n".encode()]
        if self.request.include_usage:
            events.append(self.usage_chunk(object_name, with_nulls=object_name == "chat.completion.chunk"))
        return events

    def deliver(self, sim_request: SimRequest, tokens: int, finished: bool) -> None:
        """The engine's ``TokenSink``: ``tokens`` new tokens leave now."""
        if not self.first_output_ns:
            self.first_output_ns = time.perf_counter_ns()
        self.scheduled = sim_request
        start = self.completion_tokens
        self.completion_tokens = start + tokens
        if self.hooks.record_times:
            self.event_ns.append(time.perf_counter_ns())
            self.event_tokens.append(tokens)
        exchange = self.exchange
        if not self.request.stream:
            if finished:
                exchange.respond(200, compact_json(self.full_response()))
                self.hooks.finished(self, sim_request)
            return
        events = self.stream_events(start, tokens, finished)
        if self.hooks.malformed is not None:
            events = [self.hooks.malformed(event) for event in events]
        if not exchange.streaming:
            exchange.start_stream()
        if finished:
            exchange.end_stream(b"".join([*events, DONE_EVENT]))
            self.hooks.finished(self, sim_request)
        else:
            exchange.send(events[0] if len(events) == 1 else b"".join(events))

    @abstractmethod
    def stream_events(self, start: int, tokens: int, finished: bool) -> list[bytes]:
        """The SSE events for the ``tokens`` tokens from position ``start`` on."""

    @abstractmethod
    def full_response(self) -> dict[str, Any]:
        """The non-streaming response body."""

    def output_tokens(self, count: int) -> list[Hashable]:
        """The response's first ``count`` tokens as the prefix cache keys them."""
        return self.tokens.keys(count)

    def text_of(self, start: int, count: int) -> str:
        return self.tokens.text(start, count) if count else ""

    @property
    def finish_reason(self) -> dict[str, Any]:
        if self.failure is not None:
            message, status = self.failure.message, self.failure.status.value
            return {"type": "abort", "message": message, "status_code": status, "err_type": None}
        if self.aborted:
            return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
        if self.handoff:
            return {"type": "length", "length": 0}
        if self.ends_on_eos:
            return {"type": "stop", "matched": self.info.eos_token_id}
        return {"type": "length", "length": self.completion_tokens}

    @property
    def matched_stop(self) -> int | None:
        return self.info.eos_token_id if self.finish_reason["type"] == "stop" else None

    @property
    def weight_versions(self) -> list[dict[str, Any]]:
        """``add_weight_versions_to_meta_info``: one span, the weights never change here."""
        return [{"version": self.info.weight_version, "start": 0, "end": self.completion_tokens}]

    @property
    def cached_tokens(self) -> int:
        """The prompt tokens the prefix cache held when the request was admitted; 0 before."""
        return self.scheduled.cached_tokens if self.scheduled is not None else 0

    # --- /generate's meta_info, which chat's return_meta_info carries too ----------------------------

    def meta_info(self, finished: bool) -> str:
        """``TokenizerManager._handle_batch_output``'s meta_info, in its key order.

        ``response_sent_to_client_ts``, epoch seconds, is the moment the response first goes to the
        client: it is set on a stream's first event, on a whole response's only one. With
        ``--enable-metrics`` every output also carries the scheduler's time stats of the request, and the
        last the tokenizer's (among them ``response_sent_to_client_ts`` again, on a stream's). With
        ``return_logprob`` the log-probabilities follow the scheduler's stats; under speculative decoding
        the finished output's ``spec_*`` counts follow ``e2e_latency``."""
        now_ns = time.perf_counter_ns()
        finish = compact_json(self.finish_reason).decode() if finished else "null"
        scheduled = self.scheduled
        cached = self.cached_tokens
        details = f'{{"device":{cached},"host":0}}' if cached else "null"
        meta = (
            f'{{"id":{self.rid_json},"finish_reason":{finish},"prompt_tokens":{self.request.prompt_tokens},'
            f'"weight_version":{json.dumps(self.info.weight_version)},"num_retractions":0'
        )
        if self.info.enable_metrics:
            meta += self._scheduler_time_stats(scheduled)
        if self.request.logprobs is not None:
            meta += self._logprob_meta(self.request.logprobs)
        meta += f',"reasoning_tokens":0,"completion_tokens":{self.completion_tokens},"cached_tokens":{cached}'
        if finished:
            meta += f',"weight_versions":{compact_json(self.weight_versions).decode()}'
        meta += f',"cached_tokens_details":{details},"dp_rank":null'
        if finished:
            meta += f',"e2e_latency":{(now_ns - self.received_ns) / 1e9}'
            spec = self.spec_meta()
            if spec is not None:
                meta += "," + compact_json(spec).decode()[1:-1]
            if self.info.enable_metrics:
                meta += self._request_time_stats(now_ns)
        if self.first_sent_ts is None:
            self.first_sent_ts = repr(self._epoch_s(now_ns))
            meta += f',"response_sent_to_client_ts":{self.first_sent_ts}'
        return meta + "}"

    def _logprob_meta(self, asked: LogprobRequest) -> str:
        """``add_logprob_to_meta_info`` for the output so far: the prompt's lists stay empty (SGLang
        computes none by default), each output list holds one entry per token, cumulative as SGLang's."""
        count = self.completion_tokens
        tokens = self.tokens
        chosen = self._logprob_entries("output_token_logprobs", count, asked, lambda position: None)
        meta = (
            f',"input_token_logprobs":[],"output_token_logprobs":[{",".join(chosen)}]'
            f',"output_token_logprobs_length":{count}'
        )
        if asked.top > 0:
            top = self._logprob_entries(
                "output_top_logprobs", count, asked, lambda position: tokens.top_logprobs(position, asked.top)
            )
            meta += f',"input_top_logprobs":[],"output_top_logprobs":[{",".join(top)}]'
        if asked.token_ids is not None:
            ids = asked.token_ids
            listed = self._logprob_entries(
                "output_token_ids_logprobs",
                count,
                asked,
                lambda position: [(tokens.logprob_of(position, token_id), token_id) for token_id in ids],
            )
            meta += f',"input_token_ids_logprobs":[],"output_token_ids_logprobs":[{",".join(listed)}]'
        return meta

    def _logprob_entries(
        self,
        key: str,
        count: int,
        asked: LogprobRequest,
        row: Callable[[int], list[tuple[float, int]] | None],
    ) -> list[str]:
        """The JSON entries of one ``meta_info`` list up to ``count`` tokens, each worked out once:
        ``[logprob, id, text]`` for the chosen token where ``row`` gives None, else a list of them."""
        entries = self._logprob_json.setdefault(key, [])
        tokens = self.tokens
        tokens.ensure(count)
        for position in range(len(entries), count):
            pairs = row(position)
            if pairs is None:
                pairs_json = self._entry(asked, tokens.logprob(position), tokens.ids[position])
            else:
                pairs_json = "[" + ",".join(self._entry(asked, value, token) for value, token in pairs) + "]"
            entries.append(pairs_json)
        return entries[:count]

    def _entry(self, asked: LogprobRequest, value: float, token_id: int) -> str:
        text = json.dumps(self.tokens.token_text(token_id)) if asked.text else "null"
        return f"[{value!r},{token_id},{text}]"

    def spec_meta(self) -> dict[str, Any] | None:
        """``_calculate_spec_decoding_metrics``: a finished request's verify steps, draft tokens proposed
        and accepted, and its accept rate and length; None without speculative decoding or before a verify
        step (a one-token response)."""
        draft_tokens = self.info.spec_num_draft_tokens
        request = self.scheduled
        if draft_tokens is None or request is None or request.spec_verify_ct <= 0:
            return None
        meta: dict[str, Any] = {}
        proposed = request.spec_verify_ct * (draft_tokens - 1)
        if proposed > 0:
            meta["spec_accept_rate"] = request.spec_correct_drafts / proposed
            meta["spec_accept_length"] = self.completion_tokens / request.spec_verify_ct
            meta["spec_num_correct_drafts"] = request.spec_correct_drafts
            meta["spec_num_proposed_drafts"] = proposed
            meta["spec_verify_ct"] = request.spec_verify_ct
        if request.spec_histogram:
            meta["spec_correct_drafts_histogram"] = list(request.spec_histogram)
        return meta

    def sglext(self) -> dict[str, Any] | None:
        """The OpenAI routes' response-level ``sglext`` (``SglExt`` with its None fields dropped):
        ``spec_tokens_details`` as ``SpecTokensDetails`` dumps it, with ``return_spec_tokens_details``."""
        meta = self.spec_meta() if self.request.spec_details else None
        if not meta:
            return None
        details = {
            "spec_accept_rate": meta.get("spec_accept_rate") or 0.0,
            "spec_accept_length": meta.get("spec_accept_length") or 0.0,
            "spec_cap_length": 0.0,
            "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": meta.get("spec_num_correct_drafts") or 0,
            "spec_num_proposed_drafts": meta.get("spec_num_proposed_drafts") or 0,
            "spec_verify_ct": meta.get("spec_verify_ct") or 0,
            "spec_correct_drafts_histogram": meta.get("spec_correct_drafts_histogram") or [],
            "spec_cap_lens_histogram": [],
        }
        return {"spec_tokens_details": details}

    def sglext_chunk(self, object_name: str) -> list[bytes]:
        """The stream's ``sglext`` chunk, after the last content (chat: finish) chunk and before the usage
        chunk, when there is one: ``choices: []``, ``usage: null``."""
        sglext = self.sglext()
        if sglext is None:
            return []
        chunk = {
            "id": self.request.rid,
            "object": object_name,
            "created": self.created,
            "model": self.request.model,
            "choices": [],
            "usage": None,
            "sglext": sglext,
        }
        return [b"data: " + compact_json(chunk) + b"\n\n"]

    def _epoch_s(self, perf_counter_ns: int) -> float:
        """A ``perf_counter_ns`` reading as epoch seconds, as SGLang's ``convert_time_to_realtime``."""
        return perf_counter_ns / 1e9 + self.realtime_offset_s

    def _scheduler_time_stats(self, scheduled: SimRequest | None) -> str:
        """``SchedulerReqTimeStats.convert_to_output_meta_info``: no storage tier to wait for, the time
        its prefill began and ended, and its time in the queue. The simulator has no tokenizer: the
        request reaches the scheduler as it arrives."""
        queue_s = scheduled.queue_s if scheduled is not None else 0.0
        stats = ',"storage_prefetch_wait":0.0,"storage_staging_wait":0.0'
        if scheduled is not None and scheduled.admitted:
            stats += (
                f',"forward_entry_time":{self._epoch_s(self.received_ns) + queue_s}'
                f',"prefill_finished_time":{self._epoch_s(self.first_output_ns)}'
            )
        return stats + f',"queue_time":{queue_s}'

    def _request_time_stats(self, now_ns: int) -> str:
        """``APIServerReqTimeStats.convert_to_output_meta_info`` of a finished request."""
        received = self._epoch_s(self.received_ns)
        stats = (
            f',"request_received_ts":{received}'
            f',"first_token_latency":{(self.first_output_ns - self.received_ns) / 1e9}'
            f',"api_server_dispatch_finish_ts":{received}'
        )
        if self.first_sent_ts is not None:
            stats += f',"response_sent_to_client_ts":{self.first_sent_ts}'
        stats += f',"request_finished_ts":{self._epoch_s(now_ns)}'
        decode_ns = now_ns - self.first_output_ns
        if self.completion_tokens > 1 and decode_ns > 0:
            stats += f',"decode_throughput":{(self.completion_tokens - 1) * 1e9 / decode_ns}'
        return stats

    # --- the OpenAI routes ----------------------------------------------------------------------------

    def usage(self, with_nulls: bool, *, reports_cache: bool = True) -> dict[str, Any]:
        """``UsageProcessor.calculate_token_usage`` as pydantic dumps it, with or without its nulls. With
        ``--enable-cache-report`` it reports the cached prompt tokens, where SGLang's does
        (``reports_cache``): everywhere but a completions stream's continuous usage."""
        prompt = self.request.prompt_tokens
        report = reports_cache and self.info.enable_cache_report
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens} if report else None,
            "reasoning_tokens": 0,
            "completion_tokens_details": None,
        }
        return usage if with_nulls else {key: value for key, value in usage.items() if value is not None}

    def usage_chunk(self, object_name: str, with_nulls: bool) -> bytes:
        """The final usage-only chunk, ``choices: []``, sent with ``include_usage``."""
        final = {
            "id": self.request.rid,
            "object": object_name,
            "created": self.created,
            "model": self.request.model,
            "choices": [],
            "usage": self.usage(with_nulls),
        }
        return b"data: " + compact_json(final) + b"\n\n"

    def openai_response(
        self,
        object_name: str,
        choice: dict[str, Any],
        logprobs: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``CompletionResponse`` / ``ChatCompletionResponse`` around the one ``choice``; ``extra``: the
        choice's optional fields after ``matched_stop``, ``sglext`` at the end where there is one."""
        response = {
            "id": self.request.rid,
            "object": object_name,
            "created": self.created,
            "model": self.request.model,
            "choices": [
                {
                    "index": 0,
                    **choice,
                    "logprobs": logprobs,
                    "finish_reason": self.finish_reason["type"],
                    "matched_stop": self.matched_stop,
                    **(extra or {}),
                }
            ],
            "usage": self.usage(with_nulls=True),
            "metadata": {"weight_version": self.info.weight_version, "weight_versions": self.weight_versions},
        }
        sglext = self.sglext()
        if sglext is not None:
            response["sglext"] = sglext
        return response

    def completion_logprobs(self, start: int, count: int) -> dict[str, Any]:
        """``to_openai_style_logprobs``: the legacy ``LogProbs`` of ``count`` tokens from ``start``, with
        no text offsets (-1, as SGLang's) and ``top_logprobs`` as {token text: logprob} per token."""
        tokens = self.tokens
        tokens.ensure(start + count)
        positions = range(start, start + count)
        top = self.request.logprobs.top if self.request.logprobs is not None else 0
        return {
            "text_offset": [-1] * count,
            "token_logprobs": [tokens.logprob(position) for position in positions],
            "tokens": [tokens.texts[position] for position in positions],
            "top_logprobs": [
                {tokens.token_text(token): value for value, token in tokens.top_logprobs(position, top)}
                for position in positions
            ]
            if top > 0
            else [],
        }

    def chat_logprobs(self, start: int, count: int) -> dict[str, Any]:
        """``ChoiceLogprobs``: per token its text, the text's UTF-8 bytes, its logprob and its top ones."""
        tokens = self.tokens
        tokens.ensure(start + count)
        top = self.request.logprobs.top if self.request.logprobs is not None else 0
        content = []
        for position in range(start, start + count):
            alternatives = []
            for value, token in tokens.top_logprobs(position, top) if top > 0 else []:
                text = tokens.token_text(token)
                alternatives.append({"token": text, "bytes": list(text.encode()), "logprob": value})
            text = tokens.texts[position]
            content.append(
                {
                    "token": text,
                    "bytes": list(text.encode()),
                    "logprob": tokens.logprob(position),
                    "top_logprobs": alternatives,
                }
            )
        return {"content": content}


class GenerateWriter(ResponseWriter):
    """``/generate``: cumulative ``text`` and ``output_ids`` in every event (kept as growing strings)."""

    headers_before_first_token = True
    streamed_text = ""
    streamed_ids = ""

    def stream_events(self, start: int, tokens: int, finished: bool) -> list[bytes]:
        if tokens:
            self.tokens.ensure(start + tokens)
            new_ids = ",".join(self.tokens.id_texts[start : start + tokens])
            self.streamed_ids = f"{self.streamed_ids},{new_ids}" if self.streamed_ids else new_ids
            self.streamed_text += self.text_of(start, tokens)
        return [
            f'data: {{"text":"{self.streamed_text}","output_ids":[{self.streamed_ids}],'
            f'"meta_info":{self.meta_info(finished)}}}\n\n'.encode()
        ]

    def full_response(self) -> dict[str, Any]:
        count = self.completion_tokens
        self.tokens.ensure(count)
        return {
            "text": self.text_of(0, count),
            "output_ids": self.tokens.ids[:count],
            "meta_info": json.loads(self.meta_info(finished=True)),
        }


def generate_stream_error(message: str) -> bytes:
    """The event ``/generate`` streams when the request fails after its stream began, then ``[DONE]``."""
    error = {"error": {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}}
    return b"data: " + compact_json(error) + b"\n\n" + DONE_EVENT


class CompletionWriter(ResponseWriter):
    """``/v1/completions``: text deltas; the last content chunk carries ``finish_reason``."""

    def stream_events(self, start: int, tokens: int, finished: bool) -> list[bytes]:
        if finished and self.failure is not None:
            return self.failure_events("text_completion")
        finish = f'"{self.finish_reason["type"]}"' if finished else "null"
        matched = json.dumps(self.matched_stop) if finished else "null"
        usage = (
            compact_json(self.usage(with_nulls=True, reports_cache=False)).decode()
            if self.request.continuous_usage
            else "null"
        )
        # SGLang attaches log-probabilities to a chunk only when it brings new tokens.
        logprobs = (
            compact_json(self.completion_logprobs(start, tokens)).decode()
            if self.request.logprobs is not None and tokens
            else "null"
        )
        events = [
            f'data: {{"id":{self.rid_json},"object":"text_completion","created":{self.created},'
            f'"model":{self.model_json},"choices":[{{"index":0,"text":"{self.text_of(start, tokens)}",'
            f'"logprobs":{logprobs},"finish_reason":{finish},"matched_stop":{matched}}}],"usage":{usage}}}\n\n'.encode()
        ]
        if finished:
            events += self.sglext_chunk("text_completion")
            if self.request.include_usage:
                # SGLang writes this one with exclude_none=True: the usage keeps only its non-null fields.
                events.append(self.usage_chunk("text_completion", with_nulls=False))
        return events

    def full_response(self) -> dict[str, Any]:
        count = self.completion_tokens
        logprobs = self.completion_logprobs(0, count) if self.request.logprobs is not None else None
        # CompletionResponseChoice's token_ids, after matched_stop.
        extra = {"token_ids": self.tokens.ids[:count]} if self.request.token_ids else None
        return self.openai_response("text_completion", {"text": self.text_of(0, count)}, logprobs, extra)


class ChatWriter(ResponseWriter):
    """``/v1/chat/completions``: a role chunk, content deltas, a finish chunk, then the usage chunk."""

    def _chunk(
        self, delta: str, tail: str = "", finish: str = "null", matched: str = "null", logprobs: str = "null"
    ) -> bytes:
        return (
            f'data: {{"id":{self.rid_json},"object":"chat.completion.chunk","created":{self.created},'
            f'"model":{self.model_json},"choices":[{{"index":0,"delta":{{"reasoning_content":null{delta}}},'
            f'"logprobs":{logprobs},"finish_reason":{finish},"matched_stop":{matched}}}]{tail}}}\n\n'
        ).encode()

    def stream_events(self, start: int, tokens: int, finished: bool) -> list[bytes]:
        if finished and self.failure is not None:
            return self.failure_events("chat.completion.chunk")
        events = [self._chunk(',"role":"assistant","content":""')] if start == 0 else []
        usage = (
            f',"usage":{compact_json(self.usage(with_nulls=True)).decode()}'
            if self.request.continuous_usage
            else ""
        )
        if tokens:  # SGLang sends no content chunk for an empty delta
            logprobs = (
                compact_json(self.chat_logprobs(start, tokens)).decode()
                if self.request.logprobs is not None
                else "null"
            )
            events.append(
                self._chunk(f',"content":"{self.text_of(start, tokens)}"', usage, logprobs=logprobs)
            )
        if finished:
            finish = f'"{self.finish_reason["type"]}"'
            events.append(self._chunk("", finish=finish, matched=json.dumps(self.matched_stop)))
            events += self.sglext_chunk("chat.completion.chunk")
            if self.request.include_usage:
                events.append(self.usage_chunk("chat.completion.chunk", with_nulls=True))
        return events

    def full_response(self) -> dict[str, Any]:
        count = self.completion_tokens
        message = {
            "role": "assistant",
            "content": self.text_of(0, count),
            "reasoning_content": None,
        }
        logprobs = self.chat_logprobs(0, count) if self.request.logprobs is not None else None
        # ChatCompletionResponseChoice's meta_info: the tokenizer's meta_info as /generate returns it.
        extra = {
            **({"response_token_ids": self.tokens.ids[:count]} if self.request.token_ids else {}),
            **({"meta_info": json.loads(self.meta_info(finished=True))} if self.request.meta_info else {}),
        }
        return self.openai_response("chat.completion", {"message": message}, logprobs, extra or None)


WRITERS: dict[str, type[ResponseWriter]] = {
    "generate": GenerateWriter,
    "completions": CompletionWriter,
    "chat": ChatWriter,
}
