"""Modules a gateway loads after it is ready, without stalling its event loop.

A serving process imports at start only what every request needs (STYLE: a server
process imports only what it serves). What some process needs later (the store and
its drivers, Alembic and SQLAlchemy when a schema must change, dnspython for a policy
with DNS pools) is imported by ``import_off_loop`` in a worker thread: the import still
takes the GIL in turns, but the event loop gets it back every switch interval (5 ms)
instead of waiting for the whole import (170 ms for SQLAlchemy on a fast core).
"""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType


async def import_off_loop(name: str) -> ModuleType:
    """Module ``name``, imported in a worker thread. Raises what the import raises
    (ImportError, or the module's own error).

    Always through the thread, even when ``name`` is in ``sys.modules``: it may be there
    half-initialised by another thread's import, which ``import_module`` waits for (on
    the module's lock) where the event loop must not. One thread hop (~0.1 ms) when
    the module is loaded already."""
    return await asyncio.to_thread(importlib.import_module, name)
