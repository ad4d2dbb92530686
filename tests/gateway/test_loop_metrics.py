"""The lock-free request-path metrics scrape exactly as prometheus_client's own counters
and histograms do, fed the same updates (bounds included: ``le`` is inclusive)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.loop_metrics import LoopMetrics

BUCKETS = (0.01, 0.1, 1, 2.5)
# On a bound, between bounds, below the first and above the last.
VALUES = (0.01, 0.05, 0.1, 0.0, 1.0, 2.5, 7.0, 0.3)


def _samples(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def _types(registry: CollectorRegistry) -> list[str]:
    return [ln for ln in generate_latest(registry).decode().splitlines() if ln.startswith("#")]


def test_counters_and_histograms_scrape_as_prometheus_clients_own() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    counter = Counter("x_requests_total", "Requests.", ("model", "status"), registry=theirs)
    histogram = Histogram("x_seconds", "Time.", ("model",), buckets=BUCKETS, registry=theirs)
    plain = Histogram("x_overhead_seconds", "Overhead.", buckets=BUCKETS, registry=theirs)
    hot = LoopMetrics(ours)
    loop_counter = hot.counter("x_requests_total", "Requests.", ("model", "status"))
    loop_histogram = hot.histogram("x_seconds", "Time.", ("model",), BUCKETS)
    loop_plain = hot.histogram("x_overhead_seconds", "Overhead.", (), BUCKETS)

    for n, value in enumerate(VALUES):
        model, status = ("a", "b")[n % 2], ("ok", "error")[n % 3 == 0]
        counter.labels(model, status).inc(n)
        loop_counter.inc((model, status), n)
        histogram.labels(model).observe(value)
        loop_histogram.observe((model,), value)
        plain.observe(value)
        loop_plain.observe((), value)

    assert _samples(ours) == _samples(theirs)
    assert [ln for ln in _types(theirs) if "_created" not in ln] == _types(ours)


def test_a_metric_with_no_update_yet_has_no_series_but_is_declared() -> None:
    registry = CollectorRegistry()
    hot = LoopMetrics(registry)
    hot.counter("y_total", "Nothing yet.", ("model",))
    text = generate_latest(registry).decode()
    assert "# TYPE y_total counter" in text
    assert _samples(registry) == set()
