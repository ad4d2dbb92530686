"""parse_request: the cheap check of an OpenAI request body. Pure, no network."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from base.errors import InvalidRequest
from gateway.openai_request import Operation, parse_request


def _body(**fields: Any) -> bytes:
    return orjson.dumps(fields)


def _chat(**over: Any) -> bytes:
    fields: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    fields.update(over)
    return _body(**fields)


def _param_of(body: bytes, operation: Operation = Operation.CHAT) -> str | None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(body, operation)
    return info.value.param


# -- happy paths ----------------------------------------------------------------------


def test_chat_request_parses_model_stream_and_limit() -> None:
    parsed = parse_request(_chat(stream=True, max_tokens=50), Operation.CHAT)
    assert (parsed.operation, parsed.model, parsed.stream, parsed.max_tokens) == (
        Operation.CHAT,
        "m",
        True,
        50,
    )


def test_chat_request_without_stream_or_limit_defaults_to_unstreamed_unlimited() -> None:
    parsed = parse_request(_chat(), Operation.CHAT)
    assert (parsed.stream, parsed.max_tokens) == (False, None)


def test_completion_request_parses() -> None:
    parsed = parse_request(_body(model="m", prompt="abcdefgh"), Operation.COMPLETION)
    assert (parsed.operation, parsed.model, parsed.prompt_tokens) == (
        Operation.COMPLETION,
        "m",
        2,
    )


def test_embedding_request_parses() -> None:
    parsed = parse_request(_body(model="e", input=["abcd", "efgh"]), Operation.EMBEDDING)
    assert (parsed.operation, parsed.model, parsed.stream, parsed.prompt_tokens) == (
        Operation.EMBEDDING,
        "e",
        False,
        2,
    )


def test_payload_is_the_decoded_body() -> None:
    fields = {"model": "m", "prompt": "x", "temperature": 0.5, "user": "u1"}
    assert parse_request(_body(**fields), Operation.COMPLETION).payload == fields


# -- prompt token estimate ------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "tokens"),
    [("abcd", 1), ("abcde", 2), ("x" * 400, 100), ("x" * 401, 101)],
)
def test_prompt_tokens_are_characters_over_four_rounded_up(content: str, tokens: int) -> None:
    body = _chat(messages=[{"role": "user", "content": content}])
    assert parse_request(body, Operation.CHAT).prompt_tokens == tokens


def test_prompt_tokens_sum_every_message() -> None:
    messages = [
        {"role": "system", "content": "x" * 40},
        {"role": "user", "content": "y" * 40},
    ]
    assert parse_request(_chat(messages=messages), Operation.CHAT).prompt_tokens == 20


def test_prompt_tokens_count_text_parts_of_list_content() -> None:
    parts = [
        {"type": "text", "text": "x" * 20},
        {"type": "image_url", "image_url": {"url": "http://example/i.png"}},
        {"type": "text", "text": "y" * 20},
    ]
    body = _chat(messages=[{"role": "user", "content": parts}])
    assert parse_request(body, Operation.CHAT).prompt_tokens == 10


def test_prompt_tokens_count_one_token_per_pre_tokenised_item() -> None:
    body = _body(model="m", prompt=list(range(37)))
    assert parse_request(body, Operation.COMPLETION).prompt_tokens == 37


def test_prompt_tokens_count_strings_in_a_prompt_list() -> None:
    body = _body(model="m", prompt=["x" * 8, "y" * 8])
    assert parse_request(body, Operation.COMPLETION).prompt_tokens == 4


def test_prompt_tokens_are_at_least_one_for_empty_content() -> None:
    body = _chat(messages=[{"role": "assistant", "content": None}])
    assert parse_request(body, Operation.CHAT).prompt_tokens == 1


# -- rejected bodies ------------------------------------------------------------------


def test_invalid_json_is_rejected_without_param() -> None:
    assert _param_of(b'{"model": "m",') is None


@pytest.mark.parametrize("body", [b"[]", b'"text"', b"3", b"null"])
def test_non_object_body_is_rejected_without_param(body: bytes) -> None:
    assert _param_of(body) is None


def test_missing_model_is_rejected_naming_model() -> None:
    assert _param_of(_body(messages=[{"role": "user", "content": "hi"}])) == "model"


@pytest.mark.parametrize("model", ["", 7, None, ["m"]])
def test_empty_or_non_string_model_is_rejected_naming_model(model: Any) -> None:
    assert _param_of(_chat(model=model)) == "model"


@pytest.mark.parametrize("stream", ["true", 1, 0])
def test_non_bool_stream_is_rejected_naming_stream(stream: Any) -> None:
    assert _param_of(_chat(stream=stream)) == "stream"


def test_missing_messages_is_rejected_naming_messages() -> None:
    assert _param_of(_body(model="m")) == "messages"


@pytest.mark.parametrize("messages", [[], "hi", {"role": "user"}])
def test_empty_or_non_list_messages_is_rejected_naming_messages(messages: Any) -> None:
    assert _param_of(_chat(messages=messages)) == "messages"


def test_message_without_role_is_rejected_naming_its_index() -> None:
    messages = [{"role": "user", "content": "a"}, {"content": "b"}]
    assert _param_of(_chat(messages=messages)) == "messages[1]"


def test_message_that_is_not_an_object_is_rejected_naming_its_index() -> None:
    assert _param_of(_chat(messages=["hi"])) == "messages[0]"


@pytest.mark.parametrize("content", [42, {"text": "hi"}, True])
def test_content_of_a_bad_type_is_rejected_naming_the_content(content: Any) -> None:
    body = _chat(messages=[{"role": "user", "content": content}])
    assert _param_of(body) == "messages[0].content"


def test_content_part_of_a_bad_type_is_rejected_naming_the_content() -> None:
    body = _chat(messages=[{"role": "user", "content": ["ok", 1.5]}])
    assert _param_of(body) == "messages[0].content"


def test_missing_prompt_is_rejected_naming_prompt() -> None:
    assert _param_of(_body(model="m"), Operation.COMPLETION) == "prompt"


def test_prompt_of_a_bad_type_is_rejected_naming_prompt() -> None:
    assert _param_of(_body(model="m", prompt={"a": 1}), Operation.COMPLETION) == "prompt"


def test_missing_input_is_rejected_naming_input() -> None:
    assert _param_of(_body(model="e"), Operation.EMBEDDING) == "input"


def test_streamed_embeddings_are_rejected_naming_stream() -> None:
    body = _body(model="e", input="abc", stream=True)
    assert _param_of(body, Operation.EMBEDDING) == "stream"


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [0, -5, True, False, 1.5, "10"])
def test_bad_token_limit_is_rejected_naming_it(name: str, value: Any) -> None:
    assert _param_of(_chat(**{name: value})) == name


def test_max_completion_tokens_is_preferred_over_max_tokens() -> None:
    parsed = parse_request(_chat(max_tokens=10, max_completion_tokens=20), Operation.CHAT)
    assert parsed.max_tokens == 20


def test_max_tokens_is_used_when_max_completion_tokens_is_null() -> None:
    parsed = parse_request(_chat(max_tokens=10, max_completion_tokens=None), Operation.CHAT)
    assert parsed.max_tokens == 10


@pytest.mark.parametrize("n", [129, 0, True, 2.5, "2"])
def test_an_n_that_is_not_1_to_128_is_rejected_naming_n(n: Any) -> None:
    assert _param_of(_chat(n=n)) == "n"


@pytest.mark.parametrize(("given", "n"), [(None, 1), (1, 1), (3, 3), (128, 128)])
def test_n_is_parsed(given: int | None, n: int) -> None:
    body = _chat() if given is None else _chat(n=given)
    assert parse_request(body, Operation.CHAT).n == n


def test_embeddings_take_no_n() -> None:
    assert _param_of(_body(model="e", input="x", n=2), Operation.EMBEDDING) == "n"


# -- the forwarded body ---------------------------------------------------------------


def test_upstream_body_rewrites_the_model_and_keeps_every_other_field() -> None:
    fields: dict[str, Any] = {
        "model": "alias",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    parsed = parse_request(_body(**fields), Operation.CHAT)
    assert orjson.loads(parsed.upstream_body("org/real-model")) == {
        **fields,
        "model": "org/real-model",
    }


def test_upstream_body_does_not_change_the_parsed_payload() -> None:
    parsed = parse_request(_chat(model="alias"), Operation.CHAT)
    parsed.upstream_body("org/real-model")
    assert parsed.payload["model"] == "alias"


def test_upstream_body_with_the_same_model_keeps_the_body() -> None:
    parsed = parse_request(_chat(model="org/m"), Operation.CHAT)
    assert orjson.loads(parsed.upstream_body("org/m")) == parsed.payload
