"""A tiny threaded HTTP server on 127.0.0.1 for the local fakes of the price APIs.

Subclasses implement ``respond``; tests switch failure modes on the instance:
``fail_on_page`` (HTTP 500 from that page on), ``garbage`` (200 with a non-JSON body),
``hang`` (never answer until the server stops: the client times out).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Request:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and left is expected here


class FakeServer:
    """Start with ``with Fake() as fake:``; ``fake.url`` is its base URL."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.fail_on_page: int | None = None
        self.garbage = False
        self.hang = False
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                request = Request(
                    self.command,
                    parts.path,
                    parse_qs(parts.query),
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                with fake._lock:
                    fake.requests.append(request)
                if fake.hang:
                    fake._stopping.wait(timeout=60)
                    return
                reply = fake.respond(request)
                if fake.garbage:
                    reply = Reply(200, b"<html>502 Bad Gateway from a proxy</html>", "text/html")
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = _serve  # noqa: N815 - the name http.server dispatches to
            do_POST = _serve  # noqa: N815

        self._handler = Handler
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the fake with 'with'"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def respond(self, request: Request) -> Reply:
        raise NotImplementedError

    def page_fails(self, page: int) -> bool:
        """True if ``page`` (1-based) should fail with HTTP 500."""
        return self.fail_on_page is not None and page >= self.fail_on_page

    def __enter__(self) -> FakeServer:
        self._server = _Server(("127.0.0.1", 0), self._handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping.set()
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
