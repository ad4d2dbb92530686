"""The official openai client works against the gateway unchanged."""

from __future__ import annotations

import openai
import pytest

from tests.gateway.conftest import CHAT, EMBED

HEADERS = (
    "x-skyroute-pool",
    "x-skyroute-provider",
    "x-skyroute-region",
    "x-skyroute-attempts",
    "x-skyroute-cost-usd",
    "x-request-id",
)
MESSAGES = [{"role": "user", "content": "Say hello to the multi-cloud fleet."}]


def test_chat_completion_is_routed_with_skyroute_headers(module_client: openai.OpenAI) -> None:
    raw = module_client.chat.completions.with_raw_response.create(
        model=CHAT, messages=MESSAGES, max_tokens=4
    )  # type: ignore[arg-type]
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.completion_tokens == 4
    for header in HEADERS:
        assert raw.headers.get(header), header
    assert raw.headers["x-skyroute-attempts"] == "1"
    assert float(raw.headers["x-skyroute-cost-usd"]) > 0


def test_streaming_chat_completion_yields_every_token(module_client: openai.OpenAI) -> None:
    with module_client.chat.completions.with_streaming_response.create(
        model=CHAT,
        messages=MESSAGES,
        max_tokens=5,
        stream=True,  # type: ignore[arg-type]
    ) as raw:
        assert raw.headers["x-skyroute-pool"] and len(raw.headers["x-request-id"]) == 32
        chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 5
    assert chunks[-1].choices[0].finish_reason == "length"


def test_text_completion_is_routed(module_client: openai.OpenAI) -> None:
    raw = module_client.completions.with_raw_response.create(
        model=CHAT, prompt="Once upon a time", max_tokens=3
    )
    assert raw.parse().choices[0].text
    assert raw.headers["x-skyroute-provider"] in {"aws", "gcp", "azure"}


def test_embeddings_are_routed_to_the_embedding_pool(module_client: openai.OpenAI) -> None:
    raw = module_client.embeddings.with_raw_response.create(model=EMBED, input=["a", "b", "c"])
    assert len(raw.parse().data) == 3
    assert raw.headers["x-skyroute-pool"] == "aws:us-east-1:embed"


def test_models_list_names_every_policy_model(module_client: openai.OpenAI) -> None:
    assert {m.id for m in module_client.models.list()} == {CHAT, EMBED}


def test_a_model_is_retrieved_by_name_and_an_unknown_one_is_404(
    module_client: openai.OpenAI,
) -> None:
    assert module_client.models.retrieve(CHAT).id == CHAT
    with pytest.raises(openai.NotFoundError) as info:
        module_client.models.retrieve("gpt-9")
    assert info.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_the_answer_names_the_model_the_client_asked_for(module_client: openai.OpenAI) -> None:
    reply = module_client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.model == CHAT  # the engine serves it as its upstream name
    chunks = list(module_client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
    ))  # fmt: skip
    assert chunks and {c.model for c in chunks} == {CHAT}


def test_a_request_id_sent_is_the_one_answered(module_client: openai.OpenAI) -> None:
    raw = module_client.chat.completions.with_raw_response.create(
        model=CHAT, messages=MESSAGES, max_tokens=2, extra_headers={"x-request-id": "rid-42"}
    )  # type: ignore[arg-type]
    assert raw.headers["x-request-id"] == "rid-42"
