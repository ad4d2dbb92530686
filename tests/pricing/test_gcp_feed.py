"""The GCP feed through the real CloudCatalogClient (REST transport, anonymous
credentials) against a local fake of ``GET /v1/services/{service}/skus``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from base.errors import PriceFeedError
from live.price_table import PriceKey
from pricing.catalog import Catalog
from pricing.feed import FeedResult
from pricing.gcp import GcpFeed, GcpFeedConfig
from tests.pricing.data import csv_rows
from tests.pricing.fake_gcp import SERVICE, FakeCatalog
from tests.pricing.helpers import run

G2_CENTRAL = PriceKey("gcp", "us-central1", "g2-standard-4", "on_demand")
G2_EAST = PriceKey("gcp", "us-east4", "g2-standard-4", "on_demand")
A3_SPOT = PriceKey("gcp", "us-central1", "a3-highgpu-8g", "spot")


@pytest.fixture
def catalog() -> Iterator[FakeCatalog]:
    with FakeCatalog() as fake:
        yield fake


def _fetch(fake: FakeCatalog, *keys: PriceKey, timeout_s: float = 5.0) -> FeedResult:
    config = GcpFeedConfig(api_endpoint=fake.url, anonymous=True, timeout_s=timeout_s)
    return run(GcpFeed(config, Catalog.builtin()).fetch(frozenset(keys)))


def _real(instance_type: str, region: str, column: str) -> float:
    row = next(
        r for r in csv_rows("gcp_machines.csv")
        if (r["instance_type"], r["region"]) == (instance_type, region)
    )  # fmt: skip
    return float(row[column])


def test_machine_prices_match_the_real_rows(catalog: FakeCatalog) -> None:
    result = _fetch(catalog, G2_CENTRAL, A3_SPOT)

    prices = {q.key: q.usd_per_hour for q in result.quotes}
    assert prices[G2_CENTRAL] == pytest.approx(_real("g2-standard-4", "us-central1", "hour"))
    assert prices[A3_SPOT] == pytest.approx(_real("a3-highgpu-8g", "us-central1", "hour_spot"))


def test_skus_are_listed_page_by_page(catalog: FakeCatalog) -> None:
    _fetch(catalog, G2_CENTRAL)

    tokens = [r.query.get("pageToken", [""])[0] for r in catalog.requests]
    assert len(tokens) == 6  # 41 SKUs, 7 a page
    assert tokens[0] == "" and tokens[1] == "7"
    assert {r.path for r in catalog.requests} == {f"/v1/{SERVICE}/skus"}


def test_quote_carries_gpu_type_and_count_from_the_catalog(catalog: FakeCatalog) -> None:
    (quote,) = _fetch(catalog, A3_SPOT).quotes

    assert (quote.gpu_type, quote.gpu_count) == ("H100-80GB", 8)


def test_page_failing_mid_way_fails_the_whole_listing(catalog: FakeCatalog) -> None:
    catalog.fail_on_page = 3

    with pytest.raises(PriceFeedError) as err:
        _fetch(catalog, G2_CENTRAL)

    assert err.value.reason == "http_error"


def test_garbage_payload_is_a_bad_payload_error(catalog: FakeCatalog) -> None:
    catalog.garbage = True

    with pytest.raises(PriceFeedError) as err:
        _fetch(catalog, G2_CENTRAL)

    assert err.value.reason == "bad_payload"


def test_endpoint_that_never_answers_is_a_timeout(catalog: FakeCatalog) -> None:
    catalog.hang = True

    with pytest.raises(PriceFeedError) as err:
        _fetch(catalog, G2_CENTRAL, timeout_s=0.3)

    assert err.value.reason == "timeout"


def test_missing_region_leaves_its_key_without_a_quote(catalog: FakeCatalog) -> None:
    catalog.drop_region = "us-east4"

    result = _fetch(catalog, G2_CENTRAL, G2_EAST)

    assert {q.key for q in result.quotes} == {G2_CENTRAL}


def test_no_gcp_key_wanted_makes_no_call(catalog: FakeCatalog) -> None:
    result = _fetch(catalog, PriceKey("aws", "us-east-1", "p5.48xlarge", "on_demand"))

    assert result.quotes == () and catalog.requests == []
