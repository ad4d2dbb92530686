"""The live dashboard page at ``/dashboard``, behind the admin credential.

One static HTML document (``static/dashboard.html``) whose inline script polls
``/admin/dashboard/data`` every second and draws pools, recent decisions, spend and
traffic share with DOM text nodes and inline SVG: no build step, nothing fetched from
elsewhere. A browser may log in with HTTP Basic (any user name, the admin token as the
password); it then sends the same credentials with the script's same-origin requests.
"""

from __future__ import annotations

import secrets
from importlib.resources import files

from fastapi import APIRouter, Request
from starlette.responses import Response

from base.errors import AuthenticationError
from gateway.context import Gateway
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


def dashboard_router(gw: Gateway) -> APIRouter:
    """Route ``GET /dashboard``: 200 with the page for the admin credential (Bearer, or
    Basic with the token as password); 401 with a Basic challenge otherwise, so that a
    browser asks for it. The page is read once here: a missing file fails at start-up."""
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

    return router
