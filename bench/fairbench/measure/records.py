"""Per-request records: what the client observed, the only input of the metrics.

Times are ``time.perf_counter_ns()`` readings of the client process, so they are
comparable with each other within one sweep and with nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One request of a point, as seen by the client.

    A *content chunk* is a stream event that carried at least one output token
    according to the server's cumulative count (``usage.completion_tokens`` or
    ``meta_info.completion_tokens``). ``chunk_ns[i]`` is its arrival time and
    ``chunk_tokens[i]`` the number of tokens it carried (the increase of the
    server's count), so ``sum(chunk_tokens) == output_len`` on success.
    """

    index: int
    """Position of the prompt in the point's workload."""
    prompt_len: int
    """Input tokens: the server-reported prompt length when it gave one."""
    output_len_requested: int
    """The ``max_tokens`` / ``max_new_tokens`` sent with ``ignore_eos``."""
    start_ns: int = 0
    """Just before the request was written to the connection; in an open loop, the time it was scheduled
    to be sent (it went out ``send_delay_ns`` later), so that its TTFT and latency count the wait."""
    end_ns: int = 0
    """Arrival of the last stream line (``[DONE]``), or the moment it failed."""
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    output_len: int = 0
    """Completion tokens as the server counted them (0 when it never said)."""
    status: int = 0
    """HTTP status; 0 when no response arrived."""
    error: str = ""
    """Empty on success, else the reason (with a body excerpt for HTTP errors)."""
    rid: str = ""
    """The request id sent to the server (SGLang's ``rid``): finds the request in its log."""
    send_delay_ns: int = 0
    """When the request was written to the connection less ``start_ns``: in an open loop, how late it
    went out after its scheduled time (waiting for a slot, or for the event loop); 0 in a closed loop,
    whose ``start_ns`` is the send itself. Files written before it existed read back as 0."""
    server_sent_ns: int | None = None
    """When the server sent the stream's first event, on this record's clock: SGLang's ``/generate``
    reports it (``meta_info.response_sent_to_client_ts``, epoch seconds, on its first event only) and
    the client subtracts its own epoch - ``perf_counter_ns`` offset, read once. A server on the same
    machine reads the same clock, so ``chunk_ns[0] - server_sent_ns`` is the way from the server's send
    to the client's read; on another machine it also holds the offset between the two clocks. None when
    the server did not say (the OpenAI APIs never do), and in files written before it existed."""
    server_received_ns: int | None = None
    """When the server received the request, on this record's clock: SGLang's ``/generate`` with
    ``--enable-metrics`` reports it (``meta_info.request_received_ts``, epoch seconds, when its tokenizer
    manager took the request, on its last event), converted as ``server_sent_ns`` is. None when the server
    did not say, and in files written before it existed."""
    cached_tokens: int | None = None
    """The prompt tokens the server says it took from its prefix cache (``/generate``'s
    ``meta_info.cached_tokens``; the OpenAI APIs' ``usage.prompt_tokens_details.cached_tokens``, which
    SGLang gives only with ``--enable-cache-report``); None when it did not say, and in files written
    before it existed."""

    turn: int | None = None
    """The request's turn in its multi-turn conversation, from 0; None outside a multi-turn workload, and
    in files written before it existed."""

    # Speculative decoding, as SGLang 0.5.23's /generate reports it on a stream's last event
    # (``meta_info``, written by TokenizerManager._calculate_spec_decoding_metrics once the request has
    # finished, and only by a server with a speculative algorithm and a request that had a verify step).
    # None where the server did not say (the OpenAI APIs never do), and in files written before them.
    spec_accept_length: float | None = None
    """``meta_info.spec_accept_length``: completion_tokens / spec_verify_ct, the tokens each verify step
    gave this request (the first token, which the prefill gave, included, as SGLang counts it)."""
    spec_accept_rate: float | None = None
    """``meta_info.spec_accept_rate``: spec_num_correct_drafts / spec_num_proposed_drafts, the share of
    the draft tokens proposed that the target model accepted (the bonus token not counted)."""
    spec_verify_ct: int | None = None
    """``meta_info.spec_verify_ct``: the request's verify steps (forward passes of the target model)."""
    spec_num_correct_drafts: int | None = None
    """``meta_info.spec_num_correct_drafts``: draft tokens the target model accepted."""
    spec_num_proposed_drafts: int | None = None
    """``meta_info.spec_num_proposed_drafts``: draft tokens proposed, spec_verify_ct x
    (speculative-num-draft-tokens - 1)."""

    @property
    def success(self) -> bool:
        return not self.error

    @property
    def ttft_ns(self) -> int:
        """First content chunk minus send time (``start_ns``); 0 when there was none."""
        return self.chunk_ns[0] - self.start_ns if self.chunk_ns else 0

    @property
    def latency_ns(self) -> int:
        """End-to-end latency: last stream line minus send time (``start_ns``)."""
        return self.end_ns - self.start_ns

    def to_json(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies every list, a second per large point.
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**data)
