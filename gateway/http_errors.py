"""The one place where skyroute errors become HTTP responses, in OpenAI's error shape:

{"error": {"message": str, "type": str, "param": str | null, "code": str | null}}
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from base.errors import (
    NoFeasiblePool,
    PolicyError,
    RateLimited,
    RequestError,
    RoutingError,
    SkyrouteError,
    TableError,
    UpstreamError,
    UpstreamTimeout,
)

logger = logging.getLogger(__name__)

_HTTP_TYPES = {401: "authentication_error", 403: "permission_error", 404: "invalid_request_error"}


def error_response(
    status: int,
    message: str,
    *,
    error_type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """An OpenAI-shaped error response."""
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


def to_response(exc: SkyrouteError) -> Response:
    """Map one skyroute error to its HTTP response. Total: every error gets an answer."""
    if isinstance(exc, RateLimited):
        retry = str(max(1, math.ceil(exc.retry_after_s)))
        return error_response(
            exc.status,
            exc.message,
            error_type=exc.error_type,
            code=exc.code,
            headers={"Retry-After": retry},
        )
    if isinstance(exc, RequestError):
        return error_response(
            exc.status, exc.message, error_type=exc.error_type, param=exc.param, code=exc.code
        )
    if isinstance(exc, NoFeasiblePool):
        return error_response(
            503, str(exc), error_type="service_unavailable", code="no_feasible_pool"
        )
    if isinstance(exc, RoutingError):
        return error_response(
            503, str(exc), error_type="service_unavailable", code="no_available_pool"
        )
    if isinstance(exc, UpstreamTimeout):
        return error_response(504, str(exc), error_type="upstream_error", code="upstream_timeout")
    if isinstance(exc, UpstreamError):
        return error_response(502, str(exc), error_type="upstream_error", code="upstream_error")
    if isinstance(exc, TableError):
        return error_response(
            503,
            "the live tables are unreachable; retry",
            error_type="service_unavailable",
            code="tables_unavailable",
        )
    if isinstance(exc, PolicyError):
        return error_response(400, str(exc), code="invalid_policy")
    logger.error("unmapped skyroute error: %s", type(exc).__name__)
    return error_response(500, "internal error", error_type="server_error")


def install(app: FastAPI) -> None:
    """Register the handlers that turn every error into OpenAI's shape."""

    async def on_skyroute(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, SkyrouteError)
        return to_response(exc)

    async def on_http(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        error_type = _HTTP_TYPES.get(exc.status_code, "invalid_request_error")
        return error_response(
            exc.status_code, str(exc.detail), error_type=error_type, headers=exc.headers
        )

    async def on_validation(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        return error_response(
            400, str(first.get("msg", "invalid request")), param=".".join(loc) or None
        )

    async def on_unexpected(_: Request, exc: Exception) -> Response:
        logger.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal error", error_type="server_error")

    app.add_exception_handler(SkyrouteError, on_skyroute)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(Exception, on_unexpected)
