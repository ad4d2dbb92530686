"""Upstreams that answer 200 with something that is not an OpenAI answer: the request
fails over (nothing had reached the client) or its stream ends with an error event (bytes
had), the failure counts against the pool, and it is not recorded as a success."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.conftest import CHAT, EMBED
from tests.gateway.faults.scripted_upstream import Mode, ScriptedUpstream
from tests.gateway.harness import (
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    write_policy,
)

BAD = "gcp:us-central1:bad"
GOOD = "aws:us-east-1:good"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    made = Engine("a10g-llama-3.1-8b", "upstream-chat", 0.05, seed=1).start()
    try:
        yield made
    finally:
        made.kill()


def _gateway(tmp: Path, engine: Engine, bad: ScriptedUpstream, redis_url: str) -> Gateway:
    pools = [
        pool(BAD, engine, provider="gcp", region="us-central1", model=CHAT,
             usd_per_gpu_hour=0.4, endpoints=[bad.url]),
        pool(GOOD, engine, provider="aws", region="us-east-1", model=CHAT, usd_per_gpu_hour=1.0),
    ]  # fmt: skip
    doc = policy_doc(pools, [CHAT, EMBED], outlier={"consecutive_failures": 3})
    del doc["models"][EMBED]
    return Gateway(write_policy(tmp / "policy.yaml", doc), redis_url, unique_prefix()).start()


@pytest.mark.parametrize("mode", ["html", "array"])
def test_a_garbage_200_fails_over_to_a_good_pool(
    tmp_path: Path, engine: Engine, redis_url: str, mode: Mode
) -> None:
    with ScriptedUpstream(mode) as bad:
        gw = _gateway(tmp_path, engine, bad, redis_url)
        stack = ExitStack()
        try:
            client = openai.OpenAI(base_url=f"{gw.base}/v1", api_key=API_KEY, max_retries=0)
            stack.enter_context(client)
            raw = client.chat.completions.with_raw_response.create(
                model=CHAT,
                messages=MESSAGES,
                max_tokens=4,  # type: ignore[arg-type]
            )
            assert raw.parse().choices[0].message.content
            assert raw.headers["x-skyroute-pool"] == GOOD
            assert raw.headers["x-skyroute-attempts"] == "2"
            assert bad.calls == 1
        finally:
            stack.close()
            gw.stop()
        assert f"pool {BAD} answered 200" in gw.logs()  # the failure was counted


@pytest.mark.parametrize(
    ("mode", "logged"),
    [("html_stream", "a stream that is not server-sent events"),
     ("empty_stream", "ended its stream before any event")],
)  # fmt: skip
def test_a_non_sse_or_empty_stream_fails_over_before_any_byte(
    tmp_path: Path, engine: Engine, redis_url: str, mode: Mode, logged: str
) -> None:
    with ScriptedUpstream(mode) as bad:
        gw = _gateway(tmp_path, engine, bad, redis_url)
        stack = ExitStack()
        try:
            client = openai.OpenAI(base_url=f"{gw.base}/v1", api_key=API_KEY, max_retries=0)
            stack.enter_context(client)
            stream = client.chat.completions.create(
                model=CHAT,
                messages=MESSAGES,
                max_tokens=4,
                stream=True,  # type: ignore[arg-type]
            )
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            assert text
            assert bad.calls == 1
        finally:
            stack.close()
            gw.stop()
        assert logged in gw.logs()  # the failure was counted against the bad pool


def test_a_stream_that_ends_without_done_ends_with_an_error_and_counts_against_the_pool(
    tmp_path: Path, engine: Engine, redis_url: str
) -> None:
    with ScriptedUpstream("truncated_stream") as bad:
        gw = _gateway(tmp_path, engine, bad, redis_url)
        stack = ExitStack()
        try:
            client = openai.OpenAI(base_url=f"{gw.base}/v1", api_key=API_KEY, max_retries=0)
            stack.enter_context(client)
            with pytest.raises(openai.APIError, match="ended before it was complete"):
                for _ in client.chat.completions.create(
                    model=CHAT,
                    messages=MESSAGES,
                    max_tokens=4,
                    stream=True,  # type: ignore[arg-type]
                ):
                    pass
            # Three such streams in a row eject the pool: the next request avoids it.
            for _ in range(2):
                with httpx.stream("POST", f"{gw.base}/v1/chat/completions",
                                  json={"model": CHAT, "messages": MESSAGES, "stream": True},
                                  headers={"Authorization": f"Bearer {API_KEY}"}) as reply:  # fmt: skip
                    reply.read()
            raw = client.chat.completions.with_raw_response.create(
                model=CHAT,
                messages=MESSAGES,
                max_tokens=4,  # type: ignore[arg-type]
            )
            assert raw.headers["x-skyroute-pool"] == GOOD
        finally:
            stack.close()
            gw.stop()
