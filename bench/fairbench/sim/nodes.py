"""One simulated server over several nodes: the rendezvous of ``--nnodes N --node-rank R --dist-init-addr``.

SGLang spreads one server over N hosts, each started with the same flags plus its ``--node-rank``; they
meet at rank 0's ``--dist-init-addr`` (torch.distributed's TCP store), rank 0 serves the HTTP API, and
the others run schedulers only (``Engine._launch_subprocesses``, the ``node_rank >= 1`` branch) with a
dummy health server on their own ``--host``/``--port`` (``launch_dummy_health_check_server`` in
``sglang/srt/utils/common.py``). A rank that dies takes the whole server down. The simulator plays the
same roles over a small protocol of its own.

Protocol: each rank R >= 1 holds one TCP connection to rank 0, which listens on the dist-init address.
Messages are ASCII lines ending in ``\\n``:

=====================  ===============  ============================================================
``join R N``           rank R -> 0      the first line: this is node rank R of N nodes
``welcome``            0 -> rank R      the join is accepted
``refused REASON``     0 -> rank R      the join is refused (a duplicate rank, a rank outside
                                        ``--nnodes``, another ``--nnodes``); the connection closes
``heartbeat``          both ways        every ``--sim-heartbeat-s`` seconds once joined; silence for
                                        ``HEARTBEAT_MISSES`` intervals means the other side is frozen
``shutdown``           0 -> rank R      rank 0 is stopping in order (SIGTERM): the rank exits 0
``leaving``            rank R -> 0      the rank is stopping in order (SIGTERM): rank 0 shuts the
                                        server down, tells the other ranks, and exits 0
=====================  ===============  ============================================================

Any other end of a joined connection (EOF, a reset, missed heartbeats, an unknown line) is a lost node:
rank 0 exits 1 naming the rank and its address, and a rank R >= 1 that loses rank 0 exits 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass

from fairbench.sim.http import HttpExchange, HttpRequest, serve

DEFAULT_JOIN_TIMEOUT_S = 300.0
"""How long the nodes wait for one another by default: torch.distributed's store waits minutes too."""
DEFAULT_HEARTBEAT_S = 1.0
HEARTBEAT_MISSES = 3
"""Heartbeat intervals of silence after which a joined node counts as lost (frozen, or its host gone)."""
JOIN_RETRY_S = 0.2
"""How long a rank waits between attempts to reach rank 0 (torch's TCP store client retries likewise)."""
CLOSE_WAIT_S = 1.0
"""How long a stopping node waits for its last message to leave before it closes the connection."""

JOIN = "join"
WELCOME = "welcome"
REFUSED = "refused"
HEARTBEAT = "heartbeat"
SHUTDOWN = "shutdown"
LEAVING = "leaving"

# SGLang's dummy health server: FastAPI routes answering an empty 200 (``launch_dummy_health_check_server``).
DUMMY_HEALTH_PATHS = frozenset({"/health", "/health_generate", "/ping"})


@dataclass(frozen=True, slots=True)
class Address:
    """A ``HOST:PORT`` address, as SGLang's ``NetworkAddress`` holds it (an IPv6 host without brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def split_address(text: str) -> tuple[str, str]:
    """``text``'s host and port parts as SGLang's ``NetworkAddress.parse`` splits them (``[::1]:5000``,
    ``10.0.0.1:5000``, ``node0:5000``); ``ValueError`` with the reason when it is no ``HOST:PORT``."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError("missing the closing bracket of an IPv6 address")
        host, rest = text[1:close], text[close + 1 :]
        if not host or not rest.startswith(":"):
            raise ValueError("expected [IPV6]:PORT")
        return host, rest[1:]
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise ValueError("expected HOST:PORT")
    if ":" in host:
        raise ValueError("an IPv6 host must be in brackets: [HOST]:PORT")
    return host, port


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """Where this process stands in a multi-node server, and the rendezvous's timing."""

    nnodes: int = 1
    node_rank: int = 0
    rendezvous: Address | None = None
    """Rank 0's ``--dist-init-addr``; None on a single node, which meets nobody."""
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S
    """How long the nodes wait for one another: a rank >= 1 for rank 0, rank 0 for all the others."""
    heartbeat_s: float = DEFAULT_HEARTBEAT_S

    @property
    def silence_s(self) -> float:
        """How long a joined node may stay silent before it counts as lost."""
        return HEARTBEAT_MISSES * self.heartbeat_s


def log(message: str) -> None:
    print(f"fairbench sim: {message}", file=sys.stderr, flush=True)


def log_error(message: str) -> None:
    print(f"fairbench sim: error: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class LinkEnd:
    """How a joined connection ended."""

    orderly: bool
    """The other side announced it (``shutdown`` or ``leaving``); otherwise the node was lost."""
    reason: str
    """The message announced, or why the node counts as lost (``connection closed``, ...)."""


class Link:
    """One joined connection, on either side: heartbeats out, messages in, until it ends."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, settings: NodeSettings
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._settings = settings
        self.peer = _peer_address(writer)

    def send(self, message: str) -> None:
        if not self._writer.is_closing():
            self._writer.write(f"{message}\n".encode())

    async def run(self) -> LinkEnd:
        """Send heartbeats and read the other side's lines until the connection ends."""
        beating = asyncio.create_task(self._beat())
        try:
            while True:
                try:
                    line = await asyncio.wait_for(self._reader.readline(), self._settings.silence_s)
                except asyncio.TimeoutError:
                    return LinkEnd(False, f"no heartbeat for {self._settings.silence_s:g} s")
                except ConnectionError as exc:
                    return LinkEnd(False, f"connection lost ({exc.strerror or exc})")
                except ValueError:
                    return LinkEnd(False, "a message longer than any of the protocol's")
                if not line:
                    return LinkEnd(False, "connection closed")
                message = line.decode("ascii", "replace").strip()
                if message == HEARTBEAT:
                    continue
                if message in (SHUTDOWN, LEAVING):
                    return LinkEnd(True, message)
                return LinkEnd(False, f"unexpected message {message!r}")
        finally:
            beating.cancel()

    async def _beat(self) -> None:
        # No drain: a frozen peer's socket buffer holds days of heartbeats, and a send must never block.
        while not self._writer.is_closing():
            self.send(HEARTBEAT)
            await asyncio.sleep(self._settings.heartbeat_s)

    async def close(self) -> None:
        """Send what is queued (for at most ``CLOSE_WAIT_S``), then close the connection."""
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(self._writer.drain(), CLOSE_WAIT_S)
        self._writer.close()
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(self._writer.wait_closed(), CLOSE_WAIT_S)


def _peer_address(writer: asyncio.StreamWriter) -> Address:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return Address(str(peer[0]), int(peer[1]))
    return Address(str(peer), 0)


# --- rank 0 ---------------------------------------------------------------------------------------------


class Rendezvous:
    """Rank 0's side: the listener on ``--dist-init-addr``, the joined ranks and their heartbeats.

    ``on_all_joined`` runs once, when the last rank has joined (the model then loads, as SGLang's does
    once torch.distributed has formed its group). ``on_end`` runs once with the exit status when the
    server must stop: 1 for a lost rank or ranks that did not all join within the join timeout, 0 when a
    rank stopped in order (``leaving``)."""

    def __init__(
        self, settings: NodeSettings, on_all_joined: Callable[[], None], on_end: Callable[[int], None]
    ) -> None:
        assert settings.rendezvous is not None
        self.settings = settings
        self.address = settings.rendezvous
        self._on_all_joined = on_all_joined
        self._on_end = on_end
        self.links: dict[int, Link] = {}
        """The joined ranks' connections, by node rank."""
        self.complete = False
        """Every rank has joined."""
        self._stopping = False
        self._server: asyncio.Server | None = None

    @property
    def joined_nodes(self) -> int:
        """Nodes in the server so far, rank 0 included."""
        return 1 + len(self.links)

    async def start(self) -> None:
        """Listen on the dist-init address (``OSError`` when it cannot) and start the join timeout."""
        self._server = await asyncio.start_server(
            self._accept, self.address.host, self.address.port, reuse_address=True
        )
        missing = self.settings.nnodes - 1
        log(
            f"node rank 0: waiting on {self.address} (--dist-init-addr) for {missing} more "
            f"node{'s' if missing > 1 else ''}"
        )
        asyncio.get_running_loop().call_later(self.settings.join_timeout_s, self._join_deadline)

    def _join_deadline(self) -> None:
        if self.complete or self._stopping:
            return
        log_error(
            f"only {self.joined_nodes} of {self.settings.nnodes} nodes joined within "
            f"{self.settings.join_timeout_s:g} s (--sim-join-timeout-s); shutting down"
        )
        self._end(1)

    def _end(self, status: int) -> None:
        if not self._stopping:
            self._stopping = True
            self._on_end(status)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = Link(reader, writer, self.settings)
        rank = await self._admit(reader, link)
        if rank is None:
            await link.close()
            return
        end = await link.run()
        if self.links.get(rank) is link:
            del self.links[rank]
        if self._stopping:
            await link.close()
            return
        if end.orderly:
            log(f"node rank {rank} ({link.peer}) is stopping; shutting down")
            self._end(0)
        else:
            log_error(f"node rank {rank} ({link.peer}) left: {end.reason}; shutting down")
            self._end(1)
        await link.close()

    async def _admit(self, reader: asyncio.StreamReader, link: Link) -> int | None:
        """The node rank a new connection joins as, or None when it is refused (and told why)."""
        try:
            line = await asyncio.wait_for(reader.readline(), self.settings.silence_s)
        except (asyncio.TimeoutError, ConnectionError, ValueError):
            line = b""
        words = line.decode("ascii", "replace").split()
        if len(words) != 3 or words[0] != JOIN or not all(word.isdigit() for word in words[1:]):
            log(f"node rank 0: ignored a connection from {link.peer}: no {JOIN!r} line")
            return None
        rank, nnodes = int(words[1]), int(words[2])
        refusal = self._refusal(rank, nnodes)
        if refusal is not None:
            log_error(f"node rank 0: refused node rank {rank} from {link.peer}: {refusal}")
            link.send(f"{REFUSED} {refusal}")
            return None
        self.links[rank] = link
        link.send(WELCOME)
        log(f"node rank {rank} joined from {link.peer} ({self.joined_nodes} of {self.settings.nnodes} nodes)")
        if self.joined_nodes == self.settings.nnodes:
            self.complete = True
            log(f"all {self.settings.nnodes} nodes joined")
            self._on_all_joined()
        return rank

    def _refusal(self, rank: int, nnodes: int) -> str | None:
        if self._stopping:
            return "the server is shutting down"
        if nnodes != self.settings.nnodes:
            return f"it has --nnodes {nnodes}, rank 0 has --nnodes {self.settings.nnodes}"
        if not 1 <= rank < self.settings.nnodes:
            return f"--node-rank {rank} is outside 1..{self.settings.nnodes - 1}"
        if rank in self.links:
            return f"node rank {rank} already joined from {self.links[rank].peer}"
        return None

    async def close(self, shutdown: bool) -> None:
        """Stop listening and close every joined connection, first telling the ranks ``shutdown`` when
        the server stops in order (after a lost node the others find rank 0 gone, and fail, as SGLang's
        do when their process group breaks)."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        links = list(self.links.values())
        if shutdown:
            for link in links:
                link.send(SHUTDOWN)
        await asyncio.gather(*(link.close() for link in links))


# --- ranks >= 1 -----------------------------------------------------------------------------------------


class JoinError(Exception):
    """Rank 0 could not be reached within the join timeout, or it refused this rank."""


async def join(settings: NodeSettings) -> Link:
    """Connect to rank 0 and join as ``settings.node_rank``, retrying until the join timeout."""
    assert settings.rendezvous is not None
    address = settings.rendezvous
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.join_timeout_s
    problem = "no attempt"
    while True:
        # Every attempt gets at least one retry interval, so a timeout of 0 still tries once.
        remaining = max(deadline - loop.time(), JOIN_RETRY_S)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(address.host, address.port), remaining
            )
        except (OSError, asyncio.TimeoutError) as exc:
            problem = _connect_problem(exc)
        else:
            link = Link(reader, writer, settings)
            link.send(f"{JOIN} {settings.node_rank} {settings.nnodes}")
            try:
                line = await asyncio.wait_for(reader.readline(), max(deadline - loop.time(), JOIN_RETRY_S))
            except (OSError, asyncio.TimeoutError, ValueError) as exc:
                line, problem = b"", _connect_problem(exc)
            else:
                problem = "the connection closed before rank 0 answered"
            message = line.decode("ascii", "replace").strip()
            if message == WELCOME:
                return link
            await link.close()
            if message.startswith(REFUSED):
                reason = message.removeprefix(REFUSED).strip()
                raise JoinError(f"rank 0 at {address} refused node rank {settings.node_rank}: {reason}")
            if message:
                problem = f"{address} answered {message[:80]!r}: no fairbench sim rank 0"
        if loop.time() >= deadline:
            raise JoinError(
                f"node rank {settings.node_rank}: could not reach rank 0 at {address} within "
                f"{settings.join_timeout_s:g} s (--sim-join-timeout-s): {problem}"
            )
        await asyncio.sleep(min(JOIN_RETRY_S, max(deadline - loop.time(), 0.0)))


def _connect_problem(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, OSError):
        return str(exc.strerror or exc)
    return str(exc)


async def dummy_health(request: HttpRequest, exchange: HttpExchange) -> None:
    """SGLang's dummy health server: an empty 200 on its three GET routes, FastAPI's 404 and 405 else."""
    if request.path not in DUMMY_HEALTH_PATHS:
        exchange.respond(404, b'{"detail":"Not Found"}')
    elif request.method != "GET":
        exchange.respond(405, b'{"detail":"Method Not Allowed"}')
    else:
        exchange.respond(200, content_type=None)


async def follow(settings: NodeSettings, host: str, port: int, load_seconds: float) -> int:
    """A rank >= 1: join rank 0, "load" for ``load_seconds``, then answer health checks on ``host:port``
    until rank 0 shuts the server down (0), SIGTERM or SIGINT (0), or rank 0 is lost (1).

    SGLang's non-zero ranks start the dummy health server once their schedulers are ready
    (``scheduler_init_result.wait_for_ready()``), which follows the process group's rendezvous and the
    model load. On SIGTERM they keep running until rank 0's shutdown broadcast; this one exits at once,
    after telling rank 0 (so stopping every unit of a server at the same time ends each with 0)."""
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopped.set)
    rank = settings.node_rank
    log(f"node rank {rank} of {settings.nnodes}: joining rank 0 at {settings.rendezvous} (--dist-init-addr)")
    joining = asyncio.create_task(join(settings))
    stopping = asyncio.create_task(stopped.wait())
    await asyncio.wait({joining, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not joining.done():
        joining.cancel()
        log(f"node rank {rank}: stopped before joining")
        return 0
    stopping.cancel()
    try:
        link = joining.result()
    except JoinError as exc:
        log_error(str(exc))
        return 1
    log(f"node rank {rank} joined rank 0 at {link.peer}")
    health = asyncio.create_task(_dummy_health_server(host, port, load_seconds))
    running = asyncio.create_task(link.run())
    stopping = asyncio.create_task(stopped.wait())
    try:
        await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not running.done():
            log(f"node rank {rank}: stopping; telling rank 0")
            link.send(LEAVING)
            return 0
        end = running.result()
        if end.orderly:
            log(f"node rank {rank}: rank 0 shut the server down")
            return 0
        log_error(f"node rank {rank}: lost rank 0 at {link.peer}: {end.reason}; exiting")
        return 1
    finally:
        for task in (running, stopping, health):
            task.cancel()
        await link.close()


async def _dummy_health_server(host: str, port: int, load_seconds: float) -> None:
    await asyncio.sleep(load_seconds)
    try:
        server = await serve(dummy_health, host, port)
    except OSError as exc:
        # SGLang runs this server in a daemon thread whose failure it only logs: the rank goes on.
        log_error(f"Dummy health check server failed to start on {host}:{port}: {exc.strerror or exc}")
        return
    log(f"Dummy health check server started at {Address(host, port)}")
    try:
        await asyncio.Future()  # serves until cancelled
    finally:
        server.close()
