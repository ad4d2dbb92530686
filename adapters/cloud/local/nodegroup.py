"""The ``local`` provider: simulated engine replicas on this machine, for the demo.

Each replica is ``python -m simengine`` on a free 127.0.0.1 port, with the engine
profile named after the pool's GPU and model (``h100-llama-3.1-70b``) and serving the
pool's ``upstream_model``. A new group starts empty; closing it stops its engines.
"""

from __future__ import annotations

from typing import Self

from adapters.cloud.config import CloudConfig, NodeGroupSpec
from adapters.cloud.local.manager import LocalManager
from adapters.cloud.local.process import EngineCommand
from adapters.cloud.managed import ManagedNodeGroup
from base.errors import AdapterError
from simengine.perf_model import profile_name

__all__ = ["LocalNodeGroup", "engine_profile"]


def engine_profile(spec: NodeGroupSpec) -> str:
    """The engine profile of a pool: GPU family + model, e.g. ``a100-llama-3.1-70b``.

    Raises ``AdapterError`` if the engine has no such profile.
    """
    try:
        return profile_name(spec.gpu_type, spec.model)
    except KeyError as exc:
        raise AdapterError(f"pool {spec.id}: {exc.args[0]}") from None


class LocalNodeGroup(ManagedNodeGroup, provider="local"):
    """Simulated engines on 127.0.0.1; ``nodes()`` carry their base URLs as ``address``."""

    @classmethod
    def from_spec(cls, spec: NodeGroupSpec, config: CloudConfig) -> Self:
        settings = config.local
        command = EngineCommand(
            profile=engine_profile(spec),
            model=spec.upstream_model or spec.model,
            time_scale=settings.time_scale,
            seed=settings.seed,
            log_level=settings.log_level,
            python=settings.python,
        )
        manager = LocalManager(spec.id, spec.group, command, settings.capacity, config.cache_ttl_s)
        return cls(spec, manager)
