"""Build the enabled feeds from settings and the policy, each registered by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from base.errors import PriceFeedError
from pricing.aws import AwsFeed, AwsFeedConfig
from pricing.azure import AzureFeed, AzureFeedConfig
from pricing.catalog import Catalog
from pricing.feed import Feed
from pricing.gcp import GcpFeed, GcpFeedConfig
from pricing.settings import PriceFeedSettings
from pricing.static import StaticFeed, static_path
from router.policy import Policy

__all__ = ["FEEDS", "build_feeds", "static_path"]

Builder = Callable[[PriceFeedSettings, Policy, Path, Catalog], Feed]


def _aws(s: PriceFeedSettings, _policy: Policy, _path: Path, _catalog: Catalog) -> Feed:
    config = AwsFeedConfig(
        timeout_s=s.feed_timeout_s,
        max_attempts=s.aws_max_attempts,
        pricing_region=s.aws_pricing_region,
    )
    return AwsFeed(config)


def _azure(s: PriceFeedSettings, _policy: Policy, _path: Path, _catalog: Catalog) -> Feed:
    return AzureFeed(AzureFeedConfig(url=s.azure_prices_url, timeout_s=s.feed_timeout_s))


def _gcp(s: PriceFeedSettings, _policy: Policy, _path: Path, catalog: Catalog) -> Feed:
    config = GcpFeedConfig(
        api_endpoint=s.gcp_billing_endpoint,
        api_key=s.gcp_api_key.get_secret_value() if s.gcp_api_key else None,
        anonymous=s.gcp_anonymous,
        timeout_s=s.feed_timeout_s,
    )
    return GcpFeed(config, catalog)


def _static(_s: PriceFeedSettings, policy: Policy, path: Path, catalog: Catalog) -> Feed:
    return StaticFeed(static_path(policy, path), catalog)


FEEDS: Mapping[str, Builder] = {"aws": _aws, "gcp": _gcp, "azure": _azure, "static": _static}


def build_feeds(
    settings: PriceFeedSettings, policy: Policy, policy_path: Path, catalog: Catalog
) -> dict[str, Feed]:
    """The feeds ``settings.price_feeds`` names. Raises PriceFeedError for an unknown name."""
    unknown = [n for n in settings.feed_names if n not in FEEDS]
    if unknown:
        raise PriceFeedError(
            f"unknown price feed(s) {unknown}; known: {sorted(FEEDS)}",
            feed=",".join(unknown),
            reason="config",
        )
    return {n: FEEDS[n](settings, policy, policy_path, catalog) for n in settings.feed_names}
