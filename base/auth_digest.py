"""The one way skyroute turns a secret into what it stores: SHA-256."""

from __future__ import annotations

import hashlib


def digest_hex(secret: str) -> str:
    """Hex SHA-256 of ``secret`` (API keys are stored and looked up by it)."""
    return hashlib.sha256(secret.encode()).hexdigest()
