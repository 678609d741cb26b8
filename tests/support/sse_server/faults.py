"""The scripted faults: what each one does to a stream, and which requests it strikes."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

FAULT_KINDS = ("http_error", "malformed", "reset", "stall", "abort", "error_event")


@dataclass(frozen=True)
class FaultRule:
    """One fault and the requests it strikes.

    ``kind``: ``http_error`` (answer ``status`` with an SGLang error body instead of a
    stream), ``malformed`` (content chunk ``after_chunks`` is sent with its JSON cut in
    half; the stream then goes on), ``reset`` (TCP reset where that chunk was due),
    ``stall`` (nothing more is sent; the connection stays open), ``abort`` (what SGLang
    sends when the scheduler aborts a request with a status, default 503: on the OpenAI
    routes ``data: {"error": {...}}``, the usage chunk if asked for and ``[DONE]``; on
    ``/generate`` a chunk whose ``meta_info.finish_reason`` is ``{"type": "abort", ...}``,
    then ``[DONE]``), ``error_event`` (what SGLang sends when an exception ends a started
    stream, default 400: ``data: {"error": {...}}`` and ``[DONE]`` on every route; with
    ``after=0`` SGLang would answer HTTP 400 on the OpenAI routes, use ``http_error``).
    A fault whose ``after_chunks`` is past the last chunk strikes one gap after it, in
    place of the finish/usage/``[DONE]`` trailer (``malformed``: the last chunk).

    Requests are numbered from 1 in arrival order (streaming API requests only). With
    ``every`` N the rule strikes requests N, 2N, ...; with ``fraction`` F a seeded random
    F of them; with neither, all of them. The first matching rule wins.
    """

    kind: str
    every: int = 0
    fraction: float = 0.0
    after_chunks: int = 1
    status: int = 0  # 0: 500 for http_error, 503 for abort, 400 for error_event
    message: str = ""

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r}: must be one of {', '.join(FAULT_KINDS)}")
        if self.every < 0 or not 0.0 <= self.fraction <= 1.0 or self.after_chunks < 0:
            raise ValueError(f"fault {self.kind}: every >= 0, 0 <= fraction <= 1 and after >= 0")
        if self.status and not 400 <= self.status <= 599:
            raise ValueError(f"fault {self.kind}: status {self.status} is not an HTTP error status")

    @property
    def effective_status(self) -> int:
        return self.status or {"http_error": 500, "abort": 503, "error_event": 400}.get(self.kind, 0)

    @property
    def effective_message(self) -> str:
        return self.message or f"fairbench test server: injected {self.kind}"

    def to_spec(self) -> str:
        """The ``--fault`` argument that parses back to this rule."""
        parts = [self.kind]
        if self.every:
            parts.append(f"every={self.every}")
        if self.fraction:
            parts.append(f"fraction={self.fraction!r}")
        if self.after_chunks != 1:
            parts.append(f"after={self.after_chunks}")
        if self.status:
            parts.append(f"status={self.status}")
        if self.message:
            parts.append(f"message={self.message}")
        return ":".join(parts)

    @classmethod
    def parse(cls, spec: str) -> FaultRule:
        """``KIND[:every=N][:fraction=F][:after=K][:status=S][:message=TEXT]``."""
        kind, *options = spec.split(":")
        values: dict[str, Any] = {}
        for i, option in enumerate(options):
            key, sep, value = option.partition("=")
            if not sep:
                raise ValueError(f"--fault {spec}: option {option!r} is not key=value")
            if key == "message":  # the message may itself contain colons
                values["message"] = ":".join([value, *options[i + 1 :]])
                break
            converters: dict[str, tuple[str, Callable[[str], Any]]] = {
                "every": ("every", int),
                "fraction": ("fraction", float),
                "after": ("after_chunks", int),
                "status": ("status", int),
            }
            if key not in converters:
                raise ValueError(f"--fault {spec}: unknown option {key!r}")
            name, convert = converters[key]
            try:
                values[name] = convert(value)
            except ValueError:
                raise ValueError(f"--fault {spec}: {key}={value!r} is not a number") from None
        return cls(kind=kind, **values)


class FaultPicker:
    """Picks the rule that strikes each request; fractions draw from one seeded generator."""

    def __init__(self, rules: Sequence[FaultRule], seed: int) -> None:
        self._rules = rules
        self._random = random.Random(seed)

    def pick(self, request_number: int) -> FaultRule | None:
        for rule in self._rules:
            if rule.every:
                if request_number % rule.every == 0:
                    return rule
            elif rule.fraction:
                if self._random.random() < rule.fraction:
                    return rule
            else:
                return rule
        return None
