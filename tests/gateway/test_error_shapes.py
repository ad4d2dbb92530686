"""Bad requests get OpenAI-shaped 4xx errors that the openai client understands."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.conftest import CHAT
from tests.gateway.harness import API_KEY, Gateway

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _assert_openai_error(
    resp: httpx.Response, status: int, code: str | None = None
) -> dict[str, object]:
    assert resp.status_code == status
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code
    return error  # type: ignore[no-any-return]


def test_missing_key_is_401(module_gateway: Gateway) -> None:
    resp = httpx.post(
        f"{module_gateway.base}/v1/chat/completions", json={"model": CHAT, "messages": []}
    )
    _assert_openai_error(resp, 401, "invalid_api_key")


def test_wrong_key_is_401_through_the_openai_client(module_gateway: Gateway) -> None:
    client = openai.OpenAI(
        base_url=f"{module_gateway.base}/v1", api_key="sk-wrong-key-000000", max_retries=0
    )
    with client, pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_malformed_json_is_400(module_gateway: Gateway) -> None:
    resp = httpx.post(
        f"{module_gateway.base}/v1/chat/completions", content=b"{not json", headers=AUTH
    )
    _assert_openai_error(resp, 400)


def test_missing_messages_is_400_naming_the_field(module_gateway: Gateway) -> None:
    resp = httpx.post(
        f"{module_gateway.base}/v1/chat/completions", json={"model": CHAT}, headers=AUTH
    )
    assert _assert_openai_error(resp, 400)["param"] == "messages"


def test_unknown_model_is_404_model_not_found(module_client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        module_client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}]
        )
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "model_not_found"


def test_oversized_body_is_413(module_gateway: Gateway) -> None:
    big = {"model": CHAT, "messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]}
    resp = httpx.post(
        f"{module_gateway.base}/v1/chat/completions", json=big, headers=AUTH, timeout=30
    )
    _assert_openai_error(resp, 413, "payload_too_large")


def test_unknown_slo_class_is_400(module_gateway: Gateway) -> None:
    body = {"model": CHAT, "messages": [{"role": "user", "content": "x"}]}
    resp = httpx.post(
        f"{module_gateway.base}/v1/chat/completions",
        json=body,
        headers={**AUTH, "x-skyroute-slo": "nope"},
    )
    _assert_openai_error(resp, 400)


def test_unknown_path_is_openai_shaped_404(module_gateway: Gateway) -> None:
    resp = httpx.get(f"{module_gateway.base}/v1/nothing-here", headers=AUTH)
    _assert_openai_error(resp, 404)
