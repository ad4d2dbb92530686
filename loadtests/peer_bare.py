"""The floor: a bare aiohttp proxy with no features, as a benchmark peer.

    python loadtests/peer_bare.py --port PORT --upstream http://127.0.0.1:ENGINE

It forwards ``POST /v1/chat/completions`` to ``--upstream`` unchanged (body and
content type; no auth, no routing, no accounting, no metrics, no access log) on one pooled
``aiohttp.ClientSession``, and relays the answer: a non-streaming body whole, a streaming
(SSE) body chunk by chunk as it arrives. An upstream that cannot be reached is a 502.
Whatever a gateway costs above this is the price of its features. Listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import aiohttp
import uvloop
from aiohttp import web

UPSTREAM = web.AppKey("upstream", str)
SESSION = web.AppKey("session", aiohttp.ClientSession)
TIMEOUT_S = 30.0


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """Relay one chat completion; the status and content type are the upstream's."""
    body = await request.read()
    session = request.app[SESSION]
    headers = {"content-type": request.headers.get("content-type", "application/json")}
    try:
        async with session.post(
            request.app[UPSTREAM] + "/v1/chat/completions", data=body, headers=headers
        ) as upstream:
            ctype = upstream.headers.get("content-type", "application/json")
            if not ctype.startswith("text/event-stream"):
                return web.Response(
                    status=upstream.status, body=await upstream.read(), content_type=None,
                    headers={"content-type": ctype},
                )  # fmt: skip
            resp = web.StreamResponse(status=upstream.status, headers={"content-type": ctype})
            await resp.prepare(request)
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp
    except aiohttp.ClientError as exc:
        return web.json_response(
            {"error": {"message": f"upstream: {exc}", "type": "bad_gateway"}}, status=502
        )


async def health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def build_app(upstream: str) -> web.Application:
    """The proxy application; its client session lives as long as the app."""
    app = web.Application()
    app[UPSTREAM] = upstream.rstrip("/")

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            app[SESSION] = session
            yield

    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/health", health)
    return app


def peer_args(doc: str) -> argparse.Namespace:
    """A peer's command line (``--port``, ``--upstream``), described by the first
    paragraph of its ``doc``; exits with a usage message on a bad option."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="engine base URL")
    return parser.parse_args()


def main() -> None:
    args = peer_args(__doc__)
    web.run_app(
        build_app(args.upstream), host="127.0.0.1", port=args.port, access_log=None,
        print=None, loop=uvloop.new_event_loop(),
    )  # fmt: skip


if __name__ == "__main__":
    main()
