"""OpenAPI description of the OpenAI routes.

The handlers are plain Starlette routes that parse bodies with orjson for speed
(``gateway.openai_request``); this module documents the same contract, request and
response, for clients and for schema-driven testing.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

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
    "n": {"type": "integer", "minimum": 1, "maximum": 128},
    "temperature": {"type": "number"},
}


_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
_ERRORS = {
    str(status): {"description": text, "content": {"application/json": {"schema": _ERROR}}}
    for status, text in (
        (400, "Malformed request"),
        (401, "Missing or wrong API key"),
        (404, "Unknown model"),
        (413, "Body too large"),
        (502, "Every upstream attempt failed"),
        (503, "No pool can take the request"),
        (504, "Upstream timed out"),
    )
}
_SECURITY: list[dict[str, list[str]]] = [{"bearerAuth": []}]


def _body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "required": required, "properties": {**_COMMON, **properties}}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _post(summary: str, body: dict[str, Any], streams: bool) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if streams:
        # Server-sent events: no JSON schema describes the byte stream itself.
        content["text/event-stream"] = {}
    ok = {"description": "Routed response, with x-skyroute-* headers", "content": content}
    return {
        "post": {
            "summary": summary,
            "security": _SECURITY,
            **body,
            "responses": {"200": ok, **_ERRORS},
        }
    }


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


def paths() -> dict[str, Any]:
    """OpenAPI ``paths`` entries of the OpenAI routes."""
    models_ok = {
        "description": "The models this policy serves",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
    return {
        "/v1/chat/completions": _post("Chat completion, streamed (SSE) or not", CHAT, streams=True),
        "/v1/completions": _post(
            "Text completion, streamed (SSE) or not", COMPLETION, streams=True
        ),
        "/v1/embeddings": _post("Embeddings", EMBEDDING, streams=False),
        "/v1/models": {
            "get": {
                "summary": "List models",
                "security": _SECURITY,
                "responses": {"200": models_ok, "401": _ERRORS["401"]},
            }
        },
        "/v1/models/{model}": {
            "get": {
                "summary": "Retrieve a model",
                "security": _SECURITY,
                "parameters": [
                    {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {
                        "description": "The model, if the caller may use it",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "401": _ERRORS["401"],
                    "404": _ERRORS["404"],
                },
            }
        },
    }


def security_schemes() -> dict[str, Any]:
    """The bearer-token scheme every /v1 route uses."""
    return {"bearerAuth": {"type": "http", "scheme": "bearer"}}


# What any operation outside ``/v1`` may answer besides its own documented codes: the
# error tree's 4xx (gateway.http_errors), all in OpenAI's error shape.
_ADMIN_ERRORS = {
    "400": _ERRORS["400"],
    "401": _ERRORS["401"],
    "403": {**_ERRORS["401"], "description": "The credential may not do this"},
    "404": {**_ERRORS["404"], "description": "No such pool, key, tenant or rollout"},
    "409": {**_ERRORS["400"], "description": "Conflicts with the current state (a rollout)"},
    "503": {**_ERRORS["503"], "description": "The live tables or the store do not answer"},
}


def document_errors(schema: dict[str, Any], *, prometheus_type: str) -> None:
    """Complete the operations FastAPI documented from the admin and ops routes, in
    place: every error status the error tree can answer with, and the Prometheus text
    type of ``/metrics`` (its ``prometheus_type``)."""
    for path, item in schema.get("paths", {}).items():
        if path.startswith("/v1/"):
            continue
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            for status, response in _ADMIN_ERRORS.items():
                responses.setdefault(status, response)
    metrics = schema.get("paths", {}).get("/metrics", {}).get("get")
    if metrics is not None:
        metrics["responses"]["200"] = {
            "description": "Prometheus text exposition",
            "content": {prometheus_type: {"schema": {"type": "string"}}},
        }


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a route that validates ``model`` itself (the body
    is read raw, so FastAPI cannot document it)."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }
