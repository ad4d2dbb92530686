"""The demo's two sidecars: the price feed (``skyroute prices watch``) and the autoscaler
(``skyroute autoscale``), each a child process as in a real deployment.

The autoscaler serves every cloud's pools with the ``local`` provider
(``SKYROUTE_CLOUD_ADAPTER_FOR``): a pool with a ``scaling`` section gets its replicas
as simulated engine processes that the autoscaler starts and stops, and publishes
(replica discovery) once they answer ``/health``. Its knobs are set for a demo that
reacts in seconds (:data:`FAST_AUTOSCALE`); any ``SKYROUTE_*`` variable already in the
environment wins, which is how tests make it faster still.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from live.redis_client import connect
from live.tables import LiveTables
from router.policy import Policy

__all__ = ["DEMAND_BUCKET_S", "FAST_AUTOSCALE", "sidecars"]

# Demand telemetry resolution of the demo (s): the gateway records and the autoscaler
# reads demand in buckets this long, so a burst shows within seconds.
DEMAND_BUCKET_S = 5

# Every duration in seconds. A cycle every 5 s on 5-s buckets; a pool may shrink 20 s
# after it grew, to the largest size recommended over the last 20 s; the forecast's
# upper quantile is 0.75 (not 0.95), so that one burst in a few minutes of history does
# not keep the fleet at burst size.
FAST_AUTOSCALE: Mapping[str, str] = {
    "SKYROUTE_AUTOSCALE_INTERVAL_S": "5",
    "SKYROUTE_AUTOSCALE_FORECAST_BUCKET_S": str(DEMAND_BUCKET_S),
    "SKYROUTE_AUTOSCALE_HISTORY_S": "1800",
    "SKYROUTE_AUTOSCALE_COOLDOWN_S": "20",
    "SKYROUTE_AUTOSCALE_SCALE_DOWN_WINDOW_S": "20",
    "SKYROUTE_AUTOSCALE_QUANTILE": "0.75",
    "SKYROUTE_AUTOSCALE_LEASE_TTL_MS": "5000",
    "SKYROUTE_CLOUD_ADAPTER_FOR": json.dumps({"aws": "local", "gcp": "local", "azure": "local"}),
}
_START_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 20.0


def _env(settings: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(settings)
    for key, value in extra.items():
        env.setdefault(key, value)
    return env


def _spawn(
    args: list[str], env: dict[str, str], log: Path, preexec: Callable[[], None]
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        # Started before the demo runs any thread, so preexec_fn is safe here.
        return subprocess.Popen(
            [sys.executable, "-c", "from skyroute.cli import main; main()", *args],
            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=preexec,  # noqa: PLW1509
        )  # fmt: skip


async def _wait_rows(
    redis_url: str,
    prefix: str,
    pools: list[str],
    ok: Callable[[float, float], bool],
    what: str,
    procs: list[subprocess.Popen[bytes]],
    logs: list[Path],
) -> None:
    """Poll the live tables until ``ok(price, ready replicas)`` holds for every pool."""
    redis = connect(redis_url)
    deadline = time.monotonic() + _START_TIMEOUT_S
    try:
        tables = LiveTables(redis, prefix=prefix)
        while True:
            rows = await tables.read(pools, int(time.time() * 1000), 3000, with_samples=False)
            if all(ok(r.usd_per_gpu_hour, r.ready_replicas) for r in rows.values()):
                return
            dead = [p for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                tails = "\n".join(_tail(log) for log in logs)
                why = "a sidecar exited" if dead else f"not within {_START_TIMEOUT_S:.0f} s"
                raise RuntimeError(f"demo: {what}: {why}\n{tails}")
            await asyncio.sleep(0.25)
    finally:
        await redis.aclose()


def _tail(log: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return f"--- {log} ---\n" + "\n".join(log.read_text().splitlines()[-lines:])
    return ""


@contextlib.contextmanager
def sidecars(
    policy: Policy,
    settings: Mapping[str, str],
    run_dir: Path,
    time_scale: float,
    preexec: Callable[[], None],
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start the price feed (``SKYROUTE_PRICE_FEEDS`` default ``static``) and the
    autoscaler; wait until every pool priced by the static file has a price, then until
    every pool the autoscaler manages with ``min`` >= 1 has a ready replica; stop both
    (SIGTERM: the autoscaler stops its engines) on exit.

    ``settings``: the ``SKYROUTE_*`` variables both share (Redis URL and prefix,
    policy path, replica TTL). Raises RuntimeError if a sidecar dies or is not ready
    within 90 s (with the tail of its log, which is in ``run_dir``).
    """
    redis_url, prefix = settings["SKYROUTE_REDIS_URL"], settings["SKYROUTE_REDIS_PREFIX"]
    common = {"SKYROUTE_LOG_JSON": "false", "SKYROUTE_LOG_LEVEL": "INFO"}
    procs: list[subprocess.Popen[bytes]] = []
    logs = [run_dir / "prices.log", run_dir / "autoscaler.log"]
    try:
        env = _env(settings, {**common, "SKYROUTE_PRICE_FEEDS": "static"})
        procs.append(_spawn(["prices", "watch"], env, logs[0], preexec))
        fast = {**FAST_AUTOSCALE, "SKYROUTE_LOCAL_TIME_SCALE": str(time_scale)}
        procs.append(_spawn(["autoscale"], _env(settings, {**common, **fast}), logs[1], preexec))
        # The demo runs the static feed only: a cloud feed would need that cloud's
        # credentials, so pools priced by one wait for nothing here.
        priced = [p.id for p in policy.pools if p.price.source == "static"]
        asyncio.run(
            _wait_rows(redis_url, prefix, priced, lambda usd, _: math.isfinite(usd),
                       "pool prices from the static price file", procs, logs)
        )  # fmt: skip
        managed = [p.id for p in policy.pools if p.scaling is not None and p.replicas.min > 0]
        asyncio.run(
            _wait_rows(redis_url, prefix, managed, lambda _, ready: ready >= 1,
                       "first replicas started by the autoscaler", procs, logs)
        )  # fmt: skip
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
