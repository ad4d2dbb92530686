"""Modules a gateway loads after it is ready, without stalling its event loop.

A serving process imports at start only what every request needs (STYLE: a server
process imports only what it serves). What some process needs later (the store's
SQLAlchemy, dnspython for a policy with DNS pools) is imported by ``import_off_loop``
in a worker thread: the import still takes the GIL in turns, but the event loop gets
it back every switch interval (5 ms) instead of waiting for the whole import (170 ms
for SQLAlchemy on a fast core).
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from types import ModuleType


async def import_off_loop(name: str) -> ModuleType:
    """Module ``name``, imported in a worker thread unless it already is. Raises what
    the import raises (ImportError, or the module's own error)."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    return await asyncio.to_thread(importlib.import_module, name)
