"""SSE events on the wire: each event one chunk of the chunked transfer encoding, as uvicorn frames it."""

from __future__ import annotations

CHUNKED_END = b"0\r\n\r\n"
DONE_DATA = "data: [DONE]\n\n"


def sse_chunk(data: str) -> bytes:
    """One SSE event as one chunk of the chunked transfer encoding."""
    payload = data.encode()
    return b"%x\r\n%b\r\n" % (len(payload), payload)
