"""Validation of OpenAI-style request bodies for the simulated engine.

Hand-rolled rather than pydantic: the engine must sustain thousands of requests/s on two
cores, and it only needs a handful of fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

# The engine's tokenizer stand-in: a token is about 4 characters of English text.
CHARS_PER_TOKEN = 4


class InvalidRequest(Exception):
    """A request the engine rejects, rendered as an OpenAI error body.

    Attributes:
        status: HTTP status to answer with.
        message, param, code: the OpenAI ``error`` fields.
        type: the OpenAI error ``type``.
    """

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """What the engine needs from a chat or text completion request.

    Attributes:
        prompt_tokens: approximate prompt length, tokens (``ceil(chars / 4)``, at least 1).
        max_tokens: requested completion cap, tokens, or None to let the engine draw one.
        stream: answer with server-sent events.
        include_usage: ``stream_options.include_usage``: append a usage chunk to the stream.
        prompt_text: the prompt as one string, for the prefix cache: a chat's messages as
            ``role\ncontent\n`` each, so conversations sharing leading messages share a
            leading string; token-id prompts as their decimal text.
        seed: the request's ``seed``, if an integer: as engines sample reproducibly for a
            given seed, the same seed on the same engine gives the same text.
    """

    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    prompt_text: str = ""
    seed: int | None = None


def parse_body(body: bytes, served_model: str) -> dict[str, Any]:
    """Decode a JSON object body and check its ``model`` names the served model.

    Raises:
        InvalidRequest: 400 on bad JSON or a missing ``model``; 404 on another model.
    """
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(400, f"invalid JSON body: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidRequest(400, "request body must be a JSON object")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest(400, "'model' is a required string", param="model")
    if model != served_model:
        raise InvalidRequest(
            404, f"The model `{model}` does not exist.", param="model", code="model_not_found"
        )
    return payload


def tokens_for_chars(chars: int) -> int:
    """Approximate token count of ``chars`` characters of text: ``ceil(chars / 4)``, at least 1."""
    return max(1, -(-chars // CHARS_PER_TOKEN))


def parse_generation(payload: dict[str, Any], *, chat: bool) -> GenerationRequest:
    """Extract a :class:`GenerationRequest` from a chat (``chat``) or completions body.

    Raises:
        InvalidRequest: 400 on missing ``messages``/``prompt``, ``n`` other than 1, or a
            non-positive or non-integer ``max_tokens``/``max_completion_tokens``.
    """
    chars, text = _chat_prompt(payload) if chat else _completion_prompt(payload)
    n = payload.get("n")
    if n is not None and n != 1:
        raise InvalidRequest(400, "only n=1 is supported", param="n")
    max_tokens = _optional_positive_int(payload, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _optional_positive_int(payload, "max_tokens")
    options = payload.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    stream = bool(payload.get("stream"))
    seed = payload.get("seed")
    seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
    return GenerationRequest(tokens_for_chars(chars), max_tokens, stream, include_usage, text, seed)


def parse_embedding_inputs(payload: dict[str, Any]) -> list[str]:
    """The ``input`` of an embeddings body as a list of strings (token-id lists are rendered
    as their decimal text, so they embed deterministically too).

    Raises:
        InvalidRequest: 400 if ``input`` is missing, empty or of the wrong type.
    """
    raw = payload.get("input")
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw:
        if all(isinstance(item, str) for item in raw):
            return raw
        if all(isinstance(item, int) for item in raw):
            return [" ".join(map(str, raw))]
        if all(isinstance(item, list) for item in raw):
            return [" ".join(map(str, item)) for item in raw]
    raise InvalidRequest(400, "'input' must be a string or a non-empty list", param="input")


def _chat_prompt(payload: dict[str, Any]) -> tuple[int, str]:
    """Characters of the messages' text content, and the rendered prompt."""
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(400, "'messages' must be a non-empty list", param="messages")
    chars = 0
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            raise InvalidRequest(400, "each message must be an object", param="messages")
        content = message.get("content")
        role = message.get("role")
        parts.append(f"{role}\n")
        if isinstance(content, str):
            chars += len(content)
            parts.append(content)
        elif isinstance(content, list):
            # Multi-part content: only text parts count towards the prompt.
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    chars += len(part["text"])
                    parts.append(part["text"])
        parts.append("\n")
    return chars, "".join(parts)


def _completion_prompt(payload: dict[str, Any]) -> tuple[int, str]:
    """Characters of the prompt (4 per token id), and the prompt as one string."""
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        return len(prompt), prompt
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return sum(len(p) for p in prompt), "".join(prompt)
        if all(isinstance(p, int) for p in prompt):
            # Already token ids.
            return CHARS_PER_TOKEN * len(prompt), " ".join(map(str, prompt))
    raise InvalidRequest(400, "'prompt' must be a string or a list of strings", param="prompt")


def _optional_positive_int(payload: dict[str, Any], key: str) -> int | None:
    value = payload.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequest(400, f"'{key}' must be an integer >= 1", param=key)
    return value
