"""Response bodies of the simulated engine, shaped like vLLM's OpenAI-compatible server.

Everything here returns ready-to-send ``bytes``: the engine's hot path serialises each
response once with orjson and streams pre-built SSE frames.
"""

from __future__ import annotations

import base64
import hashlib
import random

import numpy as np
import numpy.typing as npt
import orjson

from simengine.parsing import InvalidRequest

EMBEDDING_DIM = 16
DONE_FRAME = b"data: [DONE]\n\n"

# Filler vocabulary: one word is one simulated token.
WORDS = (
    "the", "model", "routes", "tokens", "to", "a", "cheaper", "pool", "while", "latency",
    "stays", "within", "its", "budget", "and", "every", "replica", "keeps", "batch", "slots",
    "busy", "so", "that", "goodput", "rises", "as", "prices", "fall", "across", "clouds",
    "of", "GPUs", "in", "regions", "near", "users", "who", "wait", "for", "answers",
    "streamed", "one", "word", "at", "time", "through", "gateway", "cache", "queue", "signal",
)  # fmt: skip
_WORD_JSON = tuple(orjson.dumps(" " + word) for word in WORDS)


class TextTape:
    """A fixed cyclic sequence of filler tokens drawn once from the engine's seeded RNG.

    A completion is a window of the tape, so a request costs one RNG draw and one slice no
    matter how many tokens it generates.
    """

    SIZE = 4096

    def __init__(self, rng: random.Random) -> None:
        ids = [rng.randrange(len(WORDS)) for _ in range(self.SIZE)]
        self._ids = ids + ids  # doubled so any window shorter than SIZE is one slice
        self._text = "".join(" " + WORDS[i] for i in self._ids)
        offsets = [0]
        for i in self._ids:
            offsets.append(offsets[-1] + len(WORDS[i]) + 1)
        self._offsets = offsets

    def text(self, start: int, tokens: int) -> str:
        """Concatenated text of ``tokens`` tokens starting at tape position ``start``."""
        start %= self.SIZE
        cycles, rest = divmod(tokens, self.SIZE)
        window = self._text[self._offsets[start] : self._offsets[start + rest]]
        if cycles == 0:
            return window
        cycle = self._text[self._offsets[start] : self._offsets[start + self.SIZE]]
        return cycle * cycles + window

    def word_ids(self, start: int, tokens: int) -> list[int]:
        """Vocabulary indices of ``tokens`` tokens starting at tape position ``start``."""
        start %= self.SIZE
        cycles, rest = divmod(tokens, self.SIZE)
        ids = self._ids[start : start + self.SIZE] * cycles if cycles else []
        return ids + self._ids[start : start + rest]


class StreamFrames:
    """SSE frames of one streamed chat (``chat.completion.chunk``) or text completion."""

    def __init__(self, *, chat: bool, rid: str, created: int, model: str) -> None:
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._chat = chat
        self._head = {"id": rid, "object": obj, "created": created, "model": model}
        # Token frames differ only in their text, so they are spliced from fixed bytes.
        head = orjson.dumps(self._head)[:-1]
        field = b'"delta":{"content":' if chat else b'"text":'
        self._token_prefix = b"data: " + head + b',"choices":[{"index":0,' + field
        close = b"}" if chat else b""
        self._token_suffix = close + b',"logprobs":null,"finish_reason":null}]}\n\n'

    def role(self) -> bytes:
        """The opening chat frame announcing ``delta.role = "assistant"``."""
        delta = {"role": "assistant", "content": ""}
        return self._frame([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])

    def tokens(self, word_ids: list[int]) -> list[bytes]:
        """One frame per generated token."""
        prefix, suffix, words = self._token_prefix, self._token_suffix, _WORD_JSON
        return [prefix + words[i] + suffix for i in word_ids]

    def final(self, finish_reason: str) -> bytes:
        """The frame carrying ``finish_reason`` (empty delta / empty text)."""
        body: dict[str, object] = {"delta": {}} if self._chat else {"text": ""}
        choice = {"index": 0, **body, "logprobs": None, "finish_reason": finish_reason}
        return self._frame([choice])

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The ``stream_options.include_usage`` frame: empty choices plus usage."""
        return self._frame([], usage=usage_obj(prompt_tokens, completion_tokens))

    def _frame(self, choices: list[dict[str, object]], **extra: object) -> bytes:
        return b"data: " + orjson.dumps({**self._head, "choices": choices, **extra}) + b"\n\n"


def usage_obj(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def error_body(exc: InvalidRequest) -> bytes:
    """OpenAI error body ``{"error": {message, type, param, code}}``."""
    return orjson.dumps(
        {"error": {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}}
    )


def error_frame(exc: InvalidRequest) -> bytes:
    """An SSE event carrying an OpenAI error object, as vLLM sends on a mid-stream failure."""
    return b"data: " + error_body(exc) + b"\n\n"


def completion_body(
    *, chat: bool, rid: str, created: int, model: str, text: str, finish: str, usage: object
) -> bytes:
    """Non-streamed ``chat.completion`` (``chat``) or ``text_completion`` body."""
    if chat:
        message = {"role": "assistant", "content": text, "tool_calls": []}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    return orjson.dumps(
        {
            "id": rid,
            "object": obj,
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": usage,
        }
    )


def embedding(text: str, seed: int) -> npt.NDArray[np.float32]:
    """Deterministic unit-norm pseudo-embedding of ``text`` (dimension ``EMBEDDING_DIM``)."""
    digest = hashlib.blake2b(
        text.encode(), digest_size=4 * EMBEDDING_DIM, key=str(seed).encode()[:64]
    ).digest()
    raw = np.frombuffer(digest, dtype="<u4").astype(np.float64) / 2.0**31 - 1.0
    norm = float(np.linalg.norm(raw)) or 1.0
    return (raw / norm).astype(np.float32)


def embeddings_body(
    inputs: list[str], *, seed: int, model: str, prompt_tokens: int, as_base64: bool
) -> bytes:
    """OpenAI ``list`` of ``embedding`` objects, floats or base64 little-endian float32."""
    data = []
    for index, text in enumerate(inputs):
        vec = embedding(text, seed)
        value: object = (
            base64.b64encode(vec.astype("<f4").tobytes()).decode() if as_base64 else vec.tolist()
        )
        data.append({"object": "embedding", "index": index, "embedding": value})
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return orjson.dumps({"object": "list", "data": data, "model": model, "usage": usage})


def models_body(model: str, created: int, max_context: int) -> bytes:
    """``GET /v1/models`` body listing the served model, as vLLM reports it."""
    card = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model,
        "parent": None,
        "max_model_len": max_context,
    }
    return orjson.dumps({"object": "list", "data": [card]})
