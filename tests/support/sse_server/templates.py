"""Streams rendered once per shape, with the request id and clock readings filled in at send time."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Sequence

from tests.support.sse_server.stream_plan import Event, render_stream
from tests.support.sse_server.stream_shape import StreamShape

# Stream templates are rendered once per shape with these stand-ins and filled per request
# with bytes.replace. Control characters never occur raw in the JSON we emit, and each
# stand-in has the length of its value, so the chunk-size lines stay right.
_RID_SLOT = "\x01" * 32  # uuid4().hex, as SGLang names requests
_CREATED_SLOT = "\x02" * 10  # int(time.time())
_WALL_SLOT = "\x03" * 17  # f"{time.time():.6f}"
_RID_SLOT_B = _RID_SLOT.encode()
_CREATED_SLOT_B = _CREATED_SLOT.encode()
_WALL_SLOT_B = _WALL_SLOT.encode()

Substitutions = tuple[tuple[bytes, bytes], ...]
"""(stand-in, value) pairs that turn a template's frames into one request's frames."""


class StreamTemplates:
    """Rendered streams by shape, with the id and clock readings left as stand-ins.

    A benchmark's requests mostly share one shape, so rendering happens once and each
    request costs a few ``bytes.replace`` calls at send time. Huge templates (``/generate``
    repeats all output ids in every chunk) are not kept.
    """

    def __init__(self, max_entries: int = 64, max_template_bytes: int = 4 << 20) -> None:
        self._entries: OrderedDict[StreamShape, tuple[Event, ...]] = OrderedDict()
        self._max_entries = max_entries
        self._max_template_bytes = max_template_bytes

    def get(self, shape: StreamShape) -> tuple[Event, ...]:
        events = self._entries.get(shape)
        if events is not None:
            self._entries.move_to_end(shape)
            return events
        events = tuple(render_stream(shape, _RID_SLOT, _CREATED_SLOT, _WALL_SLOT))
        if sum(len(frame) for event in events for frame in event.frames) <= self._max_template_bytes:
            self._entries[shape] = events
            if len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return events

    def stream(self, shape: StreamShape, rid: str) -> tuple[Sequence[Event], Substitutions]:
        """One request's events and the substitutions that fill in its id and clock readings."""
        if len(rid) == len(_RID_SLOT) and rid.isascii() and rid.isalnum():
            events: Sequence[Event] = self.get(shape)
            rid_bytes = rid.encode()
        else:  # an id of another length or with characters to escape: render this one
            escaped = json.dumps(rid, ensure_ascii=False)[1:-1]
            events = render_stream(shape, escaped, _CREATED_SLOT, _WALL_SLOT)
            rid_bytes = _RID_SLOT_B  # nothing to fill in
        now = time.time()
        substitutions = (
            (_RID_SLOT_B, rid_bytes),
            (_CREATED_SLOT_B, b"%d" % int(now))
            if shape.api != "generate"
            else (_WALL_SLOT_B, b"%.6f" % (now + shape.first_token_s)),
        )
        return events, substitutions
