"""Simulated timing of the engine: token pacing, FIFO queueing, gauges, aborts.

Assertions compare orderings and generous fractions of the modelled durations, never
absolute wall-clock bounds, so a loaded two-core machine cannot break them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time

from tests.simengine._harness import FLAT, MODEL, Harness, messages, running_engine

ONE_SLOT = dataclasses.replace(FLAT, batch_slots=1)


async def _stream_times(h: Harness, max_tokens: int) -> list[float]:
    """Arrival times (perf_counter, s) of each content chunk of one streamed chat."""
    stream = await h.client.chat.completions.create(
        model=MODEL, messages=messages(), max_tokens=max_tokens, stream=True
    )
    return [time.perf_counter() async for c in stream if c.choices and c.choices[0].delta.content]


async def _until(predicate, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.perf_counter() + timeout_s
    while not await predicate():
        assert time.perf_counter() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_stream_chunks_are_spread_over_decode_time() -> None:
    async def main() -> list[float]:
        async with running_engine(time_scale=1.0) as h:
            return await _stream_times(h, max_tokens=20)

    times = asyncio.run(main())
    assert len(times) == 20
    decode_s = 19 * FLAT.tpot_ms(1) / 1000.0
    assert times[-1] - times[0] >= 0.5 * decode_s


def test_time_scale_zero_streams_everything_at_once() -> None:
    async def main() -> list[float]:
        async with running_engine(ONE_SLOT, time_scale=0.0) as h:
            return await _stream_times(h, max_tokens=200)

    times = asyncio.run(main())
    # 200 tokens at 20 ms would take ~4 s if the engine slept.
    assert times[-1] - times[0] < 0.5 * 199 * 0.020


def test_second_request_waits_for_single_slot() -> None:
    async def main() -> tuple[list[float], list[float]]:
        async with running_engine(ONE_SLOT, time_scale=1.0) as h:
            first = asyncio.create_task(_stream_times(h, max_tokens=10))

            async def admitted() -> bool:
                return h.engine.running == 1

            await _until(admitted)
            second = await _stream_times(h, max_tokens=10)
            return await first, second

    first, second = asyncio.run(main())
    assert second[0] > first[-1]


def _gauge(text: str, name: str) -> float:
    match = re.search(rf'^{re.escape(name)}{{model_name="{re.escape(MODEL)}"}} (\S+)$', text, re.M)
    assert match, f"{name} missing from metrics"
    return float(match.group(1))


def test_metrics_report_running_and_waiting_gauges() -> None:
    async def main() -> tuple[str, str]:
        async with running_engine(ONE_SLOT, time_scale=1.0) as h:

            async def metrics() -> str:
                async with h.http.get(h.url("/metrics")) as resp:
                    return await resp.text()

            async def one() -> None:
                await h.client.chat.completions.create(
                    model=MODEL, messages=messages(), max_tokens=15
                )

            calls = [asyncio.create_task(one()) for _ in range(2)]
            busy = ""

            async def both_in() -> bool:
                nonlocal busy
                busy = await metrics()
                return _gauge(busy, "vllm:num_requests_waiting") == 1

            await _until(both_in)
            await asyncio.gather(*calls)
            return busy, await metrics()

    busy, idle = asyncio.run(main())
    assert _gauge(busy, "vllm:num_requests_running") == 1
    assert _gauge(idle, "vllm:num_requests_running") == 0
    assert _gauge(idle, "vllm:num_requests_waiting") == 0
    assert 'vllm:request_success_total{finished_reason="length",' in idle
    assert "# TYPE vllm:num_requests_running gauge" in idle


def test_client_disconnect_frees_batch_slot() -> None:
    async def main() -> float:
        async with running_engine(ONE_SLOT, time_scale=1.0) as h:
            stream = await h.client.chat.completions.create(
                model=MODEL, messages=messages(), max_tokens=200, stream=True
            )
            await anext(aiter(stream))
            assert h.engine.running == 1
            closed = time.perf_counter()
            await stream.close()

            async def freed() -> bool:
                return h.engine.running == 0

            await _until(freed)
            return time.perf_counter() - closed

    # The full stream would hold the slot for ~4 s.
    assert asyncio.run(main()) < 0.5 * 199 * 0.020
