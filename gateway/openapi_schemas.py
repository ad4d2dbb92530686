"""OpenAPI request-body schemas for the OpenAI routes.

The handlers parse bodies with orjson for speed (``gateway.openai_request``); these
schemas document the same contract for clients and for schema-driven testing.
"""

from __future__ import annotations

from typing import Any

_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string"},
        "content": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "object"}},
                {"type": "null"},
            ]
        },
    },
}
_COMMON = {
    "model": {"type": "string", "minLength": 1},
    "stream": {"type": "boolean"},
    "max_tokens": {"type": "integer", "minimum": 1},
    "n": {"type": "integer", "minimum": 1, "maximum": 1},
    "temperature": {"type": "number"},
}


def _body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "required": required, "properties": {**_COMMON, **properties}}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


CHAT = _body(
    ["model", "messages"],
    {
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
        "max_completion_tokens": {"type": "integer", "minimum": 1},
    },
)
COMPLETION = _body(
    ["model", "prompt"],
    {"prompt": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}},
)
EMBEDDING = _body(
    ["model", "input"],
    {"input": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}},
)
