"""The front door against clients that hold connections without finishing a request
(a slowloris of our own), and SIGTERM past the grace with streams still running.

Raw sockets play the slow clients: each waits on the server's answer (a read with a
bound), never on a sleep."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.conftest import CHAT, Fleet, start_fleet
from tests.gateway.harness import API_KEY, Gateway, unique_prefix

SLOW_CONNECTIONS = 400
CAP = 64


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = start_fleet(tmp_path_factory.mktemp("front-door"))
    try:
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture(scope="module")
def guarded(fleet: Fleet, redis_url: str) -> Iterator[Gateway]:
    """A gateway with a small connection cap and short header/body timeouts."""
    env = {
        "SKYROUTE_MAX_CONNECTIONS": str(CAP),
        "SKYROUTE_HEADER_TIMEOUT_S": "1.0",
        "SKYROUTE_BODY_TIMEOUT_S": "1.0",
    }
    gw = Gateway(fleet.policy_path, redis_url, unique_prefix(), extra_env=env).start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def capped(fleet: Fleet, redis_url: str) -> Iterator[Gateway]:
    """A gateway with a small connection cap and a header timeout too long to matter:
    only the cap can free its slots."""
    env = {"SKYROUTE_MAX_CONNECTIONS": str(CAP), "SKYROUTE_HEADER_TIMEOUT_S": "300"}
    gw = Gateway(fleet.policy_path, redis_url, unique_prefix(), extra_env=env).start()
    try:
        yield gw
    finally:
        gw.stop()


def _connect(gw: Gateway) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gw.port), timeout=10)


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (bounded by the
    socket timeout); a reset counts as a close."""
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return out


def test_headers_that_never_complete_get_408_and_a_close(guarded: Gateway) -> None:
    with _connect(guarded) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    assert b'"code":"request_timeout"' in answer


def test_a_connection_that_sends_nothing_is_closed(guarded: Gateway) -> None:
    with _connect(guarded) as sock:
        assert _read_all(sock).startswith(b"HTTP/1.1 408 ")


def test_a_body_that_never_completes_gets_408(guarded: Gateway) -> None:
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + API_KEY.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n"
    )
    with _connect(guarded) as sock:
        sock.sendall(head + b'{"model": "chat-model", ')
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]


def test_a_websocket_upgrade_is_answered_as_plain_http(guarded: Gateway) -> None:
    """No route speaks WebSocket: the upgrade is not taken (no 101), and the request is
    served, or refused, as HTTP under the same key check as any other."""
    upgrade = (
        b"Host: x\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    )
    with _connect(guarded) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\n" + upgrade + b"\r\n")
        refused = _read_all(sock)
    with _connect(guarded) as sock:
        key = b"Authorization: Bearer " + API_KEY.encode() + b"\r\n"
        sock.sendall(b"GET /v1/models HTTP/1.1\r\n" + upgrade + key + b"\r\n")
        served = _read_all(sock)
    assert refused.startswith(b"HTTP/1.1 401 "), refused[:80]
    assert served.startswith(b"HTTP/1.1 200 "), served[:80]
    assert b'"object":"list"' in served


def test_a_slowloris_over_the_cap_leaves_normal_requests_unaffected(capped: Gateway) -> None:
    slow: list[socket.socket] = []
    try:
        for _ in range(SLOW_CONNECTIONS):
            sock = _connect(capped)
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            slow.append(sock)
        with openai.OpenAI(
            base_url=f"{capped.base}/v1", api_key=API_KEY, max_retries=0, timeout=10
        ) as client:
            answers = [
                client.chat.completions.create(
                    model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=2
                )
                for _ in range(20)
            ]
        assert all(a.choices[0].message.content for a in answers)
        # The process held at most CAP client connections: the slow ones over the cap
        # were closed by the gateway (the oldest waiting first), not left to pile up.
        # A closed socket is readable (EOF or reset); the closes happened before the
        # normal requests could get in, so nothing here waits on them.
        closed, _, _ = select.select(slow, [], [], 0)
        assert len(closed) >= SLOW_CONNECTIONS - CAP
        assert slow[-1] not in closed  # the newest slow client still has its slot
    finally:
        for sock in slow:
            sock.close()


def test_idle_keep_alive_connections_do_not_lock_out_new_clients(guarded: Gateway) -> None:
    with httpx.Client(base_url=guarded.base, timeout=10) as idle_pool:
        # CAP connections that each made one request and now sit idle in keep-alive.
        clients = [httpx.Client(base_url=guarded.base, timeout=10) for _ in range(CAP)]
        try:
            for c in clients:
                assert c.get("/healthz").status_code == 200
            assert idle_pool.get("/healthz").status_code == 200
        finally:
            for c in clients:
                c.close()


def test_sigterm_past_the_grace_ends_streams_with_an_error_event(
    tmp_path: Path, redis_url: str
) -> None:
    env = {"SKYROUTE_DRAIN_DELAY_S": "0", "SKYROUTE_SHUTDOWN_TIMEOUT_S": "2"}
    with contextlib.ExitStack() as stack:
        fleet = start_fleet(tmp_path)
        stack.callback(fleet.stop)
        gw = Gateway(fleet.policy_path, redis_url, unique_prefix(), extra_env=env)
        stack.callback(gw.stop)
        gw.start()
        client = openai.OpenAI(base_url=f"{gw.base}/v1", api_key=API_KEY, max_retries=0)
        stack.callback(client.close)
        stream = client.chat.completions.create(
            model=CHAT,
            messages=[{"role": "user", "content": "a long answer"}],
            max_tokens=4000,
            stream=True,
        )
        received = 0
        error: list[BaseException] = []
        started = threading.Event()

        def read() -> None:
            nonlocal received
            try:
                for _ in stream:
                    received += 1
                    started.set()
            except openai.APIError as exc:
                error.append(exc)
            finally:
                started.set()

        reader = threading.Thread(target=read)
        reader.start()
        assert started.wait(20)
        assert gw.stop() == 0
        reader.join(20)
        assert received > 0
        assert error, "the stream ended without an error event"
        assert "shutting down" in str(error[0])
