"""The simulated engine's prefix KV cache: chained block hashes, LRU, and the prefill it saves."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from adapters.upstream.engine_metrics import EngineKind, parse_engine_load
from simengine.parsing import GenerationRequest, parse_generation
from simengine.prefix_cache import PrefixCache, chained_block_hashes
from simengine.state import SimEngine
from tests.simengine._harness import FLAT, MODEL, messages, running_engine

# FLAT prefills 10 tokens per ms; 4096 tokens of KV = 256 blocks of 16 tokens.
CACHED = replace(FLAT, name="test-cached", kv_cache_tokens=4096)


def _req(text: str) -> GenerationRequest:
    return parse_generation({"model": MODEL, "prompt": text, "max_tokens": 4}, chat=False)


def test_block_hash_depends_on_every_earlier_block() -> None:
    a = chained_block_hashes("x" * 64 + "y" * 64, 64)
    b = chained_block_hashes("z" * 64 + "y" * 64, 64)
    assert len(a) == len(b) == 2
    assert a[1] != b[1]


def test_equal_prefixes_give_equal_leading_hashes_and_partial_blocks_none() -> None:
    a = chained_block_hashes("p" * 128 + "tail one", 64)
    b = chained_block_hashes("p" * 128 + "another tail, longer than one block" * 3, 64)
    assert a == b[:2]
    assert len(a) == 2


def test_second_request_with_the_same_prefix_hits_its_blocks() -> None:
    cache = PrefixCache(capacity_blocks=100, block_tokens=16)
    hashes = list(range(1, 11))
    assert cache.admit(hashes, prompt_tokens=170) == 0
    assert cache.admit(hashes, prompt_tokens=170) == 160
    assert (cache.queries_tokens, cache.hits_tokens) == (340, 160)


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    cache = PrefixCache(capacity_blocks=100, block_tokens=16)
    cache.admit([1, 2], prompt_tokens=32)
    assert cache.admit([1, 2], prompt_tokens=32) == 31


def test_the_match_stops_at_the_first_uncached_block() -> None:
    cache = PrefixCache(capacity_blocks=100, block_tokens=16)
    cache.admit([1, 2, 3], prompt_tokens=48)
    assert cache.admit([1, 2, 99, 3], prompt_tokens=64) == 32


def test_lru_evicts_least_recently_used_chain_tails_first() -> None:
    cache = PrefixCache(capacity_blocks=4, block_tokens=16)
    cache.admit([1, 2, 3], prompt_tokens=48)
    cache.admit([7, 8], prompt_tokens=32)
    # Five blocks for four places: the old chain's tail went, its head stayed.
    assert len(cache) == 4
    assert cache.admit([1, 2], prompt_tokens=48) == 32


def test_capacity_zero_caches_nothing_but_counts_queries() -> None:
    cache = PrefixCache(capacity_blocks=0)
    assert cache.hashes("a" * 1000) == []
    assert cache.admit([1, 2], prompt_tokens=40) == 0
    assert (len(cache), cache.queries_tokens) == (0, 40)


def test_engine_prefills_only_uncached_tokens() -> None:
    engine = SimEngine(CACHED, MODEL, time_scale=0.0)
    req = _req("s" * 4000)  # 1000 tokens: 62 full blocks of 16 tokens
    first = engine.admit_prefill(req, engine.prefix_cache.hashes(req.prompt_text), 4)
    second = engine.admit_prefill(req, engine.prefix_cache.hashes(req.prompt_text), 4)
    assert first == pytest.approx(100.0)
    assert second == pytest.approx((1000 - 62 * 16) / 10)


def test_engine_kv_usage_counts_admitted_requests_until_released() -> None:
    engine = SimEngine(CACHED, MODEL, time_scale=0.0)
    req = _req("k" * 4000)
    engine.admit_prefill(req, [], 24)
    assert engine.kv_cache_usage == pytest.approx(1024 / 4096)
    engine.release_kv(req, 24)
    assert engine.kv_cache_usage == 0.0


def test_chat_prompts_sharing_leading_messages_share_leading_blocks() -> None:
    system = {"role": "system", "content": "You are terse. " * 40}
    one = parse_generation(
        {"model": MODEL, "messages": [system, {"role": "user", "content": "a"}]}, chat=True
    )
    two = parse_generation(
        {"model": MODEL, "messages": [system, {"role": "user", "content": "b"}]}, chat=True
    )
    cache = PrefixCache(capacity_blocks=100)
    shared = cache.hashes(one.prompt_text)
    assert len(shared) >= 9
    assert cache.hashes(two.prompt_text)[: len(shared)] == shared


def test_metrics_page_reports_prefix_hits_in_current_vllm_names() -> None:
    prompt = "The same long system prompt, again and again. " * 30

    async def main() -> str:
        async with running_engine(CACHED) as h:
            for _ in range(2):
                await h.client.chat.completions.create(
                    model=MODEL, messages=messages(prompt), max_tokens=3
                )
            async with h.http.get(h.url("/metrics")) as resp:
                return await resp.text()

    text = asyncio.run(main())
    assert "# TYPE vllm:kv_cache_usage_perc gauge" in text
    load = parse_engine_load(text)
    assert load.kind is EngineKind.VLLM
    assert (load.running, load.waiting, load.kv_cache_usage) == (0.0, 0.0, 0.0)
    assert load.prefix_cache_queries is not None and load.prefix_cache_hits is not None
    assert load.prefix_cache_hits > 0
    assert load.prefix_cache_hit_rate == pytest.approx(
        load.prefix_cache_hits / load.prefix_cache_queries
    )
    # The second request found all but the partial block and last token of the first.
    rate = load.prefix_cache_hit_rate
    assert rate is not None and 0.4 < rate < 0.5
