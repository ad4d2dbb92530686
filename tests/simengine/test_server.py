"""The simulated engine's OpenAI-compatible API, exercised with the real openai client."""

from __future__ import annotations

import asyncio
import math

import openai
import pytest

from tests.simengine._harness import MODEL, Harness, messages, running_engine


def _run(scenario) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        async with running_engine() as h:
            await scenario(h)

    asyncio.run(main())


def test_chat_non_streaming_returns_text_and_usage() -> None:
    async def scenario(h: Harness) -> None:
        resp = await h.client.chat.completions.create(
            model=MODEL, messages=messages("x" * 41), max_tokens=7
        )
        assert resp.object == "chat.completion"
        assert resp.choices[0].message.role == "assistant"
        assert len((resp.choices[0].message.content or "").split()) == 7
        assert resp.choices[0].finish_reason == "length"
        assert resp.usage is not None
        assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (11, 7)
        assert resp.usage.total_tokens == 18

    _run(scenario)


def test_chat_without_max_tokens_draws_a_length_and_stops() -> None:
    async def scenario(h: Harness) -> None:
        resp = await h.client.chat.completions.create(model=MODEL, messages=messages())
        assert resp.choices[0].finish_reason == "stop"
        assert resp.usage is not None
        assert 1 <= resp.usage.completion_tokens <= 2048

    _run(scenario)


def test_chat_stream_has_role_tokens_finish_usage() -> None:
    async def scenario(h: Harness) -> None:
        stream = await h.client.chat.completions.create(
            model=MODEL,
            messages=messages(),
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        assert chunks[0].choices[0].delta.role == "assistant"
        content = [c.choices[0].delta.content for c in chunks[1:6]]
        assert all(content)
        assert chunks[6].choices[0].finish_reason == "length"
        assert chunks[7].choices == []
        assert chunks[7].usage is not None and chunks[7].usage.completion_tokens == 5
        assert len(chunks) == 8
        assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)

    _run(scenario)


def test_stream_text_equals_non_stream_text_for_same_seed() -> None:
    async def texts(stream: bool) -> str:
        async with running_engine(seed=7) as h:
            if not stream:
                resp = await h.client.chat.completions.create(
                    model=MODEL, messages=messages(), max_tokens=30
                )
                return resp.choices[0].message.content or ""
            chunks = await h.client.chat.completions.create(
                model=MODEL, messages=messages(), max_tokens=30, stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

    assert asyncio.run(texts(True)) == asyncio.run(texts(False))


def test_same_seed_gives_same_text_and_other_seed_differs() -> None:
    async def text(seed: int) -> list[str]:
        async with running_engine(seed=seed) as h:
            out = []
            for _ in range(3):
                resp = await h.client.chat.completions.create(model=MODEL, messages=messages())
                out.append(resp.choices[0].message.content or "")
            return out

    assert asyncio.run(text(1)) == asyncio.run(text(1))
    assert asyncio.run(text(1)) != asyncio.run(text(2))


def test_completions_non_streaming_and_streaming() -> None:
    async def scenario(h: Harness) -> None:
        resp = await h.client.completions.create(model=MODEL, prompt="abcd" * 5, max_tokens=4)
        assert resp.object == "text_completion"
        assert len(resp.choices[0].text.split()) == 4
        assert resp.usage is not None and resp.usage.prompt_tokens == 5
        stream = await h.client.completions.create(
            model=MODEL,
            prompt=["ab", "cd"],
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
        assert [c.choices[0].finish_reason for c in chunks[:4]] == [None, None, None, "length"]
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 4

    _run(scenario)


def test_embeddings_are_unit_16d_and_deterministic() -> None:
    async def scenario(h: Harness) -> None:
        one = await h.client.embeddings.create(model=MODEL, input="hello")
        many = await h.client.embeddings.create(
            model=MODEL, input=["hello", "world"], encoding_format="float"
        )
        assert [len(d.embedding) for d in many.data] == [16, 16]
        assert one.data[0].embedding == pytest.approx(many.data[0].embedding, abs=1e-6)
        assert many.data[0].embedding != many.data[1].embedding
        assert math.sqrt(sum(v * v for v in one.data[0].embedding)) == pytest.approx(1, abs=1e-5)
        assert many.usage.prompt_tokens == 4

    _run(scenario)


def test_models_list_names_served_model() -> None:
    async def scenario(h: Harness) -> None:
        page = await h.client.models.list()
        assert [m.id for m in page.data] == [MODEL]

    _run(scenario)


def test_health_is_empty_200_tagged_with_profile() -> None:
    async def scenario(h: Harness) -> None:
        async with h.http.get(h.url("/health")) as resp:
            assert resp.status == 200
            assert await resp.read() == b""
            assert resp.headers["x-sim-engine"] == "test-flat"

    _run(scenario)


def test_unknown_model_is_404_model_not_found() -> None:
    async def scenario(h: Harness) -> None:
        with pytest.raises(openai.NotFoundError) as info:
            await h.client.chat.completions.create(model="gpt-9", messages=messages())
        assert info.value.code == "model_not_found"
        assert info.value.type == "invalid_request_error"

    _run(scenario)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b'{"messages": [{"role": "user", "content": "hi"}]}', "model"),
        (b'{"model": "' + MODEL.encode() + b'"}', "messages"),
        (b'{"model": "' + MODEL.encode() + b'", "messages": [], "n": 1}', "messages"),
    ],
)
def test_bad_chat_body_is_400_openai_error(body: bytes, param: str | None) -> None:
    async def scenario(h: Harness) -> None:
        async with h.http.post(h.url("/v1/chat/completions"), data=body) as resp:
            assert resp.status == 400
            error = (await resp.json())["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
        assert error["param"] == param

    _run(scenario)


def test_n_greater_than_one_is_rejected() -> None:
    async def scenario(h: Harness) -> None:
        with pytest.raises(openai.BadRequestError) as info:
            await h.client.chat.completions.create(model=MODEL, messages=messages(), n=2)
        assert info.value.param == "n"

    _run(scenario)


def test_request_beyond_context_is_rejected() -> None:
    async def scenario(h: Harness) -> None:
        with pytest.raises(openai.BadRequestError) as info:
            await h.client.chat.completions.create(
                model=MODEL, messages=messages(), max_tokens=5000
            )
        assert info.value.code == "context_length_exceeded"

    _run(scenario)
