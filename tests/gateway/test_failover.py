"""A failing pool is skipped without the client seeing an error."""

from __future__ import annotations

import openai

from tests.gateway.conftest import CHAT, Fleet

MESSAGES = [{"role": "user", "content": "fail over"}]


def test_killed_engine_is_answered_by_next_pool_without_client_error(
    client: openai.OpenAI, fleet: Fleet
) -> None:
    fleet.engines["cheap"].kill()
    pools, attempts = [], []
    for _ in range(10):
        raw = client.chat.completions.with_raw_response.create(
            model=CHAT, messages=MESSAGES, max_tokens=2
        )  # type: ignore[arg-type]
        assert raw.status_code == 200
        pools.append(raw.headers["x-skyroute-pool"])
        attempts.append(int(raw.headers["x-skyroute-attempts"]))
    assert set(pools) == {"aws:us-east-1:mid"}
    assert attempts[0] == 2
    # After the ejection threshold the dead pool is no longer tried at all.
    assert attempts[-1] == 1


def test_engine_5xx_fails_over_to_next_pool(client: openai.OpenAI, fleet: Fleet) -> None:
    fleet.engines["cheap"].set_faults(fail_rate=1.0, fail_status=503)
    raw = client.chat.completions.with_raw_response.create(
        model=CHAT, messages=MESSAGES, max_tokens=2
    )  # type: ignore[arg-type]
    assert raw.headers["x-skyroute-pool"] == "aws:us-east-1:mid"
    assert raw.headers["x-skyroute-attempts"] == "2"


def test_streaming_request_fails_over_before_first_byte(
    client: openai.OpenAI, fleet: Fleet
) -> None:
    fleet.engines["cheap"].set_faults(fail_rate=1.0, fail_status=500)
    with client.chat.completions.with_streaming_response.create(
        model=CHAT,
        messages=MESSAGES,
        max_tokens=3,
        stream=True,  # type: ignore[arg-type]
    ) as raw:
        assert raw.headers["x-skyroute-pool"] == "aws:us-east-1:mid"
        chunks = list(raw.parse())
    assert chunks[-1].choices[0].finish_reason == "length"


def test_every_pool_down_gives_openai_shaped_error(client: openai.OpenAI, fleet: Fleet) -> None:
    for role in ("cheap", "mid", "pricey"):
        fleet.engines[role].kill()
    try:
        client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=2)  # type: ignore[arg-type]
    except openai.APIStatusError as exc:
        assert exc.status_code in {502, 503}
        assert isinstance(exc.body, dict) and {"message", "type", "code"} <= set(exc.body)
    else:
        raise AssertionError("expected an error with every pool down")


def test_error_event_mid_stream_reaches_client_as_error(
    client: openai.OpenAI, fleet: Fleet
) -> None:
    fleet.engines["cheap"].set_faults(stream_error_after=2)
    stream = client.chat.completions.create(
        model=CHAT, messages=MESSAGES, max_tokens=8, stream=True
    )  # type: ignore[arg-type]
    try:
        for _ in stream:
            pass
    except openai.APIError as exc:
        assert "error" in str(exc).lower() or exc.message
    else:
        raise AssertionError("the stream's error event was not surfaced")
