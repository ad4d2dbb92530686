"""Rate limits and budgets through two real gateway replicas sharing one Redis: the
limits are one budget for the tenant, whichever replica a request goes through, and a
refusal is OpenAI's 429 with a Retry-After header."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest

from tests.gateway.access.conftest import (
    admin,
    create_key,
    openai_client,
    put_tenant,
    tenant_name,
)
from tests.gateway.conftest import CHAT
from tests.gateway.harness import Gateway

MESSAGES: Any = [{"role": "user", "content": "hi"}]


def _keyed_tenant(pair: list[Gateway], label: str, **spec: object) -> tuple[str, str]:
    name = tenant_name(label)
    put_tenant(pair, name, **spec)
    return name, str(create_key(pair[0], name)["secret"])


def _send(gw: Gateway, secret: str, max_tokens: int = 2) -> int:
    """The status of one chat request (200, or the refusal's)."""
    with openai_client(gw, secret) as client:
        try:
            client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=max_tokens)
        except openai.APIStatusError as exc:
            return exc.status_code
    return 200


def _refusal(gw: Gateway, secret: str, max_tokens: int = 2) -> openai.RateLimitError:
    with openai_client(gw, secret) as client, pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=max_tokens)
    return info.value


def test_rpm_is_shared_by_the_replicas(pair: list[Gateway]) -> None:
    one, two = pair
    _, secret = _keyed_tenant(pair, "rpm", rpm=5)
    statuses = [_send(one, secret) for _ in range(3)] + [_send(two, secret) for _ in range(3)]
    assert statuses == [200] * 5 + [429]


def test_over_rpm_is_a_429_rate_limit_exceeded_with_retry_after(pair: list[Gateway]) -> None:
    one, two = pair
    _, secret = _keyed_tenant(pair, "rpm-shape", rpm=2)
    assert [_send(one, secret), _send(two, secret)] == [200, 200]
    refusal = _refusal(one, secret)
    # 2 per minute: the next token is due within 30 s.
    assert refusal.code == "rate_limit_exceeded"
    assert 1 <= int(refusal.response.headers["retry-after"]) <= 30


def test_tpm_is_shared_by_the_replicas(pair: list[Gateway]) -> None:
    one, two = pair
    _, secret = _keyed_tenant(pair, "tpm", tpm=100)
    # About 41 tokens each (1 prompt, 40 completion): the third does not fit in 100.
    statuses = [_send(one, secret, 40), _send(two, secret, 40), _send(one, secret, 40)]
    assert statuses == [200, 200, 429]


def test_over_tpm_is_a_429_rate_limit_exceeded_with_retry_after(pair: list[Gateway]) -> None:
    one, two = pair
    _, secret = _keyed_tenant(pair, "tpm-shape", tpm=60)
    assert _send(two, secret, 40) == 200
    refusal = _refusal(one, secret, 40)
    # About 20 tokens left, 21 missing at 1 token/s.
    assert refusal.code == "rate_limit_exceeded"
    assert 1 <= int(refusal.response.headers["retry-after"]) <= 60


def test_a_tenant_over_its_limit_does_not_limit_another(pair: list[Gateway]) -> None:
    one, _ = pair
    _, limited = _keyed_tenant(pair, "limited", rpm=1)
    _, other = _keyed_tenant(pair, "other", rpm=1)
    assert [_send(one, limited), _send(one, limited), _send(one, other)] == [200, 429, 200]


def test_a_budget_stop_applies_once_spend_reaches_the_budget(pair: list[Gateway]) -> None:
    one, two = pair
    # One request of a few tokens costs a few hundred nano-USD: more than this budget.
    name, secret = _keyed_tenant(pair, "budget", budget_usd=0.0000001, budget_period="month")
    assert _send(one, secret) == 200
    deadline = time.monotonic() + 5
    spent = 0.0
    while spent <= 0 and time.monotonic() < deadline:
        groups = admin(one, "GET", f"/admin/usage?tenant={name}").json()["groups"]
        spent = groups.get("all", {}).get("cost_usd", 0.0)
        time.sleep(0.05)
    assert spent > 0.0000001
    refusal = _refusal(two, secret)
    assert refusal.code == "insufficient_quota"
    assert int(refusal.response.headers["retry-after"]) >= 1
