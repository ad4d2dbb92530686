"""The Azure feed: the public Retail Prices REST API, read with httpx.

One query per wanted region (``$filter`` on service, price type, region and the wanted
SKUs), following ``NextPageLink`` until it is null. Only pay-as-you-go Linux meters
count: ``type`` must be ``Consumption`` (not ``DevTestConsumption`` or
``Reservation``), products whose name ends in ``Windows`` carry a licence and are
skipped, ``… Spot`` meters are the spot price, and ``… Low Priority`` meters (the
retired low-priority VMs, billed apart from both) are skipped. A region whose query
fails part-way contributes nothing, so its keys keep their last good prices.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from base.errors import PriceFeedError
from live.price_table import PriceKey
from pricing.feed import FeedResult, Quote, by_region, merge_results

logger = logging.getLogger(__name__)

SOURCE = "azure"
DEFAULT_URL = "https://prices.azure.com/api/retail/prices"


@dataclass(frozen=True)
class AzureFeedConfig:
    """``url`` of the Retail Prices API; ``timeout_s`` per HTTP request; ``max_pages``
    per region guards against a ``NextPageLink`` that never ends."""

    url: str = DEFAULT_URL
    timeout_s: float = 10.0
    max_pages: int = 100


def region_filter(region: str, skus: set[str]) -> str:
    """The OData ``$filter`` for the wanted SKUs of one region."""
    sku_terms = " or ".join(f"armSkuName eq '{s}'" for s in sorted(skus))
    return (
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' "
        f"and armRegionName eq '{region}' and ({sku_terms})"
    )


def item_quote(item: Mapping[str, Any], origin: str) -> Quote | None:
    """The quote one Retail Prices item stands for, or None for a meter that is not a
    Linux pay-as-you-go VM price. Raises ValueError for an item that cannot be read."""
    try:
        service, kind = item["serviceName"], item["type"]
        product, meter = str(item["productName"]), str(item["meterName"])
        sku, region = str(item["armSkuName"]), str(item["armRegionName"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{origin}: item lacks {exc}") from exc
    if service != "Virtual Machines" or kind != "Consumption":
        return None
    if product.endswith("Windows") or item.get("unitOfMeasure") != "1 Hour":
        return None
    if item.get("currencyCode", "USD") != "USD":
        raise ValueError(f"{origin}: price in {item.get('currencyCode')}, not USD")
    if meter.endswith("Low Priority"):
        return None
    return Quote(
        source=SOURCE,
        provider="azure",
        region=region,
        instance_type=sku,
        purchase="spot" if meter.endswith("Spot") else "on_demand",
        usd_per_hour=item.get("retailPrice"),
        origin=f"{origin} meter {item.get('meterId', '?')}",
    )


class AzureFeed:
    """Pay-as-you-go and spot prices of the wanted Azure VM sizes."""

    name = SOURCE

    def __init__(
        self, config: AzureFeedConfig | None = None, client: httpx.AsyncClient | None = None
    ) -> None:
        self.config = config or AzureFeedConfig()
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=self.config.timeout_s)

    async def aclose(self) -> None:
        """Close the HTTP client if this feed made it. Idempotent."""
        if self._owns_client:
            await self._client.aclose()

    async def fetch(self, wants: frozenset[PriceKey]) -> FeedResult:
        """Query every wanted region at once. Raises PriceFeedError only if every region
        failed."""
        regions = by_region(wants, "azure")
        outcomes = await asyncio.gather(
            *(self._region(r, skus) for r, skus in sorted(regions.items())),
            return_exceptions=True,
        )
        results: list[FeedResult] = []
        for region, outcome in zip(sorted(regions), outcomes, strict=True):
            if isinstance(outcome, PriceFeedError):
                logger.warning(
                    "azure price feed: %s failed (%s): %s", region, outcome.reason, outcome
                )
                results.append(FeedResult(errors=(outcome,)))
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                results.append(outcome)
        merged = merge_results(results)
        if regions and len(merged.errors) == len(regions):
            raise merged.errors[0]
        return merged

    async def _region(self, region: str, skus: set[str]) -> FeedResult:
        url: str | None = self.config.url
        params: dict[str, str] | None = {"$filter": region_filter(region, skus)}
        quotes: list[Quote] = []
        malformed: list[str] = []
        page = 0
        while url:
            page += 1
            if page > self.config.max_pages:
                raise self._error(region, f"more than {self.config.max_pages} pages", "bad_payload")
            data = await self._get(region, url, params, page)
            params = None  # NextPageLink already carries the query
            items = data.get("Items")
            if not isinstance(items, list):
                raise self._error(region, f"page {page} has no Items list", "bad_payload")
            for i, item in enumerate(items):
                try:
                    quote = item_quote(item, f"{region} page {page} item {i + 1}")
                except ValueError as exc:
                    malformed.append(str(exc))
                    logger.warning("azure price feed: unreadable item: %s", exc)
                    continue
                if quote is not None:
                    quotes.append(quote)
            link = data.get("NextPageLink")
            url = link if isinstance(link, str) and link else None
        return FeedResult(quotes=tuple(quotes), malformed=tuple(malformed))

    async def _get(
        self, region: str, url: str, params: dict[str, str] | None, page: int
    ) -> dict[str, Any]:
        try:
            response = await self._client.get(url, params=params)
            response.raise_for_status()
            data = response.json()
        except httpx.TimeoutException as exc:
            raise self._error(region, f"page {page} timed out: {exc!r}", "timeout") from exc
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            raise self._error(region, f"page {page}: HTTP {status}", "http_error") from exc
        except httpx.HTTPError as exc:
            raise self._error(region, f"page {page}: {exc!r}", "connection") from exc
        except ValueError as exc:
            raise self._error(region, f"page {page} is not JSON", "bad_payload") from exc
        if not isinstance(data, dict):
            raise self._error(region, f"page {page} is not a JSON object", "bad_payload")
        return data

    @staticmethod
    def _error(region: str, message: str, reason: str) -> PriceFeedError:
        return PriceFeedError(f"azure {region}: {message}", feed=SOURCE, reason=reason)
