"""``skyroute prices refresh|show`` through its argparse registration, with settings
from ``SKYROUTE_*`` variables, a real Redis and the local Azure fake."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from redis.asyncio import Redis

from live.lease import Lease
from skyroute import prices_cmd
from tests.pricing.data import FIXTURES
from tests.pricing.fake_azure import PATH, FakeRetailPrices
from tests.pricing.helpers import policy_of, pool_doc

POOLS = [
    pool_doc("azure:eastus:a100", "azure", "eastus", "azure", "Standard_NC24ads_A100_v4", tokens_per_s=1000.0),
    pool_doc("aws:us-east-1:p5", "aws", "us-east-1", "static", "p5.48xlarge", gpus=8),
]  # fmt: skip


def _main(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="skyroute")
    prices_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


@pytest.fixture
def azure() -> Iterator[FakeRetailPrices]:
    with FakeRetailPrices() as fake:
        yield fake


@pytest.fixture
def env(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    azure: FakeRetailPrices,
) -> Path:
    doc = policy_of(POOLS, static_file=str(FIXTURES / "static_prices.csv")).model_dump(mode="json")
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(doc))
    for name, value in {
        "SKYROUTE_REDIS_URL": redis_url, "SKYROUTE_REDIS_PREFIX": prefix,
        "SKYROUTE_POLICY": str(policy), "SKYROUTE_PRICE_FEEDS": "azure,static",
        "SKYROUTE_AZURE_PRICES_URL": f"{azure.url}{PATH}", "SKYROUTE_FEED_TIMEOUT_S": "2",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(prices_cmd.logs, "configure", lambda *a, **k: None)
    return policy


def test_refresh_prints_each_pools_price_and_cost_per_million_tokens(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _main("prices", "refresh")

    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("azure:eastus:a100"))
    # 3.673 $/h, 1 GPU, 1000 tok/s: 3.673 / 3.6 = 1.0203 $/1M tokens
    assert code == 0 and "3.6730" in line and "azure" in line and "1.0203" in line


def test_static_file_prices_its_pool(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _main("prices", "refresh")

    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("aws:us-east-1:p5"))
    assert "40.0000" in line and "static" in line


def test_show_reads_what_refresh_wrote(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _main("prices", "refresh")
    capsys.readouterr()

    code = _main("prices", "show")

    out = capsys.readouterr().out
    assert code == 0 and "azure:eastus:a100" in out and "Feeds:" in out


def test_refresh_exits_1_when_a_feed_fails(
    env: Path, azure: FakeRetailPrices, capsys: pytest.CaptureFixture[str]
) -> None:
    azure.garbage = True

    code = _main("prices", "refresh")

    feed_line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("azure "))
    assert code == 1 and "bad_payload" in feed_line


def test_refresh_defers_to_the_sidecar_holding_the_lease(
    env: Path,
    redis_url: str,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
    azure: FakeRetailPrices,
) -> None:
    async def hold() -> None:
        client = Redis.from_url(redis_url)
        try:
            await Lease(client, "prices", "other-sidecar", 60_000, prefix=prefix).acquire()
        finally:
            await client.aclose()

    asyncio.run(hold())

    code = _main("prices", "refresh")

    assert code == 1 and "holds the price lease" in capsys.readouterr().err and azure.requests == []


def test_feed_choices_name_every_registered_feed() -> None:
    from pricing.feeds import FEEDS  # noqa: PLC0415 - the CLI itself must not import it

    assert sorted(prices_cmd.FEED_NAMES) == sorted(FEEDS)
