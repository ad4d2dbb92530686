"""``skyroute prices refresh|watch|show|set``: run the GPU price feeds, show their
prices, or change one in the static price file.

Settings come from ``SKYROUTE_*`` (``pricing.settings.PriceFeedSettings``); ``--policy``
overrides ``SKYROUTE_POLICY``. ``refresh`` exits 1 if a feed failed outright (its last
good prices stay), ``watch`` runs until SIGINT/SIGTERM. ``set`` writes the policy's
``pricing.static_file`` and refreshes the static feed at once (a running ``prices
watch`` would pick the change up at its next refresh anyway).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import TYPE_CHECKING, Any

from base.errors import CommandError
from skyroute import logs

if TYPE_CHECKING:
    from pricing.settings import PriceFeedSettings

# The names ``pricing.feeds.FEEDS`` registers; spelled here so that building the parser
# does not import the cloud SDKs (``skyroute serve`` starts without them).
FEED_NAMES = ("aws", "azure", "gcp", "static")


def _settings(args: argparse.Namespace) -> PriceFeedSettings:
    from pricing.settings import PriceFeedSettings  # noqa: PLC0415 - keep start-up light
    from skyroute.context import policy_path, redis_target  # noqa: PLC0415

    # The environment, else the CLI context (a running demo's Redis and policy).
    overrides: dict[str, Any] = {}
    url, prefix = redis_target()
    overrides.update({k: v for k, v in (("redis_url", url), ("redis_prefix", prefix)) if v})
    with contextlib.suppress(CommandError):  # else the settings' own default, policy.yaml
        overrides["policy"] = policy_path(getattr(args, "policy", None))
    if getattr(args, "feed", None):
        overrides["price_feeds"] = ",".join(args.feed)
    return PriceFeedSettings(**overrides)


async def _refresh(settings: PriceFeedSettings, force: bool) -> int:
    from pricing.process import open_process  # noqa: PLC0415

    async with open_process(settings) as proc:
        token = await proc.lease.acquire()
        if token is None and not force:
            print(
                "another sidecar holds the price lease and refreshes the prices; "
                "use --force to refresh anyway",
                file=sys.stderr,
            )
            return 1
        try:
            report = await proc.refresher.refresh(fence=proc.lease.fence)
        finally:
            await proc.lease.release()
        print(await proc.show())
        if report.fenced_out:
            print("the price lease was lost during the refresh: nothing written", file=sys.stderr)
            return 1
        return 1 if any(s.state == "error" for s in report.statuses.values()) else 0


async def _watch(settings: PriceFeedSettings) -> int:
    from prometheus_client import start_http_server  # noqa: PLC0415

    from pricing.process import open_process  # noqa: PLC0415

    async with open_process(settings) as proc:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        server = None
        if settings.price_metrics_port:
            server, _ = start_http_server(
                settings.price_metrics_port, addr="127.0.0.1", registry=proc.registry
            )
        try:
            await proc.watcher.run(stop)
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
    return 0


async def _show(settings: PriceFeedSettings) -> int:
    from pricing.process import open_process  # noqa: PLC0415

    async with open_process(settings) as proc:
        print(await proc.show())
    return 0


def cmd_refresh(args: argparse.Namespace) -> int:
    """``prices refresh``: fetch every enabled feed once and print the result."""
    settings = _settings(args)
    logs.configure(settings.log_level, json=False)
    return asyncio.run(_refresh(settings, args.force))


def cmd_watch(args: argparse.Namespace) -> int:
    """``prices watch``: the sidecar loop (leader-elected)."""
    settings = _settings(args)
    logs.configure(settings.log_level, settings.log_json)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_watch(settings))
    return 130


def cmd_show(args: argparse.Namespace) -> int:
    """``prices show``: pools with their prices and $/1M tokens, and each feed's status."""
    settings = _settings(args)
    logs.configure(settings.log_level, json=False)
    return asyncio.run(_show(settings))


def cmd_set(args: argparse.Namespace) -> int:
    """``prices set POOL_OR_SKU PRICE``: write the static price file, refresh it."""
    from live.policy_file import load_policy  # noqa: PLC0415
    from pricing.static import static_path  # noqa: PLC0415
    from pricing.static_edit import read_rows, resolve, set_price  # noqa: PLC0415

    settings = _settings(args).model_copy(update={"price_feeds": "static"})
    logs.configure("WARNING", json=False)
    policy = load_policy(settings.policy)
    path = static_path(policy, settings.policy)
    if path is None:
        raise CommandError(
            f"the policy {settings.policy} names no pricing.static_file to write prices to"
        )
    try:
        keys = resolve(args.target, policy, read_rows(path))
        set_price(path, keys, args.price)
    except OSError as exc:
        raise CommandError(f"cannot change {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    for key in keys:
        print(f"{path}: {key} = {args.price:g} USD per GPU-hour")
    if not settings.redis_url:
        print("no Redis to refresh (SKYROUTE_REDIS_URL): the price feed applies it at its next run")
        return 0
    return asyncio.run(_refresh(settings, force=True))


def register(subparsers: Any) -> None:
    """Add ``prices refresh|watch|show|set`` to the ``skyroute`` parser."""
    p = subparsers.add_parser("prices", help="GPU price feeds: refresh, watch, show, set")
    sub = p.add_subparsers(dest="prices_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--policy", help="routing policy YAML (env SKYROUTE_POLICY)")

    q = sub.add_parser("refresh", help="fetch every enabled feed once, then show the prices")
    common(q)
    q.add_argument(
        "--feed", action="append", choices=FEED_NAMES, help="only this feed (repeatable)"
    )
    q.add_argument(
        "--force", action="store_true", help="refresh even if another sidecar holds the lease"
    )
    q.set_defaults(func=cmd_refresh)

    q = sub.add_parser("watch", help="refresh on the policy's interval while holding the lease")
    common(q)
    q.set_defaults(func=cmd_watch)

    q = sub.add_parser("show", help="pools' prices, ages, stale flags, $/1M tokens; feed status")
    common(q)
    q.set_defaults(func=cmd_show)

    q = sub.add_parser(
        "set", help="change a price in the static price file, then refresh that feed"
    )
    common(q)
    q.add_argument(
        "target",
        metavar="POOL_OR_SKU",
        help="a pool id, provider:region:instance_type[:purchase], or an instance type",
    )
    q.add_argument("price", type=float, metavar="PRICE", help="USD per GPU-hour")
    q.set_defaults(func=cmd_set)
