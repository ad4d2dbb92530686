"""An httpx client for a running gateway's admin API, configured from the environment:
``SKYROUTE_ADMIN_URL`` (default ``http://127.0.0.1:$SKYROUTE_PORT``) and
``SKYROUTE_ADMIN_TOKEN``. Used by the operator subcommands."""

from __future__ import annotations

import os
import sys

import httpx


def admin_client() -> httpx.Client:
    """A client for the admin API; the caller closes it."""
    base = (
        os.environ.get("SKYROUTE_ADMIN_URL")
        or f"http://127.0.0.1:{os.environ.get('SKYROUTE_PORT', '8080')}"
    )
    token = os.environ.get("SKYROUTE_ADMIN_TOKEN", "")
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=None)


def failed(reply: httpx.Response) -> bool:
    """Print a non-2xx reply to stderr; True if it was one."""
    if reply.is_success:
        return False
    print(f"skyroute: {reply.status_code} {reply.text}", file=sys.stderr)
    return True
