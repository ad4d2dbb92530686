"""The running policy: loaded from a file, reloaded on change or on demand, swapped
atomically. An invalid new version is refused with its reasons and the running one stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from base.errors import PolicyError
from live.policy_file import load_policy
from router.compiled import CompiledPolicy, compile_policy

logger = logging.getLogger(__name__)


class PolicyStore:
    """Owns the policy file path; calls ``on_swap`` with each new valid compiled policy."""

    def __init__(self, path: Path, on_swap: Callable[[CompiledPolicy], None]) -> None:
        self.path = path
        self._on_swap = on_swap
        self._mtime_ns = self._stat()
        self.version = 1
        self.last_error: str | None = None

    def _stat(self) -> int:
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return 0

    @staticmethod
    def load_initial(path: Path) -> CompiledPolicy:
        """Load the policy at start-up. Raises PolicyError: a gateway must not start without one."""
        return compile_policy(load_policy(path))

    def reload(self) -> CompiledPolicy:
        """Load the file again and swap it in. Raises PolicyError (running policy kept).

        Idempotent: reloading an unchanged file swaps in an equal policy.
        """
        self._mtime_ns = self._stat()
        try:
            compiled = compile_policy(load_policy(self.path))
        except PolicyError as exc:
            self.last_error = str(exc)
            logger.error("policy reload refused, keeping version %d: %s", self.version, exc)
            raise
        self._on_swap(compiled)
        self.version += 1
        self.last_error = None
        logger.info(
            "policy version %d loaded from %s (%d pools)", self.version, self.path, compiled.size
        )
        return compiled

    async def watch(self, interval_s: float) -> None:
        """Reload whenever the file's mtime changes. Runs until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            mtime = await asyncio.to_thread(self._stat)
            if mtime and mtime != self._mtime_ns:
                # A refused reload is already logged; the running policy stays in force.
                with contextlib.suppress(PolicyError):
                    self.reload()
