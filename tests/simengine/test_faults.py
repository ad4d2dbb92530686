"""Fault injection through /sim/faults."""

from __future__ import annotations

import asyncio

import openai
import pytest

from simengine.faults import FaultConfig
from tests.simengine._harness import FLAT, MODEL, Harness, messages, running_engine


async def _set_faults(h: Harness, **faults: object) -> dict[str, object]:
    async with h.http.post(h.url("/sim/faults"), json=faults) as resp:
        assert resp.status == 200
        body: dict[str, object] = await resp.json()
        return body


def test_get_faults_returns_posted_config_with_defaults() -> None:
    async def main() -> dict[str, object]:
        async with running_engine() as h:
            await _set_faults(h, fail_rate=0.25, slowdown=2.0)
            async with h.http.get(h.url("/sim/faults")) as resp:
                return dict(await resp.json())

    assert asyncio.run(main()) == {
        "fail_rate": 0.25,
        "fail_status": 503,
        "slowdown": 2.0,
        "stream_error_after": None,
        "hang": False,
    }


def test_invalid_fault_config_is_400() -> None:
    async def main() -> int:
        async with (
            running_engine() as h,
            h.http.post(h.url("/sim/faults"), json={"fail_rate": 2}) as resp,
        ):
            return resp.status

    assert asyncio.run(main()) == 400


def test_fail_rate_one_fails_with_configured_status() -> None:
    async def main() -> None:
        async with running_engine() as h:
            await _set_faults(h, fail_rate=1.0, fail_status=503)
            with pytest.raises(openai.InternalServerError) as info:
                await h.client.chat.completions.create(model=MODEL, messages=messages())
            assert info.value.status_code == 503
            assert info.value.type == "server_error"

    asyncio.run(main())


def test_partial_failures_follow_the_seed() -> None:
    async def pattern(seed: int) -> list[bool]:
        async with running_engine(seed=seed) as h:
            await _set_faults(h, fail_rate=0.5, fail_status=429)
            outcome = []
            for _ in range(30):
                try:
                    await h.client.completions.create(model=MODEL, prompt="x", max_tokens=1)
                    outcome.append(True)
                except openai.RateLimitError:
                    outcome.append(False)
            return outcome

    first = asyncio.run(pattern(3))
    assert first == asyncio.run(pattern(3))
    assert any(first) and not all(first)


def test_stream_error_after_n_chunks_raises_in_client() -> None:
    async def main() -> int:
        async with running_engine() as h:
            await _set_faults(h, stream_error_after=3)
            stream = await h.client.chat.completions.create(
                model=MODEL, messages=messages(), max_tokens=10, stream=True
            )
            received = 0
            with pytest.raises(openai.APIError, match="mid-stream"):
                async for _ in stream:
                    received += 1
            return received

    assert asyncio.run(main()) == 3


def test_hang_holds_requests_until_turned_off() -> None:
    async def main() -> None:
        async with running_engine() as h:
            await _set_faults(h, hang=True)
            call = asyncio.create_task(
                h.client.chat.completions.create(model=MODEL, messages=messages(), max_tokens=2)
            )
            await asyncio.sleep(0.2)
            assert not call.done()
            await _set_faults(h, hang=False)
            resp = await asyncio.wait_for(call, timeout=10)
            assert resp.choices[0].finish_reason == "length"

    asyncio.run(main())


def test_slowdown_multiplies_tpot() -> None:
    async def main() -> float:
        async with running_engine() as h:
            await _set_faults(h, slowdown=3.0)
            return h.engine.tpot_ms()

    assert asyncio.run(main()) == pytest.approx(3 * FLAT.tpot_ms(0))


def test_fault_config_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="unknown"):
        FaultConfig.from_json({"explode": True})
