"""Prefill/decode disaggregation: the settings, the KV transfer's timing, and SGLang's failure messages.

SGLang 0.5.23 splits serving into a *prefill* server, which computes a prompt's KV cache and its first
token, and a *decode* server, which receives that KV and generates the rest. A router sends each request
to one of each at once, the same body to both with ``bootstrap_host``, ``bootstrap_port`` and
``bootstrap_room`` added; the decode server reaches the prefill's bootstrap server (on
``--disaggregation-bootstrap-port``) and the prefill sends the room's KV once both sides have met.
``kv_transfer`` serves both roles; this module holds what they share.

The transfer model (``KvTransferModel``): a request's KV is its prompt's tokens times the KV bytes per
token, and it takes ``latency + bytes / bandwidth``; one prefill server's transfers queue for one link,
each taking the link for its ``bytes / bandwidth`` (the latency is per-transfer set-up and overlaps).
Bandwidth is in SGLang's GB/s, as its ``sglang:kv_transfer_speed_gb_s`` counts it: 2**30 bytes a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

from fairbench.sim.checkpoint import Checkpoint

FAKE_BOOTSTRAP_HOST = "2.2.2.2"
"""SGLang's ``FAKE_BOOTSTRAP_HOST``: a request for it moves no KV (health checks, warm-up, the fake
backend's synthetic decode benchmarks)."""
GIB = 1 << 30
"""SGLang's GB in ``kv_transfer_speed_gb_s`` (``total_mb / 1024`` with MB of 2**20 bytes)."""
TP_RANK = 0
"""The rank SGLang's messages name: the simulator is one scheduler per replica, rank 0."""

# Bytes of one KV cache element by --kv-cache-dtype; "auto" is the model's dtype (see kv_element_bytes).
_KV_ELEMENT_BYTES = {
    "fp8_e5m2": 1.0,
    "fp8_e4m3": 1.0,
    "mxfp8": 1.0,
    "nvfp4": 0.5,
    "fp4_mx_block16": 0.5,
    "bf16": 2.0,
    "bfloat16": 2.0,
}


@dataclass(frozen=True, slots=True)
class KvTransferModel:
    """How long one prefill server takes to hand a request's KV to a decode server."""

    bytes_per_token: int
    bandwidth_gb_s: float
    latency_s: float

    def kv_bytes(self, prompt_tokens: int) -> int:
        """A request's KV: every prompt token's, the prefix its own prefix cache served included (the
        decode server has none of it)."""
        return prompt_tokens * self.bytes_per_token

    def link_seconds(self, kv_bytes: int) -> float:
        """How long the transfer holds the link: its bytes over the bandwidth."""
        return kv_bytes / (self.bandwidth_gb_s * GIB)


@dataclass(frozen=True, slots=True)
class Disaggregation:
    """``--disaggregation-mode prefill|decode`` and what goes with it."""

    mode: str
    """``prefill`` or ``decode``: also the ``engine_type`` label of every metric it serves."""
    bootstrap_port: int
    """``--disaggregation-bootstrap-port``: a prefill server's bootstrap server listens there; a decode
    server asks there when a request's ``bootstrap_port`` is null."""
    transfer_backend: str
    """``--disaggregation-transfer-backend`` as SGLang resolves it (``mooncake_tcp`` is ``mooncake``);
    every backend moves KV by the same model except ``fake``, which moves none."""
    transfer: KvTransferModel | None
    """The prefill server's transfer model; None on a decode server, which only waits for it."""
    bootstrap_timeout_s: float
    """``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT``: how long a prefill request waits for its decode
    server to ask for its room."""
    waiting_timeout_s: float
    """``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``: how long a decode request waits for its KV."""

    def describe(self) -> dict[str, object]:
        """The ``sim.disaggregation`` part of ``/server_info``."""
        transfer = self.transfer
        return {
            "mode": self.mode,
            "bootstrap_port": self.bootstrap_port,
            "transfer_backend": self.transfer_backend,
            "kv_bytes_per_token": transfer.bytes_per_token if transfer else None,
            "kv_transfer_gb_s": transfer.bandwidth_gb_s if transfer else None,
            "kv_transfer_latency_ms": transfer.latency_s * 1000 if transfer else None,
            "bootstrap_timeout_s": self.bootstrap_timeout_s,
            "waiting_timeout_s": self.waiting_timeout_s,
        }


def kv_element_bytes(kv_cache_dtype: str, dtype: str) -> float:
    """Bytes of one KV cache element: ``--kv-cache-dtype``, or with ``auto`` the model's ``--dtype``
    (2 bytes but for float32). Block-scaled formats' scales are left out."""
    if kv_cache_dtype in _KV_ELEMENT_BYTES:
        return _KV_ELEMENT_BYTES[kv_cache_dtype]
    return 4.0 if dtype in ("float32", "float") else 2.0


def checkpoint_kv_bytes_per_token(checkpoint: Checkpoint, kv_cache_dtype: str, dtype: str) -> int | None:
    """The KV bytes one token holds by the model directory's config.json; None when it does not say."""
    if checkpoint.kv_elements_per_token is None:
        return None
    return max(1, round(checkpoint.kv_elements_per_token * kv_element_bytes(kv_cache_dtype, dtype)))


# --- SGLang's messages for a request it aborts (``prepare_abort``) -----------------------------------------


@dataclass(frozen=True, slots=True)
class Failure:
    """An error a scheduler ends a request with: the status SGLang answers with and its message."""

    status: HTTPStatus
    message: str


def missing_room(rid: str) -> Failure:
    """A request without ``bootstrap_room`` on a prefill or decode server (``Scheduler``'s check)."""
    return Failure(
        HTTPStatus.BAD_REQUEST,
        f"Invalid request: Disaggregated request received without bootstrap room id. req.rid={rid!r}",
    )


def _kv_error(room: int, reason: str) -> str:
    """``KVTransferError.__str__``."""
    return f"KVTransferError(bootstrap_room={room}): {reason}"


def prefill_bootstrap_failed(rid: str, room: int, reason: str) -> Failure:
    """``handle_bootstrap_failure``: no decode server asked for the room in time, or it was taken."""
    return Failure(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        f"Prefill bootstrap failed for request rank={TP_RANK} req.rid={rid!r} req.bootstrap_room={room} "
        f"with exception {_kv_error(room, reason)}",
    )


def prefill_transfer_failed(rid: str, room: int) -> Failure:
    """``handle_inflight_transfer_failure`` after the decode side gave the room up (its abort notice
    carries no reason)."""
    return Failure(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        f"Prefill transfer failed for request rank={TP_RANK} req.rid={rid!r} req.bootstrap_room={room} "
        f"with exception {_kv_error(room, 'Failed due to an unknown reason from another rank')}",
    )


def decode_handshake_failed(rid: str, room: int, reason: str) -> Failure:
    """The prealloc queue's failure: the prefill's bootstrap server cannot be reached, or refused."""
    return Failure(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        f"Decode handshake failed for request rank={TP_RANK} decode_req.req.rid={rid!r} "
        f"decode_req.req.bootstrap_room={room} with exception {_kv_error(room, reason)}",
    )


def decode_transfer_failed(rid: str, room: int, reason: str) -> Failure:
    """The transfer queue's failure: the KV did not come in time, or the prefill failed."""
    return Failure(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        f"Decode transfer failed for request rank={TP_RANK} decode_req.req.rid={rid!r} "
        f"decode_req.req.bootstrap_room={room} with exception {_kv_error(room, reason)}",
    )


def timed_out(room: int, elapsed_s: float, state: str) -> str:
    """The reason ``_check_bootstrap_timeout`` / ``_check_waiting_timeout`` record."""
    return f"Request {room} timed out after {elapsed_s:.1f}s in KVPoll.{state}"


PREFILL_GONE_REASON = "Failed to get kvcache from prefill instance, it might be dead"
"""``DEFAULT_PREFILL_FAILURE_REASON``: what a decode server records when the prefill failed the room."""
