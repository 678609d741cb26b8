"""One greedy answer from a server through one of SGLang's three generation APIs, not streamed: the text,
and where the server gives them, the output's token ids and each token's log-probability.

Bodies (SGLang 0.5.23's protocol): temperature 0, at most ``max_tokens``, no ``ignore_eos`` (an answer
ends where the model ends it), and the asks for what a comparison token by token needs:

- ``chat``: ``/v1/chat/completions``, one user message through the server's chat template;
  ``logprobs: true, top_logprobs: 1``, ``return_token_ids: true`` (``choices[0].response_token_ids``);
- ``completions``: ``/v1/completions``, the prompt as text; ``logprobs: 1``, ``return_token_ids: true``
  (``choices[0].token_ids``);
- both with ``return_spec_tokens_details: true``: under speculative decoding, the request's counts
  (``sglext.spec_tokens_details``: ``spec_accept_length``, ``spec_verify_ct``...);
- ``generate``: ``/generate``, the prompt as ``text``; ``return_logprob: true``
  (``meta_info.output_token_logprobs``: ``[logprob, token id, text]`` each), ``output_ids``.

A server that gives no token ids is compared by its tokens' texts (its log-probabilities' ``token``), one
that gives neither by characters (``Reply.unit``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import aiohttp

from fairbench.measure.workload import CHAT

TOKENS = "tokens"
CHARACTERS = "characters"

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "generate": "/generate"}


class AnswerError(Exception):
    """The server did not answer: the message is one line, with its status and the start of its body."""


@dataclass
class Reply:
    text: str
    token_ids: list[int] | None = None
    tokens: list[str] | None = None
    """Each output token's text, from the log-probabilities; None where the server gave none."""
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    meta_info: dict[str, Any] = field(default_factory=dict)
    """SGLang's speculative decoding counts of the request (``spec_*``), where it reports them."""

    @property
    def sequence(self) -> list[int] | list[str] | str:
        """What a comparison goes through position by position: token ids, else token texts, else the
        text's characters."""
        if self.token_ids is not None:
            return self.token_ids
        if self.tokens is not None:
            return self.tokens
        return self.text

    @property
    def unit(self) -> str:
        return CHARACTERS if self.token_ids is None and self.tokens is None else TOKENS

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "tokens": self.tokens,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
            **({"meta_info": self.meta_info} if self.meta_info else {}),
        }


def body(api: str, prompt: str, max_tokens: int, model: str | None) -> dict[str, Any]:
    """The request body of a greedy answer to ``prompt`` through ``api``."""
    if api == CHAT:
        return {
            **({"model": model} if model else {}),
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 1,
            "return_token_ids": True,
            "return_spec_tokens_details": True,
        }
    if api == "completions":
        return {
            **({"model": model} if model else {}),
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "logprobs": 1,
            "return_token_ids": True,
            "return_spec_tokens_details": True,
        }
    return {
        "text": prompt,
        "sampling_params": {"temperature": 0, "max_new_tokens": max_tokens},
        "return_logprob": True,
    }


def reply_of(api: str, answer: object) -> Reply:
    """The reply in a response body of ``api``; AnswerError where it lacks the answer's text."""
    try:
        if api == "generate":
            return _generate_reply(answer)
        choice = answer["choices"][0]  # type: ignore[index]
        reply = _chat_reply(choice) if api == CHAT else _completion_reply(choice)
        details = (answer.get("sglext") or {}).get("spec_tokens_details")  # type: ignore[attr-defined]
        reply.meta_info = {key: value for key, value in (details or {}).items() if key.startswith("spec_")}
        return reply
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise AnswerError(
            f"no answer in the response ({type(exc).__name__}: {exc}): {_start(answer)}"
        ) from None


def _chat_reply(choice: dict[str, Any]) -> Reply:
    content = (choice.get("logprobs") or {}).get("content")
    return Reply(
        text=str(choice["message"]["content"] or ""),
        token_ids=_ints(choice.get("response_token_ids")),
        tokens=None if content is None else [str(entry["token"]) for entry in content],
        logprobs=None if content is None else [float(entry["logprob"]) for entry in content],
        finish_reason=choice.get("finish_reason"),
    )


def _completion_reply(choice: dict[str, Any]) -> Reply:
    logprobs = choice.get("logprobs")
    return Reply(
        text=str(choice["text"]),
        token_ids=_ints(choice.get("token_ids")),
        tokens=None if logprobs is None else [str(token) for token in logprobs["tokens"]],
        logprobs=None if logprobs is None else [float(value) for value in logprobs["token_logprobs"]],
        finish_reason=choice.get("finish_reason"),
    )


def _generate_reply(answer: Any) -> Reply:
    meta = dict(answer["meta_info"])
    entries = meta.pop("output_token_logprobs", None)
    finish = meta.get("finish_reason")
    return Reply(
        text=str(answer["text"]),
        token_ids=_ints(answer.get("output_ids")),
        tokens=None
        if entries is None
        else [str(entry[2]) for entry in entries if entry[2] is not None] or None,
        logprobs=None if entries is None else [float(entry[0]) for entry in entries],
        finish_reason=finish.get("type") if isinstance(finish, dict) else None,
        meta_info={key: value for key, value in meta.items() if key.startswith("spec_")},
    )


def _ints(value: object) -> list[int] | None:
    return None if value is None else [int(item) for item in value]  # type: ignore[attr-defined]


def _start(answer: object, limit: int = 200) -> str:
    text = str(answer).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


async def ask(
    session: aiohttp.ClientSession,
    base_url: str,
    api: str,
    prompt: str,
    *,
    max_tokens: int,
    model: str | None,
) -> Reply:
    """The server's greedy answer to ``prompt``; AnswerError (one line) where it gives none."""
    url = base_url.rstrip("/") + PATHS[api]
    try:
        async with session.post(url, json=body(api, prompt, max_tokens, model)) as response:
            text = await response.text()
            if response.status != 200:
                raise AnswerError(f"{PATHS[api]}: HTTP {response.status}: {_start(text)}")
            try:
                answer = await response.json(content_type=None)
            except ValueError:
                raise AnswerError(f"{PATHS[api]}: not JSON: {_start(text)}") from None
    except aiohttp.ClientError as exc:
        raise AnswerError(f"{PATHS[api]}: {type(exc).__name__}: {exc}") from None
    except TimeoutError:
        raise AnswerError(f"{PATHS[api]}: no answer within the time limit") from None
    return reply_of(api, answer)
