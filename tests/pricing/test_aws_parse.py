"""Parsing AWS spot history and Price List items, on real rows and the aws-cli samples."""

from __future__ import annotations

import json
import statistics

import pytest

from pricing.aws_parse import product_quote, spot_quotes
from tests.pricing.data import api_example, csv_rows
from tests.pricing.fake_aws_pricing import product


def _history(instance_type: str, region: str) -> list[dict[str, str]]:
    """Spot history items (DescribeSpotPriceHistory shape) from the real catalog rows."""
    return [
        {"AvailabilityZone": r["AvailabilityZone"], "InstanceType": r["InstanceType"],
         "ProductDescription": "Linux/UNIX", "SpotPrice": r["SpotPrice"],
         "Timestamp": "2024-06-01T00:00:00.000Z"}
        for r in csv_rows("aws_vms.csv")
        if r["InstanceType"] == instance_type and r["Region"] == region
    ]  # fmt: skip


def test_aws_cli_spot_sample_gives_one_regional_quote() -> None:
    items = api_example("aws_describe_spot_price_history_example.json")["SpotPriceHistory"]

    quotes = spot_quotes(items, "us-west-1")

    assert [(q.instance_type, q.purchase, q.usd_per_hour) for q in quotes] == [
        ("m1.xlarge", "spot", 0.08)
    ]


def test_regional_spot_price_is_the_median_over_zones() -> None:
    items = _history("p5.48xlarge", "us-east-1")
    expected = statistics.median(float(i["SpotPrice"]) for i in items)

    (quote,) = spot_quotes(items, "us-east-1")

    assert quote.usd_per_hour == expected


def test_latest_price_per_zone_wins() -> None:
    old = {"AvailabilityZone": "us-east-1a", "InstanceType": "g5.xlarge",
           "ProductDescription": "Linux/UNIX", "SpotPrice": "9.0", "Timestamp": "2024-01-01T00:00:00Z"}  # fmt: skip
    new = {**old, "SpotPrice": "0.45", "Timestamp": "2024-06-01T00:00:00Z"}

    (quote,) = spot_quotes([new, old], "us-east-1")

    assert quote.usd_per_hour == 0.45


def test_windows_spot_history_is_ignored() -> None:
    items = [{**i, "ProductDescription": "Windows"} for i in _history("g5.xlarge", "us-east-1")]

    assert spot_quotes(items, "us-east-1") == []


def test_zones_without_a_numeric_price_give_a_quote_validation_rejects() -> None:
    items = _history("p5.4xlarge", "us-east-1")  # every zone's SpotPrice is empty

    (quote,) = spot_quotes(items, "us-east-1")

    assert quote.usd_per_hour == ""


def test_price_list_item_is_parsed_from_json_inside_json() -> None:
    item = json.dumps(product("p5.48xlarge", "us-east-1", "55.0400000000", "8"))

    quote = product_quote(item, "page 1 item 1")

    assert quote is not None
    assert (quote.region, quote.instance_type, quote.purchase) == (
        "us-east-1", "p5.48xlarge", "on_demand",
    )  # fmt: skip
    assert (quote.usd_per_hour, quote.gpu_count) == ("55.0400000000", "8")


def test_aws_cli_storage_sample_is_not_an_instance() -> None:
    item = api_example("aws_pricing_get_products_example.json")["PriceList"][0]

    assert product_quote(item, "page 1 item 1") is None


def test_windows_product_is_not_an_on_demand_linux_price() -> None:
    item = json.dumps(product("p5.48xlarge", "us-east-1", "80", "8", operatingSystem="Windows"))

    assert product_quote(item, "page 1 item 1") is None


@pytest.mark.parametrize("item", ["{not json", json.dumps({"product": 3}), "[]"])
def test_unreadable_price_list_item_raises_value_error(item: str) -> None:
    with pytest.raises(ValueError, match="page 2 item 5"):
        product_quote(item, "page 2 item 5")
