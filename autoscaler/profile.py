"""Measure a goodput profile against a running OpenAI-compatible engine.

At each level ``c`` the measurer keeps ``c`` streaming chat requests in flight and
records every request's TTFT and TPOT (time between its first and last token over the
tokens in between). The largest ``c`` whose 90th-percentile TPOT meets the target is
found by doubling, then bisection. Requests in flight are not sequences in the batch: a
request waiting for its prefill (or for a client too busy to send the next one) is not
decoding, and the TPOT of those that are is then lower than ``c`` sequences would give.
So the batch reported is the level's median, over its requests, of the requests
decoding at the middle of each one's decode (``c`` when every request decodes beside
the others, fewer when prefill queues or the client lags), and goodput is that batch
``× 1000 / mean TPOT`` output tokens/s (DistServe's sense: only work that met the SLO
counts). A loaded machine can thus make the figures smaller, never larger. Prefill speed
comes from the TTFT difference between a short and a long prompt at ``c = 1``. The result
is written in the policy's ``goodput`` format.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx
import numpy as np
import orjson

__all__ = ["LevelResult", "MeasuredProfile", "RequestTiming", "measure_profile"]


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One streamed request: TTFT and TPOT (ms), prompt and output tokens, and when its
    first and last tokens arrived (``time.perf_counter`` s)."""

    ttft_ms: float
    tpot_ms: float
    prompt_tokens: int
    output_tokens: int
    first_s: float = 0.0
    last_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LevelResult:
    """Measurements at one level of requests in flight: p90 and mean TPOT (ms), median
    TTFT (ms), and ``decoding``: the median number of requests decoding together (see
    the module docstring)."""

    concurrency: int
    tpot_p90_ms: float
    tpot_mean_ms: float
    ttft_p50_ms: float
    requests: int
    decoding: float = 0.0


@dataclass(frozen=True)
class MeasuredProfile:
    """A measured goodput profile (``router.policy.GoodputProfile`` fields) and the
    levels it came from."""

    tokens_per_s: float
    prefill_tokens_per_s: float
    max_concurrency: int
    tpot_ms: float
    slo_tpot_ms: float
    levels: tuple[LevelResult, ...]
    in_flight: int = 0  # the level the batch was measured at (requests in flight)

    def snippet(self, model: str, url: str) -> str:
        """The profile as a policy YAML snippet, with how it was measured."""
        return (
            f"# measured by `skyroute profile` against {url} ({model}) at TPOT <= "
            f"{self.slo_tpot_ms:g} ms (p90)\n"
            f"goodput: {{tokens_per_s: {self.tokens_per_s:.0f}, "
            f"prefill_tokens_per_s: {self.prefill_tokens_per_s:.0f}, "
            f"max_concurrency: {self.max_concurrency}, tpot_ms: {self.tpot_ms:.1f}}}\n"
        )


async def _one(
    client: httpx.AsyncClient, url: str, model: str, prompt_words: int, max_tokens: int
) -> RequestTiming:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": " ".join(["tokens"] * prompt_words)}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first = last = 0.0
    usage: dict[str, int] = {}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = orjson.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                last = time.perf_counter()
                first = first or last
    tokens = int(usage.get("completion_tokens", 0))
    tpot = (last - first) * 1000.0 / (tokens - 1) if tokens > 1 else float("nan")
    return RequestTiming(
        (first - started) * 1000.0, tpot, int(usage.get("prompt_tokens", 0)), tokens, first, last
    )


def _decoding(timings: list[RequestTiming]) -> float:
    """Median over requests of how many were decoding at the middle of each one's decode."""
    first = np.asarray([t.first_s for t in timings])
    last = np.asarray([t.last_s for t in timings])
    middle = (first + last) / 2.0
    together = ((first[None, :] <= middle[:, None]) & (middle[:, None] <= last[None, :])).sum(
        axis=1
    )
    return float(np.median(together))


async def _level(
    client: httpx.AsyncClient, url: str, model: str, c: int, rounds: int, output_tokens: int
) -> LevelResult:
    async def worker() -> list[RequestTiming]:
        return [await _one(client, url, model, 64, output_tokens) for _ in range(rounds)]

    timings = [t for batch in await asyncio.gather(*(worker() for _ in range(c))) for t in batch]
    tpot = np.asarray([t.tpot_ms for t in timings])
    tpot = tpot[np.isfinite(tpot)]
    ttft = np.asarray([t.ttft_ms for t in timings])
    return LevelResult(
        c,
        float(np.percentile(tpot, 90)),
        float(tpot.mean()),
        float(np.median(ttft)),
        len(timings),
        _decoding(timings),
    )


async def measure_profile(
    url: str,
    model: str,
    slo_tpot_ms: float,
    *,
    output_tokens: int = 32,
    rounds: int = 2,
    max_concurrency: int = 512,
    long_prompt_words: int = 4000,
    timeout_s: float = 120.0,
) -> MeasuredProfile:
    """Measure the engine at ``url`` (base URL, without ``/v1``) serving ``model``.

    Raises ``httpx.HTTPError`` if the engine cannot be reached or answers an error, and
    ValueError if even one sequence misses ``slo_tpot_ms``.
    """
    limits = httpx.Limits(max_connections=max_concurrency + 8)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        short = await _one(client, url, model, 64, 2)
        long = await _one(client, url, model, long_prompt_words, 2)
        seen: dict[int, LevelResult] = {}

        async def ok(c: int) -> bool:
            if c not in seen:
                seen[c] = await _level(client, url, model, c, rounds, output_tokens)
            return seen[c].tpot_p90_ms <= slo_tpot_ms

        if not await ok(1):
            raise ValueError(f"TPOT {seen[1].tpot_p90_ms:.1f} ms misses {slo_tpot_ms} ms at c=1")
        good, bad = 1, 0
        while bad == 0 and good * 2 <= max_concurrency:
            if await ok(good * 2):
                good *= 2
            else:
                bad = good * 2
        while bad and bad - good > 1:
            middle = (good + bad) // 2
            good, bad = (middle, bad) if await ok(middle) else (good, middle)
    best = seen[good]
    extra_tokens = long.prompt_tokens - short.prompt_tokens
    extra_ms = long.ttft_ms - short.ttft_ms
    prefill = extra_tokens * 1000.0 / extra_ms if extra_ms > 0 else float("inf")
    batch = max(1, min(good, int(best.decoding)))
    return MeasuredProfile(
        tokens_per_s=batch * 1000.0 / best.tpot_mean_ms,
        prefill_tokens_per_s=prefill,
        max_concurrency=batch,
        tpot_ms=seen[1].tpot_mean_ms,
        slo_tpot_ms=slo_tpot_ms,
        levels=tuple(seen[c] for c in sorted(seen)),
        in_flight=good,
    )
