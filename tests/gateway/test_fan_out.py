"""``n > 1``: passed through to engines that serve it, fanned out and merged for those
that answer one choice per request, within the tenant's ``max_n``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import orjson
import pytest

from gateway.fan_out import merge_answers
from tests.gateway.conftest import CHAT
from tests.gateway.faults.scripted_upstream import ScriptedUpstream
from tests.gateway.harness import (
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    write_policy,
)

MESSAGES = [{"role": "user", "content": "hi"}]


def _answer(text: str, completion: int) -> bytes:
    return orjson.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": completion, "total_tokens": 0},
        }
    )  # fmt: skip


def test_merged_answers_are_indexed_in_order_and_count_the_prompt_once() -> None:
    merged = orjson.loads(merge_answers([_answer("a", 2), _answer("b", 3), _answer("c", 4)]))
    assert [(c["index"], c["message"]["content"]) for c in merged["choices"]] == [
        (0, "a"), (1, "b"), (2, "c"),
    ]  # fmt: skip
    assert merged["usage"] == {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    made = Engine("a10g-llama-3.1-8b", "upstream-chat", 0.05, seed=1).start()
    try:
        yield made
    finally:
        made.kill()


def _gateway(tmp: Path, entry: dict[str, object], redis_url: str, max_n: int = 4) -> Gateway:
    doc = policy_doc([entry], [CHAT])
    doc["tenants"] = {"default": {"max_n": max_n}}
    return Gateway(write_policy(tmp / "policy.yaml", doc), redis_url, unique_prefix()).start()


@pytest.fixture(scope="module")
def fanning(
    engine: Engine, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    """A gateway whose only pool is a simulated engine (one choice per request)."""
    entry = pool(
        "gcp:us-central1:sim",
        engine,
        provider="gcp",
        region="us-central1",
        model=CHAT,
        usd_per_gpu_hour=0.4,
    )
    gw = _gateway(tmp_path_factory.mktemp("fan-out"), entry, redis_url)
    try:
        with openai.OpenAI(base_url=f"{gw.base}/v1", api_key=API_KEY, max_retries=0) as client:
            yield client
    finally:
        gw.stop()


def test_n_is_fanned_out_and_merged_for_an_engine_without_n(fanning: openai.OpenAI) -> None:
    raw = fanning.chat.completions.with_raw_response.create(
        model=CHAT, messages=MESSAGES, max_tokens=3, n=3, extra_headers={"x-request-id": "fan-1"}
    )  # type: ignore[arg-type]
    assert raw.headers["x-request-id"] == "fan-1"
    answer = raw.parse()
    assert [c.index for c in answer.choices] == [0, 1, 2]
    assert all(c.message.content for c in answer.choices)
    assert answer.model == CHAT
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 3 * 3  # max_tokens for each of the 3


def test_a_streamed_n_carries_every_choice_and_one_done(fanning: openai.OpenAI) -> None:
    stream = fanning.chat.completions.create(
        model=CHAT, messages=MESSAGES, max_tokens=3, n=2, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
    )  # fmt: skip
    text: dict[int, str] = {0: "", 1: ""}
    finished: set[int] = set()
    usage = None
    for chunk in stream:
        for choice in chunk.choices:
            text[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finished.add(choice.index)
        usage = chunk.usage or usage
    assert finished == {0, 1}
    assert text[0] and text[1]
    assert usage is not None and usage.completion_tokens > 0


def test_n_over_the_tenants_limit_is_refused(fanning: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        fanning.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=3, n=5)  # type: ignore[arg-type]
    assert "limit of 4" in str(refused.value)


def test_n_is_passed_through_to_an_engine_that_serves_it(
    engine: Engine, redis_url: str, tmp_path: Path
) -> None:
    with ScriptedUpstream("n_choices") as up:
        entry = pool("gcp:us-central1:vllm", engine, provider="gcp", region="us-central1",
                     model=CHAT, usd_per_gpu_hour=0.4, endpoints=[up.url], supports_n=True)  # fmt: skip
        gw = _gateway(tmp_path, entry, redis_url)
        try:
            with openai.OpenAI(base_url=f"{gw.base}/v1", api_key=API_KEY, max_retries=0) as c:
                answer = c.chat.completions.create(model=CHAT, messages=MESSAGES, n=3)  # type: ignore[arg-type]
        finally:
            gw.stop()
        assert up.asked_n == [3]
        assert [choice.index for choice in answer.choices] == [0, 1, 2]
