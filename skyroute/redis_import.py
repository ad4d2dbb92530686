"""Import redis-py without the OpenTelemetry metrics it would load for nothing.

redis-py 8 imports the OpenTelemetry metrics API and SDK at its own import whenever they
are installed (they are: the gateway's traces come with both), for redis-py's optional
OTel metrics, which skyroute never turns on (its metrics are Prometheus's): 27 modules
of every skyroute process's start-up (46 ms for the metrics SDK under ``-X importtime``
on a 2-core VM). ``import_redis``
imports redis once with those two modules hidden, so redis-py records them as not
installed, exactly as it does on a machine without them. Nothing else changes: the
modules are hidden only during that import and stay importable by anyone after it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

# What redis-py imports in ``try: ... except ImportError`` blocks for its OTel metrics
# (redis/observability/providers.py and metrics.py).
OPTIONAL_FOR_REDIS = ("opentelemetry.metrics", "opentelemetry.sdk.metrics")


class _Hidden(importlib.abc.MetaPathFinder):
    """A finder that makes the named modules fail to import (ModuleNotFoundError)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname in self.names:
            raise ModuleNotFoundError(f"{fullname} is hidden while redis loads", name=fullname)
        return None


def import_redis() -> None:
    """Import ``redis`` and ``redis.asyncio`` without redis-py's optional OTel metrics
    (the module docstring). Idempotent; a no-op once redis is imported (by anyone) or
    when one of the hidden modules already is."""
    if "redis" in sys.modules or any(name in sys.modules for name in OPTIONAL_FOR_REDIS):
        return
    hidden = _Hidden(OPTIONAL_FOR_REDIS)
    sys.meta_path.insert(0, hidden)
    try:
        importlib.import_module("redis.asyncio")
    finally:
        sys.meta_path.remove(hidden)
