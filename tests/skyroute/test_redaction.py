"""Common secret shapes are masked wherever they appear in a log line (a client can put
anything in ``x-request-id``)."""

from __future__ import annotations

import logging

import orjson
import pytest

from skyroute import logs
from skyroute.logs import JsonFormatter, redact

SECRETS = {
    "aws-key-id": "AKIAIOSFODNN7EXAMPLE",
    "aws-session-key-id": "ASIAY34FZKBOKMUTVV7A",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFU",
    "github-classic": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github-fine-grained": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "slack": "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "openai": "sk-proj-abcdefghijklmnop",
}


@pytest.mark.parametrize("secret", SECRETS.values(), ids=SECRETS.keys())
def test_each_secret_shape_is_masked_in_text(secret: str) -> None:
    assert secret not in redact(f"request id {secret} from 10.0.0.1")
    assert "[REDACTED]" in redact(f"request id {secret} from 10.0.0.1")


@pytest.mark.parametrize(
    "text",
    ["api-key: 0123456789abcdef", "api_key=0123456789abcdef", 'x-api-key="0123456789abcdef"'],
)
def test_api_key_values_are_masked_but_the_name_kept(text: str) -> None:
    out = redact(text)
    assert "0123456789abcdef" not in out and "key" in out


@pytest.mark.parametrize("text", ["AKIA short", "eyJ not a token", "xoxb-1", "ghp_short"])
def test_near_misses_are_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("secret", SECRETS.values(), ids=SECRETS.keys())
def test_a_secret_in_a_structured_field_is_masked_in_json(secret: str) -> None:
    record = logging.LogRecord("skyroute.access", logging.INFO, __file__, 1, "request", None, None)
    record.fields = {"request_id": secret, "status": 200}
    line = JsonFormatter().format(record)
    assert secret not in line
    assert orjson.loads(line)["request_id"] == "[REDACTED]"


@pytest.mark.parametrize("secret", SECRETS.values(), ids=SECRETS.keys())
def test_a_secret_is_masked_every_time_and_never_remembered(secret: str) -> None:
    text = f"request id {secret}"
    for _ in range(3):  # a clean string seen before is answered from memory; this never is
        assert secret not in redact(text)
    assert text not in logs._CLEAN and all(secret not in s for s in logs._CLEAN)


def test_remembered_clean_strings_answer_as_the_pattern_does() -> None:
    values = ["aws:us-east-1:h100-llama70b", "ok", "acme", "x" * 300]
    assert [redact(v) for v in values] == values
    assert [redact(v) for v in values] == values  # second time: from memory
    assert "x" * 300 not in logs._CLEAN  # long values are not kept


def test_the_memory_of_clean_strings_is_bounded() -> None:
    for n in range(logs._CLEAN_MAX + 10):
        redact(f"req-{n}")
    assert len(logs._CLEAN) <= logs._CLEAN_MAX
