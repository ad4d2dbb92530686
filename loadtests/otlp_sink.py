"""A local OTLP/HTTP trace sink for ``bench_overhead.py --tracing``: it takes protobuf
trace exports on ``POST /v1/traces``, counts exports, spans and bytes, and reports them on
``GET /stats``. Runs in a process of its own, so its CPU is not charged to the load
generator.
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar


class _OtlpSinkHandler(BaseHTTPRequestHandler):
    """Takes OTLP/HTTP protobuf trace exports and counts them; ``GET /stats`` reports."""

    protocol_version = "HTTP/1.1"
    stats: ClassVar[dict[str, int]] = {"spans": 0, "exports": 0, "bytes": 0, "bad": 0}
    lock: ClassVar[threading.Lock] = threading.Lock()

    def log_message(self, format: str, *args: object) -> None:
        return None

    def _reply(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        with self.lock:
            body = json.dumps(self.stats).encode()
        self._reply(200, body, "application/json")

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import (  # noqa: PLC0415 - sink only
            trace_service_pb2 as pb,
        )

        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        size = len(body)
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        try:
            export = pb.ExportTraceServiceRequest.FromString(body)
        except ValueError:
            with self.lock:
                self.stats["bad"] += 1
            self._reply(400, b"", "application/x-protobuf")
            return
        spans = sum(len(scope.spans) for rs in export.resource_spans for scope in rs.scope_spans)
        with self.lock:
            self.stats["bytes"] += size
            self.stats["exports"] += 1
            self.stats["spans"] += spans
        ok = pb.ExportTraceServiceResponse().SerializeToString()
        self._reply(200 if self.path == "/v1/traces" else 404, ok, "application/x-protobuf")


def serve_otlp_sink(port: int) -> None:
    """Run the OTLP/HTTP sink on 127.0.0.1:``port`` until terminated (own process, so
    its CPU is not charged to the load generator)."""
    ThreadingHTTPServer(("127.0.0.1", port), _OtlpSinkHandler).serve_forever()
