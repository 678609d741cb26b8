"""The event bytes of SGLang's OpenAI routes, /v1/completions and /v1/chat/completions."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from tests.support.sse_server.faults import FaultRule
from tests.support.sse_server.json_bodies import error_type
from tests.support.sse_server.sse import CHUNKED_END, DONE_DATA, sse_chunk
from tests.support.sse_server.stream_shape import EOS_TOKEN_ID, StreamShape, token_text


def _usage_full(prompt_tokens: int, completion_tokens: int) -> str:
    """``UsageInfo.model_dump_json()`` (or msgspec of ``model_dump()``): None fields kept."""
    return (
        f'{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens + completion_tokens},'
        f'"completion_tokens":{completion_tokens},"prompt_tokens_details":null,"reasoning_tokens":0,'
        f'"completion_tokens_details":null}}'
    )


def openai_head(shape: StreamShape, rid: str, created: str) -> str:
    """'data: {"id":...,"model":...,' up to the choices: the same on every chunk of a stream."""
    kind = "text_completion" if shape.api == "completions" else "chat.completion.chunk"
    model = json.dumps(shape.model, ensure_ascii=False)
    return f'data: {{"id":"{rid}","object":"{kind}","created":{created},"model":{model},'


class _OpenAIFrames:
    """What /v1/completions and /v1/chat/completions have in common."""

    def __init__(self, shape: StreamShape, head: str) -> None:
        self.shape = shape
        self.head = head  # 'data: {"id":...,"model":...,' up to the choices

    def _usage_chunk(self, completion_tokens: int) -> list[bytes]:
        return []

    def fault_frames(self, rule: FaultRule, j: int, offset: float, sent: int) -> list[bytes]:
        """``create_streaming_error_response`` (note ``json.dumps``'s default separators),
        then what SGLang still sends after it."""
        status = rule.effective_status
        # An abort names its HTTPStatus; an exception gets the default BadRequestError.
        kind = HTTPStatus(status).name if rule.kind == "abort" else error_type(status)
        error: dict[str, Any] = {
            "object": "error",
            "message": rule.effective_message,
            "type": kind,
            "param": None,
            "code": status,
        }
        frames = [sse_chunk(f"data: {json.dumps({'error': error})}\n\n")]
        if rule.kind == "abort":  # the loop breaks; the usage chunk still follows
            frames += self._usage_chunk(sent)
        return [*frames, sse_chunk(DONE_DATA), CHUNKED_END]


class CompletionsFrames(_OpenAIFrames):
    """serving_completions.py: pydantic ``model_dump_json`` of CompletionStreamResponse."""

    def content(self, j: int, offset: float, sent: int, count: int, final: bool) -> tuple[list[str], int]:
        shape = self.shape
        done = sent + count
        finish = f'"{shape.finish}"' if final else "null"
        matched = str(EOS_TOKEN_ID) if final and shape.finish == "stop" else "null"
        usage = _usage_full(shape.prompt_tokens, done) if shape.continuous_usage else "null"
        data = (
            f'{self.head}"choices":[{{"index":0,"text":"{token_text(sent, done)}","logprobs":null,'
            f'"finish_reason":{finish},"matched_stop":{matched}}}],"usage":{usage}}}\n\n'
        )
        return [data], 0

    def _usage_chunk(self, completion_tokens: int) -> list[bytes]:
        if not self.shape.include_usage:
            return []
        prompt_tokens = self.shape.prompt_tokens
        # model_dump_json(exclude_none=True): the None detail fields disappear.
        usage = (
            f'{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens + completion_tokens},'
            f'"completion_tokens":{completion_tokens},"reasoning_tokens":0}}'
        )
        return [sse_chunk(f'{self.head}"choices":[],"usage":{usage}}}\n\n')]

    def trailer(self, offset: float, sent: int) -> list[bytes]:
        return [*self._usage_chunk(sent), sse_chunk(DONE_DATA), CHUNKED_END]


class ChatFrames(_OpenAIFrames):
    """serving_chat.py: content chunks from sse_utils.build_sse_content (msgspec: the delta
    always has reasoning_content and omits None role/content, the choice keeps every field,
    the chunk omits a None usage); the usage chunk is pydantic with None fields kept."""

    def content(self, j: int, offset: float, sent: int, count: int, final: bool) -> tuple[list[str], int]:
        events = []
        if j == 0:  # the role chunk goes out with the first output
            events.append(
                f'{self.head}"choices":[{{"index":0,"delta":{{"reasoning_content":null,"role":"assistant",'
                f'"content":""}},"logprobs":null,"finish_reason":null,"matched_stop":null}}]}}\n\n'
            )
        text = token_text(sent, sent + count)
        if not text:  # SGLang sends no content chunk for an empty delta
            return events, -1
        usage = ""
        if self.shape.continuous_usage:
            usage = f',"usage":{_usage_full(self.shape.prompt_tokens, sent + count)}'
        events.append(
            f'{self.head}"choices":[{{"index":0,"delta":{{"reasoning_content":null,"content":"{text}"}},'
            f'"logprobs":null,"finish_reason":null,"matched_stop":null}}]{usage}}}\n\n'
        )
        return events, len(events) - 1

    def _usage_chunk(self, completion_tokens: int) -> list[bytes]:
        if not self.shape.include_usage:
            return []
        usage = _usage_full(self.shape.prompt_tokens, completion_tokens)
        return [sse_chunk(f'{self.head}"choices":[],"usage":{usage}}}\n\n')]

    def trailer(self, offset: float, sent: int) -> list[bytes]:
        matched = str(EOS_TOKEN_ID) if self.shape.finish == "stop" else "null"
        finish = sse_chunk(
            f'{self.head}"choices":[{{"index":0,"delta":{{"reasoning_content":null}},"logprobs":null,'
            f'"finish_reason":"{self.shape.finish}","matched_stop":{matched}}}]}}\n\n'
        )
        return [finish, *self._usage_chunk(sent), sse_chunk(DONE_DATA), CHUNKED_END]
