"""Mapping Cloud Billing SKUs to GCP machine-type prices (pure)."""

from __future__ import annotations

import pytest

from live.price_table import PriceKey
from pricing.catalog import Catalog
from pricing.gcp_skus import Sku, machine_quotes, price_components
from tests.pricing.data import csv_rows, gcp_skus

CATALOG = Catalog.builtin()


def _skus() -> list[Sku]:
    return [
        Sku(e["id"], e["description"], e["group"], e["usage"], tuple(e["regions"]), e["unit"], e["usd"])
        for e in gcp_skus()
    ]  # fmt: skip


def _price(instance_type: str, region: str, purchase: str, skus: list[Sku] | None = None) -> float:
    components, _ = price_components(skus if skus is not None else _skus())
    (quote,) = machine_quotes(
        components, [PriceKey("gcp", region, instance_type, purchase)], CATALOG
    )
    assert isinstance(quote.usd_per_hour, float)
    return quote.usd_per_hour


@pytest.mark.parametrize(
    "row",
    csv_rows("gcp_machines.csv"),
    ids=lambda r: f"{r['instance_type']}-{r['region']}",
)
def test_machine_price_from_skus_matches_the_real_on_demand_row(row: dict[str, str]) -> None:
    price = _price(row["instance_type"], row["region"], "on_demand")

    assert price == pytest.approx(float(row["hour"]), rel=1e-6)


@pytest.mark.parametrize(
    "row",
    csv_rows("gcp_machines.csv"),
    ids=lambda r: f"{r['instance_type']}-{r['region']}",
)
def test_machine_price_from_spot_skus_matches_the_real_spot_row(row: dict[str, str]) -> None:
    price = _price(row["instance_type"], row["region"], "spot")

    assert price == pytest.approx(float(row["hour_spot"]), rel=1e-6)


def test_commitment_skus_do_not_price_on_demand() -> None:
    commit = Sku("C1", "Commitment v1: A2 Cpu in Americas for 1 Year", "CPU", "Commit1Yr",
                 ("us-central1",), "h", 0.001)  # fmt: skip

    assert _price("a2-highgpu-1g", "us-central1", "on_demand", [*_skus(), commit]) == pytest.approx(
        3.673385, rel=1e-6
    )


def test_sku_with_an_unexpected_unit_is_not_used() -> None:
    skus = [s if s.description != "A2 Instance Ram running in Iowa" else
            Sku(s.sku_id, s.description, s.resource_group, s.usage_type, s.regions, "GiBy.mo", 3.0)
            for s in _skus()]  # fmt: skip
    components, _ = price_components(skus)

    quotes = machine_quotes(
        components, [PriceKey("gcp", "us-central1", "a2-highgpu-1g", "on_demand")], CATALOG
    )

    assert quotes == []


def test_machine_type_outside_the_mapping_gets_no_quote() -> None:
    components, _ = price_components(_skus())

    assert (
        machine_quotes(
            components, [PriceKey("gcp", "us-central1", "n1-standard-8", "on_demand")], CATALOG
        )
        == []
    )


def test_region_without_skus_gets_no_quote() -> None:
    components, _ = price_components(_skus())

    assert (
        machine_quotes(
            components, [PriceKey("gcp", "europe-west4", "g2-standard-4", "on_demand")], CATALOG
        )
        == []
    )


def test_mapped_sku_without_a_usd_price_is_reported() -> None:
    broken = Sku(
        "X1", "Nvidia L4 GPU running in Iowa", "GPU", "OnDemand", ("us-central1",), "h", None
    )

    _, malformed = price_components([broken])

    assert malformed == ["sku X1 (Nvidia L4 GPU running in Iowa): no USD unit price"]
