"""Each real feed against its local fake: after a good refresh, a page failing mid-way,
a garbage payload, a missing region or a timeout keeps the last good price, and the
failure shows in ``prices show`` and in a metric."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from pricing.aws import AwsFeed, AwsFeedConfig
from pricing.azure import AzureFeed, AzureFeedConfig
from pricing.catalog import Catalog
from pricing.feed import Feed
from pricing.gcp import GcpFeed, GcpFeedConfig
from pricing.pools import price_pools
from pricing.show import render
from router.policy import Policy
from tests.pricing.fake_aws_pricing import FakePricing
from tests.pricing.fake_azure import PATH, FakeRetailPrices
from tests.pricing.fake_gcp import FakeCatalog
from tests.pricing.helpers import policy_of, pool_doc, rig, run

MODES = {"page": "http_error", "garbage": "bad_payload", "region": "missing", "timeout": "timeout"}
# Long enough for a good fetch on a loaded machine; the hang mode waits this out once.
TIMEOUT_S = 1.0


@dataclass
class Case:
    feed: Feed
    fake: Any
    policy: Policy
    region: str

    def break_it(self, mode: str) -> None:
        if mode == "page":
            self.fake.fail_on_page = 2
        elif mode == "garbage":
            self.fake.garbage = True
        elif mode == "region":
            self.fake.drop_region = self.region
        else:
            self.fake.hang = True


def _aws(stack: ExitStack, monkeypatch: pytest.MonkeyPatch) -> Case:
    fake = stack.enter_context(FakePricing(page_size=1))  # p5.48xlarge: 2 regions, 2 pages
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", fake.url)
    feed = AwsFeed(AwsFeedConfig(timeout_s=TIMEOUT_S, max_attempts=1))
    return Case(
        feed,
        fake,
        policy_of([pool_doc("pool", "aws", "us-east-1", "aws", "p5.48xlarge", gpus=8)]),
        "us-east-1",
    )


def _azure(stack: ExitStack, _: pytest.MonkeyPatch) -> Case:
    fake = stack.enter_context(FakeRetailPrices(page_size=1))
    feed = AzureFeed(AzureFeedConfig(url=f"{fake.url}{PATH}", timeout_s=TIMEOUT_S))
    pool = pool_doc("pool", "azure", "eastus", "azure", "Standard_NC24ads_A100_v4")
    return Case(feed, fake, policy_of([pool]), "eastus")


def _gcp(stack: ExitStack, _: pytest.MonkeyPatch) -> Case:
    fake = stack.enter_context(FakeCatalog())
    config = GcpFeedConfig(api_endpoint=fake.url, anonymous=True, timeout_s=TIMEOUT_S)
    pool = pool_doc("pool", "gcp", "us-central1", "gcp", "g2-standard-4")
    return Case(GcpFeed(config, Catalog.builtin()), fake, policy_of([pool]), "us-central1")


FEEDS: dict[str, Callable[[ExitStack, pytest.MonkeyPatch], Case]] = {
    "aws": _aws,
    "azure": _azure,
    "gcp": _gcp,
}
PARAMS = [(f, m) for f in FEEDS for m in MODES]


@contextmanager
def _case(name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Case]:
    with ExitStack() as stack:
        yield FEEDS[name](stack, monkeypatch)


def _good_then_broken(redis_url: str, prefix: str, case: Case, name: str, mode: str) -> Any:
    async def scenario() -> Any:
        async with rig(redis_url, prefix, case.policy, {name: case.feed}) as r:
            await r.refresher.refresh()
            before = (await r.pool_price("pool")).usd_per_gpu_hour
            case.break_it(mode)
            await r.refresher.refresh()
            after = (await r.pool_price("pool")).usd_per_gpu_hour
            rows = await r.table.read_rows()
            shown = render(
                price_pools(case.policy, rows, r.clock()), await r.table.read_statuses(), r.clock()
            )
            errors = r.metric("skyroute_price_feed_errors_total", feed=name, reason=MODES[mode])
            return before, after, shown, errors

    return run(scenario())


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize(("feed", "mode"), PARAMS)
def test_failure_keeps_the_last_good_price(
    feed: str, mode: str, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _case(feed, monkeypatch) as case:
        before, after, _, _ = _good_then_broken(redis_url, prefix, case, feed, mode)

    assert before > 0 and after == before


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize(("feed", "mode"), PARAMS)
def test_failure_shows_in_prices_show(
    feed: str, mode: str, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _case(feed, monkeypatch) as case:
        _, _, shown, _ = _good_then_broken(redis_url, prefix, case, feed, mode)

    feed_line = next(line for line in shown.splitlines() if line.startswith(f"{feed} "))
    assert "ERROR" in feed_line and MODES[mode] in feed_line


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize(("feed", "mode"), PARAMS)
def test_failure_counts_in_the_errors_metric(
    feed: str, mode: str, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _case(feed, monkeypatch) as case:
        _, _, _, errors = _good_then_broken(redis_url, prefix, case, feed, mode)

    assert errors == 1
