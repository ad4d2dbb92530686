"""The ASGI floor: the bare proxy of ``peer_bare.py`` behind uvicorn instead of aiohttp's
server, as a benchmark peer.

    python loadtests/peer_bare_asgi.py --port PORT --upstream http://127.0.0.1:ENGINE

Same work as ``peer_bare.py`` (forward ``POST /v1/chat/completions`` unchanged on one
pooled ``aiohttp.ClientSession``; relay a non-streaming body whole and SSE chunk by chunk;
502 if the upstream cannot be reached), but served by the front door skyroute runs on:
uvicorn with uvloop and httptools, one raw ASGI callable (no Starlette, no FastAPI). The
CPU it costs above ``peer_bare.py`` is the ASGI server's; what skyroute costs above it is
its features. Listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import aiohttp
import uvicorn
from starlette.types import Receive, Scope, Send

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script, from bench_peers.py
    sys.path.insert(0, str(_ROOT))

from loadtests.peer_bare import peer_args  # noqa: E402

TIMEOUT_S = 30.0
_JSON = [(b"content-type", b"application/json")]


class BareAsgiProxy:
    """The ASGI application; its client session opens at lifespan start."""

    def __init__(self, upstream: str) -> None:
        self.url = upstream.rstrip("/") + "/v1/chat/completions"
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            if scope["method"] == "POST" and scope["path"] == "/v1/chat/completions":
                await self._chat(scope, receive, send)
            else:
                await _answer(send, 200, b"ok", [(b"content-type", b"text/plain")])

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
                timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
                self.session = aiohttp.ClientSession(connector=connector, timeout=timeout)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.session is not None
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = bool(message.get("more_body", False))
        ctype_in = next((v for k, v in scope["headers"] if k == b"content-type"),
                        b"application/json")  # fmt: skip
        try:
            async with self.session.post(
                self.url, data=b"".join(chunks), headers={"content-type": ctype_in.decode()}
            ) as upstream:
                ctype = upstream.headers.get("content-type", "application/json")
                headers = [(b"content-type", ctype.encode())]
                if not ctype.startswith("text/event-stream"):
                    await _answer(send, upstream.status, await upstream.read(), headers)
                    return
                await send({"type": "http.response.start", "status": upstream.status,
                            "headers": headers})  # fmt: skip
                async for chunk in upstream.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk,
                                "more_body": True})  # fmt: skip
                await send({"type": "http.response.body", "body": b""})
        except aiohttp.ClientError as exc:
            body = {"error": {"message": f"upstream: {exc}", "type": "bad_gateway"}}
            await _answer(send, 502, json.dumps(body).encode(), _JSON)


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    args = peer_args(__doc__)
    uvicorn.run(
        BareAsgiProxy(args.upstream), host="127.0.0.1", port=args.port, loop="uvloop",
        http="httptools", lifespan="on", access_log=False, log_level="warning",
    )  # fmt: skip


if __name__ == "__main__":
    main()
