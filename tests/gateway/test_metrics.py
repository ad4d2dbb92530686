"""Prometheus metrics of a real gateway process, scraped from ``/metrics``: names and
labels against a declared list, Prometheus naming conventions, counters and histograms
moved by routed requests, and no tenant key or request id in any label."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import CHAT, Fleet, start_fleet
from tests.gateway.harness import API_KEY, Gateway, unique_prefix

# Every metric family of the gateway (gateway/metrics.py): exposed name, type, labels.
DECLARED: dict[str, tuple[str, frozenset[str]]] = {
    name: (kind, frozenset(labels))
    for name, kind, labels in [
        ("skyroute_requests_total", "counter", ("model", "pool", "status", "slo_class")),
        ("skyroute_request_duration_seconds", "histogram", ("model",)),
        ("skyroute_gateway_overhead_seconds", "histogram", ()),
        ("skyroute_ttft_seconds", "histogram", ("model",)),
        ("skyroute_tpot_seconds", "histogram", ("model",)),
        ("skyroute_slo_requests_total", "counter", ("model", "slo_class", "met")),
        ("skyroute_goodput_tokens_total", "counter", ("model",)),
        ("skyroute_route_decisions_total", "counter", ("model", "reason")),
        ("skyroute_failovers_total", "counter", ("model",)),
        ("skyroute_hedges_total", "counter", ("model",)),
        ("skyroute_upstream_errors_total", "counter", ("pool", "kind")),
        ("skyroute_rejected_requests_total", "counter", ("code",)),
        ("skyroute_snapshot_age_seconds", "gauge", ()),
        ("skyroute_redis_up", "gauge", ()),
        ("skyroute_redis_errors_total", "counter", ()),
        ("skyroute_journal_write_errors_total", "counter", ()),
        ("skyroute_pool_transitions_total", "counter", ("pool", "from_state", "to_state")),
        ("skyroute_pool_state", "gauge", ("pool", "state")),
        ("skyroute_pool_needs_replacement", "gauge", ("pool",)),
        ("skyroute_retries_denied_total", "counter", ("model",)),
        ("skyroute_rollout_requests_total", "counter", ("model", "version")),
        ("skyroute_shadow_requests_total", "counter", ("model", "outcome")),
        ("skyroute_rollout_state", "gauge", ("model", "stage")),
        ("skyroute_rollout_transitions", "gauge", ("model",)),
        ("skyroute_rollout_exposed_requests", "gauge", ("model",)),
        ("skyroute_inflight_requests", "gauge", ("pool",)),
        ("skyroute_store_ready", "gauge", ()),
        ("skyroute_ledger_records_total", "counter", ()),
        ("skyroute_ledger_malformed_records_total", "counter", ()),
        ("skyroute_redis_refills_total", "counter", ()),
        ("skyroute_usage_backlog", "gauge", ()),
        ("skyroute_usage_pending", "gauge", ()),
    ]
}
# Families the module's traffic (plain, streamed and failed-over requests) must give series.
# Pool transitions and denied retries need an ejection or an exhausted retry budget.
WITH_SERIES_AFTER_TRAFFIC = set(DECLARED) - {
    "skyroute_rejected_requests_total",
    "skyroute_pool_transitions_total",
    "skyroute_retries_denied_total",
    "skyroute_hedges_total",  # only SLO classes with ``hedge`` hedge
    "skyroute_rollout_requests_total",  # only under a rollout (tests/gateway/test_rollouts)
    "skyroute_shadow_requests_total",
    "skyroute_rollout_state",
    "skyroute_rollout_transitions",
    "skyroute_rollout_exposed_requests",
}
_TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
_TIME_WORDS = ("duration", "latency", "age", "ttft", "tpot", "overhead", "time")


@dataclass(frozen=True)
class Exposition:
    """One scrape: the families' types and every sample as (name, labels, value)."""

    text: str
    types: dict[str, str]
    samples: list[tuple[str, dict[str, str], float]]

    def family_of(self, sample: str) -> str | None:
        for family, kind in self.types.items():
            base = family.removesuffix("_total") if kind == "counter" else family
            if sample == family or sample in {f"{base}{s}" for s in ("_bucket", "_count", "_sum")}:
                return family
        return None

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels``."""
        return sum(
            v
            for n, sample_labels, v in self.samples
            if n == name and labels.items() <= sample_labels.items()
        )


def moved(before: Exposition, after: Exposition, name: str, **labels: str) -> float:
    """How much the samples ``name`` with ``labels`` went up between two scrapes."""
    return after.value(name, **labels) - before.value(name, **labels)


def parse(text: str) -> Exposition:
    types = {
        name: kind
        for name, kind in _TYPE_LINE.findall(text)
        # prometheus_client's companion series of counters and histograms.
        if not name.endswith("_created")
    }
    samples = [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    ]
    return Exposition(text, types, samples)


@dataclass
class Running:
    fleet: Fleet
    gateway: Gateway

    def scrape(self) -> Exposition:
        resp = self.gateway.admin("GET", "/metrics")
        assert resp.status_code == 200
        return parse(resp.text)

    def chat(
        self, *, stream: bool = False, slo: str = "batch", request_id: str | None = None
    ) -> httpx.Response:
        body = {"model": CHAT, "messages": [{"role": "user", "content": "count me"}],
                "max_tokens": 12, "stream": stream}  # fmt: skip
        if stream:
            body["stream_options"] = {"include_usage": True}
        headers = {"Authorization": f"Bearer {API_KEY}", "x-skyroute-slo": slo}
        if request_id:
            headers["x-request-id"] = request_id
        resp = httpx.post(
            f"{self.gateway.base}/v1/chat/completions", json=body, headers=headers, timeout=30
        )
        assert resp.status_code == 200, resp.text
        return resp

    def failover(self) -> httpx.Response:
        """One request whose first attempt (the cheap pool) answers 503."""
        cheap = self.fleet.engines["cheap"]
        cheap.set_faults(fail_rate=1.0, fail_status=503)
        try:
            return self.chat()
        finally:
            cheap.set_faults()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Running]:
    """One fleet and one gateway process for the module; tests compare before/after."""
    fleet = start_fleet(tmp_path_factory.mktemp("metrics"))
    try:
        gateway = Gateway(fleet.policy_path, redis_url, unique_prefix()).start()
        try:
            yield Running(fleet, gateway)
        finally:
            gateway.stop()
    finally:
        fleet.stop()


@pytest.fixture(scope="module")
def after_traffic(running: Running) -> Exposition:
    """A scrape after a plain, a streamed and a failed-over request."""
    running.chat()
    running.chat(stream=True)
    running.failover()
    return running.scrape()


# --- names and labels ---------------------------------------------------------------


def test_exposed_metric_families_match_the_declared_list(after_traffic: Exposition) -> None:
    declared = {name: kind for name, (kind, _) in DECLARED.items()}
    assert after_traffic.types == declared


def test_every_series_has_the_declared_label_names(after_traffic: Exposition) -> None:
    seen: set[str] = set()
    for name, labels, _ in after_traffic.samples:
        family = after_traffic.family_of(name)
        assert family in DECLARED, name
        seen.add(family)
        assert set(labels) - {"le"} == DECLARED[family][1], (name, labels)
    assert seen >= WITH_SERIES_AFTER_TRAFFIC


def test_metric_names_follow_prometheus_conventions(after_traffic: Exposition) -> None:
    for name, kind in after_traffic.types.items():
        assert name.startswith("skyroute_"), name
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", name), name
        assert name.endswith("_total") == (kind == "counter"), name
        assert not re.search(r"_(ms|milliseconds|minutes|hours|us|ns)(_|$)", name), name
        # Whole words: "usage" is not an "age".
        if any(word in name.split("_") for word in _TIME_WORDS):
            assert name.endswith("_seconds"), f"{name}: times are in seconds"


def test_redis_error_count_is_a_counter_with_total_suffix(after_traffic: Exposition) -> None:
    assert after_traffic.types.get("skyroute_redis_errors_total") == "counter"


# --- what a routed request moves -----------------------------------------------------


def _moves(running: Running) -> tuple[httpx.Response, Exposition, Exposition]:
    before = running.scrape()
    resp = running.chat()
    return resp, before, running.scrape()


@pytest.mark.parametrize(
    "series",
    [
        "requests_total",
        "request_duration_count",
        "overhead_count",
        "slo_requests_met",
        "goodput_tokens",
        "route_decisions_cheapest_feasible",
    ],
)
def test_routed_request_moves_its_counter_or_histogram(running: Running, series: str) -> None:
    resp, before, after = _moves(running)
    pool = resp.headers["x-skyroute-pool"]
    output_tokens = resp.json()["usage"]["completion_tokens"]
    name, labels, delta = {
        "requests_total": ("skyroute_requests_total",
                           {"model": CHAT, "pool": pool, "status": "ok", "slo_class": "batch"}, 1),
        "request_duration_count": ("skyroute_request_duration_seconds_count", {"model": CHAT}, 1),
        "overhead_count": ("skyroute_gateway_overhead_seconds_count", {}, 1),
        "slo_requests_met": ("skyroute_slo_requests_total",
                             {"model": CHAT, "slo_class": "batch", "met": "true"}, 1),
        "goodput_tokens": ("skyroute_goodput_tokens_total", {"model": CHAT}, output_tokens),
        "route_decisions_cheapest_feasible": ("skyroute_route_decisions_total",
                                              {"model": CHAT, "reason": "cheapest-feasible"}, 1),
    }[series]  # fmt: skip
    assert output_tokens > 0
    assert moved(before, after, name, **labels) == delta


def test_streamed_request_observes_ttft_and_tpot_histograms(running: Running) -> None:
    before = running.scrape()
    running.chat(stream=True)
    after = running.scrape()
    for name in ("skyroute_ttft_seconds_count", "skyroute_tpot_seconds_count"):
        assert moved(before, after, name, model=CHAT) == 1, name


def test_failover_moves_failovers_and_upstream_errors_counters(running: Running) -> None:
    before = running.scrape()
    resp = running.failover()
    after = running.scrape()
    assert resp.headers["x-skyroute-attempts"] == "2"
    failed = {"pool": "gcp:us-central1:cheap", "kind": "UpstreamStatusError"}
    assert moved(before, after, "skyroute_failovers_total", model=CHAT) == 1
    assert moved(before, after, "skyroute_upstream_errors_total", **failed) == 1


def test_rejected_request_counts_in_rejected_requests_total(running: Running) -> None:
    before = running.scrape()
    resp = httpx.post(
        f"{running.gateway.base}/v1/chat/completions",
        json={"model": CHAT, "messages": [{"role": "user", "content": "x"}]},
        headers={"Authorization": "Bearer sk-not-a-key-0123456789"},
        timeout=10,
    )
    assert resp.status_code == 401
    after = running.scrape()
    assert moved(before, after, "skyroute_rejected_requests_total") == 1


# --- cardinality ----------------------------------------------------------------------


def test_exposition_contains_no_tenant_key_or_request_id(running: Running) -> None:
    request_id = f"req-{uuid.uuid4().hex}"
    running.chat(request_id=request_id)
    running.chat(stream=True, request_id=request_id)
    text = running.scrape().text
    assert request_id not in text
    assert API_KEY not in text
    assert hashlib.sha256(API_KEY.encode()).hexdigest() not in text
