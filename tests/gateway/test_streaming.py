"""Streaming passes through chunk by chunk, with no buffering in the gateway."""

from __future__ import annotations

import time

import httpx

from tests.gateway.conftest import CHAT, Fleet
from tests.gateway.harness import API_KEY, Gateway, running, wait_for


def test_streaming_chunks_arrive_incrementally_not_all_at_the_end(gateway: Gateway) -> None:
    # a10g-llama-3.1-8b decodes at >= 30 ms a token, so 20 tokens take >= 570 ms after the first.
    body = {
        "model": CHAT,
        "messages": [{"role": "user", "content": "stream"}],
        "max_tokens": 20,
        "stream": True,
    }
    arrivals: list[float] = []
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.stream(
        "POST", f"{gateway.base}/v1/chat/completions", json=body, headers=headers, timeout=30
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("data: ") and '"content"' in line:
                arrivals.append(time.monotonic())
    assert len(arrivals) >= 20
    spread = arrivals[-1] - arrivals[0]
    # Buffered delivery would put every chunk within a few ms of each other.
    assert spread > 0.5 * 19 * 0.030
    first_half = arrivals[len(arrivals) // 2] - arrivals[0]
    assert first_half > 0.2 * spread


def test_a_client_that_leaves_mid_stream_frees_the_engine_at_once(
    gateway: Gateway, fleet: Fleet
) -> None:
    """2,000 tokens at >= 30 ms each would run for a minute: closing the connection after
    the first tokens must cancel the relay, which closes the upstream request, and the
    engine frees its slot (as vLLM aborts a request whose client went away)."""
    chat = [fleet.engines[k] for k in ("cheap", "mid", "pricey")]
    body = {
        "model": CHAT,
        "messages": [{"role": "user", "content": "a long story"}],
        "max_tokens": 2000,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.stream(
        "POST", f"{gateway.base}/v1/chat/completions", json=body, headers=headers, timeout=30
    ) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        while '"content"' not in next(lines):
            pass
        assert running(chat) == 1.0
    wait_for(lambda: running(chat) == 0.0, "the engine to drop the abandoned request", 10.0)
    # The gateway is none the worse: the next request is served.
    assert gateway.chat_status("after the abandoned stream") == 200
