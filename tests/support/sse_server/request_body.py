"""What a streaming request asks for, read from its JSON body the way SGLang reads it."""

from __future__ import annotations

import json
import uuid
from typing import Any, NamedTuple

from tests.support.sse_server.http_messages import HttpError

DEFAULT_COMPLETION_MAX_TOKENS = 16  # CompletionRequest.max_tokens default
DEFAULT_CHAT_MAX_TOKENS = 16  # SGLang's is "up to the context length"; a test wants a number
DEFAULT_GENERATE_MAX_NEW_TOKENS = 128  # SamplingParams.max_new_tokens default


class StreamRequest(NamedTuple):
    rid: str
    model: str
    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool
    include_usage: bool
    continuous_usage: bool


def parse_stream_request(api: str, raw_body: bytes) -> StreamRequest:
    """The request to ``api`` (completions, chat or generate); HttpError 400 if SGLang would refuse it."""
    try:
        body = json.loads(raw_body)
    except (ValueError, UnicodeDecodeError):
        raise HttpError(400, "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise HttpError(400, "request body must be a JSON object")
    if not body.get("stream"):
        raise HttpError(400, "the fairbench test server only streams: send stream=true")
    prompt_tokens, max_tokens, ignore_eos = _read_lengths(api, body)
    include_usage = continuous_usage = False
    if api != "generate":
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise HttpError(400, "stream_options must be an object")
        include_usage = bool(options.get("include_usage"))
        continuous_usage = bool(options.get("continuous_usage_stats"))
    rid = body.get("rid")  # SGLang names the request (and its chunks) after it if given
    if rid is None:
        rid = uuid.uuid4().hex
    elif not isinstance(rid, str):
        raise HttpError(400, "rid must be a string")
    model = str(body.get("model") or "default")
    return StreamRequest(rid, model, prompt_tokens, max_tokens, ignore_eos, include_usage, continuous_usage)


def _read_lengths(api: str, body: dict[str, Any]) -> tuple[int, int, bool]:
    """(prompt tokens, requested output tokens, ignore_eos) of a request body."""
    if api == "completions":
        prompt = body.get("prompt")
        if isinstance(prompt, str) and prompt:
            prompt_tokens = _count_words(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_tokens = len(prompt)
        elif not prompt:
            raise HttpError(400, "Prompt cannot be empty")
        else:
            raise HttpError(400, "the test server takes one prompt: a string or a list of token ids")
        return (
            prompt_tokens,
            _int_field(body, "max_tokens", DEFAULT_COMPLETION_MAX_TOKENS),
            bool(body.get("ignore_eos")),
        )
    if api == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise HttpError(400, "messages must be a non-empty list")
        words = 0
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                words += len(content.split())
            elif isinstance(content, list):
                words += sum(
                    len(str(part.get("text", "")).split()) for part in content if isinstance(part, dict)
                )
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        max_tokens = _int_field({"max_tokens": max_tokens}, "max_tokens", DEFAULT_CHAT_MAX_TOKENS)
        return max(1, words), max_tokens, bool(body.get("ignore_eos"))
    input_ids = body.get("input_ids")
    text = body.get("text")
    if isinstance(input_ids, list) and input_ids and all(isinstance(t, int) for t in input_ids):
        prompt_tokens = len(input_ids)
    elif isinstance(text, str) and text:
        prompt_tokens = _count_words(text)
    else:
        raise HttpError(400, "the test server takes one prompt: text or a list of input_ids")
    sampling_params = body.get("sampling_params") or {}
    if not isinstance(sampling_params, dict):
        raise HttpError(400, "sampling_params must be an object")
    max_new_tokens = _int_field(sampling_params, "max_new_tokens", DEFAULT_GENERATE_MAX_NEW_TOKENS)
    return prompt_tokens, max_new_tokens, bool(sampling_params.get("ignore_eos"))


def _count_words(text: str) -> int:
    return max(1, len(text.split()))


def _int_field(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise HttpError(400, f"{name} must be a positive integer")
    return value
