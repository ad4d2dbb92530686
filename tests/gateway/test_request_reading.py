"""``read_headers`` and ``read_body``: what the OpenAI routes read of a request, on raw
ASGI messages (the same as uvicorn gives them)."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message

from base.errors import HeadersTooLarge, PayloadTooLarge
from gateway.routes_openai import read_body, read_headers


def _request(headers: list[tuple[bytes, bytes]], messages: list[Message]) -> Request:
    pending = list(messages)

    async def receive() -> Message:
        return pending.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "headers": headers}  # fmt: skip
    return Request(scope, receive)


def test_headers_take_the_first_value_of_a_name_as_starlette_does() -> None:
    raw = [(b"authorization", b"Bearer first"), (b"x-request-id", b"r1"),
           (b"authorization", b"Bearer second")]  # fmt: skip
    request = _request(raw, [])
    headers = read_headers(request, 1024)
    assert headers[b"authorization"] == b"Bearer first"
    assert request.headers.get("authorization") == "Bearer first"
    assert headers[b"x-request-id"] == b"r1"
    assert b"x-session-id" not in headers


def test_headers_over_the_limit_are_refused_with_their_size() -> None:
    raw = [(b"a", b"x" * 10), (b"b", b"y" * 10)]
    assert read_headers(_request(raw, []), 22) == {b"a": b"x" * 10, b"b": b"y" * 10}
    with pytest.raises(HeadersTooLarge, match="22 bytes are over the 21-byte limit"):
        read_headers(_request(raw, []), 21)


def test_a_body_in_several_messages_is_joined() -> None:
    messages: list[Message] = [
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b" 1}", "more_body": False},
    ]
    assert asyncio.run(read_body(_request([], messages), 100)) == b'{"a": 1}'
    empty: list[Message] = [{"type": "http.request", "body": b""}]
    assert asyncio.run(read_body(_request([], empty), 100)) == b""


def test_a_body_over_the_limit_is_refused_before_the_rest_is_read() -> None:
    messages: list[Message] = [
        {"type": "http.request", "body": b"x" * 60, "more_body": True},
        {"type": "http.request", "body": b"x" * 60, "more_body": True},
    ]
    request = _request([], messages)
    with pytest.raises(PayloadTooLarge, match="over the 100-byte limit"):
        asyncio.run(read_body(request, 100))
    # A declared length over the limit is refused without reading anything (there is
    # nothing to read: a receive would fail).
    with pytest.raises(PayloadTooLarge, match="of 5000 bytes"):
        asyncio.run(read_body(_request([], []), 100, b"5000"))


def test_a_client_that_leaves_mid_body_is_a_disconnect() -> None:
    messages: list[Message] = [
        {"type": "http.request", "body": b"{", "more_body": True},
        {"type": "http.disconnect"},
    ]
    with pytest.raises(ClientDisconnect):
        asyncio.run(read_body(_request([], messages), 100))
