"""The event bytes of SGLang's native /generate route."""

from __future__ import annotations

import json

from tests.support.sse_server.faults import FaultRule
from tests.support.sse_server.sse import CHUNKED_END, DONE_DATA, sse_chunk
from tests.support.sse_server.stream_shape import EOS_TOKEN_ID, TOKEN_IDS, StreamShape, token_text


class GenerateFrames:
    """http_server.py's /generate: orjson of the tokenizer manager's output dict, in its key
    order, with cumulative text and output_ids (non-incremental streaming, the default)."""

    def __init__(self, shape: StreamShape, rid: str, wall: str) -> None:
        self.shape = shape
        self.wall = wall
        self.text = ""
        self.ids: list[str] = []
        self.meta_head = f'"meta_info":{{"id":"{rid}","finish_reason":'
        self.meta_mid = (
            f',"prompt_tokens":{shape.prompt_tokens},"weight_version":"default","num_retractions":0'
            f',"reasoning_tokens":0'
        )

    def _chunk(self, j: int, offset: float, finish: str) -> str:
        tail = f',"completion_tokens":{len(self.ids)},"cached_tokens":0'
        if finish != "null":
            tail += f',"e2e_latency":{round(offset, 6)!r}'
        if j == 0:  # set on the first output the tokenizer manager sends
            tail += f',"response_sent_to_client_ts":{self.wall}'
        output_ids = ",".join(self.ids)
        return (
            f'data: {{"text":"{self.text}","output_ids":[{output_ids}],'
            f"{self.meta_head}{finish}{self.meta_mid}{tail}}}}}\n\n"
        )

    def content(self, j: int, offset: float, sent: int, count: int, final: bool) -> tuple[list[str], int]:
        self.text += token_text(sent, sent + count)
        self.ids += [str(TOKEN_IDS[i % 8]) for i in range(sent, sent + count)]
        if not final:
            finish = "null"
        elif self.shape.finish == "stop":
            finish = f'{{"type":"stop","matched":{EOS_TOKEN_ID}}}'
        else:
            finish = f'{{"type":"length","length":{len(self.ids)}}}'
        return [self._chunk(j, offset, finish)], 0

    def trailer(self, offset: float, sent: int) -> list[bytes]:
        return [sse_chunk(DONE_DATA), CHUNKED_END]

    def fault_frames(self, rule: FaultRule, j: int, offset: float, sent: int) -> list[bytes]:
        status = rule.effective_status
        message = json.dumps(rule.effective_message, ensure_ascii=False)
        if rule.kind == "abort":  # a scheduler abort with a status: a normal-looking chunk
            finish = f'{{"type":"abort","message":{message},"status_code":{status},"err_type":null}}'
            data = self._chunk(j, offset, finish)
        else:  # a ValueError inside the stream
            data = (
                f'data: {{"error":{{"message":{message},"type":"invalid_request_error","code":{status},'
                f'"retryable":false}}}}\n\n'
            )
        return [sse_chunk(data), sse_chunk(DONE_DATA), CHUNKED_END]
