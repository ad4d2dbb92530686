"""Prometheus metrics of one gateway process, in its own registry (no global state).

Names follow Prometheus conventions: ``skyroute_`` prefix, base units, ``_total`` on
counters. Labels are bounded sets (model, pool, status, SLO class): never a tenant key
or a request id.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from gateway.loop_metrics import LoopMetrics
from router.scoring import RouteRequest

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01)


class GatewayMetrics:
    """The gateway's metrics. ``render()`` gives the Prometheus text exposition."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # The metrics every request updates: lock-free, on the event loop's thread.
        hot = LoopMetrics(r)
        self.requests = hot.counter(
            "skyroute_requests_total", "Routed requests by outcome.",
            ("model", "pool", "status", "slo_class"),
        )  # fmt: skip
        self.request_seconds = hot.histogram(
            "skyroute_request_duration_seconds",
            "Time of routed requests in the gateway, end to end.", ("model",), _LATENCY_BUCKETS,
        )  # fmt: skip
        self.overhead_seconds = hot.histogram(
            "skyroute_gateway_overhead_seconds",
            "Time the gateway itself spends before forwarding a request.", (), _OVERHEAD_BUCKETS,
        )  # fmt: skip
        self.ttft_seconds = hot.histogram(
            "skyroute_ttft_seconds", "Time to first token through the gateway.", ("model",),
            _LATENCY_BUCKETS,
        )  # fmt: skip
        self.tpot_seconds = hot.histogram(
            "skyroute_tpot_seconds", "Time per output token after the first.", ("model",),
            (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0),
        )  # fmt: skip
        self.slo_requests = hot.counter(
            "skyroute_slo_requests_total", "Finished requests by whether they met their SLO class.",
            ("model", "slo_class", "met"),
        )  # fmt: skip
        self.goodput_tokens = hot.counter(
            "skyroute_goodput_tokens_total", "Output tokens of requests that met their SLO.",
            ("model",),
        )  # fmt: skip
        self.route_decisions = hot.counter(
            "skyroute_route_decisions_total", "Routing decisions by reason.", ("model", "reason")
        )
        self.failovers = Counter(
            "skyroute_failovers_total",
            "Attempts on a second or later pool.",
            ("model",),
            registry=r,
        )
        self.hedges = Counter(
            "skyroute_hedges_total",
            "Requests whose first attempt stayed silent long enough to start a hedge.",
            ("model",),
            registry=r,
        )
        self.upstream_errors = Counter(
            "skyroute_upstream_errors_total",
            "Failed upstream attempts.",
            ("pool", "kind"),
            registry=r,
        )
        self.rejected = Counter(
            "skyroute_rejected_requests_total",
            "Requests answered with an error by the gateway.",
            ("code",),
            registry=r,
        )
        self.snapshot_age = Gauge(
            "skyroute_snapshot_age_seconds",
            "Age of the live-table snapshot routing uses.",
            registry=r,
        )
        self.redis_up = Gauge(
            "skyroute_redis_up", "1 if the last Redis operation succeeded.", registry=r
        )
        self.redis_errors = Counter("skyroute_redis_errors", "Failed Redis operations.", registry=r)
        self._redis_errors_seen = 0
        self.pool_transitions = Counter(
            "skyroute_pool_transitions_total",
            "Health state transitions applied by this replica.",
            ("pool", "from_state", "to_state"),
            registry=r,
        )
        self.pool_state = Gauge(
            "skyroute_pool_state", "1 for the state each pool is in.", ("pool", "state"), registry=r
        )
        self.pool_needs_replacement = Gauge(
            "skyroute_pool_needs_replacement",
            "1 if the pool keeps failing readmission.",
            ("pool",),
            registry=r,
        )
        self.retries_denied = Counter(
            "skyroute_retries_denied_total",
            "Retries refused by the retry budget.",
            ("model",),
            registry=r,
        )
        self.rollout_requests = Counter(
            "skyroute_rollout_requests_total",
            "Requests of a model under a rollout, by the version they were routed to.",
            ("model", "version"),
            registry=r,
        )
        self.shadow_requests = Counter(
            "skyroute_shadow_requests_total",
            "Requests mirrored to a rollout's new version (outcome: sent, dropped, failed).",
            ("model", "outcome"),
            registry=r,
        )
        self.rollout_stage = Gauge(
            "skyroute_rollout_state",
            "1 for the stage each model's newest rollout is in (from the shared record).",
            ("model", "stage"),
            registry=r,
        )
        self.rollout_transitions = Gauge(
            "skyroute_rollout_transitions",
            "Moves of each model's rollouts so far (the shared record's revision less one).",
            ("model",),
            registry=r,
        )
        self.rollout_exposed = Gauge(
            "skyroute_rollout_exposed_requests",
            "User requests the new version answered in the finished canary steps.",
            ("model",),
            registry=r,
        )
        self.inflight = Gauge(
            "skyroute_inflight_requests",
            "Requests in flight from this replica.",
            ("pool",),
            registry=r,
        )
        self.store_ready = Gauge(
            "skyroute_store_ready",
            "1 once this replica has migrated the store's schema; 0 with "
            "SKYROUTE_STORE_WORKER=external, where the store worker migrates it.",
            registry=r,
        )
        self.ledger_records = Counter(
            "skyroute_ledger_records",
            "Usage records this replica's consumer wrote to the store's ledger.",
            registry=r,
        )
        self.ledger_malformed = Counter(
            "skyroute_ledger_malformed_records",
            "Usage stream entries dropped as malformed by this replica's consumer.",
            registry=r,
        )
        self.redis_refills = Counter(
            "skyroute_redis_refills",
            "Refills of Redis from the store by this replica (Redis had lost its data).",
            registry=r,
        )
        self.usage_backlog = Gauge(
            "skyroute_usage_backlog",
            "Usage stream entries no store reader has read yet: how far the ledger trails "
            "the gateways, wherever its writer runs (NaN: Redis cannot count them).",
            registry=r,
        )
        self.usage_pending = Gauge(
            "skyroute_usage_pending",
            "Usage stream entries a store reader has read and not yet written (acknowledged).",
            registry=r,
        )
        self.usage_journal_errors = Counter(
            "skyroute_journal_write_errors",
            "Failed writes to this replica's usage journal (records kept in memory only).",
            registry=r,
        )
        self._totals: dict[Counter, int] = {}

    def observe_finish(
        self,
        route: RouteRequest,
        pool_id: str,
        status: str,
        latency_ms: float,
        ttft_ms: float | None,
        tpot_ms: float | None,
        output_tokens: int,
        slo_met: bool,
    ) -> None:
        """Count one finished request: outcome, end-to-end time, TTFT/TPOT when measured,
        and whether it met its SLO class (goodput counts only the tokens of those)."""
        model = (route.model,)
        self.requests.inc((route.model, pool_id, status, route.slo_class))
        self.request_seconds.observe(model, latency_ms / 1000.0)
        if ttft_ms is not None:
            self.ttft_seconds.observe(model, ttft_ms / 1000.0)
        if tpot_ms is not None:
            self.tpot_seconds.observe(model, tpot_ms / 1000.0)
        self.slo_requests.inc((route.model, route.slo_class, "true" if slo_met else "false"))
        if slo_met:
            self.goodput_tokens.inc(model, output_tokens)

    def sync_redis_errors(self, total: int) -> None:
        """Bring the Redis error counter up to ``total`` (counted by the sync loops)."""
        if total > self._redis_errors_seen:
            self.redis_errors.inc(total - self._redis_errors_seen)
            self._redis_errors_seen = total

    def sync_total(self, counter: Counter, total: int) -> None:
        """Bring ``counter`` up to ``total`` (a running count kept elsewhere)."""
        seen = self._totals.get(counter, 0)
        if total > seen:
            counter.inc(total - seen)
            self._totals[counter] = total

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
