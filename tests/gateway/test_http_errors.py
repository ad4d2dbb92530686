"""to_response: every skyroute error becomes one OpenAI-shaped HTTP response."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.responses import Response

from base.errors import (
    AdapterError,
    AuthenticationError,
    InvalidRequest,
    ModelNotFound,
    NoFeasiblePool,
    PayloadTooLarge,
    PermissionDenied,
    PolicyError,
    PolicyProblem,
    RateLimited,
    RoutingError,
    SkyrouteError,
    TableError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
    UpstreamTimeout,
)
from gateway.http_errors import error_response, status_of, to_response


def _error(response: Response) -> dict[str, Any]:
    body = orjson.loads(bytes(response.body))
    # OpenAI's shape; an invalid policy adds the list of its problems beside it.
    assert set(body) - {"problems"} == {"error"}
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("exc", "status", "error_type", "code", "param"),
    [
        (InvalidRequest("bad", param="messages"), 400, "invalid_request_error", None, "messages"),
        (PayloadTooLarge("big"), 413, "invalid_request_error", "payload_too_large", None),
        (AuthenticationError("who"), 401, "authentication_error", "invalid_api_key", None),
        (PermissionDenied("no"), 403, "permission_error", "permission_denied", None),
        (ModelNotFound("gpt-x"), 404, "invalid_request_error", "model_not_found", "model"),
        (RateLimited("slow", retry_after_s=2), 429, "requests", "rate_limit_exceeded", None),
        (NoFeasiblePool("slo"), 503, "service_unavailable", "no_feasible_pool", None),
        (RoutingError("none"), 503, "service_unavailable", "no_available_pool", None),
        (UpstreamTimeout("late"), 504, "upstream_error", "upstream_timeout", None),
        (UpstreamError("down"), 502, "upstream_error", "upstream_error", None),
        (UpstreamConnectError("refused"), 502, "upstream_error", "upstream_error", None),
        (UpstreamStatusError("5xx", status=503), 502, "upstream_error", "upstream_error", None),
        (UpstreamStreamError("cut"), 502, "upstream_error", "upstream_error", None),
        (
            PolicyError("p.yaml", [PolicyProblem("pools", 3, "bad")]),
            400,
            "invalid_request_error",
            "invalid_policy",
            None,
        ),
        (TableError("redis"), 503, "service_unavailable", "tables_unavailable", None),
        (AdapterError("cloud"), 500, "server_error", None, None),
        (SkyrouteError("?"), 500, "server_error", None, None),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None,
)
def test_each_error_maps_to_its_status_type_code_and_param(
    exc: SkyrouteError, status: int, error_type: str, code: str | None, param: str | None
) -> None:
    response = to_response(exc)
    error = _error(response)
    assert (response.status_code, error["type"], error["code"], error["param"]) == (
        status,
        error_type,
        code,
        param,
    )


@pytest.mark.parametrize(
    "exc",
    [InvalidRequest("field x is wrong"), NoFeasiblePool("no pool meets it")],
)
def test_the_message_is_the_errors_own(exc: SkyrouteError) -> None:
    assert _error(to_response(exc))["message"] == str(exc)


@pytest.mark.parametrize(
    "exc",
    [
        UpstreamTimeout(
            "http://10.0.3.7:8000/v1/chat/completions: no response headers within 60.0s"
        ),
        UpstreamConnectError("cannot reach http://10.0.3.7:8000/v1/chat/completions: refused"),
        UpstreamStatusError("pool p answered 503 at http://engine-7.internal:8000", status=503),
        UpstreamStreamError("engine closed the connection mid-body (10.0.3.7)"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_upstream_error_never_shows_the_engines_address(exc: SkyrouteError) -> None:
    exc.pool_id = "aws:us-east-1:h100"  # type: ignore[attr-defined]
    message = _error(to_response(exc))["message"]
    assert "10.0.3.7" not in message and "internal" not in message and "http" not in message
    assert message.startswith("pool aws:us-east-1:h100: ") and "engine" in message


def test_an_unmapped_error_does_not_leak_its_message() -> None:
    assert _error(to_response(AdapterError("asg at 10.0.0.5 refused")))["message"] == (
        "internal error"
    )


def test_a_table_error_does_not_leak_its_message() -> None:
    assert "10.0.0.5" not in _error(to_response(TableError("redis at 10.0.0.5 refused")))["message"]


def test_responses_are_json() -> None:
    assert to_response(InvalidRequest("x")).media_type == "application/json"


def test_a_rate_limit_code_override_is_kept() -> None:
    exc = RateLimited("budget", retry_after_s=1, code="budget_exceeded")
    assert _error(to_response(exc))["code"] == "budget_exceeded"


@pytest.mark.parametrize(
    ("retry_after_s", "header"),
    [(0.0, "1"), (0.2, "1"), (1.0, "1"), (1.01, "2"), (2.5, "3"), (30.0, "30"), (-4.0, "1")],
)
def test_rate_limited_sets_retry_after_rounded_up_to_at_least_one(
    retry_after_s: float, header: str
) -> None:
    response = to_response(RateLimited("slow", retry_after_s=retry_after_s))
    assert response.headers["retry-after"] == header


def test_other_errors_set_no_retry_after() -> None:
    assert "retry-after" not in to_response(UpstreamTimeout("late")).headers


def test_error_response_passes_extra_headers() -> None:
    response = error_response(401, "no", headers={"WWW-Authenticate": "Bearer"})
    assert response.headers["www-authenticate"] == "Bearer"


def test_a_subclass_without_a_row_answers_like_its_nearest_parent() -> None:
    class SlowFirstByte(UpstreamTimeout):
        pass

    response = to_response(SlowFirstByte("late"))
    assert (response.status_code, _error(response)["code"]) == (504, "upstream_timeout")
    assert status_of(SlowFirstByte("late")) == 504


def test_status_of_is_what_the_client_gets() -> None:
    for exc in (TableError("x"), RateLimited("r", retry_after_s=1), AdapterError("a")):
        assert status_of(exc) == to_response(exc).status_code


def test_a_policy_error_carries_every_problem() -> None:
    exc = PolicyError("p.yaml", [PolicyProblem("pools[0].id", 4, "duplicate pool id 'a'")])
    body = orjson.loads(to_response(exc).body)
    assert body["problems"] == [
        {"path": "pools[0].id", "line": 4, "message": "duplicate pool id 'a'"}
    ]
    assert body["error"]["code"] == "invalid_policy"


def test_the_error_tree_knows_nothing_of_http() -> None:
    import base.errors as errors_module  # noqa: PLC0415

    for cls in vars(errors_module).values():
        if isinstance(cls, type) and issubclass(cls, SkyrouteError):
            assert "status" not in vars(cls) and "error_type" not in vars(cls), cls
