"""The OpenAPI document describes the OpenAI routes, although they bypass FastAPI."""

from __future__ import annotations

from pathlib import Path

from gateway.app import create_app
from gateway.settings import GatewaySettings
from skyroute.demo import demo_policy_path


def test_openapi_documents_every_openai_route_with_its_body_and_errors(
    tmp_path: Path, redis_url: str
) -> None:
    app = create_app(GatewaySettings(policy=demo_policy_path(), redis_url=redis_url))
    schema = app.openapi()
    paths = schema["paths"]
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        post = paths[path]["post"]
        assert "requestBody" in post
        assert {"200", "400", "401", "404", "413"} <= set(post["responses"])
    assert "get" in paths["/v1/models"]
    assert "/admin/policy/reload" in paths
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
