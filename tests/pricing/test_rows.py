"""Row-by-row validation of quotes, on real catalog rows (tests/fixtures/pricing)."""

from __future__ import annotations

import logging

import pytest

from live.price_table import PriceRow
from pricing.catalog import Catalog
from pricing.feed import Quote
from pricing.rows import Bounds, Rejection, validate, validate_all
from tests.pricing.data import csv_rows

BOUNDS = Bounds(min_usd_per_gpu_hour=0.01, max_usd_per_gpu_hour=200.0)
CATALOG = Catalog.builtin()
NOW = 1_750_000_000.0


def _aws_row(instance_type: str, zone: str) -> dict[str, str]:
    return next(
        r for r in csv_rows("aws_vms.csv")
        if r["InstanceType"] == instance_type and r["AvailabilityZone"] == zone
    )  # fmt: skip


def _quote(usd: object, instance_type: str = "p5.48xlarge", **kw: object) -> Quote:
    fields: dict[str, object] = {
        "source": "aws", "provider": "aws", "region": "us-east-1",
        "instance_type": instance_type, "purchase": "on_demand", "usd_per_hour": usd, **kw,
    }  # fmt: skip
    return Quote(**fields)  # type: ignore[arg-type]


def test_real_on_demand_price_becomes_usd_per_gpu_hour() -> None:
    row = _aws_row("p5.48xlarge", "use1-az1")  # Price 55.04 for 8 H100

    out = validate(_quote(row["Price"]), BOUNDS, CATALOG, NOW)

    assert isinstance(out, PriceRow)
    assert (out.usd_per_hour, out.gpu_count, out.usd_per_gpu_hour) == (55.04, 8, 6.88)


def test_empty_spot_price_from_the_catalog_is_rejected_as_non_numeric() -> None:
    row = _aws_row("p5.4xlarge", "use1-az1")  # SpotPrice is empty in the real catalog

    out = validate(_quote(row["SpotPrice"], "p5.4xlarge", purchase="spot"), BOUNDS, CATALOG, NOW)

    assert out == Rejection(out.quote, "non-numeric price")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("usd", "reason"),
    [("abc", "non-numeric price"), (float("nan"), "non-numeric price"), (True, "non-numeric price"),
     ("-3.5", "negative price"), (0, "zero price"), ("0.0", "zero price")],
)  # fmt: skip
def test_bad_price_is_rejected_with_its_reason(usd: object, reason: str) -> None:
    out = validate(_quote(usd), BOUNDS, CATALOG, NOW)

    assert isinstance(out, Rejection) and out.reason == reason


def test_price_per_gpu_hour_below_the_range_is_rejected() -> None:
    out = validate(_quote("0.00001"), BOUNDS, CATALOG, NOW)  # moto's canned spot price

    assert isinstance(out, Rejection) and "outside [0.01, 200]" in out.reason


def test_price_per_gpu_hour_above_the_range_is_rejected() -> None:
    out = validate(_quote("55.04"), Bounds(0.01, 5.0), CATALOG, NOW)  # 6.88 per GPU-hour

    assert isinstance(out, Rejection) and "outside" in out.reason


def test_instance_type_of_unknown_gpu_count_is_rejected() -> None:
    out = validate(_quote("1.0", "m1.xlarge"), BOUNDS, CATALOG, NOW)

    assert isinstance(out, Rejection) and out.reason == "unknown GPU count"


def test_gpu_count_in_the_payload_wins_over_the_catalog() -> None:
    out = validate(_quote("16.0", gpu_count="4"), BOUNDS, CATALOG, NOW)

    assert isinstance(out, PriceRow) and out.usd_per_gpu_hour == 4.0


def test_azure_nd96isr_h100_counts_eight_gpus_not_the_catalogs_twelve() -> None:
    row = next(
        r for r in csv_rows("azure_vms.csv")
        if r["InstanceType"] == "Standard_ND96isr_H100_v5" and r["Region"] == "eastus"
    )  # fmt: skip
    quote = _quote(
        row["Price"], row["InstanceType"], provider="azure", region="eastus", source="azure"
    )

    out = validate(quote, BOUNDS, CATALOG, NOW)

    assert isinstance(out, PriceRow) and out.usd_per_gpu_hour == pytest.approx(98.32 / 8)


def test_unknown_purchase_option_is_rejected() -> None:
    out = validate(_quote("10", purchase="reserved"), BOUNDS, CATALOG, NOW)

    assert isinstance(out, Rejection) and "purchase" in out.reason


def test_each_rejection_is_logged_with_row_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pricing.rows")

    rows, rejected = validate_all([_quote("-1"), _quote("55.04")], BOUNDS, CATALOG, NOW)

    assert len(rows) == 1 and len(rejected) == 1
    assert "aws|us-east-1|p5.48xlarge|on_demand" in caplog.text
    assert "negative price" in caplog.text
