"""``skyroute prices set``'s file edit: a JSON or YAML static price file changed row by row,
which the static feed then reads like any hand edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from live.price_table import PriceKey
from pricing.catalog import Catalog
from pricing.rows import Bounds, validate_all
from pricing.static import StaticFeed, static_path
from pricing.static_edit import read_rows, resolve, set_price
from tests.pricing.helpers import policy_of, pool_doc, run

L4 = PriceKey("gcp", "europe-west4", "g2-standard-4", "on_demand")
L4_US = PriceKey("gcp", "us-central1", "g2-standard-4", "spot")
H100 = PriceKey("aws", "us-east-1", "p5.48xlarge", "on_demand")
ROWS = [
    {"provider": "gcp", "region": "europe-west4", "instance_type": "g2-standard-4",
     "purchase": "on_demand", "usd_per_hour": 0.7429, "gpu_count": 1},
    {"provider": "gcp", "region": "us-central1", "instance_type": "g2-standard-4",
     "purchase": "spot", "usd_per_hour": 0.3973, "gpu_count": 1},
    {"provider": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge",
     "purchase": "on_demand", "usd_per_hour": 55.04, "gpu_count": 8},
]  # fmt: skip
POLICY = policy_of(
    [
        pool_doc("gcp:europe-west4:l4", "gcp", "europe-west4", "static", "g2-standard-4"),
        pool_doc("aws:us-east-1:h100", "aws", "us-east-1", "static", "p5.48xlarge", gpus=8),
        pool_doc("aws:us-east-1:fixed", "aws", "us-east-1", "policy", "x", override=2.0),
    ],
    static_file="prices.json",
)


def _write(path: Path) -> Path:
    text = (
        json.dumps({"prices": ROWS}) if path.suffix == ".json" else yaml.safe_dump({"prices": ROWS})
    )
    path.write_text(text)
    return path


def _per_gpu(path: Path) -> dict[PriceKey, float]:
    result = run(StaticFeed(path, Catalog.builtin()).fetch(frozenset()))
    rows, rejected = validate_all(result.quotes, Bounds(0.01, 200.0), Catalog.builtin(), 0.0)
    assert not rejected and not result.malformed
    return {r.key: round(r.usd_per_gpu_hour, 6) for r in rows}


@pytest.mark.parametrize("name", ["prices.json", "prices.yaml"])
def test_the_feed_reads_a_json_or_yaml_price_file(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path / name)

    assert _per_gpu(path) == {L4: 0.7429, L4_US: 0.3973, H100: 6.88}


@pytest.mark.parametrize("name", ["prices.json", "prices.yaml"])
def test_setting_a_pools_price_changes_its_row_and_only_that_row(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path / name)

    keys = resolve("aws:us-east-1:h100", POLICY, read_rows(path))
    set_price(path, keys, 9.5)
    set_price(path, keys, 9.5)  # idempotent

    assert keys == [H100]
    # USD per GPU-hour: the feed multiplies by the row's 8 GPUs and divides again.
    assert _per_gpu(path) == {L4: 0.7429, L4_US: 0.3973, H100: 9.5}
    assert len(read_rows(path)) == len(ROWS)


def test_an_instance_type_or_a_provider_region_type_names_rows_of_the_file(tmp_path: Path) -> None:
    rows = read_rows(_write(tmp_path / "prices.json"))

    assert resolve("g2-standard-4", POLICY, rows) == sorted([L4, L4_US], key=str)
    assert resolve("gcp:us-central1:g2-standard-4", POLICY, rows) == [L4_US]
    assert resolve("gcp:europe-west4:g2-standard-4:on_demand", POLICY, rows) == [L4]


def test_a_pool_whose_row_is_missing_gets_one(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"prices": []}))

    set_price(path, resolve("gcp:europe-west4:l4", POLICY, []), 1.25)

    assert _per_gpu(path) == {L4: 1.25}  # GPU count from the catalog


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("aws:us-east-1:fixed", "not the static file"),
        ("no:such:thing", "no pool or price row"),
        ("nothing", "no pool or price row"),
    ],
)
def test_what_names_no_static_row_is_refused_saying_what_would(
    tmp_path: Path, name: str, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        resolve(name, POLICY, read_rows(_write(tmp_path / "prices.json")))


def test_a_price_that_is_not_positive_or_a_csv_file_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "prices.json")
    before = path.read_text()
    with pytest.raises(ValueError, match="positive"):
        set_price(path, [L4], 0.0)
    assert path.read_text() == before
    csv_file = tmp_path / "prices.csv"
    csv_file.write_text("provider,region,instance_type,purchase,usd_per_hour\n")
    with pytest.raises(ValueError, match="edit it by hand"):
        set_price(csv_file, [L4], 1.0)


def test_the_file_is_found_next_to_the_policy(tmp_path: Path) -> None:
    assert static_path(POLICY, tmp_path / "policy.yaml") == tmp_path / "prices.json"
