"""The AWS feed through real boto3: EC2 spot history from a moto server, on-demand
prices from a local fake of the Price List ``GetProducts`` JSON 1.1 protocol."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from base.errors import PriceFeedError
from live.price_table import PriceKey
from pricing.aws import AwsFeed, AwsFeedConfig
from tests.pricing.fake_aws_pricing import TARGET, FakePricing
from tests.pricing.helpers import run

P5_USE1 = PriceKey("aws", "us-east-1", "p5.48xlarge", "on_demand")
G6_USW2 = PriceKey("aws", "us-west-2", "g6.48xlarge", "on_demand")
G5_USE1 = PriceKey("aws", "us-east-1", "g5.xlarge", "on_demand")  # one region: one page
SPOT_USE1 = PriceKey("aws", "us-east-1", "p5.48xlarge", "spot")
FAST = AwsFeedConfig(timeout_s=0.5, max_attempts=1)
# moto builds its EC2 backend on the first call, which takes longer than FAST allows.
MOTO = AwsFeedConfig(timeout_s=30.0, max_attempts=1)


@pytest.fixture
def pricing(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePricing]:
    with FakePricing() as fake:
        monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", fake.url)
        yield fake


@pytest.fixture
def ec2(aws_env: None, moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", moto_url)
    return moto_url


# -- spot: moto -------------------------------------------------------------------------


def test_spot_history_from_moto_is_parsed_into_a_regional_quote(ec2: str) -> None:
    result = run(AwsFeed(MOTO).fetch(frozenset({SPOT_USE1})))

    (quote,) = result.quotes
    assert quote.key == SPOT_USE1
    # moto answers every offering with a canned SpotPrice of 0.00001 (validation rejects it).
    assert quote.usd_per_hour == 0.00001


def test_spot_history_of_an_instance_type_moto_does_not_offer_is_absent(ec2: str) -> None:
    wants = frozenset({PriceKey("aws", "us-east-1", "x9.huge", "spot")})

    result = run(AwsFeed(MOTO).fetch(wants))

    assert result.quotes == () and result.errors == ()


def test_unreachable_ec2_endpoint_is_a_connection_error(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:9")

    with pytest.raises(PriceFeedError) as err:
        run(AwsFeed(FAST).fetch(frozenset({SPOT_USE1})))

    assert err.value.reason == "connection"


# -- on-demand: the GetProducts fake ----------------------------------------------------


def test_on_demand_price_is_the_real_linux_price(pricing: FakePricing) -> None:
    result = run(AwsFeed(FAST).fetch(frozenset({P5_USE1})))

    prices = {q.key: q.usd_per_hour for q in result.quotes}
    assert prices[P5_USE1] == "55.04"  # aws_vms.csv; Windows and reservation rows filtered out


def test_get_products_is_called_with_term_match_filters(pricing: FakePricing) -> None:
    run(AwsFeed(FAST).fetch(frozenset({P5_USE1})))

    first = pricing.requests[0]
    body = json.loads(first.body)
    assert first.headers["x-amz-target"] == TARGET
    assert body["ServiceCode"] == "AmazonEC2"
    assert {(f["Field"], f["Value"]) for f in body["Filters"]} >= {
        ("instanceType", "p5.48xlarge"), ("operatingSystem", "Linux"), ("tenancy", "Shared"),
        ("preInstalledSw", "NA"), ("capacitystatus", "Used"),
    }  # fmt: skip


def test_get_products_follows_next_token_across_pages(pricing: FakePricing) -> None:
    pricing.page_size = 1

    result = run(AwsFeed(FAST).fetch(frozenset({P5_USE1})))

    tokens = [json.loads(r.body).get("NextToken") for r in pricing.requests]
    assert tokens == [None, "1"]  # p5.48xlarge is sold in us-east-1 and us-west-2
    assert {q.region for q in result.quotes} == {"us-east-1", "us-west-2"}


def test_unreadable_price_list_item_is_reported_not_fatal(pricing: FakePricing) -> None:
    pricing.bad_item = True

    result = run(AwsFeed(FAST).fetch(frozenset({P5_USE1})))

    assert len(result.malformed) == 1 and P5_USE1 in {q.key for q in result.quotes}


def test_page_failing_mid_way_drops_that_instance_type_only(pricing: FakePricing) -> None:
    pricing.page_size, pricing.fail_on_page = 1, 2

    result = run(AwsFeed(FAST).fetch(frozenset({P5_USE1, G5_USE1})))

    assert {q.key for q in result.quotes} == {G5_USE1}  # p5 needed a 2nd page, which failed
    assert [e.reason for e in result.errors] == ["http_error"]


def test_every_part_failing_raises(pricing: FakePricing) -> None:
    pricing.fail_on_page = 1

    with pytest.raises(PriceFeedError) as err:
        run(AwsFeed(FAST).fetch(frozenset({P5_USE1})))

    assert err.value.reason == "http_error"


def test_garbage_payload_is_a_bad_payload_error(pricing: FakePricing) -> None:
    pricing.garbage = True

    with pytest.raises(PriceFeedError) as err:
        run(AwsFeed(FAST).fetch(frozenset({P5_USE1})))

    assert err.value.reason == "bad_payload"


def test_endpoint_that_never_answers_is_a_timeout(pricing: FakePricing) -> None:
    pricing.hang = True

    with pytest.raises(PriceFeedError) as err:
        run(AwsFeed(FAST).fetch(frozenset({P5_USE1})))

    assert err.value.reason == "timeout"


def test_missing_region_leaves_its_key_without_a_quote(pricing: FakePricing) -> None:
    pricing.drop_region = "us-west-2"

    result = run(AwsFeed(FAST).fetch(frozenset({P5_USE1, G6_USW2})))

    keys = {q.key for q in result.quotes}
    assert P5_USE1 in keys and G6_USW2 not in keys and result.errors == ()
