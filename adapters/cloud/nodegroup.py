"""The node-group interface every cloud implements, after cluster-autoscaler's ``NodeGroup``.

A node group is one pool's set of identical replicas in one cloud: an AWS Auto Scaling
group, a GCP managed instance group, an Azure VM scale set, or simulated engines on this
machine. The autoscaler talks to every cloud through this class alone and never imports an
SDK; it looks implementations up by provider name in :mod:`adapters.cloud.registry`.

Methods are synchronous, because the cloud SDKs are; async callers use
``asyncio.to_thread``. An implementation is safe to call from several threads at once.
Failures raise the :mod:`base.errors` ``AdapterError`` family:

- ``OutOfCapacity``: the cloud has no capacity of this type there (stockout);
- ``QuotaExceeded``: the account's quota forbids the change;
- ``Throttled``: the control plane asked us to slow down;
- ``NotImplementedByProvider``: an optional method this provider lacks;
- ``AdapterError`` itself: anything else, including a change outside [min_size, max_size].

A refused call (out of bounds, quota, throttled) leaves the group as it was. After
``OutOfCapacity`` a cloud may keep the raised target with FAILED or missing replicas (an
Azure scale set does); :meth:`NodeGroup.nodes` shows them, and ``delete_nodes`` or
``decrease_target_size`` gives the capacity back.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar, Self

from adapters.cloud import registry
from base.errors import NotImplementedByProvider

if TYPE_CHECKING:
    from adapters.cloud.config import CloudConfig, NodeGroupSpec

__all__ = ["Node", "NodeGroup", "NodeStatus"]


class NodeStatus(enum.StrEnum):
    """Lifecycle of one replica as its cloud reports it."""

    CREATING = "creating"
    RUNNING = "running"
    DELETING = "deleting"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Node:
    """One replica (instance, VM or process) of a node group.

    ``id`` is unique within the group and is what :meth:`NodeGroup.delete_nodes` takes.
    ``address`` is where the replica can be reached (an IP or a base URL) when the provider
    knows it, else None. ``error`` is the cloud's code for why a FAILED (or stuck CREATING)
    node failed, e.g. ``ZONE_RESOURCE_POOL_EXHAUSTED``, else None.
    """

    id: str
    status: NodeStatus
    address: str | None = None
    error: str | None = None

    def url(self, port: int) -> str | None:
        """The replica's base URL: ``address`` itself when it is a URL (the local
        provider's), else ``http://<address>:<port>``; None without an address."""
        if not self.address:
            return None
        if "://" in self.address:
            return self.address.rstrip("/")
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{port}"


class NodeGroup(ABC):
    """One pool's group of identical replicas in one cloud.

    A concrete class registers itself under a provider name by subclassing with
    ``class AsgNodeGroup(NodeGroup, provider="aws")`` and builds itself in
    :meth:`from_spec`. Close a group (or use it as a context manager) to release its
    SDK clients or processes.
    """

    provider: ClassVar[str] = ""

    def __init_subclass__(cls, *, provider: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if provider is not None:
            cls.provider = provider
            registry.register(provider, cls)

    @classmethod
    @abstractmethod
    def from_spec(cls, spec: NodeGroupSpec, config: CloudConfig) -> Self:
        """Required. Build the group for ``spec``; no cloud call is made until first use.

        Raises ``AdapterError`` if ``spec`` lacks what this provider needs (e.g. a GCP
        project) or the provider's settings in ``config`` are unusable.
        """

    @property
    @abstractmethod
    def id(self) -> str:
        """Required. The pool id this group serves, e.g. ``aws:us-east-1:h100-llama70b``."""

    @property
    @abstractmethod
    def min_size(self) -> int:
        """Required. Fewest replicas the adapter will ever leave (the policy's bound).

        The cloud may be stricter (an ASG's own MinSize); the stricter bound wins.
        """

    @property
    @abstractmethod
    def max_size(self) -> int:
        """Required. Most replicas the adapter will ever ask for (the policy's bound).

        Enforced here, whatever the cloud allows; the cloud's own bound also applies.
        """

    @abstractmethod
    def target_size(self) -> int:
        """Required. The replica count the cloud is currently asked to maintain.

        It may differ from ``len(nodes())`` while replicas are created or deleted. The
        value may be cached for a few seconds; any write through this object refreshes it.
        """

    @abstractmethod
    def increase_size(self, delta: int) -> None:
        """Required. Ask the cloud for ``delta`` more replicas (``delta`` > 0).

        Returns once the cloud accepted the new target, not when replicas are running.
        Not idempotent: a retry asks again, so compare :meth:`target_size` first.

        Raises ``ValueError`` if ``delta`` <= 0; ``AdapterError`` (nothing changed) if the
        target would pass :attr:`max_size`; ``OutOfCapacity``, ``QuotaExceeded`` or
        ``Throttled`` when the cloud refuses.
        """

    def decrease_target_size(self, delta: int) -> None:
        """Optional. Lower the target by ``delta`` (> 0) without deleting any replica.

        Only cancels capacity that was asked for but does not exist yet (cluster-autoscaler
        semantics): the new target may not drop below the replicas the cloud already has
        (any status but deleting), nor below :attr:`min_size`; either raises
        ``AdapterError`` and changes nothing. Use :meth:`delete_nodes` to remove replicas.

        Raises ``ValueError`` if ``delta`` <= 0, ``NotImplementedByProvider`` if the
        provider cannot do this.
        """
        raise NotImplementedByProvider(f"{self.provider}: decrease_target_size")

    @abstractmethod
    def delete_nodes(self, ids: Sequence[str]) -> None:
        """Required. Delete exactly these replicas and lower the target by as many.

        Idempotent: ids that are no longer in the group, or already deleting, are skipped,
        so a retry after a partial failure neither deletes nor decrements twice. Callers
        drain a replica before deleting it; this method does not.

        Raises ``AdapterError`` (nothing deleted) if the target would drop below
        :attr:`min_size`; the cloud's errors as for :meth:`increase_size`.
        """

    @abstractmethod
    def nodes(self) -> list[Node]:
        """Required. Every replica the group has, in any status, ordered by id.

        Counts only replicas the cloud reports; while the cloud is still acting on a
        new target there may be fewer than :meth:`target_size`. May be cached briefly.
        """

    def close(self) -> None:  # noqa: B027 - optional, a no-op by default
        """Optional. Release clients, sessions or processes. Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.provider}:{self.id}>"
