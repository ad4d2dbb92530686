"""``skyroute autoscale`` (the sidecar) and ``skyroute profile`` (measure a goodput profile).

``autoscale`` runs until SIGTERM: one cycle per interval, acting only while it holds the
leader lease. ``--once`` runs one cycle and exits; ``--dry-run`` never changes anything
and prints the plan as a table. Settings come from ``SKYROUTE_*`` variables
(``autoscaler.settings.AutoscalerSettings``), built once here; the Redis URL and
prefix and the policy fall back to the CLI context (``skyroute.context``) when unset.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoscaler.profile import measure_profile
from autoscaler.settings import AutoscalerSettings
from autoscaler.sidecar import Sidecar, SidecarOptions
from base.errors import CommandError, SkyrouteError, StoreError
from live.policy_file import PolicySource
from live.redis_client import connect
from skyroute import logs
from skyroute.embedded_redis import redis_url_or_embedded
from store.migrate import migrate
from store.store import Store
from store.url import default_database_url

__all__ = ["main", "register"]

logger = logging.getLogger(__name__)


def _redis_url(settings: AutoscalerSettings) -> contextlib.AbstractContextManager[str]:
    return redis_url_or_embedded(settings.redis_url)


def _options(settings: AutoscalerSettings) -> SidecarOptions:
    return SidecarOptions(
        holder=settings.autoscale_holder,
        prefix=settings.redis_prefix,
        interval_s=settings.autoscale_interval_s,
        lease_ttl_ms=settings.autoscale_lease_ttl_ms,
        replica_ttl_ms=settings.replica_ttl_ms,
        demand_bucket_s=settings.autoscale_demand_bucket_s,
        drain_settle_s=settings.autoscale_drain_settle_s,
        dry_run=settings.autoscale_dry_run,
    )


async def _autoscale(
    settings: AutoscalerSettings, policies: PolicySource, url: str, once: bool
) -> int:
    redis = connect(url)
    store_url = settings.database_url or default_database_url()
    store = Store.open(store_url)
    try:
        # The gateway migrates too; whichever is first does it (idempotent).
        await migrate(store_url)
    except StoreError as exc:
        logger.warning("store not ready (rollouts wait for it): %s", exc)
    sidecar = Sidecar(
        policies.policy, redis, settings.cloud_config(), settings.scaler_config(),
        _options(settings), rollout_store=store.rollouts,
    )  # fmt: skip
    policies.subscribe(sidecar.on_policy)
    try:
        if not once:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            watcher = asyncio.create_task(policies.watch(settings.policy_poll_s, stop))
            await sidecar.run(stop)
            await watcher
            return 0
        acting = not settings.autoscale_dry_run
        if acting:
            await sidecar.leadership.tick()
        result = await sidecar.cycle(act=acting)
        print(result.plan.table())
        if acting and not result.leader:
            print("standby: another sidecar holds the lease; nothing was changed")
        for outcome in result.report.outcomes if result.report else []:
            print(f"{outcome.pool_id}: {outcome.action} {outcome.done}/{outcome.asked}"
                  + (f" ({outcome.error})" if outcome.error else ""))  # fmt: skip
        if acting:
            await sidecar.leadership.resign()
        return 0
    finally:
        sidecar.close()
        await redis.aclose()
        await store.close()


def cmd_autoscale(args: argparse.Namespace) -> int:
    """Run the sidecar (see the module docstring)."""
    from skyroute.context import policy_path, read_context, redis_target  # noqa: PLC0415

    # The environment, else the CLI context (a running demo's Redis and policy).
    overrides: dict[str, Any] = {}
    url, prefix = redis_target()
    overrides.update({k: v for k, v in (("redis_url", url), ("redis_prefix", prefix)) if v})
    with contextlib.suppress(CommandError):  # else the settings' default, policy.yaml
        overrides["policy"] = policy_path(args.policy)
    ctx = read_context()
    if ctx is not None and ctx.cloud_adapter_for and "SKYROUTE_CLOUD_ADAPTER_FOR" not in os.environ:
        # A demo's pools run on the local provider; in another process its groups start
        # empty (the engines belong to the demo's autoscaler), so use --dry-run there.
        overrides["cloud_adapter_for"] = ctx.cloud_adapter_for
    if args.dry_run:
        overrides["autoscale_dry_run"] = True
    settings = AutoscalerSettings(**overrides)
    logs.configure(settings.log_level, settings.log_json and not args.once)
    policies = PolicySource(settings.policy)
    with _redis_url(settings) as url:
        return asyncio.run(_autoscale(settings, policies, url, args.once))


def cmd_profile(args: argparse.Namespace) -> int:
    """Measure a goodput profile and print it (and write it with ``--out``)."""
    logs.configure("WARNING", json=False)
    url = args.url.rstrip("/").removesuffix("/v1")
    measured = asyncio.run(
        measure_profile(
            url, args.model, args.slo_tpot_ms,
            output_tokens=args.output_tokens, rounds=args.rounds,
            max_concurrency=args.max_concurrency,
        )
    )  # fmt: skip
    for level in measured.levels:
        print(f"c={level.concurrency:<4} tpot p90 {level.tpot_p90_ms:7.1f} ms  "
              f"mean {level.tpot_mean_ms:7.1f} ms  ttft p50 {level.ttft_p50_ms:7.1f} ms",
              file=sys.stderr)  # fmt: skip
    snippet = measured.snippet(args.model, url)
    if args.out:
        Path(args.out).write_text(snippet)
    print(snippet, end="")
    return 0


def register(subparsers: Any) -> None:
    """Add ``autoscale`` and ``profile`` to the ``skyroute`` command line."""
    p = subparsers.add_parser(
        "autoscale", help="run the autoscaler sidecar: forecast demand, plan, resize pools"
    )
    p.add_argument("--once", action="store_true", help="run one cycle, print it and exit")
    p.add_argument("--dry-run", action="store_true", help="change nothing; print the plan")
    p.add_argument("--policy", help="routing policy YAML (env SKYROUTE_POLICY)")
    p.set_defaults(func=cmd_autoscale)

    q = subparsers.add_parser("profile", help="measure a goodput profile against an engine")
    q.add_argument("--url", required=True, help="engine base URL, e.g. http://127.0.0.1:9101")
    q.add_argument("--model", required=True, help="model name the engine serves")
    q.add_argument("--slo-tpot-ms", type=float, required=True, help="TPOT target, ms (p90)")
    q.add_argument("--out", help="write the policy snippet to this file")
    q.add_argument("--output-tokens", type=int, default=32, help="tokens per test request")
    q.add_argument("--rounds", type=int, default=2, help="requests per client per level")
    q.add_argument("--max-concurrency", type=int, default=512, help="largest batch tried")
    q.set_defaults(func=cmd_profile)


def main(argv: Sequence[str] | None = None) -> None:
    """Run these subcommands on their own (``python -m skyroute.autoscale_cmd``)."""
    parser = argparse.ArgumentParser(prog="skyroute")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
    except SkyrouteError as exc:
        print(f"skyroute: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
