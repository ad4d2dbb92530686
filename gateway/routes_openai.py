"""The OpenAI-compatible surface: chat and text completions, embeddings, models.

Handlers take the raw ``Request`` and parse the body themselves (see
``gateway.openai_request``); the schemas in ``gateway.openapi_schemas`` document it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from base.errors import (
    HeadersTooLarge,
    InvalidRequest,
    ModelNotFound,
    PayloadTooLarge,
    PermissionDenied,
    SkyrouteError,
)
from base.log_fields import log_fields
from gateway import http_errors
from gateway.access import Caller, bearer_digest
from gateway.context import Gateway
from gateway.fan_out import fan_out
from gateway.finish import RequestContext, access_log
from gateway.openai_request import Operation, ParsedRequest, parse_request
from gateway.replica_attempts import SESSION_HEADER
from gateway.tracing import NOOP
from router.scoring import RouteRequest

SLO_HEADER = "x-skyroute-slo"
CLIENT_REGION_HEADER = "x-skyroute-client-region"
# The same names as ASGI gives them (lowercase bytes), for ``read_headers``' map.
_SLO = SLO_HEADER.encode()
_CLIENT_REGION = CLIENT_REGION_HEADER.encode()
_SESSION = SESSION_HEADER.encode()
_MODEL_KINDS = {
    Operation.CHAT: "chat",
    Operation.COMPLETION: "chat",
    Operation.EMBEDDING: "embedding",
}


async def read_body(request: Request, limit: int, declared: bytes | None = None) -> bytes:
    """The request body, refusing more than ``limit`` bytes (PayloadTooLarge) without
    reading the rest; ``declared`` is its Content-Length header, if any. Raises
    ClientDisconnect if the client leaves first. Reads the ASGI messages itself:
    Starlette's ``Request.stream`` is an async generator, which cost more than the read
    for the one message a typical body comes in. The body can be read once."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"Request body of {declared.decode()} bytes is over the {limit}-byte limit."
        )
    size = 0
    parts: list[bytes] = []
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body is over the {limit}-byte limit.")
        parts.append(chunk)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def read_headers(request: Request, limit: int) -> dict[bytes, bytes]:
    """The request's headers by name (lowercase bytes, as ASGI gives them), the first
    value of each as Starlette's ``Headers.get`` returns it. Raises HeadersTooLarge if
    they are over ``limit`` bytes in all. One pass over the raw list: ``Headers.get``
    scans it again for every name asked, and raises and catches inside for each one
    that is absent (most of the six a request asks for)."""
    size = 0
    found: dict[bytes, bytes] = {}
    for name, value in request.scope["headers"]:
        size += len(name) + len(value)
        if name not in found:
            found[name] = value
    if size > limit:
        raise HeadersTooLarge(f"Request headers of {size} bytes are over the {limit}-byte limit.")
    return found


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None


def estimate_tokens(gw: Gateway, parsed: ParsedRequest) -> int:
    """The request's size, computed once: prompt + requested (or typical) output tokens.
    Admission charges it against TPM and routing prices the request by it."""
    spec = gw.state.policy.policy.models.get(parsed.model)
    expected = spec.expected_output_tokens if spec else 0
    return parsed.prompt_tokens + parsed.n * (parsed.max_tokens or expected)


def route_request(
    gw: Gateway,
    parsed: ParsedRequest,
    headers: Mapping[bytes, bytes],
    caller: Caller,
    est_tokens: int,
) -> RouteRequest:
    """Resolve model, SLO class, client region and the tenant's rules. ``headers`` are
    the request's (``read_headers``); ``est_tokens`` is the request's size as admission
    charged it (``estimate_tokens``): routing prices it by the same number.

    Raises ModelNotFound, PermissionDenied (model not allowed for the tenant) or
    InvalidRequest.
    """
    policy = gw.state.policy.policy
    spec = policy.models.get(parsed.model)
    if spec is None:
        raise ModelNotFound(parsed.model)
    tenant = caller.spec
    if not tenant.allows_model(parsed.model):
        raise PermissionDenied(f"Tenant {caller.tenant} may not use model {parsed.model!r}.")
    if spec.kind != _MODEL_KINDS[parsed.operation]:
        raise InvalidRequest(f"model {parsed.model!r} is a {spec.kind} model", param="model")
    slo = _text(headers.get(_SLO)) or tenant.default_slo or spec.default_slo
    if slo not in policy.slo_classes:
        raise InvalidRequest(
            f"unknown SLO class {slo!r}; known: {sorted(policy.slo_classes)}", param=SLO_HEADER
        )
    region = (
        _text(headers.get(_CLIENT_REGION))
        or tenant.client_region
        or policy.routing.default_client_region
    )
    if region not in policy.client_regions:
        raise InvalidRequest(f"unknown client region {region!r}", param=CLIENT_REGION_HEADER)
    cap = min(spec.max_output_tokens, tenant.max_tokens or spec.max_output_tokens)
    if parsed.max_tokens is not None and parsed.max_tokens > cap:
        raise InvalidRequest(
            f"max_tokens {parsed.max_tokens} is over the limit of {cap}", param="max_tokens"
        )
    if parsed.max_tokens is None and tenant.max_tokens is not None and spec.kind == "chat":
        # A tenant cap must bound what the engine generates, not just what is asked.
        parsed.payload["max_tokens"] = tenant.max_tokens
    if parsed.n > tenant.max_n:
        raise InvalidRequest(
            f"n={parsed.n} is over the tenant's limit of {tenant.max_n}", param="n"
        )
    return RouteRequest(
        model=parsed.model,
        prompt_tokens=parsed.prompt_tokens,
        max_output_tokens=parsed.max_tokens,
        slo_class=slo,
        client_region=region,
        ramp_draw=random.random(),
        est_tokens=est_tokens,
        allowed_regions=frozenset(tenant.allowed_regions)
        if tenant.allowed_regions is not None
        else None,
    )


def openai_routes(gw: Gateway) -> list[Route]:
    """Routes under ``/v1``; each needs ``Authorization: Bearer <api key>``.

    Plain Starlette routes, not FastAPI ones: FastAPI's per-request dependency solving
    (query parsing, cookies) cost about as much CPU as the whole routing decision. The
    OpenAPI document describes them through ``gateway.openapi_schemas``.
    """

    def refused(request: Request, exc: SkyrouteError, received: float) -> None:
        # A request refused before routing still gets its metric and its access line.
        code = http_errors.code_of(exc)
        gw.metrics.rejected.labels(code=code).inc()
        if access_log.isEnabledFor(logging.INFO):
            fields = {
                "request_id": (request.headers.get("x-request-id") or "")[:128] or None,
                "status": code,
                "http_status": http_errors.status_of(exc),
                "latency_ms": round((time.perf_counter() - received) * 1000.0, 3),
            }
            log_fields(access_log, logging.INFO, "request", fields)

    async def handle(request: Request, operation: Operation, path: str) -> Response:
        received = time.perf_counter()
        trace = gw.tracing.start(
            f"{operation.value}", request.headers, {"gen_ai.operation.name": operation.value}
        ) if gw.tracing.enabled else NOOP  # fmt: skip
        try:
            headers = read_headers(request, gw.settings.max_header_bytes)
            key = bearer_digest(_text(headers.get(b"authorization")))
            body = await read_body(
                request, gw.settings.max_body_bytes, headers.get(b"content-length")
            )
            parsed = parse_request(body, operation)
            est_tokens = estimate_tokens(gw, parsed)
            admission = trace.child("admission") if trace is not NOOP else NOOP
            try:
                caller = await gw.access.admit(key, est_tokens)
            except SkyrouteError as exc:
                admission.end(exc)
                raise
            admission.set({"skyroute.tenant": caller.tenant})
            admission.end()
            route = route_request(gw, parsed, headers, caller, est_tokens)
            if trace is not NOOP:
                trace.rename(f"{operation.value} {parsed.model}")  # GenAI span naming
                trace.set(
                    {
                        "gen_ai.request.model": parsed.model,
                        "skyroute.slo_class": route.slo_class,
                        "skyroute.client_region": route.client_region,
                        "skyroute.tenant": caller.tenant,
                    }
                )
        except SkyrouteError as exc:
            trace.end(exc)
            refused(request, exc, received)
            raise
        # 128 random bits as uuid4 has, without a UUID object or a getrandom syscall per
        # request: an id names a request, it guards nothing (the Mersenne Twister is
        # seeded from the OS at start and again in a forked child).
        request_id = (_text(headers.get(b"x-request-id")) or f"{random.getrandbits(128):032x}")[
            :128
        ]
        upstream_headers = {"content-type": "application/json", "x-request-id": request_id}
        # Capped like the request id: the session map keeps up to 100k of them.
        session_id = (_text(headers.get(_SESSION)) or "")[:128] or None
        ctx = RequestContext(caller.tenant, request_id, est_tokens, received, trace, session_id)
        assert gw.forwarder is not None, "the app's lifespan has not started"
        # From here on the forwarder ends the trace, with the request (streams included).
        if parsed.n > 1 and parsed.model in gw.state.policy.fan_out_n:
            response = await fan_out(gw.forwarder, parsed, route, path, upstream_headers, ctx)
            response.headers["x-request-id"] = request_id
            return response
        # The forwarder's answers carry the request id from their construction.
        return await gw.forwarder.forward(parsed, route, path, upstream_headers, ctx)

    async def chat_completions(request: Request) -> Response:
        return await handle(request, Operation.CHAT, "/v1/chat/completions")

    async def completions(request: Request) -> Response:
        return await handle(request, Operation.COMPLETION, "/v1/completions")

    async def embeddings(request: Request) -> Response:
        return await handle(request, Operation.EMBEDDING, "/v1/embeddings")

    async def admit_reader(request: Request) -> Caller:
        # The model listings: the headers' limit and the key, no tokens charged.
        headers = read_headers(request, gw.settings.max_header_bytes)
        return await gw.access.admit(bearer_digest(_text(headers.get(b"authorization"))), 0)

    async def models(request: Request) -> Response:
        caller = await admit_reader(request)
        data = [
            _model_card(name)
            for name in gw.state.policy.policy.models
            if caller.spec.allows_model(name)
        ]
        return Response(
            orjson.dumps({"object": "list", "data": data}), media_type="application/json"
        )

    async def model(request: Request) -> Response:
        caller = await admit_reader(request)
        name = request.path_params["model"]
        if name not in gw.state.policy.policy.models or not caller.spec.allows_model(name):
            raise ModelNotFound(name)  # a model the caller may not use does not exist for it
        return Response(orjson.dumps(_model_card(name)), media_type="application/json")

    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
    ]


def _model_card(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "skyroute"}
