"""The one error hierarchy of skyroute.

Every package raises these; foreign exceptions (redis, aiohttp, httpx, botocore,
google.api_core, azure.core) are turned into them once, at the boundary, with
``raise ... from exc``. The gateway maps them to OpenAI-shaped HTTP errors with one
table (``gateway.http_errors.TABLE``; the statuses below are what it says): this
module knows nothing of HTTP, and imports nothing from the project, so any layer may
import it.

    SkyrouteError
    ├── PolicyError                 invalid routing policy (carries every problem found)
    ├── RequestError                the client's request is wrong                -> 4xx
    │   ├── InvalidRequest          malformed JSON, missing or bad field        -> 400
    │   ├── PayloadTooLarge         body over the size limit                      -> 413
    │   ├── HeadersTooLarge         request headers over the size limit           -> 431
    │   ├── AuthenticationError     missing, wrong or expired API key             -> 401
    │   ├── PermissionDenied        key may not use this model or route           -> 403
    │   ├── NotFound                no such pool, key or tenant                   -> 404
    │   │   └── ModelNotFound       model not in the policy                       -> 404
    │   └── RateLimited             over a request/token limit or budget          -> 429
    ├── RoutingError                no pool can take the request                  -> 503
    │   └── NoFeasiblePool          every candidate misses the SLO (fallback: reject)
    ├── UpstreamError               an upstream engine failed                     -> 502
    │   ├── UpstreamConnectError    could not connect (retryable)
    │   ├── UpstreamTimeout         no first byte in time (retryable)
    │   ├── UpstreamStatusError     5xx or 429 before the first byte (retryable)
    │   ├── UpstreamInvalidAnswer   a 200 that is not an OpenAI answer (retryable)
    │   │   └── EngineMetricsError  a /metrics page with none of vLLM's, SGLang's or TGI's metrics
    │   └── UpstreamStreamError     failed after bytes reached the client (never retried)
    ├── TableError                  the live tables in Redis could not be read or written
    ├── StoreError                  the system of record (SQL) could not be read or written -> 503
    ├── SimulationError             bad simulator input (simulator.errors)
    ├── PriceFeedError              a price feed could not be read (``reason`` says why)
    ├── CommandError                the command line cannot do what it was asked (says what to do)
    ├── DiscoveryError              replica discovery (DNS) could not get an answer
    └── AdapterError                a cloud control plane failed
        ├── NotImplementedByProvider  optional capability absent
        ├── OutOfCapacity           stockout in the zone/region
        ├── QuotaExceeded
        └── Throttled
"""

from __future__ import annotations

from dataclasses import dataclass


class SkyrouteError(Exception):
    """Root of every error skyroute raises on purpose."""


@dataclass(frozen=True)
class PolicyProblem:
    """One problem in a policy file: dotted key path, 1-based line (0 if unknown), reason."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.path or '<root>'}: {self.message}"


class PolicyError(SkyrouteError):
    """The routing policy is invalid; ``problems`` lists every problem found."""

    def __init__(self, source: str, problems: list[PolicyProblem]) -> None:
        self.source = source
        self.problems = problems
        lines = "; ".join(str(p) for p in problems)
        super().__init__(f"invalid policy {source}: {lines}")


class RequestError(SkyrouteError):
    """The client's request cannot be served as sent. ``param`` names the field, if any."""

    # A machine-readable reason, when one instance differs from its class's usual one.
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(RequestError):
    """Malformed JSON, or a missing or ill-typed field."""


class PayloadTooLarge(RequestError):
    """The request body is over the configured limit."""


class HeadersTooLarge(RequestError):
    """The request headers are over the configured limit."""


class AuthenticationError(RequestError):
    """Missing, unknown, revoked or expired API key."""


class PermissionDenied(RequestError):
    """The caller is known but may not do this."""


class NotFound(RequestError):
    """The request names something (a pool, a key, a tenant) that does not exist."""


class Conflict(RequestError):
    """The request conflicts with the current state (e.g. a rollout already running, or
    one that moved since it was read)."""


class ModelNotFound(NotFound):
    """The requested model is not served by this policy."""

    def __init__(self, model: str) -> None:
        super().__init__(f"The model `{model}` does not exist.", param="model")


class RateLimited(RequestError):
    """Over a rate limit or budget. ``retry_after_s`` feeds the Retry-After header."""

    def __init__(self, message: str, *, retry_after_s: float, code: str | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        if code is not None:
            self.code = code


class RoutingError(SkyrouteError):
    """No pool can take the request right now."""


class NoFeasiblePool(RoutingError):
    """Every candidate pool would miss the request's SLO and the policy says reject."""


class UpstreamError(SkyrouteError):
    """An upstream engine failed. ``retryable`` is true when nothing reached the client."""

    retryable = True

    def __init__(self, message: str, *, pool_id: str = "") -> None:
        super().__init__(message)
        self.pool_id = pool_id


class UpstreamConnectError(UpstreamError):
    """The connection to the endpoint could not be made."""


class UpstreamTimeout(UpstreamError):
    """No first byte (or no next chunk) within the timeout."""


class UpstreamStatusError(UpstreamError):
    """The endpoint answered 5xx or 429 before any byte reached the client;
    ``upstream_status`` is the status it answered."""

    def __init__(self, message: str, *, pool_id: str = "", status: int = 502) -> None:
        super().__init__(message, pool_id=pool_id)
        self.upstream_status = status


class UpstreamInvalidAnswer(UpstreamError):
    """The endpoint answered 200 with something that is not an OpenAI answer (an HTML
    page from a load balancer, a truncated or non-object JSON body)."""


class EngineMetricsError(UpstreamInvalidAnswer):
    """A replica's metrics endpoint answered, but with none of the load metrics of a known
    engine (vLLM, SGLang, TGI): not Prometheus text, another program, or an engine that
    has not recorded anything yet. Raised by the scraper, never on the request path."""


class UpstreamStreamError(UpstreamError):
    """The stream failed after bytes reached the client; it is never retried."""

    retryable = False


class TableError(SkyrouteError):
    """The live tables in Redis could not be read or written."""


class StoreError(SkyrouteError):
    """The system of record (PostgreSQL or SQLite, ``store/``) could not be read or
    written, or its schema could not be migrated. Nothing was committed by the call
    that raised it."""


class PriceFeedError(SkyrouteError):
    """A price feed failed as a whole; the last good prices stay in use.

    ``reason`` is one of ``timeout``, ``connection``, ``http_error``, ``bad_payload``,
    ``auth``, ``config`` (a metric label, so the set is small and fixed).
    """

    def __init__(self, message: str, *, feed: str, reason: str) -> None:
        super().__init__(message)
        self.feed = feed
        self.reason = reason


class CommandError(SkyrouteError):
    """A ``skyroute`` subcommand cannot proceed; the message says what to do instead."""


class DiscoveryError(SkyrouteError):
    """Replica discovery could not get an answer (a DNS timeout or server failure); an
    answer that names no replica is not an error."""


class AdapterError(SkyrouteError):
    """A cloud control plane call failed."""


class NotImplementedByProvider(AdapterError):
    """The provider does not implement this optional capability."""


class OutOfCapacity(AdapterError):
    """The cloud has no capacity of this type here (stockout)."""


class QuotaExceeded(AdapterError):
    """The account's quota does not allow the change."""


class Throttled(AdapterError):
    """The control plane asked us to slow down."""
