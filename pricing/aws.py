"""The AWS feed: spot prices from EC2 ``DescribeSpotPriceHistory`` and on-demand prices
from the Price List API (``pricing:GetProducts``), through boto3.

Endpoints and credentials come the standard AWS way (``AWS_ENDPOINT_URL_EC2``,
``AWS_ENDPOINT_URL_PRICING``, ``AWS_ACCESS_KEY_ID``…), which is also how tests point
it at local servers. boto3 is synchronous, so a fetch runs in a worker thread; every
client it makes is closed before the fetch returns. One call per region (spot) and per
instance type (on-demand) is one *part*: a part that fails mid-pagination contributes
nothing, so its keys keep their last good prices, and the others still update.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from base.errors import PriceFeedError
from live.price_table import PriceKey
from pricing.aws_parse import ON_DEMAND_ATTRIBUTES, SOURCE, product_quote, spot_quotes
from pricing.feed import FeedResult, Quote, merge_results

logger = logging.getLogger(__name__)

_AUTH_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "AuthFailure", "UnrecognizedClientException",
     "InvalidClientTokenId", "ExpiredToken", "SignatureDoesNotMatch"}
)  # fmt: skip


@dataclass(frozen=True)
class AwsFeedConfig:
    """``timeout_s`` bounds each HTTP connect and read; ``max_attempts`` counts the first
    try (botocore's standard retry mode). The Price List API lives in a few regions
    only; ``pricing_region`` picks one."""

    timeout_s: float = 10.0
    max_attempts: int = 3
    pricing_region: str = "us-east-1"


def _feed_error(exc: Exception, part: str) -> PriceFeedError:
    if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
        reason = "timeout"
    elif isinstance(exc, EndpointConnectionError):
        reason = "connection"
    elif isinstance(exc, NoCredentialsError | PartialCredentialsError):
        reason = "auth"
    elif isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        reason = "auth" if code in _AUTH_CODES else "http_error"
    elif isinstance(exc, BotoCoreError):
        reason = "connection"
    else:
        reason = "bad_payload"
    return PriceFeedError(f"aws {part}: {exc}", feed=SOURCE, reason=reason)


class AwsFeed:
    """Spot and on-demand prices of the wanted AWS instance types."""

    name = SOURCE

    def __init__(
        self,
        config: AwsFeedConfig | None = None,
        session_factory: Callable[[], boto3.session.Session] = boto3.session.Session,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config or AwsFeedConfig()
        self._session_factory = session_factory
        self._clock = clock
        self._botocore = Config(
            connect_timeout=self.config.timeout_s,
            read_timeout=self.config.timeout_s,
            retries={"total_max_attempts": self.config.max_attempts, "mode": "standard"},
        )

    async def fetch(self, wants: frozenset[PriceKey]) -> FeedResult:
        """Read spot history per wanted region and on-demand prices per wanted instance
        type. Raises PriceFeedError only if every part failed."""
        return await asyncio.to_thread(self._fetch, wants)

    async def aclose(self) -> None:
        """Nothing to release: clients live only as long as one fetch."""

    def _fetch(self, wants: frozenset[PriceKey]) -> FeedResult:
        session = self._session_factory()
        spot: dict[str, set[str]] = {}
        on_demand: set[str] = set()
        for key in wants:
            if key.provider != "aws":
                continue
            if key.purchase == "spot":
                spot.setdefault(key.region, set()).add(key.instance_type)
            else:
                on_demand.add(key.instance_type)
        parts: list[tuple[str, Callable[[], FeedResult]]] = [
            (f"spot {region}", partial(self._spot, session, region, types))
            for region, types in sorted(spot.items())
        ]
        parts += [
            (f"on-demand {t}", partial(self._on_demand, session, t)) for t in sorted(on_demand)
        ]
        results = []
        for part, run in parts:
            try:
                results.append(run())
            except PriceFeedError as exc:
                logger.warning("aws price feed: %s failed (%s): %s", part, exc.reason, exc)
                results.append(FeedResult(errors=(exc,)))
        merged = merge_results(results)
        if merged.errors and len(merged.errors) == len(parts):
            raise merged.errors[0]
        return merged

    def _client(self, session: boto3.session.Session, service: str, region: str) -> Any:
        return session.client(service, region_name=region, config=self._botocore)

    def _spot(self, session: boto3.session.Session, region: str, types: set[str]) -> FeedResult:
        client = self._client(session, "ec2", region)
        items: list[dict[str, Any]] = []
        try:
            pages = client.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=sorted(types),
                ProductDescriptions=["Linux/UNIX"],
                StartTime=self._clock(),
            )
            for n, page in enumerate(pages):
                history = page.get("SpotPriceHistory")
                if not isinstance(history, list):
                    raise PriceFeedError(
                        f"aws spot {region}: page {n + 1} has no SpotPriceHistory",
                        feed=SOURCE,
                        reason="bad_payload",
                    )
                items.extend(history)
        except PriceFeedError:
            raise
        except (BotoCoreError, ClientError) as exc:
            raise _feed_error(exc, f"spot {region}") from exc
        finally:
            client.close()
        return FeedResult(quotes=tuple(spot_quotes(items, region)))

    def _on_demand(self, session: boto3.session.Session, instance_type: str) -> FeedResult:
        client = self._client(session, "pricing", self.config.pricing_region)
        filters = [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": instance_type}]
        filters += [
            {"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in ON_DEMAND_ATTRIBUTES.items()
        ]
        quotes: list[Quote] = []
        malformed: list[str] = []
        try:
            pages = client.get_paginator("get_products").paginate(
                ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"
            )
            for n, page in enumerate(pages):
                price_list = page.get("PriceList")
                if not isinstance(price_list, list):
                    raise PriceFeedError(
                        f"aws on-demand {instance_type}: page {n + 1} has no PriceList",
                        feed=SOURCE,
                        reason="bad_payload",
                    )
                for i, item in enumerate(price_list):
                    try:
                        quote = product_quote(item, f"page {n + 1} item {i + 1}")
                    except ValueError as exc:
                        malformed.append(str(exc))
                        logger.warning("aws price feed: unreadable price list item: %s", exc)
                        continue
                    if quote is not None:
                        quotes.append(quote)
        except PriceFeedError:
            raise
        except (BotoCoreError, ClientError) as exc:
            raise _feed_error(exc, f"on-demand {instance_type}") from exc
        finally:
            client.close()
        return FeedResult(quotes=tuple(quotes), malformed=tuple(malformed))
