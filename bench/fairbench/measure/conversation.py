"""A multi-turn conversation, driven by one stream of a closed loop: its turns one after another, each
sent once the reply before it has come, with that reply in its input.

A turn's input is the conversation so far (``Prompt.earlier``: every earlier user turn and the server's
own reply to it), so its body can only be made when the turn is due; the first turn's is made before the
clock starts, as every request's is. A turn that fails ends its conversation: the turns after it would
send a reply that never came. The loop's error-rate rule counts every turn, and once it holds no further
turn is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from fairbench.measure.client import ApiFormat
from fairbench.measure.records import RequestRecord
from fairbench.measure.workload import Prompt


class TurnClient(Protocol):
    """What a conversation needs of its client (``client.StreamClient``)."""

    api: ApiFormat

    async def turn(self, prompt: Prompt, body: bytes, rid: str) -> tuple[RequestRecord, list[int] | str]:
        """Send one turn; its record and the server's reply."""
        ...


async def converse(
    client: TurnClient,
    first: tuple[Prompt, bytes, str],
    later: Sequence[tuple[Prompt, str]],
    *,
    think_time_s: float,
    ended: Callable[[RequestRecord], None],
    stopped: Callable[[], bool],
) -> None:
    """Send the ``first`` turn (its prompt, body and request id), then each of the ``later`` ones (prompt
    and request id), ``think_time_s`` after the reply before it ended, until a turn fails or ``stopped()``;
    ``ended`` is given each turn's record as it ends."""
    prompt, body, rid = first
    record, reply = await client.turn(prompt, body, rid)
    ended(record)
    earlier: tuple[tuple[list[int] | str, list[int] | str], ...] = ((prompt.prompt, reply),)
    for prompt, rid in later:
        if not record.success or stopped():
            return
        if think_time_s:
            await asyncio.sleep(think_time_s)
        turn = replace(prompt, earlier=earlier)
        record, reply = await client.turn(turn, client.api.body(turn, rid), rid)
        ended(record)
        earlier = (*earlier, (prompt.prompt, reply))
