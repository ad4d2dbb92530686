"""SIGTERM a gateway replica while streams are open: every open stream completes,
/readyz fails at once, and the process exits 0."""

from __future__ import annotations

import signal
import threading
import time

import httpx

from tests.figures import report
from tests.gateway.conftest import Fleet
from tests.gateway.harness import API_KEY, Gateway, unique_prefix

STREAMS = 6
TOKENS = 40


def test_sigterm_lets_every_open_stream_finish_and_exits_zero(
    fast_fleet: Fleet, redis_url: str
) -> None:
    gw = Gateway(
        fast_fleet.policy_path,
        redis_url,
        unique_prefix(),
        extra_env={"SKYROUTE_DRAIN_DELAY_S": "0.5"},
    ).start()
    body = {
        "model": "chat-model",
        "messages": [{"role": "user", "content": "long"}],
        "max_tokens": TOKENS,
        "stream": True,
    }
    first_chunk = threading.Barrier(STREAMS + 1, timeout=20)
    results: list[tuple[int, bool]] = []

    def stream() -> None:
        tokens, done = 0, False
        with httpx.stream(
            "POST",
            f"{gw.base}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=60,
        ) as resp:
            waited = False
            for line in resp.iter_lines():
                if not waited:
                    first_chunk.wait()
                    waited = True
                if line.startswith("data: ") and '"content"' in line and '"content":""' not in line:
                    tokens += 1
                done = done or line == "data: [DONE]"
        results.append((tokens, done))

    threads = [threading.Thread(target=stream) for _ in range(STREAMS)]
    for t in threads:
        t.start()
    first_chunk.wait()
    assert gw.proc is not None
    gw.proc.send_signal(signal.SIGTERM)
    sent_at = time.monotonic()
    try:
        readyz = httpx.get(f"{gw.base}/readyz").status_code
    except httpx.HTTPError:
        readyz = -1
    for t in threads:
        t.join(timeout=60)
    code = gw.proc.wait(timeout=30)
    report(
        f"SIGTERM with {STREAMS} open streams: {sum(done for _, done in results)}/{STREAMS} completed "
        f"with {TOKENS} tokens each: {all(n == TOKENS for n, _ in results)}; /readyz right after: {readyz}; "
        f"exit code {code} after {time.monotonic() - sent_at:.2f}s"
    )
    assert len(results) == STREAMS
    assert all(done and n == TOKENS for n, done in results), results
    assert readyz == 503
    assert code == 0
