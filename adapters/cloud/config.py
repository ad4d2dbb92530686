"""What a node group is built from: the pool's spec and the per-provider settings.

Nothing here imports a cloud SDK. ``NodeGroupSpec.from_pool`` reads a policy pool
structurally (``router.policy.PoolSpec`` fits ``PoolLike``), so ``adapters`` does not
depend on the policy module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from base.errors import AdapterError

if TYPE_CHECKING:
    from adapters.cloud.fake import FakeCloud

__all__ = [
    "AwsSettings",
    "AzureSettings",
    "CloudConfig",
    "GcpSettings",
    "LocalSettings",
    "NodeGroupSpec",
    "PoolLike",
]


class _BoundsLike(Protocol):
    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int: ...


class _ScalingLike(Protocol):
    @property
    def group(self) -> str: ...
    @property
    def project(self) -> str | None: ...
    @property
    def zone(self) -> str | None: ...
    @property
    def resource_group(self) -> str | None: ...
    @property
    def subscription(self) -> str | None: ...


class PoolLike(Protocol):
    """The fields of a policy pool a node group needs."""

    @property
    def id(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def upstream_model(self) -> str: ...
    @property
    def gpu_type(self) -> str: ...
    @property
    def replicas(self) -> _BoundsLike: ...
    @property
    def scaling(self) -> _ScalingLike | None: ...


@dataclass(frozen=True, slots=True)
class NodeGroupSpec:
    """Which cloud group serves a pool, and the policy's replica bounds.

    ``group`` is the ASG, MIG or VMSS name (for ``local`` and ``fake``, a label). A GCP
    group is zonal when ``zone`` is set, else regional in ``region``. ``model``,
    ``upstream_model`` and ``gpu_type`` tell the local provider which engine to start.
    """

    id: str
    provider: str
    region: str
    group: str
    min_size: int = 0
    max_size: int = 16
    project: str | None = None
    zone: str | None = None
    resource_group: str | None = None
    subscription: str | None = None
    model: str = ""
    upstream_model: str = ""
    gpu_type: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.min_size <= self.max_size:
            raise ValueError(f"{self.id}: need 0 <= min_size <= max_size")

    @classmethod
    def from_pool(cls, pool: PoolLike) -> NodeGroupSpec:
        """The spec of a policy pool. Raises ``AdapterError`` if a cloud pool has no
        ``scaling`` section (``local`` pools may omit it; the pool id is the label)."""
        scaling = pool.scaling
        if scaling is None and pool.provider != "local":
            raise AdapterError(f"pool {pool.id}: no scaling section, cannot resize it")
        return cls(
            id=pool.id,
            provider=pool.provider,
            region=pool.region,
            group=scaling.group if scaling else pool.id,
            min_size=pool.replicas.min,
            max_size=pool.replicas.max,
            project=scaling.project if scaling else None,
            zone=scaling.zone if scaling else None,
            resource_group=scaling.resource_group if scaling else None,
            subscription=scaling.subscription if scaling else None,
            model=pool.model,
            upstream_model=pool.upstream_model,
            gpu_type=pool.gpu_type,
        )

    def require(self, name: str) -> str:
        """The value of optional field ``name``; ``AdapterError`` if it is unset."""
        value = getattr(self, name)
        if not value:
            raise AdapterError(f"pool {self.id}: {self.provider} needs scaling.{name}")
        return str(value)


@dataclass(frozen=True, slots=True)
class AwsSettings:
    """AWS Auto Scaling. ``endpoint_url`` None: boto3's standard resolution
    (``AWS_ENDPOINT_URL_AUTO_SCALING``/``AWS_ENDPOINT_URL``, the config file, else AWS).
    Credentials come from boto3's chain, optionally from a named ``profile``.
    ``max_attempts`` is botocore's total attempts per call (standard retry mode)."""

    endpoint_url: str | None = None
    profile: str | None = None
    max_attempts: int = 3
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class GcpSettings:
    """GCP Compute Engine. ``api_endpoint`` None: compute.googleapis.com over HTTPS; a
    ``http://host:port`` value also moves operation polling there. ``anonymous`` uses
    no credentials (local fakes only); otherwise Application Default Credentials."""

    api_endpoint: str | None = None
    anonymous: bool = False
    timeout_s: float = 30.0
    operation_timeout_s: float = 600.0


@dataclass(frozen=True, slots=True)
class AzureSettings:
    """Azure Resource Manager. ``base_url`` None: the public cloud's ARM endpoint.
    ``credential`` is any azure-core ``TokenCredential``; None builds
    ``DefaultAzureCredential`` (environment, workload identity, managed identity, CLI).
    ``connection_verify`` is True, False or a CA bundle path. ``polling_interval_s``
    is the delay between polls of a long-running operation."""

    base_url: str | None = None
    credential: object | None = None
    connection_verify: bool | str = True
    polling_interval_s: float = 5.0
    operation_timeout_s: float = 900.0
    retry_total: int = 3
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class LocalSettings:
    """Simulated engines on 127.0.0.1. ``capacity`` maps a pool id to how many replicas
    this machine can start for it (absent: unlimited); asking for more raises
    ``OutOfCapacity``, to rehearse a stockout. It is read on every scale-up, so a caller
    holding a mutable mapping can start or end a stockout at run time. ``python`` None
    is this interpreter."""

    time_scale: float = 1.0
    seed: int = 0
    capacity: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    python: str | None = None
    log_level: str = "WARNING"


@dataclass(frozen=True, slots=True)
class CloudConfig:
    """Settings for every provider, built once by the process's entry point.

    ``adapter_for`` maps a pool's provider to the adapter that serves it, e.g.
    ``{"aws": "local"}`` runs AWS pools as local engines in the demo, or ``"fake"`` in
    tests. ``cache_ttl_s`` bounds how stale a cached target size or node list may be.
    ``fake`` is the in-memory cloud the ``fake`` provider uses (a fresh one if None).
    """

    aws: AwsSettings = AwsSettings()
    gcp: GcpSettings = GcpSettings()
    azure: AzureSettings = AzureSettings()
    local: LocalSettings = LocalSettings()
    fake: FakeCloud | None = None
    adapter_for: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cache_ttl_s: float = 5.0
