"""One harness per provider: makes fresh node groups and reaches into the cloud behind them.

The contract suite sees only ``Harness``: ``group()`` builds a new group through the
registry, ``inject(kind)`` makes the cloud's next write fail as a stockout, quota or
throttle, and ``hold()``/``release()`` stop and restart new replicas appearing (as when a
cloud cannot find capacity). ``capabilities`` says which of these a provider's cloud can
do; the suite runs each test on every provider that can.
"""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import pytest
from azure.core.credentials import AccessToken

from adapters.cloud import (
    AwsSettings,
    AzureSettings,
    CloudConfig,
    GcpSettings,
    LocalSettings,
    NodeGroup,
    NodeGroupSpec,
    create,
)
from adapters.cloud.fake import FakeCloud
from tests.adapters.cloud.aws_fake import MotoWithFaults
from tests.adapters.cloud.azure_fake import TOKEN, AzureFake
from tests.adapters.cloud.gcp_fake import GcpFake
from tests.adapters.cloud.tls import LocalCA

KINDS = ("stockout", "quota", "throttle")
# A long TTL: a write that failed to invalidate the cache would show as a stale read.
CACHE_TTL_S = 60.0
_names = itertools.count(1)


class StaticToken:
    """A TokenCredential with a fixed token the Azure fake accepts."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(TOKEN, int(time.time()) + 3600)


class Harness(ABC):
    capabilities: ClassVar[frozenset[str]]

    def __init__(self) -> None:
        self._groups: list[NodeGroup] = []

    def group(self, size: int = 0, *, min_size: int = 0, max_size: int = 4) -> NodeGroup:
        self.name = f"grp-{next(_names)}"
        group = self._make(self.name, size, min_size, max_size)
        self._groups.append(group)
        return group

    @abstractmethod
    def _make(self, name: str, size: int, min_size: int, max_size: int) -> NodeGroup: ...

    def inject(self, kind: str) -> None:
        raise NotImplementedError(kind)

    def hold(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        for group in self._groups:
            group.close()


class AwsHarness(Harness):
    capabilities = frozenset(KINDS)

    def __init__(self, moto: MotoWithFaults, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        self.moto = moto
        for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_AUTO_SCALING"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        self.config = CloudConfig(
            aws=AwsSettings(endpoint_url=moto.url, max_attempts=1), cache_ttl_s=CACHE_TTL_S
        )

    def _make(self, name: str, size: int, min_size: int, max_size: int) -> NodeGroup:
        # The ASG's own MaxSize is far above the policy's: moto would not stop us.
        self.moto.create_asg(name, size=size, max_size=100)
        spec = NodeGroupSpec(f"aws:us-east-1:{name}", "aws", "us-east-1", name, min_size, max_size)
        return create(spec, self.config)

    def inject(self, kind: str) -> None:
        self.moto.fail_next(kind)

    def close(self) -> None:
        super().close()
        self.moto.reset_faults()


class GcpHarness(Harness):
    capabilities = frozenset({*KINDS, "hold"})

    def __init__(self, fake: GcpFake, *, zonal: bool) -> None:
        super().__init__()
        self.fake = fake
        self.zone = "us-central1-a" if zonal else None
        self.config = CloudConfig(
            gcp=GcpSettings(api_endpoint=fake.server.url, anonymous=True, timeout_s=10),
            cache_ttl_s=CACHE_TTL_S,
        )

    def _make(self, name: str, size: int, min_size: int, max_size: int) -> NodeGroup:
        self.key = self.fake.add_mig(
            "skyroute-test", name, zone=self.zone, region="us-central1", size=size
        )
        spec = NodeGroupSpec(
            f"gcp:us-central1:{name}", "gcp", "us-central1", name, min_size, max_size,
            project="skyroute-test", zone=self.zone,
        )  # fmt: skip
        return create(spec, self.config)

    def inject(self, kind: str) -> None:
        self.fake.fail_next(kind)

    def hold(self) -> None:
        self.fake.hold(self.key)

    def release(self) -> None:
        self.fake.release(self.key)

    def close(self) -> None:
        super().close()
        self.fake.reset_faults()


class AzureHarness(Harness):
    capabilities = frozenset({*KINDS, "hold"})

    def __init__(self, fake: AzureFake, ca: LocalCA) -> None:
        super().__init__()
        self.fake = fake
        self.config = CloudConfig(
            azure=AzureSettings(
                base_url=fake.server.url,
                credential=StaticToken(),
                connection_verify=str(ca.ca_path),
                polling_interval_s=0.01,
                retry_total=0,
                timeout_s=10,
            ),
            cache_ttl_s=CACHE_TTL_S,
        )

    def _make(self, name: str, size: int, min_size: int, max_size: int) -> NodeGroup:
        self.key = self.fake.add_scale_set("sub-1", "rg-gpu", name, size)
        spec = NodeGroupSpec(
            f"azure:eastus:{name}", "azure", "eastus", name, min_size, max_size,
            resource_group="rg-gpu", subscription="sub-1",
        )  # fmt: skip
        return create(spec, self.config)

    def inject(self, kind: str) -> None:
        self.fake.fail_next(kind)

    def hold(self) -> None:
        self.fake.hold(self.key)

    def release(self) -> None:
        self.fake.release(self.key)

    def close(self) -> None:
        super().close()
        self.fake.reset_faults()


class LocalHarness(Harness):
    # This machine has no quota or throttling; a capacity cap stands in for a stockout.
    capabilities = frozenset({"stockout"})

    def __init__(self) -> None:
        super().__init__()
        self.capacity: dict[str, int] = {}
        self.config = CloudConfig(
            local=LocalSettings(time_scale=0.0, capacity=self.capacity), cache_ttl_s=CACHE_TTL_S
        )

    def _make(self, name: str, size: int, min_size: int, max_size: int) -> NodeGroup:
        spec = NodeGroupSpec(
            f"local:here:{name}", "local", "here", name, min_size, max_size,
            model="llama-3.1-8b", upstream_model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_type="L4",
        )  # fmt: skip
        group = create(spec, self.config)
        if size:
            group.increase_size(size)
        self.last = group
        return group

    def inject(self, kind: str) -> None:
        assert kind == "stockout"
        self.capacity[self.last.id] = self.last.target_size()


class FakeHarness(Harness):
    capabilities = frozenset({*KINDS, "hold"})

    def __init__(self) -> None:
        super().__init__()
        self.cloud = FakeCloud()
        self.config = CloudConfig(fake=self.cloud, cache_ttl_s=CACHE_TTL_S)

    def _make(self, name: str, size: int, min_size: int, max_size: int) -> NodeGroup:
        self.cloud.add_group(name, size)
        spec = NodeGroupSpec(f"fake:x:{name}", "fake", "x", name, min_size, max_size)
        return create(spec, self.config)

    def inject(self, kind: str) -> None:
        self.cloud.fail_next(self.name, kind)  # type: ignore[arg-type]

    def hold(self) -> None:
        self.cloud.hold(self.name)

    def release(self) -> None:
        self.cloud.hold(self.name, held=False)
