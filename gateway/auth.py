"""The admin credential check. Held only as a SHA-256 digest, compared in constant time.

(Client API keys are checked by ``gateway.access`` against the key table.)
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Iterable

from base.auth_digest import digest_hex
from base.errors import AuthenticationError


def digest(secret: str) -> bytes:
    """SHA-256 of a secret; what skyroute stores instead of the secret."""
    return bytes.fromhex(digest_hex(secret))


class KeyRing:
    """The set of accepted credentials, stored hashed. Immutable after construction."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._digests = frozenset(digest(s) for s in secrets if s)

    def __bool__(self) -> bool:
        return bool(self._digests)

    def check_bearer(self, authorization: str | None) -> None:
        """Accept ``Bearer <key>`` for a known key, or HTTP Basic with the key as the
        password (so a browser can open the dashboard); raise AuthenticationError
        otherwise."""
        if not authorization:
            raise AuthenticationError(
                "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'."
            )
        scheme, _, token = authorization.partition(" ")
        scheme = scheme.lower()
        if scheme == "basic" and token:
            try:
                token = base64.b64decode(token.strip(), validate=True).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError) as exc:
                raise AuthenticationError("Malformed Basic credentials.") from exc
        elif scheme != "bearer" or not token:
            raise AuthenticationError("Incorrect Authorization header: expected 'Bearer <key>'.")
        self.check(token.strip())

    def check(self, secret: str) -> None:
        """Accept a known secret; raise AuthenticationError otherwise.

        Every stored digest is compared, each in constant time, so the time taken does
        not depend on which key (if any) matched.
        """
        candidate = digest(secret)
        ok = False
        for stored in self._digests:
            ok |= hmac.compare_digest(stored, candidate)
        if not ok:
            raise AuthenticationError("Incorrect API key provided.")
