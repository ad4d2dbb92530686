"""OpenTelemetry traces of requests, following the GenAI semantic conventions.

Off by default, and then free: ``Tracing.start`` returns one shared no-op object and the
request path makes no OpenTelemetry call at all. On when ``OTEL_TRACES_EXPORTER`` names an
exporter (``otlp`` or ``console``); the OTLP exporter reads the standard ``OTEL_*``
variables (endpoint, headers, protocol). Each request gets a SERVER span with child
spans for admission, the route decision and every upstream attempt (CLIENT spans,
which carry W3C ``traceparent`` to the engine). Secrets never become attributes.

The OpenTelemetry SDK (provider, processor, exporters, resource detection; about 15 ms of
a gateway's start-up) is imported only when an exporter is configured: with tracing off
the request path needs the API's no-op types alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from router.policy import PoolSpec

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter


class RequestTrace(Protocol):
    """What the request path may do with a trace; the no-op one does nothing."""

    def child(
        self, name: str, attributes: Mapping[str, Any] | None = None, client: bool = False
    ) -> ChildSpan: ...
    def set(self, attributes: Mapping[str, Any]) -> None: ...
    def rename(self, name: str) -> None: ...
    def inject(self, headers: MutableMapping[str, str]) -> None: ...
    def end(self, error: BaseException | None = None) -> None: ...


class ChildSpan(Protocol):
    """A child span: annotate it, then end it."""

    def set(self, attributes: Mapping[str, Any]) -> None: ...
    def inject(self, headers: MutableMapping[str, str]) -> None: ...
    def end(self, error: BaseException | None = None) -> None: ...


class _Noop:
    __slots__ = ()

    def child(
        self, name: str, attributes: Mapping[str, Any] | None = None, client: bool = False
    ) -> _Noop:
        return self

    def set(self, attributes: Mapping[str, Any]) -> None:
        return None

    def rename(self, name: str) -> None:
        return None

    def inject(self, headers: MutableMapping[str, str]) -> None:
        return None

    def end(self, error: BaseException | None = None) -> None:
        return None


NOOP = _Noop()


def _finish(span: Span, error: BaseException | None) -> None:
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.set_attribute("error.type", type(error).__name__)
    span.end()


class _Child:
    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def set(self, attributes: Mapping[str, Any]) -> None:
        self._span.set_attributes(dict(attributes))

    def inject(self, headers: MutableMapping[str, str]) -> None:
        propagate.inject(headers, context=trace.set_span_in_context(self._span))

    def end(self, error: BaseException | None = None) -> None:
        _finish(self._span, error)


class _Trace:
    __slots__ = ("_ended", "_span", "_tracer")

    def __init__(self, tracer: trace.Tracer, span: Span) -> None:
        self._tracer = tracer
        self._span = span
        self._ended = False

    def child(
        self, name: str, attributes: Mapping[str, Any] | None = None, client: bool = False
    ) -> _Child:
        context = trace.set_span_in_context(self._span)
        kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
        return _Child(
            self._tracer.start_span(name, context=context, kind=kind, attributes=attributes)
        )

    def set(self, attributes: Mapping[str, Any]) -> None:
        self._span.set_attributes(dict(attributes))

    def rename(self, name: str) -> None:
        self._span.update_name(name)

    def inject(self, headers: MutableMapping[str, str]) -> None:
        propagate.inject(headers, context=trace.set_span_in_context(self._span))

    def end(self, error: BaseException | None = None) -> None:
        # The request may end on several paths (a failure is both recorded and raised).
        if not self._ended:
            self._ended = True
            _finish(self._span, error)


class Tracing:
    """Starts request traces, or hands out the no-op trace when tracing is off."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("skyroute.gateway") if provider else None

    @property
    def enabled(self) -> bool:
        """Whether spans are recorded."""
        return self._tracer is not None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Tracing:
        """Tracing as the standard ``OTEL_TRACES_EXPORTER`` says (off when unset or 'none')."""
        env = os.environ if environ is None else environ
        kind = env.get("OTEL_TRACES_EXPORTER", "none").strip().lower()
        if kind in ("", "none"):
            return cls(None)
        # The SDK only now (the module docstring).
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
            BatchSpanProcessor,
            ConsoleSpanExporter,
        )

        exporter: SpanExporter
        if kind == "console":
            exporter = ConsoleSpanExporter()
        elif kind == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )

            exporter = OTLPSpanExporter()
        else:
            raise ValueError(
                f"OTEL_TRACES_EXPORTER={kind!r}: skyroute supports otlp, console or none"
            )
        name = env.get("OTEL_SERVICE_NAME", "skyroute-gateway")
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider)

    def start(
        self, name: str, headers: Mapping[str, str], attributes: Mapping[str, Any]
    ) -> RequestTrace:
        """A SERVER span for one request, continuing the caller's ``traceparent``."""
        if self._tracer is None:
            return NOOP
        parent = propagate.extract(dict(headers))
        span = self._tracer.start_span(
            name, context=parent, kind=SpanKind.SERVER, attributes=attributes
        )
        return _Trace(self._tracer, span)

    def shutdown(self) -> None:
        """Flush and stop the exporter. Idempotent."""
        if self.provider is not None:
            self.provider.shutdown()


def attempt_span(
    trace_: RequestTrace,
    pool: PoolSpec,
    number: int,
    predicted_ttft_ms: float,
    est_cost_usd: float,
    headers: dict[str, str],
) -> tuple[ChildSpan, dict[str, str]]:
    """The client span of one upstream attempt, and the attempt's headers with its W3C
    ``traceparent`` for the engine (``headers`` itself is left alone)."""
    span = trace_.child(
        f"upstream {pool.id}",
        {
            "skyroute.pool": pool.id, "skyroute.provider": pool.provider,
            "skyroute.region": pool.location, "skyroute.attempt": number,
            "skyroute.ttft.predicted_ms": predicted_ttft_ms,
            "skyroute.cost_usd.estimated": est_cost_usd,
            "gen_ai.request.model": pool.upstream_model,
        },
        client=True,
    )  # fmt: skip
    out = dict(headers)
    span.inject(out)
    return span, out
