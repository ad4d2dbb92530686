"""Pools and prices: which rows feeds must fetch, and cost per million tokens."""

from __future__ import annotations

import numpy as np
import pytest

from live.price_table import PriceKey, PriceRow
from pricing.pools import price_pools, usd_per_million_tokens, wanted_keys
from router.compiled import usd_per_token
from tests.pricing.helpers import NOW, policy_of, pool_doc

KEY = PriceKey("aws", "us-east-1", "p5.48xlarge", "on_demand")


def _row(source: str = "aws", fetched_at_s: float = NOW) -> PriceRow:
    return PriceRow(
        "aws", "us-east-1", "p5.48xlarge", "H100", 8, "on_demand", 55.04, 6.88, source, fetched_at_s
    )


def test_cost_per_million_tokens_follows_the_formula() -> None:
    # $6.88/GPU-h × 8 GPUs = $55.04/h over 2500 tok/s × 3600 s = 9 M tok/h
    assert usd_per_million_tokens(6.88, 8, 2500.0) == pytest.approx(55.04 / 9.0)


def test_cost_per_million_tokens_agrees_with_the_router() -> None:
    router = usd_per_token(np.array([6.88]), np.array([8.0]), np.array([2500.0]))[0] * 1e6

    assert usd_per_million_tokens(6.88, 8, 2500.0) == pytest.approx(router)


def test_each_feed_is_asked_only_for_its_pools_rows() -> None:
    policy = policy_of([
        pool_doc("a", "aws", "us-east-1", "aws", "p5.48xlarge"),
        pool_doc("z", "azure", "eastus", "azure", "Standard_ND96asr_v4", "spot"),
        pool_doc("s", "aws", "us-west-2", "static", "p4d.24xlarge"),
    ])  # fmt: skip

    wants = wanted_keys(policy)

    assert wants["aws"] == {KEY}
    assert wants["azure"] == {PriceKey("azure", "eastus", "Standard_ND96asr_v4", "spot")}
    assert wants["static"] == {PriceKey("aws", "us-west-2", "p4d.24xlarge", "on_demand")}
    assert wants["gcp"] == frozenset()


def test_pool_price_uses_the_row_of_its_key() -> None:
    policy = policy_of(
        [pool_doc("a", "aws", "us-east-1", "aws", "p5.48xlarge", gpus=8, tokens_per_s=2500.0)]
    )

    (price,) = price_pools(policy, {KEY: _row()}, NOW)

    assert price.usd_per_million_tokens == pytest.approx(55.04 / 9.0)


def test_row_older_than_the_bound_is_stale() -> None:
    policy = policy_of([pool_doc("a", "aws", "us-east-1", "aws", "p5.48xlarge")], stale_after_s=600)

    (price,) = price_pools(policy, {KEY: _row(fetched_at_s=NOW - 601)}, NOW)

    assert price.stale and price.entry() is not None and price.entry().stale  # type: ignore[union-attr]


def test_static_pool_ignores_a_cloud_feeds_row() -> None:
    policy = policy_of([pool_doc("a", "aws", "us-east-1", "static", "p5.48xlarge")])

    (price,) = price_pools(policy, {KEY: _row(source="aws")}, NOW)

    assert price.row is None and price.entry() is None


def test_policy_override_prices_the_tokens() -> None:
    policy = policy_of(
        [pool_doc("a", "aws", "us-east-1", "aws", "p5.48xlarge", override=1.0, tokens_per_s=1000.0)]
    )

    (price,) = price_pools(policy, {KEY: _row()}, NOW)

    assert price.usd_per_million_tokens == pytest.approx(1.0 / 3.6)
