"""Start a real simulated engine on a free loopback port for one test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import openai
from openai.types.chat import ChatCompletionMessageParam

from simengine.perf_model import EngineProfile
from simengine.server import RunningEngine, SimEngine, start_server

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# Quick to reason about: 10 prompt tokens prefill in 1 ms, 20 ms per token at any occupancy.
FLAT = EngineProfile(
    name="test-flat",
    batch_slots=4,
    prefill_tokens_per_s=10_000.0,
    tpot_base_ms=20.0,
    tpot_full_ms=20.0,
    embed_tokens_per_s=10_000.0,
    max_context=4096,
)


@dataclass
class Harness:
    engine: SimEngine
    server: RunningEngine
    client: openai.AsyncOpenAI
    http: aiohttp.ClientSession

    def url(self, path: str) -> str:
        return self.server.url + path


@asynccontextmanager
async def running_engine(
    profile: EngineProfile = FLAT, *, seed: int = 0, time_scale: float = 0.0
) -> AsyncIterator[Harness]:
    engine = SimEngine(profile, MODEL, seed=seed, time_scale=time_scale)
    server = await start_server(engine)
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    http = aiohttp.ClientSession()
    try:
        yield Harness(engine, server, client, http)
    finally:
        await http.close()
        await client.close()
        await server.close()


def messages(text: str = "Say something.") -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]
