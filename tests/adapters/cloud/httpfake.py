"""A tiny threaded HTTP(S) server for the cloud fakes: one handler function, JSON helpers."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    target: str  # the request line's path and query, as sent

    def json(self) -> Any:
        return json.loads(self.body) if self.body else {}

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()


def json_response(status: int, payload: object, headers: dict[str, str] | None = None) -> Response:
    extra = tuple((headers or {}).items())
    return Response(
        status, json.dumps(payload).encode(), (("Content-Type", "application/json"), *extra)
    )


Handler = Callable[[Request], Response]


class LocalServer:
    """Serves ``handle`` on 127.0.0.1 (a free port) in a thread, TLS if given a context."""

    def __init__(self, handle: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        server_self = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                request = Request(
                    self.command, parts.path, parse_qs(parts.query),
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"", self.path,
                )  # fmt: skip
                server_self.requests.append(request)
                response = handle(request)
                self.send_response(response.status)
                for name, value in response.headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                self.wfile.write(response.body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815 - http.server names

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.requests: list[Request] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        if ssl_context is not None:
            self._httpd.socket = ssl_context.wrap_socket(self._httpd.socket, server_side=True)
        self._scheme = "https" if ssl_context is not None else "http"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> LocalServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
