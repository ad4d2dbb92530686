"""Streaming passes through chunk by chunk, with no buffering in the gateway."""

from __future__ import annotations

import time

import httpx

from tests.gateway.conftest import CHAT
from tests.gateway.harness import API_KEY, Gateway


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
