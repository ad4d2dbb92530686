"""Node-group providers by name: core code asks for a pool's group and never imports an SDK.

A provider registers itself by subclassing ``NodeGroup`` with ``provider="name"``. The
built-in providers live in subpackages that import their SDK; each is imported only when
a pool first asks for it, so a process that never touches Azure never loads azure-mgmt.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING

from adapters.cloud.config import CloudConfig, NodeGroupSpec, PoolLike
from base.errors import AdapterError

if TYPE_CHECKING:
    from adapters.cloud.nodegroup import NodeGroup

__all__ = ["create", "node_group_for", "provider_names", "register"]

# Where each built-in provider lives; importing the module registers it.
_BUILTIN = MappingProxyType(
    {
        "aws": "adapters.cloud.aws",
        "gcp": "adapters.cloud.gcp",
        "azure": "adapters.cloud.azure",
        "local": "adapters.cloud.local",
        "fake": "adapters.cloud.fake",
    }
)
_registered: dict[str, type[NodeGroup]] = {}


def _where(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__qualname__


def register(name: str, cls: type[NodeGroup]) -> None:
    """Make ``cls`` the provider called ``name``. Raises ValueError if ``name`` is taken
    by another class (re-registering the same class, as a module reload does, is fine)."""
    current = _registered.get(name)
    if current is not None and _where(current) != _where(cls):
        raise ValueError(f"node-group provider {name!r} already registered by {current}")
    _registered[name] = cls


def provider_names() -> list[str]:
    """Every provider that can be asked for: the built-ins and any registered since."""
    return sorted(set(_BUILTIN) | set(_registered))


def _provider(name: str) -> type[NodeGroup]:
    if name not in _registered and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    try:
        return _registered[name]
    except KeyError:
        raise AdapterError(
            f"unknown node-group provider {name!r}; known: {', '.join(provider_names())}"
        ) from None


def create(spec: NodeGroupSpec, config: CloudConfig) -> NodeGroup:
    """The node group for ``spec`` from the provider named ``spec.provider``, after
    ``config.adapter_for`` (e.g. ``{"aws": "fake"}``). Raises ``AdapterError`` for an
    unknown provider or a spec the provider cannot serve."""
    name = config.adapter_for.get(spec.provider, spec.provider)
    return _provider(name).from_spec(spec, config)


def node_group_for(pool: PoolLike, config: CloudConfig) -> NodeGroup:
    """The node group serving a policy pool (``router.policy.PoolSpec``).

    Raises ``AdapterError`` if the pool has no ``scaling`` section (cloud pools need
    one) or its provider is unknown.
    """
    return create(NodeGroupSpec.from_pool(pool), config)
