"""The local provider: real simulated engines on 127.0.0.1."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from adapters.cloud import CloudConfig, LocalSettings, Node, NodeGroup, NodeGroupSpec, create
from adapters.cloud.nodegroup import NodeStatus
from base.errors import AdapterError, OutOfCapacity

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DEADLINE_S = 30.0


def _spec(gpu_type: str = "L4") -> NodeGroupSpec:
    return NodeGroupSpec(
        "local:here:l4", "local", "here", "l4", 0, 3,
        model="llama-3.1-8b", upstream_model=MODEL, gpu_type=gpu_type,
    )  # fmt: skip


@pytest.fixture
def make_group() -> Iterator[Callable[..., NodeGroup]]:
    made: list[NodeGroup] = []

    def make(**settings: object) -> NodeGroup:
        local = LocalSettings(time_scale=0.0, **settings)  # type: ignore[arg-type]
        made.append(create(_spec(), CloudConfig(local=local, cache_ttl_s=0.0)))
        return made[-1]

    yield make
    for group in made:
        group.close()


def wait_for(group: NodeGroup, done: Callable[[list[Node]], bool]) -> list[Node]:
    """Poll nodes() until ``done``; the deadline only bounds a hung test."""
    deadline = time.monotonic() + DEADLINE_S
    while not done(nodes := group.nodes()):
        assert time.monotonic() < deadline, f"gave up waiting; nodes: {nodes}"
        time.sleep(0.05)
    return nodes


def test_a_started_replica_becomes_running_and_serves_the_pools_model(
    make_group: Callable[..., NodeGroup],
) -> None:
    group = make_group()
    group.increase_size(1)
    [node] = wait_for(group, lambda ns: [n.status for n in ns] == ["running"])
    models = httpx.get(f"{node.address}/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == [MODEL]


def test_close_stops_every_engine(make_group: Callable[..., NodeGroup]) -> None:
    group = make_group()
    group.increase_size(2)
    nodes = wait_for(group, lambda ns: all(n.status == "running" for n in ns))
    group.close()
    for node in nodes:
        port = int((node.address or "").rsplit(":", 1)[1])
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
            pass


def test_a_deleted_replica_is_gone_once_it_has_exited(make_group: Callable[..., NodeGroup]) -> None:
    group = make_group()
    group.increase_size(2)
    first, second = wait_for(group, lambda ns: all(n.status == "running" for n in ns))
    group.delete_nodes([first.id])
    assert [n.id for n in wait_for(group, lambda ns: len(ns) == 1)] == [second.id]


def test_an_engine_that_exits_on_its_own_is_failed(make_group: Callable[..., NodeGroup]) -> None:
    group = make_group(python="/bin/false")
    group.increase_size(1)
    [node] = wait_for(group, lambda ns: ns[0].status == "failed")
    assert node.error == "exit code 1"


def test_capacity_is_read_on_every_scale_up(make_group: Callable[..., NodeGroup]) -> None:
    capacity = {"local:here:l4": 0}
    group = make_group(capacity=capacity)
    with pytest.raises(OutOfCapacity):
        group.increase_size(1)
    capacity["local:here:l4"] = 1
    group.increase_size(1)
    assert group.target_size() == 1


def test_a_pool_without_an_engine_profile_is_refused() -> None:
    with pytest.raises(AdapterError, match=r"tpu-llama-3\.1-8b"):
        create(_spec(gpu_type="TPU-v5e"), CloudConfig())


def test_a_node_url_keeps_a_url_address_and_builds_one_from_an_ip() -> None:
    assert Node("a", NodeStatus.RUNNING, "http://127.0.0.1:9001/").url(8000) == (
        "http://127.0.0.1:9001"
    )
    assert Node("b", NodeStatus.RUNNING, "10.1.2.3").url(8000) == "http://10.1.2.3:8000"
    assert Node("c", NodeStatus.RUNNING, "fd00::7").url(8080) == "http://[fd00::7]:8080"
    assert Node("d", NodeStatus.CREATING).url(8000) is None
