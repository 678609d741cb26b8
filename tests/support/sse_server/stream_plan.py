"""A stream's plan: the frames due at each instant after dispatch, faults in place."""

from __future__ import annotations

from typing import NamedTuple

from tests.support.sse_server.generate_stream import GenerateFrames
from tests.support.sse_server.openai_stream import ChatFrames, CompletionsFrames, openai_head
from tests.support.sse_server.sse import sse_chunk
from tests.support.sse_server.stream_shape import StreamShape, chunk_token_counts


class Event(NamedTuple):
    """What the server writes at one scheduled instant: one ``transport.write`` per frame."""

    offset_s: float  # from dispatch
    frames: tuple[bytes, ...]
    tokens: int  # output tokens carried by the content frame
    content_frame: int  # index of the content frame in ``frames``; -1 if none
    action: str  # "" | "reset" | "stall"


def _malformed(data: str) -> str:
    """The event's JSON cut in half: a line no JSON parser accepts."""
    return data[: len(data) // 2] + "\n\n"


def render_stream(shape: StreamShape, rid: str, created: str, wall: str) -> list[Event]:
    """The events of one stream; ``rid`` must already be JSON-escaped.

    Content chunk ``j`` is due at ``first_token_s + j * chunk_gap_s``; the last one also
    carries the trailer (chat's finish chunk, the usage chunk, ``[DONE]``, the end of the
    chunked body). A fault takes the place of chunk ``after_chunks``, or of the trailer
    (one gap after the last chunk) when that is past the end; ``malformed`` breaks at the
    latest the last content chunk.
    """
    frames_of: CompletionsFrames | ChatFrames | GenerateFrames
    if shape.api == "generate":
        frames_of = GenerateFrames(shape, rid, wall)
    elif shape.api == "completions":
        frames_of = CompletionsFrames(shape, openai_head(shape, rid, created))
    else:
        frames_of = ChatFrames(shape, openai_head(shape, rid, created))
    counts = chunk_token_counts(shape.output_tokens, shape.tokens_per_chunk)
    fault = shape.fault if shape.fault is not None and shape.fault.kind != "http_error" else None
    fault_at = -1
    if fault is not None:
        fault_at = min(fault.after_chunks, len(counts) - 1 if fault.kind == "malformed" else len(counts))
    events: list[Event] = []
    sent = 0
    for j in range(len(counts) + 1):
        offset = shape.first_token_s + j * shape.chunk_gap_s
        if j == fault_at and fault is not None and fault.kind != "malformed":
            if fault.kind in ("reset", "stall"):
                events.append(Event(offset, (), 0, -1, fault.kind))
            else:
                events.append(Event(offset, tuple(frames_of.fault_frames(fault, j, offset, sent)), 0, -1, ""))
            break
        if j == len(counts):
            break
        final = j == len(counts) - 1 and fault_at != len(counts)
        data, content_frame = frames_of.content(j, offset, sent, counts[j], final)
        if j == fault_at:
            data[content_frame] = _malformed(data[content_frame])
        sent += counts[j]
        frames = [sse_chunk(event) for event in data]
        if final:
            frames += frames_of.trailer(offset, sent)
        tokens = counts[j] if content_frame >= 0 else 0
        events.append(Event(offset, tuple(frames), tokens, content_frame, ""))
    return events
