"""Routes served ahead of FastAPI's stack keep FastAPI's behaviour for errors and methods."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from base.errors import InvalidRequest
from gateway import http_errors
from gateway.fast_paths import GatewayApp

calls: list[str] = []


async def ok(request: Request) -> Response:
    calls.append(request.url.path)
    return Response(b'{"ok": true}', media_type="application/json")


async def refuses(_: Request) -> Response:
    raise InvalidRequest("bad field", param="messages")


async def crashes(_: Request) -> Response:
    raise RuntimeError("bug")


def make_app() -> GatewayApp:
    app = GatewayApp()
    http_errors.install(app)
    routes = [
        Route("/v1/ok", ok, methods=["POST"]),
        Route("/v1/refuses", refuses, methods=["POST"]),
        Route("/v1/crashes", crashes, methods=["POST"]),
    ]
    app.router.routes.extend(routes)
    app.add_fast_routes(routes)

    @app.get("/slow")
    async def slow() -> dict[str, str]:
        return {"via": "fastapi"}

    return app


def test_fast_route_answers() -> None:
    calls.clear()
    with TestClient(make_app()) as client:
        resp = client.post("/v1/ok")
    assert resp.status_code == 200
    assert resp.json() == {"ok": True}
    assert calls == ["/v1/ok"]


def test_skyroute_error_is_openai_shaped() -> None:
    with TestClient(make_app()) as client:
        resp = client.post("/v1/refuses")
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "messages"
    assert resp.json()["error"]["message"] == "bad field"


def test_unexpected_error_is_a_500_and_not_raised() -> None:
    with TestClient(make_app(), raise_server_exceptions=False) as client:
        resp = client.post("/v1/crashes")
    assert resp.status_code == 500
    assert resp.json()["error"]["type"] == "server_error"
    assert "bug" not in resp.text


def test_other_methods_and_paths_go_through_fastapi() -> None:
    with TestClient(make_app()) as client:
        wrong_method = client.get("/v1/ok")
        other = client.get("/slow")
        missing = client.post("/v1/nope")
    assert wrong_method.status_code == 405
    assert "error" in wrong_method.json()
    assert other.json() == {"via": "fastapi"}
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "invalid_request_error"
