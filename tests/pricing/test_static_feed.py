"""The static price file (CSV or YAML): contracted and on-prem prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from base.errors import PriceFeedError
from live.price_table import PriceKey
from pricing.catalog import Catalog
from pricing.rows import Bounds, validate_all
from pricing.static import StaticFeed
from tests.pricing.data import FIXTURES
from tests.pricing.helpers import run

CONTRACT = PriceKey("aws", "us-east-1", "p5.48xlarge", "on_demand")
ON_PREM = PriceKey("local", "dc1", "dgx-h100", "on_demand")


def _rows(path: Path) -> dict[PriceKey, float]:
    result = run(StaticFeed(path, Catalog.builtin()).fetch(frozenset()))
    rows, _ = validate_all(result.quotes, Bounds(0.01, 200.0), Catalog.builtin(), 0.0)
    return {r.key: r.usd_per_gpu_hour for r in rows}


@pytest.mark.parametrize("name", ["static_prices.csv", "static_prices.yaml"])
def test_contract_and_on_prem_rows_are_read(name: str) -> None:
    assert _rows(FIXTURES / name) == {CONTRACT: 5.0, ON_PREM: 2.1}


def test_bad_rows_of_the_file_are_rejected_row_by_row() -> None:
    result = run(StaticFeed(FIXTURES / "static_prices.csv").fetch(frozenset()))

    _, rejected = validate_all(result.quotes, Bounds(0.01, 200.0), Catalog.builtin(), 0.0)

    assert sorted(r.reason for r in rejected) == ["negative price", "non-numeric price"]


def test_row_missing_a_column_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(
        "provider,region,instance_type,purchase,usd_per_hour\naws,,p5.48xlarge,spot,9\n"
    )

    result = run(StaticFeed(path).fetch(frozenset()))

    assert result.quotes == () and result.malformed == ("prices.csv row 1: missing region",)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(PriceFeedError) as err:
        run(StaticFeed(tmp_path / "nope.csv").fetch(frozenset()))

    assert err.value.reason == "config"


def test_yaml_without_a_prices_list_is_a_bad_payload(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text("rows: []\n")

    with pytest.raises(PriceFeedError) as err:
        run(StaticFeed(path).fetch(frozenset()))

    assert err.value.reason == "bad_payload"


def test_no_file_configured_means_no_rows() -> None:
    assert run(StaticFeed(None).fetch(frozenset())).quotes == ()
