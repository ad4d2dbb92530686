"""A scale-down never cuts off an in-flight request: real engines (the local provider),
a real gateway process, and the actuator draining the pool before it deletes the node.

A local engine finishes its streams when stopped with SIGTERM; a cloud VM that is
terminated does not. So deletes here also SIGKILL the node's engine, as a cloud would,
and the control test shows that such a delete without a drain cuts the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
from redis.asyncio import Redis

from adapters.cloud import (
    CloudConfig,
    LocalSettings,
    Node,
    NodeGroup,
    NodeGroupSpec,
    NodeStatus,
    create,
)
from autoscaler.actuate import Actuator, ActuatorLimits
from autoscaler.drain import Drainer
from autoscaler.plan import Plan, PoolChange
from autoscaler.state import ScalerState
from live.policy_file import load_policy
from live.tables import LiveTables
from tests.autoscaler.conftest import RedisTarget
from tests.gateway.harness import API_KEY, Engine, Gateway, policy_doc, pool, write_policy

LOCAL = "local:here:a10g"
BACKUP = "aws:us-east-1:backup"
MODEL = "llama-3.1-8b"
TOKENS = 250  # at >= 30 ms a token: over 7 s, more than the engine's 5 s stop grace
HANG_S = 60.0


@dataclass
class Stream:
    """A streaming chat request through the gateway, read in a thread."""

    base: str
    pool: str = ""
    tokens: int = 0
    done: bool = False
    error: str = ""
    first_token: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Stream:
        threading.Thread(target=self._run, daemon=True).start()
        assert self.first_token.wait(HANG_S), self.error
        return self

    def _run(self) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "drain"}],
                "max_tokens": TOKENS, "stream": True}  # fmt: skip
        headers = {"Authorization": f"Bearer {API_KEY}"}
        try:
            with httpx.stream("POST", f"{self.base}/v1/chat/completions", json=body,
                              headers=headers, timeout=HANG_S) as resp:  # fmt: skip
                self.pool = resp.headers.get("x-skyroute-pool", "")
                for line in resp.iter_lines():
                    if line == "data: [DONE]":
                        self.done = True
                    elif line.startswith("data: ") and _content(line):
                        self.tokens += 1
                        self.first_token.set()
        except httpx.HTTPError as exc:
            self.error = repr(exc)
        finally:
            self.first_token.set()
            self.finished.set()


def _content(line: str) -> str:
    choices = json.loads(line[6:]).get("choices") or [{}]
    return str((choices[0].get("delta") or {}).get("content") or "")


class HardDelete(NodeGroup):
    """Wraps a local node group: a delete kills the node's engine at once (as a cloud
    terminates a VM) and notes whether the stream had finished by then."""

    def __init__(self, inner: NodeGroup, stream: Stream) -> None:
        self.inner = inner
        self.stream = stream
        self.finished_at_delete: list[bool] = []

    @classmethod
    def from_spec(cls, spec: NodeGroupSpec, config: CloudConfig) -> HardDelete:
        raise NotImplementedError

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def min_size(self) -> int:
        return self.inner.min_size

    @property
    def max_size(self) -> int:
        return self.inner.max_size

    def target_size(self) -> int:
        return self.inner.target_size()

    def increase_size(self, delta: int) -> None:
        self.inner.increase_size(delta)

    def nodes(self) -> list[Node]:
        return self.inner.nodes()

    def delete_nodes(self, ids: Sequence[str]) -> None:
        self.finished_at_delete.append(self.stream.finished.is_set())
        ports = {
            int(n.address.rsplit(":", 1)[1])
            for n in self.inner.nodes()
            if n.id in ids and n.address
        }
        # The engine listens on a socket it inherited (``--fd``), so it is found by the
        # port it listens on, not by its command line.
        for proc in psutil.process_iter(["cmdline"]):
            if "simengine" not in (proc.info["cmdline"] or []):
                continue
            with contextlib.suppress(psutil.Error):
                listening = {
                    c.laddr.port
                    for c in proc.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN
                }
                if listening & ports:
                    proc.kill()
        self.inner.delete_nodes(ids)


@dataclass
class Setup:
    group: NodeGroup
    gateway: Gateway
    backup: Engine
    target: RedisTarget
    policy_path: Path


@pytest.fixture
def setup(target: RedisTarget, tmp_path: Path) -> Iterator[Setup]:
    spec = NodeGroupSpec(LOCAL, "local", "here", "a10g", 0, 2, model=MODEL,
                         upstream_model="upstream-chat", gpu_type="A10G")  # fmt: skip
    group = create(spec, CloudConfig(local=LocalSettings(time_scale=1.0), cache_ttl_s=0.0))
    backup = Engine("a10g-llama-3.1-8b", "upstream-chat", 1.0, seed=2).start()
    gateway = None
    try:
        group.increase_size(1)
        deadline = time.monotonic() + HANG_S
        while [n.status for n in group.nodes()] != [NodeStatus.RUNNING]:
            assert time.monotonic() < deadline, group.nodes()
            time.sleep(0.05)
        address = group.nodes()[0].address
        assert address is not None
        node = Engine(
            "a10g-llama-3.1-8b", "upstream-chat", 1.0, port=int(address.rsplit(":", 1)[1])
        )
        doc = policy_doc(
            [pool(LOCAL, node, provider="local", region="here", model=MODEL, usd_per_gpu_hour=0.5),
             pool(BACKUP, backup, provider="aws", region="us-east-1", model=MODEL, usd_per_gpu_hour=2.0)],
            [MODEL], health={"drain_deadline_s": 30.0},
        )  # fmt: skip
        path = write_policy(tmp_path / "policy.yaml", doc)
        gateway = Gateway(path, target.url, target.prefix).start()
        yield Setup(group, gateway, backup, target, path)
    finally:
        if gateway is not None:
            gateway.stop()
        backup.kill()
        group.close()


def _scale_down(setup: Setup, group: NodeGroup) -> None:
    """Apply a plan taking the local pool from 1 replica to 0, as the leader would."""
    policy = load_policy(setup.policy_path)
    change = PoolChange(LOCAL, MODEL, 1, 0, "test", 0.5, 533.0, "on_demand")
    plan = Plan(0.0, (change,), (), 0.5, 0.0, None, ScalerState())

    async def main() -> None:
        redis = Redis.from_url(setup.target.url)
        try:
            drainer = Drainer(LiveTables(redis, setup.target.prefix), policy.health,
                              policy.routing.outlier, settle_s=1.0)  # fmt: skip
            actuator = Actuator({LOCAL: group}, drainer, lambda: True,
                                ActuatorLimits(drain_deadline_s=policy.health.drain_deadline_s))  # fmt: skip
            await actuator.apply(plan)
        finally:
            await redis.aclose()

    asyncio.run(main())


def test_a_scale_down_lets_an_in_flight_stream_finish_before_deleting_its_node(
    setup: Setup,
) -> None:
    stream = Stream(setup.gateway.base).start()
    assert stream.pool == LOCAL
    recording = HardDelete(setup.group, stream)
    _scale_down(setup, recording)
    assert stream.finished.wait(HANG_S)
    assert (stream.done, stream.tokens, stream.error) == (True, TOKENS, "")
    assert recording.finished_at_delete == [True]
    assert [n.status for n in setup.group.nodes()] in ([], [NodeStatus.DELETING])


def test_control_deleting_the_node_without_a_drain_cuts_the_stream(setup: Setup) -> None:
    stream = Stream(setup.gateway.base).start()
    assert stream.pool == LOCAL
    HardDelete(setup.group, stream).delete_nodes([setup.group.nodes()[0].id])
    assert stream.finished.wait(HANG_S)
    assert stream.done is False and stream.tokens < TOKENS
