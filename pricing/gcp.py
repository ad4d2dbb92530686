"""The GCP feed: Compute Engine SKUs from the Cloud Billing Catalog API, through
``google.cloud.billing_v1.CloudCatalogClient`` (REST transport).

The catalog has no filter by SKU, so a fetch pages through every Compute Engine SKU
(``services.skus.list``); ``pricing.gcp_skus`` maps them to machine-type prices. The
listing is one unit: a page that fails, or a payload that does not parse, fails the
whole fetch and every GCP price keeps its last good value. The client is synchronous,
so a fetch runs in a worker thread and closes its client before returning.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.exceptions import GoogleAuthError
from google.cloud.billing_v1 import CloudCatalogClient, ListSkusRequest
from google.protobuf.json_format import ParseError  # type: ignore[import-untyped]

from base.errors import PriceFeedError
from live.price_table import PriceKey
from pricing.catalog import Catalog
from pricing.feed import FeedResult
from pricing.gcp_skus import COMPUTE_ENGINE, SOURCE, Sku, machine_quotes, price_components

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GcpFeedConfig:
    """``api_endpoint`` overrides the Cloud Billing host (``http://127.0.0.1:port`` for a
    local server); ``anonymous`` sends no credentials (local servers only), else
    ``api_key`` or the application default credentials are used. ``timeout_s`` bounds
    each page request."""

    api_endpoint: str | None = None
    api_key: str | None = None
    anonymous: bool = False
    timeout_s: float = 30.0
    page_size: int = 5000
    service: str = COMPUTE_ENGINE


def sku_of(proto: Any) -> Sku:
    """Our view of one ``billing_v1.Sku`` message."""
    usd: float | None = None
    if proto.pricing_info:
        expression = proto.pricing_info[0].pricing_expression
        rates = sorted(expression.tiered_rates, key=lambda r: r.start_usage_amount)
        if rates and rates[0].unit_price.currency_code in ("USD", ""):
            price = rates[0].unit_price
            usd = int(price.units) + price.nanos / 1e9
        unit = expression.usage_unit
    else:
        unit = ""
    return Sku(
        sku_id=proto.sku_id,
        description=proto.description,
        resource_group=proto.category.resource_group,
        usage_type=proto.category.usage_type,
        regions=tuple(proto.service_regions),
        usage_unit=unit,
        usd=usd,
    )


def _feed_error(exc: Exception) -> PriceFeedError:
    if isinstance(exc, requests.exceptions.Timeout | gexc.DeadlineExceeded):
        reason = "timeout"
    elif isinstance(exc, gexc.Unauthenticated | gexc.PermissionDenied | GoogleAuthError):
        reason = "auth"
    elif isinstance(exc, gexc.GoogleAPICallError):
        reason = "http_error"
    elif isinstance(exc, requests.exceptions.RequestException):
        reason = "connection"
    else:
        reason = "bad_payload"
    return PriceFeedError(f"gcp skus.list: {exc}", feed=SOURCE, reason=reason)


class GcpFeed:
    """On-demand and spot prices of the wanted GCP machine types."""

    name = SOURCE

    def __init__(
        self,
        config: GcpFeedConfig | None = None,
        catalog: Catalog | None = None,
        client_factory: Callable[[GcpFeedConfig], CloudCatalogClient] | None = None,
    ) -> None:
        self.config = config or GcpFeedConfig()
        self.catalog = catalog or Catalog.builtin()
        self._client_factory = client_factory or make_client

    async def fetch(self, wants: frozenset[PriceKey]) -> FeedResult:
        """List every SKU of the service and price the wanted machine types. Raises
        PriceFeedError if the listing fails at any page."""
        return await asyncio.to_thread(self._fetch, wants)

    async def aclose(self) -> None:
        """Nothing to release: a client lives only as long as one fetch."""

    def _fetch(self, wants: frozenset[PriceKey]) -> FeedResult:
        if not any(k.provider == "gcp" for k in wants):
            return FeedResult()
        client = self._client_factory(self.config)
        skus: list[Sku] = []
        try:
            request = ListSkusRequest(
                parent=self.config.service, page_size=self.config.page_size, currency_code="USD"
            )
            pager = client.list_skus(request=request, timeout=self.config.timeout_s, retry=None)
            for page in pager.pages:
                skus.extend(sku_of(s) for s in page.skus)
        except (
            gexc.GoogleAPIError,
            GoogleAuthError,
            requests.exceptions.RequestException,
            ParseError,
            ValueError,
        ) as exc:
            raise _feed_error(exc) from exc
        finally:
            client.transport.close()  # type: ignore[no-untyped-call]
        components, malformed = price_components(skus)
        for line in malformed:
            logger.warning("gcp price feed: %s", line)
        quotes = machine_quotes(components, wants, self.catalog)
        logger.info("gcp price feed: %d SKUs read, %d machine prices", len(skus), len(quotes))
        return FeedResult(quotes=tuple(quotes), malformed=tuple(malformed))


def make_client(config: GcpFeedConfig) -> CloudCatalogClient:
    """A REST ``CloudCatalogClient`` for ``config``; the caller closes its transport."""
    credentials: Credentials | None = AnonymousCredentials() if config.anonymous else None  # type: ignore[no-untyped-call]
    options = ClientOptions(
        api_endpoint=config.api_endpoint,
        api_key=None if config.anonymous else config.api_key,
    )
    return CloudCatalogClient(credentials=credentials, transport="rest", client_options=options)
