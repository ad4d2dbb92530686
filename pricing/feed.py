"""What every price feed has in common: the rows it quotes and the interface it offers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from base.errors import PriceFeedError
from live.price_table import PriceKey


@dataclass(frozen=True)
class Quote:
    """One price as a feed read it, before validation: nothing here is trusted yet.

    ``usd_per_hour`` is whatever the payload held (a string, a number, None);
    ``gpu_count`` too, or None when the payload does not say (the catalog decides).
    ``origin`` says where in the payload the row came from, for the rejection log line.
    """

    source: str
    provider: str
    region: str
    instance_type: str
    purchase: str
    usd_per_hour: object
    gpu_type: str = ""
    gpu_count: object = None
    origin: str = ""

    @property
    def key(self) -> PriceKey:
        """The price-table key this quote would fill."""
        return PriceKey(self.provider, self.region, self.instance_type, self.purchase)


@dataclass(frozen=True)
class FeedResult:
    """One fetch: the quotes read, the items that could not be read at all (each a short
    'where: why'), and the parts of the fetch that failed (their rows are simply absent,
    so the last good prices for them stay)."""

    quotes: tuple[Quote, ...] = ()
    malformed: tuple[str, ...] = ()
    errors: tuple[PriceFeedError, ...] = ()


class Feed(Protocol):
    """A source of GPU prices.

    ``fetch`` reads current prices for at least the ``wants`` keys of its provider (it
    may return more), raising PriceFeedError only when nothing usable came back. It is
    safe to call again after a failure. ``aclose`` releases clients; idempotent.
    """

    name: str

    async def fetch(self, wants: frozenset[PriceKey]) -> FeedResult: ...

    async def aclose(self) -> None: ...


def merge_results(results: Iterable[FeedResult]) -> FeedResult:
    """One result holding every part's quotes, malformed items and errors."""
    quotes: list[Quote] = []
    malformed: list[str] = []
    errors: list[PriceFeedError] = []
    for r in results:
        quotes += r.quotes
        malformed += r.malformed
        errors += r.errors
    return FeedResult(tuple(quotes), tuple(malformed), tuple(errors))


def by_region(wants: Iterable[PriceKey], provider: str) -> dict[str, set[str]]:
    """Wanted instance types of ``provider`` per region."""
    out: dict[str, set[str]] = {}
    for key in wants:
        if key.provider == provider:
            out.setdefault(key.region, set()).add(key.instance_type)
    return out
