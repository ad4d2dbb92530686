"""A feed whose answers the test scripts: quotes, a failure, or an exception."""

from __future__ import annotations

from base.errors import PriceFeedError
from live.price_table import PriceKey
from pricing.feed import FeedResult, Quote


class ScriptedFeed:
    """Returns ``self.result`` (or raises ``self.error``) and counts its calls."""

    def __init__(self, name: str, quotes: list[Quote] | None = None) -> None:
        self.name = name
        self.result = FeedResult(quotes=tuple(quotes or ()))
        self.error: Exception | None = None
        self.calls: list[frozenset[PriceKey]] = []

    def set_quotes(self, *quotes: Quote) -> None:
        self.result = FeedResult(quotes=quotes)

    def fail(self, reason: str = "timeout") -> None:
        self.error = PriceFeedError(
            f"{self.name}: scripted {reason}", feed=self.name, reason=reason
        )

    async def fetch(self, wants: frozenset[PriceKey]) -> FeedResult:
        self.calls.append(wants)
        if self.error is not None:
            raise self.error
        return self.result

    async def aclose(self) -> None:
        pass


def quote(source: str, key: PriceKey, usd: object, gpus: int | None = None) -> Quote:
    """A quote for ``key`` from ``source``."""
    return Quote(
        source=source, provider=key.provider, region=key.region, instance_type=key.instance_type,
        purchase=key.purchase, usd_per_hour=usd, gpu_count=gpus,
    )  # fmt: skip
