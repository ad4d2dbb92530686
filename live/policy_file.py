"""The routing policy file: read it (the I/O half of :mod:`router.policy_loader`), and the
one running copy every process subscribes to.

:class:`PolicySource` owns the file's path and the policy in force. It loads the file at
start, again when the file changes (``poll``, or the ``watch`` loop) or on demand
(``reload``), and hands each new valid version to its subscribers: the gateway's routing
state, the price feeds, the autoscaler sidecar. An invalid file is refused with its
reasons and the running policy stays; a file whose bytes did not change is not a new
version (saving a file twice, or a watcher and an explicit reload racing, bump nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from base.errors import PolicyError, PolicyProblem
from router.policy import Policy
from router.policy_loader import parse_policy

logger = logging.getLogger(__name__)

Subscriber = Callable[[Policy], None]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(
            str(path), [PolicyProblem("", 0, f"cannot read: {exc.strerror}")]
        ) from exc


def load_policy(path: str | Path) -> Policy:
    """Read and validate the policy file at ``path``.

    Raises PolicyError if the file cannot be read or is invalid; never returns a
    partially valid policy.
    """
    p = Path(path)
    return parse_policy(_read(p), str(p))


class PolicySource:
    """The running policy of one file, with subscribers. One event loop or thread only.

    ``version`` starts at 1 and grows by one per applied change; ``last_error`` is the
    reason the last reload was refused (None after a good one).
    """

    def __init__(self, path: Path) -> None:
        """Load ``path``. Raises PolicyError: a process must not start without a policy."""
        self.path = path
        text = _read(path)
        self.policy = parse_policy(text, str(path))
        self._digest = hashlib.sha256(text.encode()).digest()
        self._stat = self._seen = self._stat_now()
        self.version = 1
        self.last_error: str | None = None
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        """Call ``subscriber(policy)`` after every change applied from now on, in the
        order of subscription. A subscriber that raises is logged; the others still run."""
        self._subscribers.append(subscriber)

    def reload(self) -> bool:
        """Read the file again; apply it if its contents changed. True if a new version
        was applied. Raises PolicyError (the running policy stays in force)."""
        return self._apply(*self._load())

    async def reload_async(self) -> bool:
        """``reload`` with the file read and parsed in a thread, off the event loop; the
        subscribers run on the caller's loop."""
        return self._apply(*await asyncio.to_thread(self._load))

    def poll(self) -> bool:
        """Reload if the file's size or mtime moved and then held still for one more
        look (a write in progress is not read). True if a new version was applied; a
        refused file is logged (see ``reload``), never raised."""
        if not self._moved(self._stat_now()):
            return False
        with contextlib.suppress(PolicyError):
            return self.reload()
        return False

    async def poll_async(self) -> bool:
        """``poll`` with the file looked at and read in a thread, off the event loop."""
        if not self._moved(await asyncio.to_thread(self._stat_now)):
            return False
        with contextlib.suppress(PolicyError):
            return await self.reload_async()
        return False

    async def watch(self, interval_s: float, stop: asyncio.Event | None = None) -> None:
        """``poll_async`` every ``interval_s`` seconds until ``stop`` is set (or cancelled)."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
            if not stop.is_set():
                await self.poll_async()

    def _moved(self, stat: tuple[int, int]) -> bool:
        # A change counts once two looks in a row see the same size and mtime: a file
        # being written (truncated, then filled in pieces) is not read half-way.
        settled = stat == self._seen
        self._seen = stat
        return settled and stat not in (self._stat, (0, 0))

    def _load(self) -> tuple[tuple[int, int], bytes, Policy | None, PolicyError | None]:
        # I/O and parsing only: safe in a worker thread (it changes no state).
        stat = self._stat_now()
        try:
            text = _read(self.path)
        except PolicyError as exc:
            return stat, b"", None, exc
        digest = hashlib.sha256(text.encode()).digest()
        if digest == self._digest:
            return stat, digest, None, None
        try:
            return stat, digest, parse_policy(text, str(self.path)), None
        except PolicyError as exc:
            return stat, digest, None, exc

    def _apply(
        self, stat: tuple[int, int], digest: bytes, policy: Policy | None, error: PolicyError | None
    ) -> bool:
        self._stat = stat
        if error is not None:
            self.last_error = str(error)
            logger.error("policy reload refused, keeping version %d: %s", self.version, error)
            raise error
        self.last_error = None
        if policy is None:  # the same bytes as the running version
            return False
        self.policy, self._digest = policy, digest
        self.version += 1
        logger.info(
            "policy version %d loaded from %s (%d pools)",
            self.version,
            self.path,
            len(policy.pools),
        )
        for subscriber in self._subscribers:
            try:
                subscriber(policy)
            except Exception:
                logger.exception("policy subscriber failed on version %d", self.version)
        return True

    def _stat_now(self) -> tuple[int, int]:
        try:
            st = self.path.stat()
        except OSError:
            return (0, 0)
        return (st.st_mtime_ns, st.st_size)
