"""The live dashboard page at ``/dashboard``, behind the admin credential.

One static HTML document (``static/dashboard.html``) whose inline script polls
``/admin/dashboard/data`` every second and ``/admin/dashboard/fleet`` (replicas per pool
and the fleet's cost rate over time, ``gateway.fleet_history``) every few seconds, and
draws pools, recent decisions, spend, traffic share, replicas and cost with DOM text
nodes and inline SVG: no build step, nothing fetched from elsewhere. A browser may log
in with HTTP Basic (any user name, the admin token as the password); it then sends the
same credentials with the script's same-origin requests.
"""

from __future__ import annotations

import secrets
from importlib.resources import files

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from base.errors import AuthenticationError
from gateway.context import Gateway
from gateway.fleet_history import FleetHistory
from gateway.http_errors import to_response

_NONCE_MARK = b"__CSP_NONCE__"
_CHALLENGE = 'Basic realm="skyroute"'


def _security_headers(nonce: str) -> dict[str, str]:
    # Only the page's own nonce-tagged script and style run; it may talk to its origin only.
    csp = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return {
        "Content-Security-Policy": csp,
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }


def dashboard_router(gw: Gateway, history: FleetHistory) -> APIRouter:
    """Route ``GET /dashboard``: 200 with the page for the admin credential (Bearer, or
    Basic with the token as password); 401 with a Basic challenge otherwise, so that a
    browser asks for it. The page is read once here: a missing file fails at start-up.
    And ``GET /admin/dashboard/fleet``: ``history``'s samples (admin credential)."""
    page = files("gateway").joinpath("static", "dashboard.html").read_bytes()
    router = APIRouter(tags=["ops"])

    @router.get("/dashboard", include_in_schema=False)
    async def dashboard(request: Request) -> Response:
        try:
            gw.admin_keys.check_bearer(request.headers.get("authorization"))
        except AuthenticationError as exc:
            return to_response(exc, headers={"WWW-Authenticate": _CHALLENGE})
        nonce = secrets.token_urlsafe(16)
        return Response(
            page.replace(_NONCE_MARK, nonce.encode()),
            media_type="text/html; charset=utf-8",
            headers=_security_headers(nonce),
        )

    @router.get("/admin/dashboard/fleet")
    async def fleet(request: Request, since_s: float = 0.0) -> Response:
        """The fleet over time: ``samples`` taken after ``since_s`` (unix s), oldest
        first, each with ``t`` (unix s), ``ready`` and ``target`` replicas per pool,
        ``usd_per_hour`` (ready replicas at their price; also ``_by_provider``) and the
        ``unpriced`` pools; ``every_s`` is the sampling period. 401 without the admin
        credential."""
        gw.admin_keys.check_bearer(request.headers.get("authorization"))
        body = {"every_s": history.every_s, "samples": history.samples(since_s)}
        return Response(orjson.dumps(body), media_type="application/json")

    return router
