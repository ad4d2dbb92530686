"""The routing policy: what platform teams write in YAML, validated with pydantic.

A policy declares models, pools, SLO classes and which pool regions may serve which
client regions (with their round-trip times). It is immutable once loaded; the gateway
swaps a whole new one in atomically. Regions are written ``provider:region``
(``aws:us-east-1``), the same spelling as the measured RTT table they come from.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

from router.policy_refs import cross_reference_problems

Provider = Literal["aws", "gcp", "azure", "local"]
Purchase = Literal["on_demand", "spot"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SLOClass(_Strict):
    """Latency targets: time to first token and time per output token, in ms.

    ``hedge``: when the first attempt stays silent past the TTFT target (or 1.5 × its
    predicted time, if later), start the next attempt too; the first answer wins and
    the other is cancelled. Costs duplicate work only on requests already late.
    """

    ttft_ms: float = Field(gt=0)
    tpot_ms: float = Field(gt=0)
    hedge: bool = False


class ModelSpec(_Strict):
    """A model clients may ask for by name."""

    kind: Literal["chat", "embedding"] = "chat"
    default_slo: str
    # The mean output of a request (tokens): prices a request that sets no max_tokens and
    # sizes the work queued ahead of a request.
    expected_output_tokens: int = Field(default=256, ge=0)
    # Upper bound a request's max_tokens may ask for (tokens).
    max_output_tokens: int = Field(default=8192, gt=0)
    # Inside a pool, send requests sharing a prompt prefix to the replica that likely
    # holds it in its KV cache (under a bounded-load rule); off: least predicted wait.
    prefix_affinity: bool = False
    # The version that serves the model's traffic while no rollout says otherwise
    # (``skyroute rollout``). Required once the model's pools declare versions; pools of
    # other versions take user traffic only through a rollout.
    version: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")


class PriceSpec(_Strict):
    """Where a pool's price comes from.

    ``usd_per_gpu_hour`` is an override that always wins over the live price table;
    without it the price comes from the table entry written by the ``source`` feed for
    (``instance_type``, ``purchase``).
    """

    source: Literal["aws", "gcp", "azure", "static", "policy"] = "policy"
    instance_type: str = ""
    purchase: Purchase = "on_demand"
    usd_per_gpu_hour: float | None = Field(default=None, gt=0, lt=1000)

    @model_validator(mode="after")
    def _override_or_feed(self) -> PriceSpec:
        if self.source == "policy" and self.usd_per_gpu_hour is None:
            raise ValueError("source 'policy' needs usd_per_gpu_hour")
        if self.source != "policy" and not self.instance_type:
            raise ValueError(f"source {self.source!r} needs instance_type")
        return self


class GoodputProfile(_Strict):
    """What one replica sustains while meeting the SLO.

    ``tokens_per_s``: output tokens/s per replica at the SLO (prices a token).
    ``prefill_tokens_per_s``: prompt tokens/s one replica prefills (predicts TTFT).
    ``max_concurrency``: sequences one replica runs at once before requests queue.
    ``tpot_ms``: time per output token at nominal load.
    """

    tokens_per_s: float = Field(gt=0)
    prefill_tokens_per_s: float = Field(gt=0)
    max_concurrency: int = Field(gt=0)
    tpot_ms: float = Field(gt=0)


class ReplicaBounds(_Strict):
    """Replica count bounds, and the count assumed before the live table says otherwise."""

    min: int = Field(default=0, ge=0)
    max: int = Field(default=16, ge=1)
    initial: int = Field(default=1, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> ReplicaBounds:
        if not self.min <= self.initial <= self.max:
            raise ValueError(
                f"need min <= initial <= max, got {self.min}/{self.initial}/{self.max}"
            )
        return self


class ScalingSpec(_Strict):
    """How the autoscaler reaches a pool's node group in its cloud.

    ``group`` is the AWS Auto Scaling group, GCP managed instance group or Azure VM
    scale set name (for ``local``, a label). GCP needs ``project`` and either ``zone``
    (zonal MIG) or none (regional MIG in the pool's region); Azure needs
    ``resource_group`` (and ``subscription``). ``provisioning_s`` is the lead time
    from a resize to a ready replica, which the forecast horizon must cover.
    """

    group: str = Field(min_length=1)
    project: str | None = None
    zone: str | None = None
    resource_group: str | None = None
    subscription: str | None = None
    provisioning_s: float = Field(default=300.0, gt=0)
    # The engines' port on each replica: a node group reports bare addresses (IPs),
    # and the gateway sends requests to ``http://<address>:<engine_port>``.
    engine_port: int = Field(default=8000, ge=1, le=65535)


class DnsDiscovery(_Strict):
    """A pool's replicas from DNS, resolved again every ``interval_s`` (a Kubernetes
    headless Service lists one record per ready pod).

    ``record`` ``A``: the addresses of ``name`` (A and AAAA), each reached on ``port``;
    ``SRV``: each record's target and port. ``nameserver`` (``host`` or ``host:port``)
    replaces the system's resolvers (``/etc/resolv.conf``). While the name resolves to
    nothing the pool's static ``endpoints`` apply.
    """

    name: str = Field(min_length=1)
    record: Literal["A", "SRV"] = "A"
    port: int = Field(default=8000, ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    interval_s: float = Field(default=2.0, gt=0)
    timeout_s: float = Field(default=1.0, gt=0)
    nameserver: str | None = None


class PoolSpec(_Strict):
    """One group of identical GPU replicas for one model in one provider and region."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:\-]+$")
    provider: Provider
    region: str = Field(min_length=1)
    model: str
    upstream_model: str
    gpu_type: str
    gpus_per_replica: int = Field(gt=0)
    endpoints: list[HttpUrl] = Field(min_length=1)
    price: PriceSpec
    goodput: GoodputProfile
    replicas: ReplicaBounds = ReplicaBounds()
    scaling: ScalingSpec | None = None
    # Replicas discovered from DNS instead of the static ``endpoints`` (their fallback).
    dns: DnsDiscovery | None = None
    # The engine answers ``n > 1`` itself (vLLM, SGLang: the choices share one prefill).
    # False for engines that answer one choice per request (TGI, the simulated engine):
    # the gateway then fans ``n`` out as ``n`` requests and merges the answers.
    supports_n: bool = True
    # Which version of ``model`` this pool serves (a model revision, quantisation or
    # engine build; the client-facing name stays ``model``). None: the model has one.
    version: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")

    @property
    def location(self) -> str:
        """``provider:region``, the key into the RTT table."""
        return f"{self.provider}:{self.region}"


class ClientRegion(_Strict):
    """A region clients call from: pool locations allowed to serve it, with RTT in ms."""

    rtt_ms: dict[str, float] = Field(min_length=1)

    @model_validator(mode="after")
    def _non_negative(self) -> ClientRegion:
        bad = [k for k, v in self.rtt_ms.items() if not v >= 0]
        if bad:
            raise ValueError(f"rtt_ms must be >= 0 for {bad}")
        return self


class OutlierSettings(_Strict):
    """Passive ejection: after ``consecutive_failures`` a pool is ejected for a backoff."""

    consecutive_failures: int = Field(default=3, ge=1)
    base_ejection_s: float = Field(default=5.0, gt=0)
    max_ejection_s: float = Field(default=120.0, gt=0)


class HealthSettings(_Strict):
    """The per-pool health state machine (healthy -> ejected -> probing -> healthy).

    Active probes ``GET probe_path`` on every endpoint every ``probe_interval_s``;
    ``unhealthy_threshold`` failed probes in a row eject a pool, ``healthy_threshold``
    good ones in a row readmit it, after which its traffic share ramps from 10 % to
    100 % over ``ramp_s``. Passive detection also ejects a pool whose error rate over
    ``error_rate_window_s`` reaches ``error_rate_threshold`` (with at least
    ``error_rate_min_requests`` requests). A pool ejected again within
    ``ramp_s`` of readmission ``max_readmissions`` times is flagged needs-replacement.
    The ``scrape_*`` and ``replica_failures`` settings are the per-replica equivalents
    (``gateway.replicas``).
    """

    probe_path: Literal["/health", "/v1/models"] = "/health"
    probe_interval_s: float = Field(default=5.0, gt=0)
    probe_timeout_s: float = Field(default=1.0, gt=0)
    unhealthy_threshold: int = Field(default=2, ge=1)
    healthy_threshold: int = Field(default=3, ge=1)
    error_rate_window_s: float = Field(default=30.0, gt=0)
    error_rate_threshold: float = Field(default=0.5, gt=0, le=1)
    error_rate_min_requests: int = Field(default=20, ge=1)
    ramp_s: float = Field(default=30.0, ge=0)
    max_readmissions: int = Field(default=3, ge=1)
    drain_deadline_s: float = Field(default=120.0, gt=0)
    # Replicas: each endpoint's ``/metrics`` is scraped every ``scrape_interval_s`` (at
    # most ``scrape_timeout_s`` each); ``replica_failures`` failed scrapes or requests in
    # a row take a replica out of its pool's choice (its pool keeps serving from the rest).
    scrape_interval_s: float = Field(default=1.0, gt=0)
    scrape_timeout_s: float = Field(default=0.5, gt=0)
    replica_failures: int = Field(default=3, ge=1)


class PricingSettings(_Strict):
    """Price feeds: refresh period (with jitter), staleness bound and sanity range.

    A price outside [``min_usd_per_gpu_hour``, ``max_usd_per_gpu_hour``] is rejected
    row by row; a price older than ``stale_after_s`` is marked stale.
    """

    refresh_interval_s: float = Field(default=300.0, gt=0)
    jitter: float = Field(default=0.1, ge=0, lt=1)
    stale_after_s: float = Field(default=3600.0, gt=0)
    min_usd_per_gpu_hour: float = Field(default=0.01, gt=0)
    max_usd_per_gpu_hour: float = Field(default=200.0, gt=0)
    static_file: str | None = None


class RoutingSettings(_Strict):
    """How the router breaks ties and what happens when nothing meets the SLO."""

    fallback: Literal["fastest", "reject"] = "fastest"
    # Pools whose cost is within this fraction of the cheapest feasible one tie;
    # the lighter-loaded of them wins.
    near_tie: float = Field(default=0.02, ge=0, lt=1)
    # A pool is feasible only if its predicted TTFT and TPOT are below the SLO targets
    # by this fraction: predictions are estimates, and a request admitted right at the
    # edge misses about half the time.
    slo_headroom: float = Field(default=0.1, ge=0, lt=1)
    # TPOT is predicted from the pool's profile at the fresh batch occupancy, a steadier
    # estimate than TTFT's queue wait, so it may keep a smaller margin. None: slo_headroom.
    tpot_headroom: float | None = Field(default=None, ge=0, lt=1)
    # Trunk reservation (as in telephone networks with alternate routing): a client more
    # than ``near_rtt_ms`` from a pool may use it only while the pool's batch slots are
    # at most (1 - near_reserve) full, if any client region is within near_rtt_ms of it.
    # Far clients came for the price and can go elsewhere; near ones often cannot (data
    # residency), and without the reserve they overflow to dearer pools. 0: off.
    near_reserve: float = Field(default=0.0, ge=0, lt=1)
    near_rtt_ms: float = Field(default=50.0, gt=0)
    max_attempts: int = Field(default=3, ge=1, le=10)
    # Retries (attempts after the first) may be at most this share of requests over
    # ``retry_budget_window_s``, but never fewer than ``retry_budget_min`` per window, so
    # low traffic can still fail over. The defaults are Linkerd's (ratio 0.2, 10 retries
    # a second, 10 s TTL): a pool that hangs holds every request sent to it for a whole
    # deadline before the first one times out, so rate x deadline requests need their
    # failover at once; at 10 req/s and a 2.6 s deadline that is 26, and a floor of 10
    # per window failed the 11th.
    retry_budget_ratio: float = Field(default=0.2, ge=0, le=1)
    retry_budget_min: int = Field(default=100, ge=0)
    retry_budget_window_s: float = Field(default=10.0, gt=0)
    connect_timeout_ms: float = Field(default=1000, gt=0)
    # An attempt waits for its first byte this multiple of the SLO's own scale (the TTFT
    # target or the pool's predicted TTFT, whichever is larger; non-streaming requests
    # add their output tokens x the TPOT target), never less than the floor, and a
    # streamed one never more than first_byte_timeout_ms (gateway.deadlines).
    deadline_factor: float = Field(default=2.0, ge=1)
    deadline_floor_ms: float = Field(default=1000, gt=0)
    first_byte_timeout_ms: float = Field(default=60000, gt=0)
    idle_timeout_ms: float = Field(default=30000, gt=0)
    default_client_region: str
    # A measured TTFT/TPOT that no request has refreshed for this long is ignored in
    # favour of the pool's profile, so a pool that measured slow can be tried again.
    measurement_ttl_s: float = Field(default=30.0, gt=0)
    outlier: OutlierSettings = OutlierSettings()


class TenantSpec(_Strict):
    """Who may call, for what, where, and how much.

    ``allowed_models``: model names, or ``["*"]``. ``allowed_regions``: pool locations
    (``provider:region``) requests may ever go to, failover included (data residency);
    None = anywhere the client region allows. Limits are per minute (requests, tokens)
    and per ``budget_period`` (USD); None = unlimited. ``priority``: higher is more
    important (0 = default).
    """

    allowed_models: list[str] = Field(default_factory=lambda: ["*"])
    default_slo: str | None = None
    client_region: str | None = None
    allowed_regions: list[str] | None = None
    # Bounds far past any real limit, but inside what the Redis scripts count exactly.
    rpm: int | None = Field(default=None, gt=0, le=10**12)
    tpm: int | None = Field(default=None, gt=0, le=10**12)
    budget_usd: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    budget_period: Literal["hour", "day", "month"] = "month"
    priority: int = 0
    max_tokens: int | None = Field(default=None, gt=0, le=10**7)
    # Choices per request (OpenAI's ``n``, at most 128): each is charged as a request's
    # worth of output tokens at admission, so TPM limits bound the fan-out too.
    max_n: int = Field(default=8, ge=1, le=128)

    def allows_model(self, model: str) -> bool:
        """Whether this tenant may use ``model``."""
        return "*" in self.allowed_models or model in self.allowed_models


class Policy(_Strict):
    """A whole routing policy. Cross-references are checked on load."""

    version: Literal[1] = 1
    slo_classes: dict[str, SLOClass] = Field(min_length=1)
    models: dict[str, ModelSpec] = Field(min_length=1)
    pools: list[PoolSpec] = Field(min_length=1)
    client_regions: dict[str, ClientRegion] = Field(min_length=1)
    routing: RoutingSettings
    health: HealthSettings = HealthSettings()
    pricing: PricingSettings = PricingSettings()
    # The tenant ``default`` is used for the bootstrap key (SKYROUTE_API_KEY); it is
    # unlimited unless the policy declares it.
    tenants: dict[str, TenantSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _cross_references(self) -> Policy:
        problems = cross_reference_problems(self.model_dump())
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def pool(self, pool_id: str) -> PoolSpec:
        """The pool with this id. Raises KeyError if there is none."""
        for pool in self.pools:
            if pool.id == pool_id:
                return pool
        raise KeyError(pool_id)
