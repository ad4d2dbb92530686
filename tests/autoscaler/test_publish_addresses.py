"""Replica discovery from the node group, per cloud: the sidecar reads the running
instances of an AWS Auto Scaling group (moto), a GCP managed instance group and an
Azure VM scale set (the local REST fakes, on the real API paths) through the cloud
adapters, and publishes each one's engine URL (``http://<private IP>:<engine_port>``)
for the gateways."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from adapters.cloud import CloudConfig
from adapters.cloud.config import AwsSettings, AzureSettings, GcpSettings
from autoscaler.sidecar import Sidecar, SidecarOptions
from tests.adapters.cloud.azure_fake import AzureFake
from tests.adapters.cloud.gcp_fake import GcpFake
from tests.adapters.cloud.harness import StaticToken
from tests.adapters.cloud.tls import make_local_ca
from tests.autoscaler.conftest import RedisTarget, config, make_policy, pool_doc

PORT = 8123


@pytest.fixture(scope="module")
def gcp() -> Iterator[GcpFake]:
    fake = GcpFake()
    fake.server.start()
    yield fake
    fake.server.stop()


@pytest.fixture(scope="module")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AzureFake, Path]]:
    ca = make_local_ca(Path(tmp_path_factory.mktemp("tls")))
    fake = AzureFake(ca.server_context())
    fake.server.start()
    yield fake, ca.ca_path
    fake.server.stop()


def _published(target: RedisTarget, doc: dict[str, Any], cloud: CloudConfig) -> list[str]:
    """Run the sidecar's publish step once; the pool's published URLs."""

    async def main() -> list[str]:
        redis = target.client()
        options = SidecarOptions(holder="test", prefix=target.prefix)
        sidecar = Sidecar(make_policy([doc]), redis, cloud, config(), options)
        try:
            await sidecar.publish_replicas()
            raw = await redis.hget(f"{target.prefix}:pool:{{{doc['id']}}}:replicas", "endpoints")
        finally:
            sidecar.close()
            await redis.aclose()
        urls: list[str] = orjson.loads(raw or b"[]")
        return urls

    return asyncio.run(main())


def _check(urls: list[str], count: int) -> None:
    assert len(urls) == count and len(set(urls)) == count
    for url in urls:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        assert ipaddress.ip_address(host).is_private and int(port) == PORT


def test_the_running_instances_of_a_gcp_mig_are_published(
    target: RedisTarget, gcp: GcpFake
) -> None:
    gcp.add_mig("skyroute-test", "mig-llama", zone="us-central1-a", size=4)
    doc = pool_doc("gcp:us-central1:mig", provider="gcp", region="us-central1", min_replicas=4,
                   max_replicas=4)  # fmt: skip
    doc["scaling"] = {"group": "mig-llama", "project": "skyroute-test", "zone": "us-central1-a",
                      "engine_port": PORT}  # fmt: skip
    cloud = CloudConfig(gcp=GcpSettings(api_endpoint=gcp.server.url, anonymous=True))
    _check(_published(target, doc, cloud), 4)


def test_the_running_vms_of_an_azure_scale_set_are_published(
    target: RedisTarget, azure: tuple[AzureFake, Path]
) -> None:
    fake, ca_path = azure
    fake.add_scale_set("sub-1", "rg-gpu", "vmss-llama", 4)
    doc = pool_doc("azure:eastus:vmss", provider="azure", region="eastus", min_replicas=4,
                   max_replicas=4)  # fmt: skip
    doc["scaling"] = {"group": "vmss-llama", "resource_group": "rg-gpu",
                      "subscription": "sub-1", "engine_port": PORT}  # fmt: skip
    settings = AzureSettings(base_url=fake.server.url, credential=StaticToken(),
                             connection_verify=str(ca_path), retry_total=0)  # fmt: skip
    _check(_published(target, doc, CloudConfig(azure=settings)), 4)


def test_the_running_instances_of_an_aws_asg_are_published(
    target: RedisTarget, moto_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_AUTO_SCALING"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    moto_server.create_asg("asg-llama", size=3, max_size=100)
    doc = pool_doc("aws:us-east-1:asg", min_replicas=3, max_replicas=3)
    doc["scaling"] = {"group": "asg-llama", "engine_port": PORT}
    cloud = CloudConfig(aws=AwsSettings(endpoint_url=moto_server.url, max_attempts=1))
    _check(_published(target, doc, cloud), 3)
