"""``skyroute serve --workers N``: N gateway processes on one port, one per core.

Each worker is a whole ``skyroute serve`` process (its own event loop, snapshot, replica
id and in-flight share) listening on the same address with ``SO_REUSEPORT``, so the
kernel spreads connections across them without a proxy in front. Everything shared
(limits, in-flight counts, health, keys) already goes through Redis per replica, so the
workers need nothing from each other.

The store's background work (migration, the Redis refill, the usage ledger's writes) runs
once per host, not once per worker: unless ``SKYROUTE_STORE_WORKER=external`` says a store
worker runs elsewhere (a Helm sidecar), the supervisor starts one ``skyroute store-worker``
beside the workers and runs them with ``SKYROUTE_STORE_WORKER=external``. N writers of one
SQLite file would take turns at its lock, and each worker would hold the store's libraries
(about 22 MB of its idle RSS) for work one process does for all.

The supervisor (this module, in the parent process) picks the port once, starts the
workers, forwards SIGTERM/SIGINT to them (each drains as a single gateway does), and
restarts a gateway worker that dies, at most ``MAX_RESTARTS`` times a minute; past that
it stops the others and exits 1. A store worker that dies is restarted at most every
``STORE_RESTART_S``, however often: the gateway workers serve without it. A worker that
has not exited ``stop_timeout_s`` after the signal (its drain delay and graceful
shutdown, plus a margin) is killed, and the supervisor exits 1: an orchestrator's stop
must end in bounded time.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping

logger = logging.getLogger(__name__)

MAX_RESTARTS = 5
# A store worker that keeps dying (a database it cannot open) is restarted this often.
STORE_RESTART_S = 5.0
_RESTART_WINDOW_S = 60.0
# Beyond a worker's own drain delay and graceful timeout: its lifespan's last flushes.
STOP_MARGIN_S = 15.0
ENV_REUSE_PORT = "SKYROUTE_REUSE_PORT"


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) with SO_REUSEPORT, not yet listening.

    Raises OSError if the address cannot be bound (or SO_REUSEPORT is unsupported).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


SERVE = "serve"
STORE_WORKER = "store-worker"


class Supervisor:
    """Runs and watches ``n`` worker processes of ``skyroute serve`` and, with
    ``store_worker``, one ``skyroute store-worker`` (the last of ``procs``)."""

    def __init__(
        self, n: int, env: Mapping[str, str], stop_timeout_s: float, store_worker: bool = False
    ) -> None:
        if n < 1:
            raise ValueError("--workers must be at least 1")
        self.n = n
        self.env = dict(env)
        self.stop_timeout_s = stop_timeout_s
        self.commands = [SERVE] * n + ([STORE_WORKER] if store_worker else [])
        # The store worker's consumer name stays the same across its restarts, so a new
        # one takes the entries its predecessor left unacknowledged at once (another name
        # would claim them only once they have been idle for a while).
        base = self.env.get("SKYROUTE_REPLICA_ID") or f"{socket.gethostname()}-{os.getpid()}"
        self.store_worker_id = f"{base}-store"
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stopping = threading.Event()
        self._restarts: deque[float] = deque()
        self.clock = time.monotonic
        self._store_started_at = -math.inf

    def _spawn(self, command: str = SERVE) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-c", "from skyroute.cli import main; main()", command]
        env = self.env
        if command == STORE_WORKER:
            env = {**env, "SKYROUTE_REPLICA_ID": self.store_worker_id}
        return subprocess.Popen(cmd, env=env)

    def _signal(self, sig: int, _frame: object = None) -> None:
        self._stopping.set()
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(sig)

    def run(self) -> int:
        """Start the workers and wait for them; 0 after a signal-initiated stop."""
        signal.signal(signal.SIGTERM, self._signal)
        signal.signal(signal.SIGINT, self._signal)
        self.procs = [self._spawn(command) for command in self.commands]
        self._store_started_at = self.clock()
        logger.info("%d gateway workers: pids %s", self.n, [p.pid for p in self.procs[: self.n]])
        if len(self.procs) > self.n:
            logger.info("store worker: pid %d", self.procs[-1].pid)
        while not self._stopping.is_set():
            for i, proc in enumerate(self.procs):
                if proc.poll() is None or self._stopping.is_set():
                    continue
                if self.commands[i] == STORE_WORKER:
                    self._restart_store_worker(i)
                    continue
                if not self._may_restart():
                    logger.error("workers keep dying; stopping the others")
                    self._signal(signal.SIGTERM)
                    self._wait()
                    return 1
                logger.warning("%s pid %d exited with %s; restarting",
                               self.commands[i], proc.pid, proc.returncode)  # fmt: skip
                self.procs[i] = self._spawn(self.commands[i])
            self._stopping.wait(0.5)
        return self._wait()

    def _restart_store_worker(self, i: int) -> None:
        """Restart the dead store worker ``procs[i]`` once ``STORE_RESTART_S`` have passed
        since it started (until then, do nothing). Its deaths never stop the gateway
        workers: they serve without it, usage waiting in Redis."""
        if self.clock() - self._store_started_at < STORE_RESTART_S:
            return
        dead = self.procs[i]
        logger.error("store worker pid %d exited with %s; restarting (usage waits in redis "
                     "meanwhile)", dead.pid, dead.returncode)  # fmt: skip
        self.procs[i] = self._spawn(STORE_WORKER)
        self._store_started_at = self.clock()

    def _may_restart(self) -> bool:
        now = self.clock()
        while self._restarts and now - self._restarts[0] > _RESTART_WINDOW_S:
            self._restarts.popleft()
        self._restarts.append(now)
        return len(self._restarts) <= MAX_RESTARTS

    def _wait(self) -> int:
        deadline = time.monotonic() + self.stop_timeout_s
        codes: list[int] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(max(deadline - time.monotonic(), 0.0)))
            except subprocess.TimeoutExpired:
                logger.error("worker pid %d did not stop in %.0f s; killed",
                             proc.pid, self.stop_timeout_s)  # fmt: skip
                proc.kill()
                proc.wait()
                codes.append(1)
        return 0 if all(code in (0, -signal.SIGINT, -signal.SIGTERM) for code in codes) else 1


def runs_own_store_worker(env: Mapping[str, str]) -> bool:
    """Whether ``serve --workers`` with this environment starts a store worker itself:
    yes, unless ``SKYROUTE_STORE_WORKER=external`` says one runs elsewhere."""
    return env.get("SKYROUTE_STORE_WORKER", "inline").strip().lower() != "external"


def run_workers(n: int, host: str, port: int, env: Mapping[str, str], stop_timeout_s: float) -> int:
    """Serve on (host, port) with ``n`` workers, and one store worker for them unless
    ``env`` says one runs elsewhere (``SKYROUTE_STORE_WORKER=external``; the module
    docstring). Port 0 picks one free port for all of them. ``env`` must carry every
    setting (the Redis URL included): workers read their settings from it.
    ``stop_timeout_s``: how long workers get to exit after a signal before they are
    killed. Returns the exit code."""
    # Hold the port while the workers bind it too; a bound socket that never listens
    # takes no connections, so closing it once they are up drops nothing.
    holder = reuse_port_socket(host, port)
    try:
        chosen = holder.getsockname()[1]
        own_store_worker = runs_own_store_worker(env)
        worker_env = {**env, "SKYROUTE_PORT": str(chosen), ENV_REUSE_PORT: "1",
                      "SKYROUTE_STORE_WORKER": "external"}  # fmt: skip
        logger.info("serving on %s:%d with %d workers (SO_REUSEPORT)", host, chosen, n)
        supervisor = Supervisor(n, worker_env, stop_timeout_s, store_worker=own_store_worker)
        closer = threading.Timer(30.0, holder.close)
        closer.daemon = True
        closer.start()
        return supervisor.run()
    finally:
        holder.close()


def reuse_port_requested() -> bool:
    """Whether this process is a worker started by :func:`run_workers`."""
    return os.environ.get(ENV_REUSE_PORT) == "1"
