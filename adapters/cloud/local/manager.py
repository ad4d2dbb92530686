"""Manager layer of the local provider: the engine processes of one group.

The "cloud" here is this machine. The target is fulfilled at once by starting engines;
a replica is CREATING until ``/health`` answers, DELETING from SIGTERM until it exits
(then it is gone), and FAILED if it exits on its own.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from adapters.cloud.local.process import EngineCommand, EngineProcess
from adapters.cloud.managed import GroupManager, GroupState
from adapters.cloud.nodegroup import Node, NodeStatus
from base.errors import AdapterError, OutOfCapacity

__all__ = ["LocalManager"]

logger = logging.getLogger(__name__)

_PROBE_TIMEOUT_S = 0.5


@dataclass
class _Replica:
    process: EngineProcess
    status: NodeStatus = NodeStatus.CREATING
    error: str | None = None


class LocalManager(GroupManager):
    """Starts and stops engines for one group.

    ``capacity[pool_id]`` (absent: unlimited) is how many replicas this machine can run
    for the pool; a scale-up past it is out of capacity. It is read on every scale-up, so
    the caller may change it at run time to start or end a simulated stockout.
    """

    def __init__(
        self,
        pool_id: str,
        name: str,
        command: EngineCommand,
        capacity: Mapping[str, int],
        ttl_s: float,
    ) -> None:
        super().__init__(ttl_s)
        self._pool_id = pool_id
        self._name = name
        self._command = command
        self._capacity = capacity
        self._target = 0
        self._replicas: dict[str, _Replica] = {}
        self._seq = itertools.count(1)
        self._mutex = threading.Lock()
        self._http = httpx.Client(timeout=_PROBE_TIMEOUT_S)
        self._closed = False

    def _load(self) -> GroupState:
        with self._mutex:
            self._refresh()
            nodes = tuple(
                Node(rid, r.status, r.process.url, r.error) for rid, r in self._replicas.items()
            )
            return GroupState(self._target, nodes)

    def _refresh(self) -> None:
        for rid, replica in list(self._replicas.items()):
            code = replica.process.exit_code()
            if code is not None:
                if replica.status is NodeStatus.DELETING:
                    del self._replicas[rid]
                elif replica.status is not NodeStatus.FAILED:
                    logger.warning("local engine %s exited with code %s", rid, code)
                    replica.status, replica.error = NodeStatus.FAILED, f"exit code {code}"
            elif replica.status is NodeStatus.CREATING and replica.process.healthy(self._http):
                replica.status = NodeStatus.RUNNING

    def _write_target(self, target: int) -> None:
        with self._mutex:
            if self._closed:
                raise AdapterError(f"local {self._name}: closed")
            live = [r for r in self._replicas.values() if r.status is not NodeStatus.DELETING]
            missing = target - len(live)
            capacity = self._capacity.get(self._pool_id)
            if capacity is not None and missing > 0 and target > capacity:
                raise OutOfCapacity(
                    f"local {self._pool_id}: this machine runs at most {capacity} replicas"
                )
            started = 0
            try:
                for _ in range(missing):
                    self._start()
                    started += 1
            except AdapterError:
                self._target = len(live) + started  # what did start is part of the group
                raise
            for replica in live[target:] if missing < 0 else []:
                replica.process.terminate()
                replica.status = NodeStatus.DELETING
            self._target = target

    def _start(self) -> None:
        try:
            process = EngineProcess(self._command)
        except OSError as exc:
            raise AdapterError(f"local {self._name}: cannot start an engine: {exc}") from exc
        rid = f"{self._name}-{next(self._seq)}"
        self._replicas[rid] = _Replica(process)
        logger.info("local engine %s starting on %s", rid, process.url)

    def _delete(self, ids: Sequence[str]) -> None:
        with self._mutex:
            for rid in ids:
                replica = self._replicas.get(rid)
                if replica is None or replica.status is NodeStatus.DELETING:
                    continue
                replica.process.terminate()
                replica.status = NodeStatus.DELETING
                self._target -= 1

    def close(self) -> None:
        """Stop every engine of the group and wait for them to exit."""
        with self._mutex:
            self._closed = True
            replicas, self._replicas = list(self._replicas.values()), {}
            self._target = 0
        for replica in replicas:
            replica.process.terminate()
        for replica in replicas:
            replica.process.stop()
        self._http.close()
