"""The Azure feed through httpx against a local Retail Prices server (several pages)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from base.errors import PriceFeedError
from live.price_table import PriceKey
from pricing.azure import AzureFeed, AzureFeedConfig, item_quote
from pricing.feed import FeedResult
from tests.pricing.data import api_example
from tests.pricing.fake_azure import PATH, FakeRetailPrices
from tests.pricing.helpers import run

A100 = "Standard_NC24ads_A100_v4"
OD_EAST = PriceKey("azure", "eastus", A100, "on_demand")
SPOT_EAST = PriceKey("azure", "eastus", A100, "spot")
OD_WEST = PriceKey("azure", "westus2", A100, "on_demand")


@pytest.fixture
def azure() -> Iterator[FakeRetailPrices]:
    with FakeRetailPrices() as fake:
        yield fake


def _fetch(fake: FakeRetailPrices, *keys: PriceKey, timeout_s: float = 2.0) -> FeedResult:
    async def go() -> FeedResult:
        feed = AzureFeed(AzureFeedConfig(url=f"{fake.url}{PATH}", timeout_s=timeout_s))
        try:
            return await feed.fetch(frozenset(keys))
        finally:
            await feed.aclose()

    return run(go())


def _prices(result: FeedResult) -> dict[PriceKey, object]:
    return {q.key: q.usd_per_hour for q in result.quotes}


def test_pay_as_you_go_and_spot_prices_are_the_real_ones(azure: FakeRetailPrices) -> None:
    prices = _prices(_fetch(azure, OD_EAST, SPOT_EAST))

    assert (prices[OD_EAST], prices[SPOT_EAST]) == (3.673, 0.444433)  # azure_vms.csv


def test_windows_low_priority_and_devtest_meters_are_not_prices(azure: FakeRetailPrices) -> None:
    result = _fetch(azure, OD_EAST, SPOT_EAST)

    assert sorted(str(q.key) for q in result.quotes) == [str(OD_EAST), str(SPOT_EAST)]


def test_pages_are_followed_through_next_page_link(azure: FakeRetailPrices) -> None:
    azure.page_size = 1

    result = _fetch(azure, OD_EAST)

    assert len(azure.requests) == 5  # payg, spot, low priority, Windows, DevTest: a page each
    assert OD_EAST in _prices(result)


def test_query_filters_service_price_type_region_and_sku(azure: FakeRetailPrices) -> None:
    _fetch(azure, OD_EAST, OD_WEST)

    assert sorted(set(azure.filters)) == [
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and armRegionName eq "
        f"'{region}' and (armSkuName eq '{A100}')"
        for region in ("eastus", "westus2")
    ]


def test_documented_sample_item_is_a_windows_devtest_meter_and_skipped() -> None:
    item = api_example("azure_retail_prices_item_example.json")["Items"][0]

    assert item_quote(item, "sample") is None


def test_item_without_its_fields_is_reported_not_fatal(azure: FakeRetailPrices) -> None:
    azure.bad_item = True

    result = _fetch(azure, OD_EAST)

    assert len(result.malformed) == 1 and OD_EAST in _prices(result)


def test_page_failing_mid_way_drops_that_region_only(azure: FakeRetailPrices) -> None:
    # 5 meters per SKU and region, 5 a page: eastus (2 SKUs) needs a 2nd page, westus2 not.
    azure.page_size, azure.fail_on_page = 5, 2
    nd96_east = PriceKey("azure", "eastus", "Standard_ND96asr_v4", "on_demand")

    result = _fetch(azure, OD_EAST, nd96_east, OD_WEST)

    assert {k.region for k in _prices(result)} == {"westus2"}
    assert [e.reason for e in result.errors] == ["http_error"]


def test_every_region_failing_raises(azure: FakeRetailPrices) -> None:
    azure.fail_on_page = 1

    with pytest.raises(PriceFeedError) as err:
        _fetch(azure, OD_EAST)

    assert err.value.reason == "http_error"


def test_garbage_payload_is_a_bad_payload_error(azure: FakeRetailPrices) -> None:
    azure.garbage = True

    with pytest.raises(PriceFeedError) as err:
        _fetch(azure, OD_EAST)

    assert err.value.reason == "bad_payload"


def test_endpoint_that_never_answers_is_a_timeout(azure: FakeRetailPrices) -> None:
    azure.hang = True

    with pytest.raises(PriceFeedError) as err:
        _fetch(azure, OD_EAST, timeout_s=0.3)

    assert err.value.reason == "timeout"


def test_missing_region_leaves_its_key_without_a_quote(azure: FakeRetailPrices) -> None:
    azure.drop_region = "westus2"

    result = _fetch(azure, OD_EAST, OD_WEST)

    assert OD_EAST in _prices(result) and OD_WEST not in _prices(result)
