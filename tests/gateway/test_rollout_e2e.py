"""Rollouts end to end: a real gateway, real autoscaler sidecars (whose leader moves
rollouts) and real engines, driven by the real ``openai`` client.

- a version failing its golden requests never gets a user request;
- a version with TPOT x1.5, and one failing 5 % of its requests, are rolled back by the
  leader alone, within the plan's bound on the requests it may answer, and no client
  sees an error;
- a healthy version is promoted through every step, while the leading sidecar is killed,
  the gateway restarted and Redis's copy of the rollout deleted in the middle of a step:
  the rollout carries on from where it was.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
import redis as sync_redis

from tests.figures import report
from tests.gateway.harness import (
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    wait_for,
    write_policy,
)

MODEL = "chat-model"
STABLE, CANARY = "aws:us-east-1:v1", "gcp:us-central1:v2"
HANG_S = 120.0  # bounds a stuck test only


@dataclass
class Fleet:
    gateway: Gateway
    engines: dict[str, Engine]
    tmp: Path
    sidecars: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def sidecar(self, name: str) -> None:
        env = {
            **os.environ,
            "SKYROUTE_REDIS_URL": self.gateway.redis_url,
            "SKYROUTE_REDIS_PREFIX": self.gateway.prefix,
            "SKYROUTE_POLICY": str(self.gateway.policy),
            "SKYROUTE_DATABASE_URL": f"sqlite+aiosqlite:///{self.gateway.store_path}",
            "SKYROUTE_AUTOSCALE_HOLDER": name,
            "SKYROUTE_AUTOSCALE_INTERVAL_S": "60",
            "SKYROUTE_AUTOSCALE_LEASE_TTL_MS": "1500",
            "SKYROUTE_LOG_JSON": "false",
        }
        log = (self.tmp / f"sidecar-{name}.log").open("ab")
        self.sidecars[name] = subprocess.Popen(
            [sys.executable, "-m", "skyroute.autoscale_cmd", "autoscale"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

    def rollout(self) -> dict[str, Any]:
        resp = self.gateway.admin("GET", f"/admin/rollouts/{MODEL}")
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    def start(self, plan: dict[str, Any]) -> dict[str, Any]:
        started: dict[str, Any] = self.gateway.admin_json(
            "POST", "/admin/rollouts", {"model": MODEL, "to": "v2", "plan": plan}
        )
        return started

    def drive(self, done: Callable[[dict[str, Any]], bool]) -> tuple[Counter[str], int]:
        """Send requests from 8 threads until ``done(rollout)``; the pools that answered
        and the client errors."""
        stop = threading.Event()
        seen: Counter[str] = Counter()
        errors = [0]
        lock = threading.Lock()

        def client_loop(n: int) -> None:
            client = openai.OpenAI(
                base_url=f"{self.gateway.base}/v1", api_key=API_KEY, max_retries=0
            )
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    resp = client.chat.completions.with_raw_response.create(
                        model=MODEL, messages=[{"role": "user", "content": f"c{n} r{i}"}],
                        max_tokens=12,
                    )  # fmt: skip
                    with lock:
                        seen[resp.headers["x-skyroute-pool"]] += 1
                except openai.OpenAIError:
                    with lock:
                        errors[0] += 1

        threads = [threading.Thread(target=client_loop, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: done(self.rollout()), "the rollout's decision", timeout_s=HANG_S)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        return seen, errors[0]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("rollout-e2e")
    engines = {
        STABLE: Engine("a10g-llama-3.1-8b", "upstream-chat", 0.2, seed=1).start(),
        CANARY: Engine("a10g-llama-3.1-8b", "upstream-chat", 0.2, seed=2).start(),
    }
    pools = []
    for pid, engine in engines.items():
        provider, region, version = pid.split(":")
        doc = pool(pid, engine, provider=provider, region=region, model=MODEL,
                   usd_per_gpu_hour=1.0, max_concurrency=64)  # fmt: skip
        doc["version"] = version
        pools.append(doc)
    doc = policy_doc(pools, [MODEL])
    doc["models"][MODEL]["version"] = "v1"
    gateway = Gateway(write_policy(tmp / "policy.yaml", doc), redis_url, unique_prefix())
    fleet = Fleet(gateway.start(), engines, tmp)
    fleet.sidecar("one")
    try:
        yield fleet
    finally:
        for proc in fleet.sidecars.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        gateway.stop()
        for engine in engines.values():
            engine.kill()


def _plan(max_exposed: int = 2000, **step0: Any) -> dict[str, Any]:
    return {
        "steps": [
            {"share": 0.2, "min_requests": 60, "min_duration_s": 0, **step0},
            {"share": 0.5, "min_requests": 60, "min_duration_s": 0},
        ],
        "judgement": {
            "max_exposed_requests": max_exposed,
            "metrics": [
                {"name": "error_rate", "allowed": 0.01},
                {"name": "tpot_over_reference", "allowed": 0.1},
            ],
        },
    }


def _finished(r: dict[str, Any]) -> bool:
    return r["stage"] in ("promoted", "rolled_back")


def test_a_version_failing_its_golden_requests_never_gets_user_traffic(fleet: Fleet) -> None:
    before = fleet.engines[CANARY].requests_received()
    plan = {
        **_plan(),
        "validation": {
            "requests": [
                {"name": "json", "messages": [{"role": "user", "content": "answer in JSON"}],
                 "checks": {"valid_json": True}},
            ]
        },
    }  # fmt: skip
    assert fleet.start(plan)["stage"] == "validating"
    seen, errors = fleet.drive(_finished)
    r = fleet.rollout()
    assert r["stage"] == "rolled_back" and errors == 0
    assert any("golden" in t["reason"] for t in r["transitions"]), r["transitions"]
    assert seen[CANARY] == 0 and seen[STABLE] > 0
    # The only requests the new version's engine saw: the one golden request.
    assert fleet.engines[CANARY].requests_received() == before + 1


@pytest.mark.parametrize(
    ("fault", "metric"),
    [({"slowdown": 1.5}, "tpot_over_reference"), ({"fail_rate": 0.05}, "error_rate")],
    ids=["tpot-x1.5", "errors-5pct"],
)
def test_a_worse_version_is_rolled_back_within_its_bound_and_no_client_sees_it(
    fleet: Fleet, fault: dict[str, float], metric: str
) -> None:
    fleet.engines[CANARY].set_faults(**fault)
    try:
        started = fleet.start(_plan(max_exposed=1500))
        seen, errors = fleet.drive(_finished)
    finally:
        fleet.engines[CANARY].set_faults()
    r = fleet.rollout()
    report(
        f"rollout, live, new version {fault}: {r['stage']} after "
        f"{r['transitions'][0]['at_s'] - started['created_s']:.1f} s; it answered "
        f"{seen[CANARY]} of {seen.total()} user requests; client errors {errors}"
    )
    assert r["stage"] == "rolled_back", r
    assert errors == 0  # a failed canary attempt fails over to stable
    assert metric in r["transitions"][0]["reason"], r["transitions"][0]
    # Bounded: what the new version answered never exceeds the plan's bound.
    assert seen[CANARY] <= 1500
    assert r["exposed"] <= 1500


def test_a_healthy_version_is_promoted_through_leader_failover_restart_and_redis_loss(
    fleet: Fleet,
) -> None:
    fleet.sidecar("two")  # a standby
    plan = _plan()
    plan["steps"][0]["min_duration_s"] = 6  # time for the faults below, inside step 0
    started = fleet.start(plan)
    seen: Counter[str] = Counter()

    def in_step0(r: dict[str, Any]) -> bool:
        return r["stage"] == "canary" and r["step"] == 0

    s, errors = fleet.drive(in_step0)
    seen += s
    step0 = fleet.rollout()
    # The leader dies, the gateway restarts and Redis loses the rollout, in step 0.
    client = sync_redis.Redis.from_url(fleet.gateway.redis_url)
    for name, proc in fleet.sidecars.items():
        if name == "one":
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
    fleet.gateway.stop()
    client.delete(f"{fleet.gateway.prefix}:{{rollouts}}:state")
    client.close()
    fleet.gateway.start()
    wait_for(lambda: fleet.rollout()["revision"] >= step0["revision"], "the rollout back", 20)
    again = fleet.rollout()
    assert (again["id"], again["stage"], again["step"]) == (started["id"], "canary", 0)
    assert again["stage_started_s"] == step0["stage_started_s"]

    s, more = fleet.drive(_finished)
    seen += s
    errors += more
    r = fleet.rollout()
    assert r["stage"] == "promoted", r["transitions"]
    assert errors == 0
    moves = [(t["from"], t["to"], t["step"]) for t in reversed(r["transitions"])]
    assert moves == [
        ("canary", "canary", 0),  # started
        ("canary", "canary", 1),  # step 0 passed
        ("canary", "promoted", 1),  # every step passed
    ], moves
    # Promoted: every request now goes to the new version.
    client = openai.OpenAI(base_url=f"{fleet.gateway.base}/v1", api_key=API_KEY, max_retries=0)
    for i in range(10):
        resp = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": f"after {i}"}], max_tokens=4
        )
        assert resp.headers["x-skyroute-pool"] == CANARY
