"""KeyRing: bearer-key checks against hashed keys. Pure, no network."""

from __future__ import annotations

import base64

import orjson
import pytest

from base.errors import AuthenticationError
from gateway.auth import KeyRing
from gateway.http_errors import to_response

SECRET = "sk-test-0123456789abcdef"
OTHER = "sk-other-fedcba9876543210"


@pytest.fixture
def ring() -> KeyRing:
    return KeyRing([SECRET, OTHER])


def test_accepts_a_known_key(ring: KeyRing) -> None:
    ring.check_bearer(f"Bearer {SECRET}")


def test_accepts_every_configured_key(ring: KeyRing) -> None:
    ring.check_bearer(f"Bearer {OTHER}")


def test_accepts_the_scheme_in_any_case(ring: KeyRing) -> None:
    ring.check_bearer(f"bearer {SECRET}")


@pytest.mark.parametrize("header", [None, ""])
def test_rejects_a_missing_header(ring: KeyRing, header: str | None) -> None:
    with pytest.raises(AuthenticationError, match="didn't provide an API key"):
        ring.check_bearer(header)


@pytest.mark.parametrize("header", [f"Token {SECRET}", SECRET])
def test_rejects_a_wrong_scheme(ring: KeyRing, header: str) -> None:
    with pytest.raises(AuthenticationError, match="Incorrect Authorization header"):
        ring.check_bearer(header)


def test_accepts_basic_credentials_with_the_key_as_password(ring: KeyRing) -> None:
    ring.check_bearer("Basic " + base64.b64encode(f"admin:{SECRET}".encode()).decode())


@pytest.mark.parametrize("password", ["wrong-password", ""])
def test_rejects_basic_credentials_with_another_password(ring: KeyRing, password: str) -> None:
    with pytest.raises(AuthenticationError):
        ring.check_bearer("Basic " + base64.b64encode(f"admin:{password}".encode()).decode())


def test_rejects_malformed_basic_credentials(ring: KeyRing) -> None:
    with pytest.raises(AuthenticationError, match="Malformed Basic"):
        ring.check_bearer(f"Basic {SECRET}")


def test_rejects_an_empty_token(ring: KeyRing) -> None:
    with pytest.raises(AuthenticationError, match="Incorrect Authorization header"):
        ring.check_bearer("Bearer ")


@pytest.mark.parametrize("token", ["sk-unknown-key", SECRET + "x", SECRET[:-1], SECRET.upper()])
def test_rejects_an_unknown_key(ring: KeyRing, token: str) -> None:
    with pytest.raises(AuthenticationError, match="Incorrect API key"):
        ring.check_bearer(f"Bearer {token}")


def test_rejection_carries_the_401_status_and_code(ring: KeyRing) -> None:
    with pytest.raises(AuthenticationError) as info:
        ring.check_bearer("Bearer nope")
    response = to_response(info.value)
    error = orjson.loads(response.body)["error"]
    assert (response.status_code, error["code"]) == (401, "invalid_api_key")


def test_an_empty_keyring_is_falsy() -> None:
    assert not KeyRing([])


def test_a_keyring_of_empty_strings_is_falsy() -> None:
    assert not KeyRing(["", ""])


def test_a_keyring_with_a_key_is_truthy(ring: KeyRing) -> None:
    assert ring


@pytest.mark.parametrize("header", [f"Bearer {SECRET}", "Bearer ", "Bearer x", None])
def test_an_empty_keyring_rejects_everything(header: str | None) -> None:
    with pytest.raises(AuthenticationError):
        KeyRing([]).check_bearer(header)


def test_an_empty_keyring_rejects_an_empty_secret() -> None:
    with pytest.raises(AuthenticationError):
        KeyRing([""]).check("")


def test_stores_no_plaintext_key(ring: KeyRing) -> None:
    stored = repr(vars(ring))
    assert (SECRET in stored, OTHER in stored) == (False, False)
