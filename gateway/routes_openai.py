"""The OpenAI-compatible surface: chat and text completions, embeddings, models.

Handlers take the raw ``Request`` and parse the body themselves (see
``gateway.openai_request``); the schemas in ``gateway.openapi_schemas`` document it.
"""

from __future__ import annotations

import random
import time
import uuid

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.context import Gateway
from gateway.openai_request import Operation, ParsedRequest, parse_request
from router.errors import InvalidRequest, ModelNotFound, PayloadTooLarge
from router.scoring import RouteRequest

SLO_HEADER = "x-skyroute-slo"
CLIENT_REGION_HEADER = "x-skyroute-client-region"
_MODEL_KINDS = {
    Operation.CHAT: "chat",
    Operation.COMPLETION: "chat",
    Operation.EMBEDDING: "embedding",
}


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes (PayloadTooLarge) without
    reading the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request body of {declared} bytes is over the {limit}-byte limit.")
    size = 0
    parts: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body is over the {limit}-byte limit.")
        parts.append(chunk)
    return b"".join(parts)


def route_request(gw: Gateway, parsed: ParsedRequest, request: Request) -> RouteRequest:
    """Resolve model, SLO class and client region. Raises ModelNotFound or InvalidRequest."""
    policy = gw.state.policy.policy
    spec = policy.models.get(parsed.model)
    if spec is None:
        raise ModelNotFound(parsed.model)
    if spec.kind != _MODEL_KINDS[parsed.operation]:
        raise InvalidRequest(f"model {parsed.model!r} is a {spec.kind} model", param="model")
    slo = request.headers.get(SLO_HEADER) or spec.default_slo
    if slo not in policy.slo_classes:
        raise InvalidRequest(
            f"unknown SLO class {slo!r}; known: {sorted(policy.slo_classes)}", param=SLO_HEADER
        )
    region = request.headers.get(CLIENT_REGION_HEADER) or policy.routing.default_client_region
    if region not in policy.client_regions:
        raise InvalidRequest(f"unknown client region {region!r}", param=CLIENT_REGION_HEADER)
    if parsed.max_tokens is not None and parsed.max_tokens > spec.max_output_tokens:
        raise InvalidRequest(
            f"max_tokens {parsed.max_tokens} is over the model's limit of {spec.max_output_tokens}",
            param="max_tokens",
        )
    return RouteRequest(
        model=parsed.model,
        prompt_tokens=parsed.prompt_tokens,
        max_output_tokens=parsed.max_tokens,
        slo_class=slo,
        client_region=region,
        ramp_draw=random.random(),
    )


def openai_routes(gw: Gateway) -> list[Route]:
    """Routes under ``/v1``; each needs ``Authorization: Bearer <api key>``.

    Plain Starlette routes, not FastAPI ones: FastAPI's per-request dependency solving
    (query parsing, cookies) cost about as much CPU as the whole routing decision. The
    OpenAPI document describes them through ``gateway.openapi_schemas``.
    """

    async def handle(request: Request, operation: Operation, path: str) -> Response:
        received = time.perf_counter()
        gw.client_keys.check_bearer(request.headers.get("authorization"))
        body = await read_body(request, gw.settings.max_body_bytes)
        parsed = parse_request(body, operation)
        route = route_request(gw, parsed, request)
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        upstream_headers = {"content-type": "application/json", "x-request-id": request_id[:128]}
        assert gw.forwarder is not None, "the app's lifespan has not started"
        response = await gw.forwarder.forward(parsed, route, path, upstream_headers, received)
        response.headers["x-request-id"] = request_id[:128]
        return response

    async def chat_completions(request: Request) -> Response:
        return await handle(request, Operation.CHAT, "/v1/chat/completions")

    async def completions(request: Request) -> Response:
        return await handle(request, Operation.COMPLETION, "/v1/completions")

    async def embeddings(request: Request) -> Response:
        return await handle(request, Operation.EMBEDDING, "/v1/embeddings")

    async def models(request: Request) -> Response:
        gw.client_keys.check_bearer(request.headers.get("authorization"))
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "skyroute"}
            for name in gw.state.policy.policy.models
        ]
        return Response(
            orjson.dumps({"object": "list", "data": data}), media_type="application/json"
        )

    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
    ]
