"""EmbeddedRedis: a real redis-server child process on a free local port."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from skyroute.embedded_redis import EmbeddedRedis, free_port, redis_binary


def _ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16)


def _port_is_free(port: int) -> bool:
    """Whether a listener could bind the port (TIME_WAIT leftovers do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            return False
        return True


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    embedded = EmbeddedRedis()
    try:
        embedded.start()
        yield embedded
    finally:
        embedded.stop()


def test_redis_binary_is_an_executable_file() -> None:
    path = Path(redis_binary())
    assert (path.is_file(), os.access(path, os.X_OK)) == (True, True)


def test_free_port_can_be_bound() -> None:
    assert _port_is_free(free_port())


def test_started_server_answers_ping(server: EmbeddedRedis) -> None:
    assert _ping(server.port) == b"+PONG\r\n"


def test_start_returns_the_url_of_the_port(server: EmbeddedRedis) -> None:
    assert server.url == f"redis://127.0.0.1:{server.port}/0"


def test_start_on_a_chosen_port_listens_there() -> None:
    port = free_port()
    embedded = EmbeddedRedis(port)
    try:
        url = embedded.start()
        assert (url, _ping(port)) == (f"redis://127.0.0.1:{port}/0", b"+PONG\r\n")
    finally:
        embedded.stop()


def test_stop_frees_the_port(server: EmbeddedRedis) -> None:
    server.stop()
    assert _port_is_free(server.port)


def test_stop_is_idempotent(server: EmbeddedRedis) -> None:
    server.stop()
    server.stop()
    assert _port_is_free(server.port)


def test_stop_before_start_does_nothing() -> None:
    EmbeddedRedis().stop()


def test_context_manager_runs_the_server_inside_and_stops_it_after() -> None:
    with EmbeddedRedis() as embedded:
        inside = _ping(embedded.port)
    assert (inside, _port_is_free(embedded.port)) == (b"+PONG\r\n", True)


def test_start_on_a_busy_port_raises(server: EmbeddedRedis) -> None:
    second = EmbeddedRedis(server.port)
    try:
        with pytest.raises(RuntimeError, match="embedded redis exited"):
            second.start()
    finally:
        second.stop()


def test_the_bundled_server_is_redis_6_2_the_oldest_supported(redis62_url: str) -> None:
    """The live-table tests run on it as their second Redis (``tests/live/conftest.py``):
    they test the oldest version skyroute supports only while it is that version."""
    client = redis.Redis.from_url(redis62_url)
    try:
        version = client.info("server")["redis_version"]
    finally:
        client.close()
    assert str(version).startswith("6.2."), version


def test_a_chosen_port_taken_before_the_server_binds_it_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another process listens on the port the instance chose: the server starts on the
    # next one instead of failing (CI once met this race with an engine's port).
    with socket.socket() as taker:
        taker.bind(("127.0.0.1", 0))
        taker.listen(1)
        taken = taker.getsockname()[1]
        picks = iter([taken, free_port()])
        monkeypatch.setattr("skyroute.embedded_redis.free_port", lambda: next(picks))
        embedded = EmbeddedRedis()
        try:
            assert embedded.port == taken
            embedded.start()
            assert embedded.port != taken and _ping(embedded.port) == b"+PONG\r\n"
        finally:
            embedded.stop()
