"""DNS discovery against a real DNS server on a free UDP port (``LocalDns``)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from adapters.upstream.dns import resolve_replicas
from adapters.upstream.dns_query import DnsQuery
from base.errors import DiscoveryError
from tests.adapters.upstream.dns_server import LocalDns

SERVICE = "vllm.default.svc.cluster.local."
SRV = "_http._tcp.vllm.default.svc.cluster.local."


@pytest.fixture
def server() -> Iterator[LocalDns]:
    dns = LocalDns()
    yield dns
    dns.close()


def _resolve(query: DnsQuery) -> list[str]:
    return asyncio.run(resolve_replicas(query))


def test_a_records_become_one_base_url_per_address_on_the_engine_port(server: LocalDns) -> None:
    server.set(SERVICE, "A", ["10.0.0.7", "10.0.0.5"])
    query = DnsQuery(SERVICE, "A", 8000, nameserver=server.address)
    assert _resolve(query) == ["http://10.0.0.5:8000", "http://10.0.0.7:8000"]


def test_aaaa_records_are_bracketed(server: LocalDns) -> None:
    server.set(SERVICE, "AAAA", ["fd00::1"])
    assert _resolve(DnsQuery(SERVICE, "A", 80, nameserver=server.address)) == [
        "http://[fd00::1]:80"
    ]


@pytest.mark.parametrize("glue", [True, False])
def test_srv_records_give_each_targets_address_and_its_own_port(glue: bool) -> None:
    server = LocalDns(glue=glue)
    try:
        server.set(SRV, "SRV", ["0 50 8001 pod-a.vllm.test.", "0 50 9002 pod-b.vllm.test."])
        server.set("pod-a.vllm.test.", "A", ["10.1.0.1"])
        server.set("pod-b.vllm.test.", "A", ["10.1.0.2"])
        query = DnsQuery(SRV, "SRV", scheme="https", nameserver=server.address)
        assert _resolve(query) == ["https://10.1.0.1:8001", "https://10.1.0.2:9002"]
    finally:
        server.close()


def test_a_name_that_does_not_exist_names_no_replica(server: LocalDns) -> None:
    server.set("other.test.", "A", ["10.0.0.1"])
    assert _resolve(DnsQuery(SERVICE, "A", nameserver=server.address)) == []


def test_no_answer_from_the_server_is_a_discovery_error() -> None:
    # A bound UDP socket that never answers: the query times out.
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    try:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(DiscoveryError, match="vllm"):
            _resolve(DnsQuery(SERVICE, "A", nameserver=address, timeout_s=0.2))
    finally:
        silent.close()
