"""Parse and check an OpenAI request body, cheaply: orjson and a few type checks.

The body is not validated into pydantic models on the hot path (that alone would cost
more than the whole routing decision); the OpenAPI schema still documents it
(``gateway.openapi_schemas``). Anything malformed raises InvalidRequest, which the
gateway answers with a 400 in OpenAI's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from base.errors import InvalidRequest

# OpenAI's own bound on ``n``; a tenant's ``max_n`` lowers it.
MAX_N = 128


class Operation(StrEnum):
    """The OpenAI operation, named as the GenAI semantic conventions name it."""

    CHAT = "chat"
    COMPLETION = "text_completion"
    EMBEDDING = "embeddings"


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """One checked request. ``prompt_tokens`` is an estimate (≈ 4 characters a token);
    ``max_tokens`` is None when the client set no limit; ``n`` is the number of choices
    asked for (1 when unset)."""

    operation: Operation
    model: str
    stream: bool
    prompt_tokens: int
    max_tokens: int | None
    payload: dict[str, Any]
    n: int = 1

    def upstream_body(self, upstream_model: str) -> bytes:
        """The body to forward, with the pool's own model name."""
        if self.payload.get("model") == upstream_model:
            return orjson.dumps(self.payload)
        return orjson.dumps({**self.payload, "model": upstream_model})


def _chars(value: Any, param: str) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        total = 0
        for part in value:
            if isinstance(part, str):
                total += len(part)
            elif isinstance(part, dict):
                text = part.get("text")
                total += len(text) if isinstance(text, str) else 0
            elif isinstance(part, int):
                total += 4  # a pre-tokenised prompt: one token per item
            else:
                raise InvalidRequest(f"'{param}' has an item of an unsupported type", param=param)
        return total
    raise InvalidRequest(f"'{param}' must be a string or an array", param=param)


def _positive_int(payload: dict[str, Any], name: str) -> int | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequest(f"'{name}' must be a positive integer", param=name)
    return value


def parse_request(body: bytes, operation: Operation) -> ParsedRequest:
    """Parse an OpenAI request body. Raises InvalidRequest naming the bad field."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("you must provide a model parameter", param="model")
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")

    if operation is Operation.CHAT:
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequest("'messages' must be a non-empty array", param="messages")
        chars = 0
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise InvalidRequest(
                    f"messages[{i}] must be an object with a 'role'", param=f"messages[{i}]"
                )
            chars += _chars(message.get("content"), f"messages[{i}].content")
    elif operation is Operation.COMPLETION:
        if "prompt" not in payload:
            raise InvalidRequest("you must provide a prompt parameter", param="prompt")
        chars = _chars(payload["prompt"], "prompt")
    else:
        if "input" not in payload:
            raise InvalidRequest("you must provide an input parameter", param="input")
        chars = _chars(payload["input"], "input")
        if stream:
            raise InvalidRequest("embeddings cannot be streamed", param="stream")

    max_tokens = _positive_int(payload, "max_completion_tokens") or _positive_int(
        payload, "max_tokens"
    )
    n = _positive_int(payload, "n") or 1
    if n > MAX_N:
        raise InvalidRequest(f"n must be at most {MAX_N}", param="n")
    if n > 1 and operation is Operation.EMBEDDING:
        raise InvalidRequest("embeddings take no 'n'", param="n")
    return ParsedRequest(
        operation=operation,
        model=model,
        stream=stream,
        prompt_tokens=max(1, (chars + 3) // 4),
        max_tokens=max_tokens,
        payload=payload,
        n=n,
    )
