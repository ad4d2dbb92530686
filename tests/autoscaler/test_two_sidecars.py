"""Two sidecar processes against one Redis and one (moto) Auto Scaling group: exactly one
acts, and when it is killed the other takes over, with the state it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis
import yaml

from autoscaler.state import ScalerState
from live.demand_table import DemandRecord, DemandTables
from tests.autoscaler.conftest import MODEL, RedisTarget, make_policy, pool_doc

HANG_S = 60.0  # bounds a hung test only; nothing asserts on elapsed time


def _record_demand(target: RedisTarget, tokens_per_s: float) -> None:
    import asyncio  # noqa: PLC0415

    async def main() -> None:
        redis = target.client()
        try:
            # Two hours up to the last 5-minute boundary, and the minutes of the window in
            # progress too: when that window completes while the test runs, the sidecar
            # must find it as busy as the others, not empty.
            end = time.time() // 300 * 300
            await DemandTables(redis, target.prefix).record(
                DemandRecord(end - 60 * (120 - i) + 1, MODEL, "us", 500, int(tokens_per_s * 60))
                for i in range(125)
            )
        finally:
            await redis.aclose()

    asyncio.run(main())


def _state(target: RedisTarget) -> ScalerState | None:
    with sync_redis.Redis.from_url(target.url, decode_responses=True) as client:
        raw = client.get(f"{target.prefix}:{{control}}:autoscaler:state")
    return None if raw is None else ScalerState.from_json(str(raw))


def _wait(target: RedisTarget, done: Any) -> ScalerState:
    deadline = time.monotonic() + HANG_S
    while True:
        state = _state(target)
        if state is not None and done(state):
            return state
        assert time.monotonic() < deadline, f"gave up waiting; last state {state}"
        time.sleep(0.05)


@dataclass
class Sidecars:
    """The two sidecar processes by holder id, and their Auto Scaling group."""

    procs: dict[str, subprocess.Popen[bytes]]
    asg: str


@pytest.fixture
def sidecars(target: RedisTarget, moto_server: Any, tmp_path: Path) -> Iterator[Sidecars]:
    asg = f"sidecars-{target.prefix.rsplit(':', 1)[1]}"
    moto_server.create_asg(asg, size=0, max_size=100)
    doc = pool_doc("aws:us-east-1:a", usd=1.0, max_replicas=8)
    doc["scaling"]["group"] = asg
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(make_policy([doc]).model_dump(mode="json")))
    _record_demand(target, 2500.0)
    env = {
        **os.environ,
        "SKYROUTE_REDIS_URL": target.url,
        "SKYROUTE_REDIS_PREFIX": target.prefix,
        "SKYROUTE_POLICY": str(policy),
        "SKYROUTE_AUTOSCALE_INTERVAL_S": "0.2",
        "SKYROUTE_AUTOSCALE_LEASE_TTL_MS": "1500",
        "SKYROUTE_AUTOSCALE_HEADROOM": "1.0",
        "SKYROUTE_AUTOSCALE_HISTORY_S": "86400",
        "SKYROUTE_AWS_ENDPOINT_URL": moto_server.url,
        "SKYROUTE_LOG_JSON": "false",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    }
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_AUTO_SCALING"):
        env.pop(key, None)
    procs = {}
    for name in ("one", "two"):
        log = (tmp_path / f"{name}.log").open("wb")
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "skyroute.autoscale_cmd", "autoscale"],
            env={**env, "SKYROUTE_AUTOSCALE_HOLDER": name}, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
    try:
        yield Sidecars(procs, asg)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def test_exactly_one_sidecar_acts_and_the_other_takes_over_when_it_is_killed(
    sidecars: Sidecars, target: RedisTarget, moto_server: Any
) -> None:
    first = _wait(target, lambda s: s.cycles >= 1)
    # Ten more cycles: every state write comes from the same leader with the same token.
    writers = set()
    last = first
    while last.cycles < first.cycles + 10:
        last = _wait(target, lambda s, c=last.cycles: s.cycles > c)
        writers.add((last.holder, last.token))
    assert writers == {(first.holder, first.token)}
    assert moto_server.desired_capacity(sidecars.asg) == 3

    sidecars.procs[first.holder].send_signal(signal.SIGKILL)
    taken = _wait(target, lambda s: s.holder != first.holder)
    assert taken.token > first.token
    assert taken.cycles > last.cycles  # it went on from the state the first one left
    assert moto_server.desired_capacity(sidecars.asg) == 3
