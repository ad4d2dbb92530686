"""The one place where skyroute errors become HTTP responses, in OpenAI's error shape:

{"error": {"message": str, "type": str, "param": str | null, "code": str | null}}
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from base.errors import (
    AuthenticationError,
    Conflict,
    HeadersTooLarge,
    ModelNotFound,
    NoFeasiblePool,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    PolicyError,
    RateLimited,
    RequestError,
    RoutingError,
    SkyrouteError,
    StoreError,
    TableError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamInvalidAnswer,
    UpstreamStatusError,
    UpstreamStreamError,
    UpstreamTimeout,
)

logger = logging.getLogger(__name__)

_HTTP_TYPES = {401: "authentication_error", 403: "permission_error", 404: "invalid_request_error"}


@dataclass(frozen=True)
class HttpError:
    """How one class of skyroute error is answered: HTTP status, OpenAI error type and
    the default error code (an error's own ``code`` wins)."""

    status: int
    error_type: str
    code: str | None = None


# The one table from the error tree to HTTP. An error takes the entry of the nearest
# class in its ``__mro__`` (as Starlette finds exception handlers), so a new subclass
# answers like its parent until it gets a row of its own.
TABLE: Mapping[type[SkyrouteError], HttpError] = {
    RequestError: HttpError(400, "invalid_request_error"),
    PayloadTooLarge: HttpError(413, "invalid_request_error", "payload_too_large"),
    HeadersTooLarge: HttpError(431, "invalid_request_error", "headers_too_large"),
    AuthenticationError: HttpError(401, "authentication_error", "invalid_api_key"),
    PermissionDenied: HttpError(403, "permission_error", "permission_denied"),
    NotFound: HttpError(404, "invalid_request_error", "not_found"),
    Conflict: HttpError(409, "invalid_request_error", "conflict"),
    ModelNotFound: HttpError(404, "invalid_request_error", "model_not_found"),
    RateLimited: HttpError(429, "requests", "rate_limit_exceeded"),
    RoutingError: HttpError(503, "service_unavailable", "no_available_pool"),
    NoFeasiblePool: HttpError(503, "service_unavailable", "no_feasible_pool"),
    UpstreamError: HttpError(502, "upstream_error", "upstream_error"),
    UpstreamTimeout: HttpError(504, "upstream_error", "upstream_timeout"),
    TableError: HttpError(503, "service_unavailable", "tables_unavailable"),
    StoreError: HttpError(503, "service_unavailable", "store_unavailable"),
    PolicyError: HttpError(400, "invalid_request_error", "invalid_policy"),
    SkyrouteError: HttpError(500, "server_error"),
}

# What a client reads for errors whose own message may name internal hosts or URLs
# (engine addresses, Redis): a fixed text, or one naming only the pool.
_TABLES_DOWN = "the live tables are unreachable; retry"
_UPSTREAM_TEXT: Mapping[type[UpstreamError], str] = {
    UpstreamConnectError: "could not connect to the engine",
    UpstreamTimeout: "the engine did not answer within its deadline",
    UpstreamStatusError: "the engine answered with a server error",
    UpstreamInvalidAnswer: "the engine answered with something that is not an OpenAI answer",
    UpstreamStreamError: "the engine's stream broke",
}


def client_message(exc: SkyrouteError) -> str:
    """The message a client may read for ``exc``: never an internal URL, host or stack."""
    if isinstance(exc, TableError):
        return _TABLES_DOWN
    if isinstance(exc, UpstreamError):
        text = next(
            (t for cls, t in _UPSTREAM_TEXT.items() if isinstance(exc, cls)), "the engine failed"
        )
        return f"pool {exc.pool_id}: {text}" if exc.pool_id else text
    return exc.message if isinstance(exc, RequestError) else str(exc)


def http_error(exc: SkyrouteError) -> HttpError:
    """The table entry for ``exc``: its nearest class that has one. Total."""
    for cls in type(exc).__mro__:
        entry = TABLE.get(cls)
        if entry is not None:
            return entry
    return TABLE[SkyrouteError]


def status_of(exc: SkyrouteError) -> int:
    """The HTTP status a client gets for ``exc`` (for logs and metrics)."""
    return http_error(exc).status


def code_of(exc: SkyrouteError) -> str:
    """The error code a client gets for ``exc`` (its class name if it has none)."""
    return getattr(exc, "code", None) or http_error(exc).code or type(exc).__name__


def error_response(
    status: int,
    message: str,
    *,
    error_type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, object] | None = None,
) -> Response:
    """An OpenAI-shaped error response; ``extra`` adds top-level fields beside ``error``."""
    body: dict[str, object] = {
        "error": {"message": message, "type": error_type, "param": param, "code": code}
    }
    if extra:
        body.update(extra)
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


def to_response(exc: SkyrouteError, headers: Mapping[str, str] | None = None) -> Response:
    """Map one skyroute error to its HTTP response. Total: every error gets an answer."""
    entry = http_error(exc)
    if entry is TABLE[SkyrouteError]:  # no closer row: nothing the client should read
        logger.error("unmapped skyroute error: %s", type(exc).__name__)
        return error_response(500, "internal error", error_type="server_error")
    message = client_message(exc)
    out_headers = dict(headers or {})
    if isinstance(exc, RateLimited):
        out_headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    extra: dict[str, object] | None = None
    if isinstance(exc, PolicyError):
        extra = {"problems": [
            {"path": p.path, "line": p.line, "message": p.message} for p in exc.problems
        ]}  # fmt: skip
    return error_response(
        entry.status,
        message,
        error_type=entry.error_type,
        param=getattr(exc, "param", None),
        code=getattr(exc, "code", None) or entry.code,
        headers=out_headers or None,
        extra=extra,
    )


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
