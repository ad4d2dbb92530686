"""Reading upstream answers and explaining refusals, for the forwarder."""

from __future__ import annotations

import orjson
from starlette.responses import Response

from base.errors import NoFeasiblePool, RoutingError, UpstreamInvalidAnswer
from gateway.openai_request import Operation
from router.scoring import Ranking

# The list an answer of each operation must carry (OpenAI's response objects).
_RESULTS = {Operation.CHAT: "choices", Operation.COMPLETION: "choices", Operation.EMBEDDING: "data"}


def checked_usage(
    body: bytes, operation: Operation, pool_id: str
) -> tuple[int | None, int | None, str | None]:
    """(prompt tokens, completion tokens, model) of a 200 answer, once it is known to be
    an OpenAI answer: a JSON object with a non-empty ``choices`` (``data`` for
    embeddings) list of objects. Raises UpstreamInvalidAnswer otherwise (the pool failed,
    not the client)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise UpstreamInvalidAnswer(
            f"pool {pool_id} answered 200 with a body that is not JSON", pool_id=pool_id
        ) from None
    results = data.get(_RESULTS[operation]) if isinstance(data, dict) else None
    if (
        not isinstance(results, list)
        or not results
        or not all(isinstance(r, dict) for r in results)
    ):
        raise UpstreamInvalidAnswer(
            f"pool {pool_id} answered 200 without a {_RESULTS[operation]} list", pool_id=pool_id
        )
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    model = data.get("model")
    return (
        _count(usage.get("prompt_tokens")),
        _count(usage.get("completion_tokens")),
        model if isinstance(model, str) else None,
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def unavailable(ranking: Ranking, model: str) -> RoutingError:
    """The error for a request no pool may take, with every pool's reason."""
    reasons = sorted({r.reason for r in ranking.explain()})
    detail = "; ".join(reasons) or "no pool serves it"
    if ranking.eligible.any():
        return NoFeasiblePool(f"no pool can meet the SLO for model {model!r}: {detail}")
    return RoutingError(f"no pool is available for model {model!r}: {detail}")


class ModelRenamer:
    """Rewrites ``"model": "<upstream name>"`` to the name the client asked for, in a body
    or in each streamed chunk, as bytes (no re-serialisation). Engines serve a pool's
    ``upstream_model``; clients must see the model they asked for."""

    __slots__ = ("_pairs",)

    def __init__(self, upstream: str, client: str) -> None:
        up, to = orjson.dumps(upstream), orjson.dumps(client)
        self._pairs = (
            ()
            if upstream == client
            else ((b'"model":' + up, b'"model":' + to), (b'"model": ' + up, b'"model": ' + to))
        )

    def __call__(self, data: bytes) -> bytes:
        for old, new in self._pairs:
            if old in data:
                data = data.replace(old, new)
        return data


class JsonAnswer(Response):
    """A JSON body for the client, with ``headers`` given as ASGI raw headers (lowercase
    names, Latin-1 values; ``content-length`` and ``content-type`` are added). The same
    response as ``Response(body, status, headers=..., media_type="application/json")``,
    built without lowercasing and encoding each header's name and value again."""

    media_type = "application/json"

    def __init__(
        self, body: bytes, headers: list[tuple[bytes, bytes]], status_code: int = 200
    ) -> None:
        self.status_code = status_code
        self.body = body
        self.background = None
        self.raw_headers = [
            (b"content-length", b"%d" % len(body)),
            (b"content-type", b"application/json"),
            *headers,
        ]
