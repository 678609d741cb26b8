"""SGLang's JSON response bodies: the compact encoding, and its error bodies and error type names."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any


def json_bytes(value: Any) -> bytes:
    """orjson's compact form (what ORJSONResponse sends)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def error_type(status: int) -> str:
    """SGLang's error ``type`` for a status: its two spelled-out names, else the enum name."""
    return {400: "BadRequestError", 500: "InternalServerError"}.get(status) or HTTPStatus(status).name


def error_body(api: str, status: int, message: str) -> bytes:
    """SGLang's error bodies: ErrorResponse on the OpenAI routes, ``{"error": ...}`` on /generate."""
    if api == "generate":
        return json_bytes({"error": {"message": message}})
    return json_bytes(
        {"object": "error", "message": message, "type": error_type(status), "param": None, "code": status}
    )
