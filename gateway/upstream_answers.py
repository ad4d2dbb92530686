"""Reading upstream answers and explaining refusals, for the forwarder."""

from __future__ import annotations

import orjson

from base.errors import NoFeasiblePool, RoutingError
from router.scoring import Ranking


def response_usage(body: bytes) -> tuple[int | None, int | None, str | None]:
    """(prompt tokens, completion tokens, model) from an OpenAI response body."""
    try:
        data = orjson.loads(body)
        usage = data.get("usage") or {}
        model = data.get("model")
        return (
            usage.get("prompt_tokens"),
            usage.get("completion_tokens"),
            model if isinstance(model, str) else None,
        )
    except (orjson.JSONDecodeError, AttributeError):
        return None, None, None


def unavailable(ranking: Ranking, model: str) -> RoutingError:
    """The error for a request no pool may take, with every pool's reason."""
    reasons = sorted({r.reason for r in ranking.explain()})
    detail = "; ".join(reasons) or "no pool serves it"
    if ranking.eligible.any():
        return NoFeasiblePool(f"no pool can meet the SLO for model {model!r}: {detail}")
    return RoutingError(f"no pool is available for model {model!r}: {detail}")
