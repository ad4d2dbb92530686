"""Fixtures for the price-feed tests: a key prefix of its own per test on the session's
real Redis, AWS credentials that point nowhere real, and a moto server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from moto.server import ThreadedMotoServer


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A fresh ``srtest:<uuid>`` key prefix; its keys are deleted after the test."""
    name = f"srtest:{uuid.uuid4().hex}"
    yield name
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{name}:*", count=500))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Dummy AWS credentials and no shared config, so boto3 only talks to local fakes."""
    empty = tmp_path_factory.mktemp("aws") / "none"
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """A real moto server (EC2 included) on 127.0.0.1, for this test module."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
