"""A disaggregated server's two roles: the prefill side's bootstrap server and KV sends, the decode side's
wait for the KV.

A router sends the same request to a prefill and a decode server at once, with ``bootstrap_host``,
``bootstrap_port`` and ``bootstrap_room``. As in SGLang (``--disaggregation-decode-allocation-policy
early``), the prefill request waits in its *bootstrap queue* until the decode server has asked for the
room; only then is it prefilled. Its first token then waits for the KV to reach the decode server, and the
prefill's response (that token, finish reason ``length`` 0) leaves only once it has. The decode request
joins its batch with the KV in place, the prefill's token as its first output, and decodes the rest.

The wire is the simulator's own, one HTTP long poll per request: the decode server POSTs ``{"room": R}``
to ``BOOTSTRAP_PATH`` on the prefill's bootstrap server and the answer comes when the room's KV has
arrived, ``{"room": R, "cached_tokens": N}`` (the prefill's prefix-cache hit, which the decode server
reports, as SGLang's carries it in the transfer's metadata), or with an error status and ``{"error":
reason}``. Closing that connection gives the room up: the prefill then fails its transfer, as SGLang's
does on the decode side's abort notice. SGLang's bootstrap server instead registers prefill ranks over
HTTP (``/route``) and moves KV over ZMQ and RDMA; only its ``GET /health`` is served here too.

Timeouts are SGLang's: a prefill request no decode server asks for fails after
``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT``, a decode request whose KV has not come after
``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``, each with SGLang's message and its failure counter. A request
for ``FAKE_BOOTSTRAP_HOST`` (the health check's), and every request on a decode server with the ``fake``
backend, moves no KV: prefilled and answered at once on a prefill server, decoded at once on a decode one.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from fairbench.sim.api import GenerationRequest, ResponseWriter, compact_json
from fairbench.sim.disaggregation import (
    FAKE_BOOTSTRAP_HOST,
    PREFILL_GONE_REASON,
    Disaggregation,
    KvTransferModel,
    decode_handshake_failed,
    decode_transfer_failed,
    missing_room,
    prefill_bootstrap_failed,
    prefill_transfer_failed,
    timed_out,
)
from fairbench.sim.engine import Engine, SimRequest
from fairbench.sim.http import HttpExchange, HttpRequest, serve
from fairbench.sim.metrics import TransferCounters, TransferQueues

BOOTSTRAP_PATH = "/sim/kv_transfer"
DUPLICATE_DECODE_ROOM = "Duplicate decode bootstrap room"
"""What SGLang records when a second decode request claims a room; the simulator refuses it with 409."""

T = TypeVar("T")


class Role(ABC):
    """What a prefill and a decode server share: which requests move KV, and the counters."""

    def __init__(self, settings: Disaggregation, engine: Engine, loop: asyncio.AbstractEventLoop) -> None:
        self.settings = settings
        self.engine = engine
        self.loop = loop
        self.counters = TransferCounters()

    def admit(self, generation: GenerationRequest, sim_request: SimRequest, writer: ResponseWriter) -> None:
        """Take a generation request in instead of the engine. As SGLang: one for the fake host (with a
        room), or any on a server with the fake backend, moves no KV; any other without a room is
        refused."""
        room = generation.bootstrap.room
        if self.settings.transfer_backend == "fake" or (
            room is not None and generation.bootstrap.host == FAKE_BOOTSTRAP_HOST
        ):
            self._admit_fake(sim_request, writer)
        elif room is None:
            writer.fail(sim_request, missing_room(generation.rid))
        else:
            self._admit_paired(generation, sim_request, writer, room)

    @abstractmethod
    def _admit_fake(self, sim_request: SimRequest, writer: ResponseWriter) -> None: ...

    @abstractmethod
    def _admit_paired(
        self, generation: GenerationRequest, sim_request: SimRequest, writer: ResponseWriter, room: int
    ) -> None: ...

    @abstractmethod
    def queues(self) -> TransferQueues:
        """The role's queues as of now, for ``/metrics``."""


# --- the prefill side -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Prefill:
    rid: str
    sim_request: SimRequest
    writer: ResponseWriter
    arrived: float


@dataclass(eq=False, slots=True)
class _Room:
    """One bootstrap room: the prefill request and the decode server's waiting handshake, whichever came
    first, until the KV has gone or the room failed."""

    room: int
    prefill: _Prefill | None = None
    decode: HttpExchange | None = None
    started: bool = False
    """The decode server has asked: the prefill left the bootstrap queue for the engine."""
    timer: asyncio.TimerHandle | None = None


@dataclass(frozen=True, slots=True)
class _Handoff:
    """A paired prefill request's sink: its token waits for the KV transfer."""

    role: PrefillRole
    room: _Room

    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        assert finished, "a prefill server's request ends with its prefill"
        self.role.prefilled(self.room, request, tokens)


class PrefillRole(Role):
    """``--disaggregation-mode prefill``: the bootstrap server, the rooms, the link the KV leaves by."""

    def __init__(
        self, settings: Disaggregation, engine: Engine, loop: asyncio.AbstractEventLoop, time_scale: float
    ) -> None:
        super().__init__(settings, engine, loop)
        assert settings.transfer is not None, "a prefill server's settings carry its transfer model"
        self.time_scale = time_scale
        """``--sim-time-scale``: on the transfers' durations as on every modelled one."""
        self.transfer: KvTransferModel = settings.transfer
        self._rooms: dict[int, _Room] = {}
        self._link_free_at = 0.0
        """When the link has sent every transfer begun so far (loop time)."""
        self._inflight = 0
        self._listener: asyncio.Server | None = None

    async def listen(self, host: str) -> None:
        """Start the bootstrap server on ``--host`` and ``--disaggregation-bootstrap-port``."""
        self._listener = await serve(self._handle, host, self.settings.bootstrap_port)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    def queues(self) -> TransferQueues:
        waiting = sum(1 for room in self._rooms.values() if room.prefill is not None and not room.started)
        return TransferQueues(prefill_bootstrap=waiting, prefill_inflight=self._inflight)

    # --- the bootstrap server ---------------------------------------------------------------------------

    async def _handle(self, request: HttpRequest, exchange: HttpExchange) -> None:
        if request.path == "/health" and request.method == "GET":
            exchange.respond(200, b"OK", "text/plain; charset=utf-8")
        elif request.path == BOOTSTRAP_PATH and request.method == "POST":
            self._handshake(request.body, exchange)
        else:
            exchange.respond(404, b"Not Found", "text/plain; charset=utf-8")

    def _handshake(self, body: bytes, exchange: HttpExchange) -> None:
        """A decode server asks for a room: the answer waits for its KV."""
        try:
            room_id = json.loads(body)["room"]
        except (ValueError, TypeError, KeyError):
            room_id = None
        if not isinstance(room_id, int) or isinstance(room_id, bool):
            exchange.respond(
                400, compact_json({"error": f"expected {{'room': integer}}, got {body[:200]!r}"})
            )
            return
        room = self._rooms.setdefault(room_id, _Room(room_id))
        if room.decode is not None:
            exchange.respond(409, compact_json({"error": DUPLICATE_DECODE_ROOM}))
            return
        room.decode = exchange
        exchange.on_disconnect = lambda: self._decode_gone(room)
        if room.prefill is not None and not room.started:
            self._start(room)

    def _decode_gone(self, room: _Room) -> None:
        """The decode server gave the room up; a prefill still waiting may yet be asked for again."""
        room.decode = None
        if room.prefill is None:
            self._close(room)

    # --- the prefill requests ---------------------------------------------------------------------------

    def _admit_fake(self, sim_request: SimRequest, writer: ResponseWriter) -> None:
        writer.handoff = True
        self.engine.submit(sim_request)

    def _admit_paired(
        self, generation: GenerationRequest, sim_request: SimRequest, writer: ResponseWriter, room_id: int
    ) -> None:
        room = self._rooms.setdefault(room_id, _Room(room_id))
        if room.prefill is not None:
            self.counters.bootstrap_failed += 1
            writer.fail(
                sim_request,
                prefill_bootstrap_failed(generation.rid, room_id, "Duplicate or cancelled bootstrap room"),
            )
            return
        room.prefill = _Prefill(generation.rid, sim_request, writer, self.loop.time())
        writer.handoff = True
        sim_request.sink = _Handoff(self, room)
        writer.exchange.complete.add_done_callback(lambda _: self._prefill_gone(room))
        if room.decode is not None:
            self._start(room)
        else:
            room.timer = self.loop.call_later(
                self.settings.bootstrap_timeout_s, self._bootstrap_timed_out, room
            )

    def _start(self, room: _Room) -> None:
        assert room.prefill is not None
        if room.timer is not None:
            room.timer.cancel()
        room.started = True
        self.engine.submit(room.prefill.sim_request)

    def _bootstrap_timed_out(self, room: _Room) -> None:
        prefill = room.prefill
        if prefill is None or not self._close(room):
            return
        self.counters.bootstrap_failed += 1
        reason = timed_out(room.room, self.loop.time() - prefill.arrived, "Bootstrapping")
        prefill.writer.fail(prefill.sim_request, prefill_bootstrap_failed(prefill.rid, room.room, reason))

    def _prefill_gone(self, room: _Room) -> None:
        """The prefill's client went away before the KV had gone: the decode server learns at once."""
        decode = room.decode
        if self._close(room) and decode is not None:
            decode.respond(500, compact_json({"error": PREFILL_GONE_REASON}))

    def prefilled(self, room: _Room, request: SimRequest, tokens: int) -> None:
        """The room's prefill produced its token: send its KV down the link, after the transfers before."""
        kv_bytes = self.transfer.kv_bytes(request.prompt_tokens)
        now = self.loop.time()
        self._link_free_at = (
            max(now, self._link_free_at) + self.transfer.link_seconds(kv_bytes) * self.time_scale
        )
        done = self._link_free_at + self.transfer.latency_s * self.time_scale
        self._inflight += 1
        self.loop.call_at(done, self._transferred, room, tokens, kv_bytes, done - now)

    def _transferred(self, room: _Room, tokens: int, kv_bytes: int, seconds: float) -> None:
        self._inflight -= 1
        prefill, decode = room.prefill, room.decode
        if prefill is None or not self._close(room):
            return
        if decode is None or decode.closed:
            self.counters.transfer_failed += 1
            prefill.writer.fail(prefill.sim_request, prefill_transfer_failed(prefill.rid, room.room))
            return
        decode.respond(
            200, compact_json({"room": room.room, "cached_tokens": prefill.sim_request.cached_tokens})
        )
        self.counters.observe_transfer(kv_bytes, seconds)
        prefill.writer.deliver(prefill.sim_request, tokens, True)

    def _close(self, room: _Room) -> bool:
        """Forget ``room``; False when it was gone already (it failed, or its KV went)."""
        if self._rooms.get(room.room) is not room:
            return False
        del self._rooms[room.room]
        if room.timer is not None:
            room.timer.cancel()
        return True


# --- the decode side --------------------------------------------------------------------------------------


class _ClientGone(Exception):
    """The decode request's own client went away; the server has aborted it already."""


class DecodeRole(Role):
    """``--disaggregation-mode decode``: each paired request asks its prefill's bootstrap server for its
    room, and joins the engine once the KV has come."""

    def __init__(self, settings: Disaggregation, engine: Engine, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(settings, engine, loop)
        self._connecting = 0
        self._receiving = 0
        self._tasks: set[asyncio.Task[None]] = set()
        """The requests waiting for their KV (the loop keeps only weak references to tasks)."""

    def queues(self) -> TransferQueues:
        return TransferQueues(decode_prealloc=self._connecting, decode_transfer=self._receiving)

    def _admit_fake(self, sim_request: SimRequest, writer: ResponseWriter) -> None:
        self.engine.submit(sim_request)

    def _admit_paired(
        self, generation: GenerationRequest, sim_request: SimRequest, writer: ResponseWriter, room: int
    ) -> None:
        bootstrap = generation.bootstrap
        # SGLang's scheduler fills a null port in with this server's own bootstrap port.
        port = self.settings.bootstrap_port if bootstrap.port is None else bootstrap.port
        task = self.loop.create_task(
            self._receive(generation.rid, sim_request, writer, (bootstrap.host, port), room)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _receive(
        self,
        rid: str,
        sim_request: SimRequest,
        writer: ResponseWriter,
        bootstrap: tuple[str | None, int],
        room: int,
    ) -> None:
        """Reach the bootstrap server, wait for the room's KV, hand the request to the engine; every wait
        ends at the waiting timeout or when the client goes away."""
        gone = writer.exchange.complete
        started = self.loop.time()
        deadline = started + self.settings.waiting_timeout_s
        host, port = bootstrap
        address = f"{host}:{port}"
        self._connecting += 1
        try:
            if host is None:
                raise OSError("no bootstrap_host")
            reader, stream = await _until(asyncio.open_connection(host, port), gone, deadline)
        except (OSError, TimeoutError):
            self.counters.bootstrap_failed += 1
            reason = f"Could not fetch prefill parallel info from bootstrap_addr: {address}"
            writer.fail(sim_request, decode_handshake_failed(rid, room, reason))
            return
        except _ClientGone:
            return
        finally:
            self._connecting -= 1
        self._receiving += 1
        try:
            body = compact_json({"room": room})
            stream.write(
                b"POST %b HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%b" % (BOOTSTRAP_PATH.encode(), address.encode(), len(body), body)
            )
            status, answer = _parse_reply(await _until(reader.read(), gone, deadline))
        except TimeoutError:
            self.counters.transfer_failed += 1
            reason = timed_out(room, self.loop.time() - started, "WaitingForInput")
            writer.fail(sim_request, decode_transfer_failed(rid, room, reason))
            return
        except OSError:
            status, answer = 0, {}
        except _ClientGone:
            return
        finally:
            self._receiving -= 1
            stream.close()
        if status == 409:
            self.counters.bootstrap_failed += 1
            writer.fail(sim_request, decode_handshake_failed(rid, room, DUPLICATE_DECODE_ROOM))
        elif status != 200:
            self.counters.transfer_failed += 1
            reason = str(answer.get("error") or PREFILL_GONE_REASON)
            writer.fail(sim_request, decode_transfer_failed(rid, room, reason))
        else:
            sim_request.cached_tokens = int(answer["cached_tokens"])
            self.engine.submit(sim_request)


async def _until(awaitable: Awaitable[T], gone: asyncio.Future[None], deadline: float) -> T:
    """``awaitable``'s result; ``_ClientGone`` once ``gone`` is done, ``TimeoutError`` at ``deadline``
    (loop time). Either way ``awaitable`` is cancelled, which closes a connection it was using."""
    task = asyncio.ensure_future(awaitable)
    timeout = max(0.0, deadline - asyncio.get_running_loop().time())
    waited: set[asyncio.Future[Any]] = {task, gone}
    done, _ = await asyncio.wait(waited, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        return task.result()
    task.cancel()
    if gone in done:
        raise _ClientGone
    raise TimeoutError


def _parse_reply(reply: bytes) -> tuple[int, dict[str, Any]]:
    """The bootstrap server's status and JSON answer; (0, {}) for a connection closed without one."""
    head, _, body = reply.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
        answer = json.loads(body) if body else {}
    except (IndexError, ValueError):
        return 0, {}
    return status, answer if isinstance(answer, dict) else {}


def make_role(
    settings: Disaggregation | None, engine: Engine, loop: asyncio.AbstractEventLoop, time_scale: float
) -> PrefillRole | DecodeRole | None:
    """The server's role under ``--disaggregation-mode``; None when it does both phases."""
    if settings is None:
        return None
    if settings.mode == "prefill":
        return PrefillRole(settings, engine, loop, time_scale)
    return DecodeRole(settings, engine, loop)
