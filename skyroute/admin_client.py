"""An httpx client for a running gateway's admin API, used by the operator subcommands.

The gateway's URL and the admin credential come from the environment or the CLI context
(:mod:`skyroute.context`). Every call has a timeout; a gateway that cannot be reached or
refuses the credential is a one-line :class:`~base.errors.CommandError` saying what to do.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from base.errors import CommandError
from skyroute.context import admin_token, gateway_url

# Connect fast; a drain with --wait sets its own, longer read timeout per call.
TIMEOUT = httpx.Timeout(10.0, connect=3.0)


@contextmanager
def admin_client() -> Iterator[httpx.Client]:
    """A client for the admin API. Transport failures become CommandError."""
    base = gateway_url()
    headers = {"Authorization": f"Bearer {admin_token()}"}
    with httpx.Client(base_url=base, headers=headers, timeout=TIMEOUT) as client:
        try:
            yield client
        except httpx.TimeoutException as exc:
            raise CommandError(f"the gateway at {base} did not answer in time ({exc})") from exc
        except httpx.TransportError as exc:
            raise CommandError(
                f"cannot reach the gateway at {base} ({exc}): is it running? "
                "Start `skyroute demo`, or set SKYROUTE_ADMIN_URL to your gateway"
            ) from exc


def failed(reply: httpx.Response) -> bool:
    """Print a non-2xx reply to stderr as one line; True if it was one."""
    if reply.is_success:
        return False
    if reply.status_code == 401:
        print(
            "skyroute: the gateway refused the admin credential (401): check "
            "SKYROUTE_ADMIN_TOKEN or the context's admin-token file",
            file=sys.stderr,
        )
        return True
    try:
        detail = reply.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        detail = reply.text.strip().replace("\n", " ")[:300]
    print(f"skyroute: {reply.status_code} {detail}", file=sys.stderr)
    return True
