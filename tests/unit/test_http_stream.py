"""The streaming HTTP/1.1 client: chunked decoding at any split of the reads, keep-alive and its retry,
bodies by length or up to the close, errors, TLS, and the request it writes."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from fairbench.measure.client import ApiFormat, StreamClient
from fairbench.measure.http_stream import (
    ClientConnectorError,
    ConnectionPool,
    InvalidResponse,
    Response,
    ServerDisconnected,
    _Connection,
)
from fairbench.measure.workload import Prompt

CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
PAYLOADS = [b'data: {"a": 1}\n\n', b'data: {"b": 22}\n\n' * 2, b"data: [DONE]\n\n"]


def chunked(*payloads: bytes, head: bytes = CHUNKED_HEAD, extension: bytes = b"") -> bytes:
    chunks = b"".join(b"%x%s\r\n%s\r\n" % (len(data), extension, data) for data in payloads)
    return head + chunks + b"0\r\n\r\n"


def by_length(status: int, body: bytes, *headers: bytes) -> bytes:
    head = b"HTTP/1.1 %d Some Reason\r\ncontent-length: %d\r\n" % (status, len(body)) + b"".join(headers)
    return head + b"\r\n" + body


def pool_for(url: str, **settings: Any) -> ConnectionPool:
    settings = {"connect_timeout": 2.0, "keep_idle": 4} | settings
    return ConnectionPool(url, {"Content-Type": "application/json"}, **settings)


# --- the protocol fed read by read, as the event loop feeds it, without a socket --------------------


class FakeTransport(asyncio.Transport):
    """Takes what the client writes; an abort tells the protocol, as a socket's transport does."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.written = b""
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        if not self.aborted:
            self.aborted = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def close(self) -> None:
        self.abort()


@dataclass
class Fed:
    """What one exchange over a fed connection gave."""

    status: int = 0
    kept: bytes = b""
    sunk: list[tuple[int, bytes]] = field(default_factory=list)
    error: BaseException | None = None
    kept_alive: bool = False


def exchange_over_reads(reads: list[bytes], stream_status: int = 200) -> Fed:
    """One request on a connection whose server sends ``reads``, a data_received call each; the clock
    of the protocol counts its readings, so a read's arrival is its number (1, 2, ...)."""
    fed = Fed()

    async def run() -> None:
        pool = pool_for("http://127.0.0.1:9/generate")
        connection = _Connection(pool)
        transport = FakeTransport(connection)
        connection.connection_made(transport)
        sending = asyncio.ensure_future(
            connection.send(b"request", lambda ns, data: fed.sunk.append((ns, data)), stream_status)
        )
        await asyncio.sleep(0)
        for read in reads:
            connection.data_received(read)
        try:
            response = await sending
            fed.status = response.status
            fed.kept = await response.finish()
        except Exception as exc:
            fed.error = exc
        await asyncio.sleep(0)
        fed.kept_alive = not transport.aborted and pool._idle == [connection]

    with patch("fairbench.measure.http_stream.perf_counter_ns", side_effect=count(1).__next__):
        asyncio.run(run())
    return fed


def assert_payloads_whole(fed: Fed, expected: bytes) -> None:
    assert fed.error is None, fed.error
    assert fed.status == 200
    assert b"".join(data for _, data in fed.sunk) == expected
    arrivals = [ns for ns, _ in fed.sunk]
    assert arrivals == sorted(set(arrivals)), "one sink call per read at most, in order"
    assert fed.kept_alive


def chunk_data_spans(response: bytes, payloads: list[bytes], extension: bytes) -> list[tuple[int, int]]:
    """Where each chunk's data lies in ``response`` (as ``chunked`` lays it out)."""
    spans, position = [], len(CHUNKED_HEAD)
    for data in payloads:
        position += len(b"%x%s\r\n" % (len(data), extension))
        spans.append((position, position + len(data)))
        position += len(data) + 2
    return spans


@pytest.mark.parametrize("extension", [b"", b";name=value"])
def test_chunked_body_split_in_two_reads_at_every_byte(extension: bytes) -> None:
    response = chunked(*PAYLOADS, extension=extension)
    spans = chunk_data_spans(response, PAYLOADS, extension)
    for cut in range(1, len(response)):
        fed = exchange_over_reads([response[:cut], response[cut:]])
        assert_payloads_whole(fed, b"".join(PAYLOADS))
        # What of the chunk data the first read held reached the sink with its arrival (1), the rest
        # with the second read's (2).
        in_first = b"".join(response[start : min(stop, cut)] for start, stop in spans if start < cut)
        assert b"".join(data for ns, data in fed.sunk if ns == 1) == in_first, cut


def test_chunked_body_one_byte_per_read() -> None:
    response = chunked(*PAYLOADS)
    fed = exchange_over_reads([response[i : i + 1] for i in range(len(response))])
    assert_payloads_whole(fed, b"".join(PAYLOADS))
    # Each byte of chunk data reached the sink alone, with its read: its position in the response + 1.
    spans = chunk_data_spans(response, PAYLOADS, b"")
    assert fed.sunk == [(at + 1, response[at : at + 1]) for start, stop in spans for at in range(start, stop)]


def test_a_chunk_per_read_is_one_sink_call_each_with_its_arrival() -> None:
    response = chunked(*PAYLOADS)
    pieces = [CHUNKED_HEAD] + [b"%x\r\n%s\r\n" % (len(p), p) for p in PAYLOADS] + [b"0\r\n\r\n"]
    assert b"".join(pieces) == response
    fed = exchange_over_reads(pieces)
    assert fed.sunk == [(2, PAYLOADS[0]), (3, PAYLOADS[1]), (4, PAYLOADS[2])]


def test_chunked_trailer_fields_are_skipped() -> None:
    response = chunked(*PAYLOADS)[: -len(b"\r\n")] + b"x-trailer: 1\r\n\r\n"
    fed = exchange_over_reads([response])
    assert_payloads_whole(fed, b"".join(PAYLOADS))


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (CHUNKED_HEAD + b"zz\r\n", "bad chunk-size line b'zz'"),
        (CHUNKED_HEAD + b"2\r\nabc\r\n", "chunk data longer than its size"),
        (b"HTTP/2 200\r\n\r\n", "not an HTTP/1.1 status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -3\r\n\r\n", "content-length '-3' is not a length"),
    ],
)
def test_a_malformed_response_fails_the_exchange_and_drops_the_connection(
    response: bytes, message: str
) -> None:
    fed = exchange_over_reads([response])
    assert isinstance(fed.error, InvalidResponse)
    assert message in str(fed.error)
    assert not fed.kept_alive


def test_an_error_from_the_sink_fails_the_exchange() -> None:
    async def run() -> BaseException:
        pool = pool_for("http://127.0.0.1:9/")
        connection = _Connection(pool)
        connection.connection_made(FakeTransport(connection))

        def refuse(arrival_ns: int, data: bytes) -> None:
            raise ValueError(f"refused {data!r}")

        sending = asyncio.ensure_future(connection.send(b"request", refuse, 200))
        await asyncio.sleep(0)
        connection.data_received(chunked(b"x"))
        response = await sending
        with pytest.raises(ValueError, match="refused b'x'") as caught:
            await response.finish()
        return caught.value

    assert isinstance(asyncio.run(run()), ValueError)


def test_a_content_length_body_streams_and_the_connection_stays() -> None:
    body = b"".join(PAYLOADS)
    response = by_length(200, body)
    fed = exchange_over_reads([response[:50], response[50:]])
    assert_payloads_whole(fed, body)


def test_other_statuses_keep_their_body_instead_of_streaming_it() -> None:
    fed = exchange_over_reads([by_length(503, b'{"detail": "overloaded"}')])
    assert (fed.status, fed.kept, fed.sunk) == (503, b'{"detail": "overloaded"}', [])
    assert fed.kept_alive
    fed = exchange_over_reads(
        [chunked(b"bad ", b"request", head=CHUNKED_HEAD.replace(b"200 OK", b"400 Bad"))]
    )
    assert (fed.status, fed.kept) == (400, b"bad request")


def test_interim_responses_are_skipped_and_a_closing_response_drops_the_connection() -> None:
    response = b"HTTP/1.1 100 Continue\r\n\r\n" + by_length(200, b"ok", b"connection: close\r\n")
    fed = exchange_over_reads([response])
    assert fed.status == 200 and fed.sunk[0][1] == b"ok"
    assert not fed.kept_alive


# --- over sockets: a scripted server -------------------------------------------------------------------

Answer = Callable[[asyncio.StreamWriter], Awaitable[bool]]
"""Writes one response; returns whether the connection stays open for the next request."""


def answer(data: bytes, *, keep_open: bool = True) -> Answer:
    async def write(writer: asyncio.StreamWriter) -> bool:
        writer.write(data)
        await writer.drain()
        return keep_open

    return write


async def close_unanswered(writer: asyncio.StreamWriter) -> bool:
    return False


@dataclass
class ScriptedServer:
    """Answers each request with the next of ``answers``; records each connection's requests."""

    answers: list[Answer]
    tls: ssl.SSLContext | None = None
    requests: list[tuple[int, bytes, bytes]] = field(default_factory=list)
    """(connection number, head, body) of each request received."""
    connections: int = 0
    port: int = 0
    _server: asyncio.Server | None = None

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/generate"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                self.requests.append((number, head, body))
                if not await self.answers.pop(0)(writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@dataclass
class Sink:
    """Collects a streamed body, with each read's arrival."""

    reads: list[tuple[int, bytes]] = field(default_factory=list)

    def __call__(self, arrival_ns: int, data: bytes) -> None:
        self.reads.append((arrival_ns, data))

    @property
    def body(self) -> bytes:
        return b"".join(data for _, data in self.reads)


def post_all(server: ScriptedServer, bodies: list[bytes], **settings: Any) -> list[tuple[int, bytes] | str]:
    """POST each body in turn; each result is (status, streamed or kept body), or the error's repr."""

    async def run() -> list[tuple[int, bytes] | str]:
        results: list[tuple[int, bytes] | str] = []
        async with server:
            pool = pool_for(server.url, **settings)
            for body in bodies:
                sink = Sink()
                try:
                    response: Response = await pool.post(body, sink)
                    kept = await response.finish()
                    results.append((response.status, sink.body or kept))
                except Exception as exc:
                    results.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.05)  # the server's close, if any, arrives before the next request
            pool.close()
        return results

    return asyncio.run(run())


def test_the_request_carries_host_length_headers_and_body() -> None:
    server = ScriptedServer([answer(chunked(b"hi"))])

    async def run() -> None:
        async with server:
            pool = ConnectionPool(
                server.url,
                {"Content-Type": "application/json", "Authorization": "Bearer k"},
                connect_timeout=1,
                keep_idle=1,
            )
            response = await pool.post(b'{"x": 1}', lambda ns, data: None)
            await response.finish()
            pool.close()

    asyncio.run(run())
    ((_, head, body),) = server.requests
    assert head == (
        b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer k\r\nContent-Length: 8\r\n\r\n" % server.port
    )
    assert body == b'{"x": 1}'


def test_keep_alive_reuses_one_connection() -> None:
    server = ScriptedServer([answer(chunked(b"one")), answer(by_length(200, b"two")), answer(chunked(b"3"))])
    assert post_all(server, [b"a", b"b", b"c"]) == [(200, b"one"), (200, b"two"), (200, b"3")]
    assert [number for number, _, _ in server.requests] == [1, 1, 1]


def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    server = ScriptedServer([answer(chunked(b"one"), keep_open=False), answer(chunked(b"two"))])
    assert post_all(server, [b"a", b"b"]) == [(200, b"one"), (200, b"two")]
    assert [number for number, _, _ in server.requests] == [1, 2]


def test_a_reused_connection_closed_before_answering_is_retried_once_on_a_new_one() -> None:
    # The server takes the second request and closes without a byte, as when its idle timeout and the
    # request cross: the request goes again on a new connection.
    server = ScriptedServer([answer(chunked(b"one")), close_unanswered, answer(chunked(b"two"))])
    assert post_all(server, [b"a", b"b"]) == [(200, b"one"), (200, b"two")]
    assert [(number, body) for number, _, body in server.requests] == [(1, b"a"), (1, b"b"), (2, b"b")]


def test_no_retry_once_a_byte_of_the_response_arrived() -> None:
    server = ScriptedServer([answer(chunked(b"one")), answer(b"HTTP/1.1 200 OK\r\n", keep_open=False)])
    results = post_all(server, [b"a", b"b"])
    assert results[0] == (200, b"one")
    assert results[1] == "ServerDisconnected: the server closed the connection in the middle of its response"
    assert len(server.requests) == 2


def test_no_retry_on_a_new_connection() -> None:
    server = ScriptedServer([close_unanswered])
    assert post_all(server, [b"a"]) == [
        "ServerDisconnected: the server closed the connection before answering"
    ]
    assert server.connections == 1


def test_a_body_without_length_runs_to_the_close() -> None:
    server = ScriptedServer(
        [answer(b"HTTP/1.1 200 OK\r\n\r\nall of it", keep_open=False), answer(chunked(b"2"))]
    )
    assert post_all(server, [b"a", b"b"]) == [(200, b"all of it"), (200, b"2")]
    assert [number for number, _, _ in server.requests] == [1, 2]


def test_a_stream_cut_mid_body_fails() -> None:
    server = ScriptedServer([answer(CHUNKED_HEAD + b"5\r\nab", keep_open=False)])
    (result,) = post_all(server, [b"a"])
    assert result == "ServerDisconnected: the server closed the connection in the middle of its response"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_refused_connection_names_host_port_and_reason() -> None:
    port = free_port()

    async def run() -> None:
        pool = pool_for(f"http://127.0.0.1:{port}/generate")
        with pytest.raises(ClientConnectorError) as caught:
            await pool.post(b"a", lambda ns, data: None)
        assert str(caught.value) == (
            f"Cannot connect to host 127.0.0.1:{port} ssl:default [Connect call failed ('127.0.0.1', {port})]"
        )

    asyncio.run(run())


def test_a_connection_reset_right_after_its_connect_fails_as_a_disconnect() -> None:
    # A server going down resets the connections its kernel accepted: the reset can arrive between the
    # connect and the request's write, and is then the same failure as a close before answering. The
    # listener resets from a thread of its own: a server on the client's event loop accepts a turn too late
    # for its reset to come before the write.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)

        def reset_each() -> None:
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:  # the listener shut down: the test is over
                    return
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                connection.close()

        resetter = threading.Thread(target=reset_each)
        resetter.start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/generate"

        async def run() -> set[str]:
            errors = set()
            for _ in range(100):
                pool = pool_for(url)
                with pytest.raises((ServerDisconnected, ClientConnectorError)) as caught:
                    await pool.post(b"a", lambda ns, data: None)
                errors.add(str(caught.value).split(" (")[0])
                pool.close()
            return errors

        try:
            errors = asyncio.run(run())
        finally:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept, which a close alone would leave blocked
            resetter.join(timeout=5)
    assert not resetter.is_alive()
    assert "the server closed the connection before answering" in errors


# --- through StreamClient: the records ---------------------------------------------------------------


def record_of(server: ScriptedServer, api: str = "generate") -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with server:
            base = server.url.rsplit("/", 1)[0]
            async with StreamClient(base, ApiFormat(api, "m"), concurrency=2) as client:
                prompt = Prompt(0, [1, 2], 2, 1)
                record = await client.request(prompt, b"{}", "r0")
        return record.to_json()

    return asyncio.run(run())


def test_an_http_error_is_recorded_with_its_status_and_body_excerpt() -> None:
    record = record_of(ScriptedServer([answer(by_length(503, b'{"detail":  "overloaded\n now"}'))]))
    assert record["status"] == 503
    assert record["error"] == 'HTTP 503: {"detail": "overloaded now"}'


def test_a_refused_connection_is_recorded_as_a_connection_failure() -> None:
    port = free_port()

    async def run() -> str:
        async with StreamClient(
            f"http://127.0.0.1:{port}", ApiFormat("generate", ""), concurrency=1
        ) as client:
            record = await client.request(Prompt(0, [1], 1, 1), b"{}", "r0")
        return record.error

    assert asyncio.run(run()) == (
        f"connection failed: ClientConnectorError: Cannot connect to host 127.0.0.1:{port} ssl:default "
        f"[Connect call failed ('127.0.0.1', {port})]"
    )


def test_a_stream_cut_is_recorded_as_a_connection_failure_after_its_status() -> None:
    record = record_of(ScriptedServer([answer(CHUNKED_HEAD + b"5\r\nab", keep_open=False)]))
    assert record["status"] == 200
    assert record["error"].startswith("connection failed: ServerDisconnected: ")


# --- TLS ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made by the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a self-signed certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


def test_https_streams_over_tls(certificate: tuple[Path, Path]) -> None:
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    server = ScriptedServer(
        [answer(chunked(*PAYLOADS)), answer(chunked(b"again"))], tls=server_tls(certificate)
    )
    results = post_all(server, [b"a", b"b"], ssl_context=trusting)
    assert results == [(200, b"".join(PAYLOADS)), (200, b"again")]
    assert server.connections == 1


def test_an_untrusted_certificate_is_a_connect_failure(certificate: tuple[Path, Path]) -> None:
    server = ScriptedServer([answer(chunked(b"never"))], tls=server_tls(certificate))
    (result,) = post_all(server, [b"a"])
    assert isinstance(result, str) and result.startswith("ClientConnectorError: Cannot connect to host")
    assert "CERTIFICATE_VERIFY_FAILED" in result


def test_a_server_that_never_answers_the_tls_handshake_times_out_the_connect() -> None:
    held: list[asyncio.StreamWriter] = []  # the accepted connections stay open, silent

    async def run() -> None:
        silent = await asyncio.start_server(lambda reader, writer: held.append(writer), "127.0.0.1", 0)
        port = silent.sockets[0].getsockname()[1]
        pool = pool_for(f"https://127.0.0.1:{port}/generate", connect_timeout=0.2)
        with pytest.raises(ClientConnectorError) as caught:
            await pool.post(b"a", lambda ns, data: None)
        silent.close()
        assert (
            str(caught.value)
            == f"Cannot connect to host 127.0.0.1:{port} ssl:default [no connection within 0.2 s]"
        )

    asyncio.run(run())
