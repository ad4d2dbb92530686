"""The demo fleet policy agrees with the price and RTT rows it was built from."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from live.policy_file import load_policy
from router.policy import Policy, PoolSpec
from router.policy_loader import parse_policy
from skyroute.demo import with_free_ports
from skyroute.demo_run import AUTOSCALED_MODEL, PRICE_FILE, demo_price_rows, run_policy_text

PROJECT = Path(__file__).resolve().parents[2]
FLEET = PROJECT / "skyroute" / "fleet"
SHARED_DATA = PROJECT.parent / "shared" / "data"
ENGINE_PROFILES = {
    "h100-llama-3.1-70b",
    "a100-llama-3.1-70b",
    "h100-llama-3.1-8b",
    "a100-llama-3.1-8b",
    "l4-llama-3.1-8b",
    "a10g-llama-3.1-8b",
    "v100-llama-3.1-8b",
    "a10g-bge-large",
}
EU_REGION_PREFIXES = ("eu-", "europe-")
EU_AZURE_REGIONS = {"westeurope", "northeurope", "francecentral", "germanywestcentral"}


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _is_eu(location: str) -> bool:
    _, region = location.split(":", 1)
    return region.startswith(EU_REGION_PREFIXES) or region in EU_AZURE_REGIONS


POLICY: Policy = load_policy(FLEET / "demo-policy.yaml")
PRICES = {
    (r["provider"], r["region"], r["instance_type"]): r
    for r in _read_csv(FLEET / "demo_prices.csv")
}
RTT = {
    (r["src_region"], r["dst_region"]): float(r["avg_rtt_ms"])
    for r in _read_csv(FLEET / "demo_rtt.csv")
}


def _price_row(pool: PoolSpec) -> dict[str, str]:
    return PRICES[(pool.provider, pool.region, pool.price.instance_type)]


def test_demo_policy_loads_with_nine_pools() -> None:
    assert len(load_policy(FLEET / "demo-policy.yaml").pools) == 9


@pytest.mark.parametrize("pool", POLICY.pools, ids=lambda p: p.id)
def test_pool_price_is_csv_row_price_per_gpu(pool: PoolSpec) -> None:
    row = _price_row(pool)
    column = "usd_per_hour_spot" if pool.price.purchase == "spot" else "usd_per_hour_on_demand"
    expected = round(float(row[column]) / int(row["gpu_count"]), 4)
    assert pool.price.source == "policy"
    assert pool.price.usd_per_gpu_hour == expected


@pytest.mark.parametrize("pool", POLICY.pools, ids=lambda p: p.id)
def test_pool_gpus_per_replica_is_csv_gpu_count(pool: PoolSpec) -> None:
    assert pool.gpus_per_replica == int(_price_row(pool)["gpu_count"])


def test_every_client_rtt_equals_demo_rtt_csv() -> None:
    policy_rtts = {
        (client, location): rtt
        for client, region in POLICY.client_regions.items()
        for location, rtt in region.rtt_ms.items()
    }
    assert policy_rtts == {pair: RTT[pair] for pair in policy_rtts}


def test_fleet_has_six_or_more_pools_across_aws_gcp_azure() -> None:
    assert len(POLICY.pools) >= 6
    assert {p.provider for p in POLICY.pools} == {"aws", "gcp", "azure"}


def test_eu_client_region_lists_only_eu_pools() -> None:
    eu_clients = [name for name in POLICY.client_regions if _is_eu(name)]
    assert eu_clients
    for name in eu_clients:
        assert all(_is_eu(loc) for loc in POLICY.client_regions[name].rtt_ms), name


def test_us_client_regions_reach_every_pool_location() -> None:
    locations = {p.location for p in POLICY.pools}
    us_clients = [name for name in POLICY.client_regions if not _is_eu(name)]
    assert us_clients
    for name in us_clients:
        assert set(POLICY.client_regions[name].rtt_ms) == locations, name


def test_every_pool_has_its_own_endpoint_port() -> None:
    ports = [url.port for p in POLICY.pools for url in p.endpoints]
    assert len(set(ports)) == len(ports) == len(POLICY.pools)


def test_the_demo_moves_every_endpoint_to_its_own_free_port_and_keeps_the_comments() -> None:
    text = (FLEET / "demo-policy.yaml").read_text(encoding="utf-8")

    moved, held = with_free_ports(text)
    for sock in held.values():
        sock.close()

    policy = parse_policy(moved)
    old = [url.port for p in POLICY.pools for url in p.endpoints]
    new = [url.port for p in policy.pools for url in p.endpoints]
    assert len(set(new)) == len(new) and not set(new) & set(old)
    assert set(held) == set(new)  # each new port was held until the engine took it
    assert [ln for ln in moved.splitlines() if ln.lstrip().startswith("#")] == [
        ln for ln in text.splitlines() if ln.lstrip().startswith("#")
    ]


def test_every_pool_is_preceded_by_a_known_engine_comment() -> None:
    engines: dict[str, str] = {}
    engine = ""
    for line in (FLEET / "demo-policy.yaml").read_text(encoding="utf-8").splitlines():
        if m := re.fullmatch(r"\s*# engine: (\S+)", line):
            engine = m.group(1)
        elif m := re.fullmatch(r"\s*- id: (\S+)", line):
            engines[m.group(1)], engine = engine, ""
    assert engines == {p.id: engines.get(p.id) for p in POLICY.pools}
    assert set(engines.values()) <= ENGINE_PROFILES


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="shared reference data not present")
def test_demo_price_rows_are_copied_from_the_shared_price_files() -> None:
    for row in PRICES.values():
        source = _read_csv(SHARED_DATA / row["source_file"])
        fields = (
            row["instance_type"],
            row["region"],
            row["usd_per_hour_on_demand"],
            row["usd_per_hour_spot"],
        )
        matches = [
            r
            for r in source
            if (
                r.get("InstanceType", r.get("instance_type")),
                r.get("Region", r.get("region")),
                r.get("Price", r.get("hour")),
                r.get("SpotPrice", r.get("hour_spot")),
            )
            == fields
        ]
        assert matches, row


def test_the_demo_run_prices_every_pool_from_its_csv_row_through_the_static_feed() -> None:
    text, wanted = run_policy_text((FLEET / "demo-policy.yaml").read_text(encoding="utf-8"))
    rows = demo_price_rows(wanted, (FLEET / "demo_prices.csv").read_text(encoding="utf-8"))

    run = parse_policy(text)
    assert run.pricing.static_file == PRICE_FILE
    by_key = {(r["provider"], r["region"], r["instance_type"], r["purchase"]): r for r in rows}
    for fixed, pool in zip(POLICY.pools, run.pools, strict=True):
        assert pool.price.source == "static" and pool.price.usd_per_gpu_hour is None
        row = by_key[(pool.provider, pool.region, pool.price.instance_type, pool.price.purchase)]
        # The same price per GPU-hour as the packaged policy's fixed one.
        per_gpu = float(row["usd_per_hour"]) / int(row["gpu_count"])
        assert round(per_gpu, 4) == fixed.price.usd_per_gpu_hour


def test_the_demo_run_lets_the_autoscaler_size_every_pool_of_one_model() -> None:
    text, _ = run_policy_text((FLEET / "demo-policy.yaml").read_text(encoding="utf-8"))

    run = parse_policy(text)
    scaled = {p.id for p in run.pools if p.scaling is not None}
    # All of the model's pools: the autoscaler plans a model over its longest lead time.
    assert scaled == {p.id for p in run.pools if p.model == AUTOSCALED_MODEL}
    assert all(p.scaling and p.scaling.provisioning_s <= 10 for p in run.pools if p.id in scaled)
    assert all(p.replicas.min >= 1 for p in run.pools if p.id in scaled)
    assert [ln for ln in text.splitlines() if ln.lstrip().startswith("# engine:")] == [
        ln
        for ln in (FLEET / "demo-policy.yaml").read_text(encoding="utf-8").splitlines()
        if ln.lstrip().startswith("# engine:")
    ]
