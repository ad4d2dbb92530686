"""Counters and histograms updated on the request path, with no lock.

prometheus_client guards every value with a lock and walks a histogram's buckets in
Python: the per-request metrics (a counter or two, three histograms) cost about 6 us a
request in isolation (``GatewayMetrics.observe_finish``). Every update of these comes
from the event loop's thread, so a plain dict of floats does: a counter is one dict
update, an observation a bisect and two list updates. They are exposed through the
same registry as the other metrics (``LoopMetrics`` is a prometheus_client collector),
with the same names, types, labels and buckets, so a scrape reads as before (without the
optional ``_created`` series).

Not safe for updates from two threads at once. Reading is: ``collect`` copies each dict
and list before it formats them, and those copies do not release the GIL.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

__all__ = ["LoopCounter", "LoopHistogram", "LoopMetrics"]

Labels = tuple[str, ...]


class LoopCounter:
    """A labelled counter (``name`` ends in ``_total``). ``inc(labels, amount)`` with one
    value per label name, in order; amounts must be >= 0 (not checked: the callers pass
    counts)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.values: dict[Labels, float] = {}

    def inc(self, labels: Labels = (), amount: float = 1.0) -> None:
        values = self.values
        values[labels] = values.get(labels, 0.0) + amount

    def collect(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in list(self.values.items()):
            family.add_metric(list(labels), value)
        return family


class LoopHistogram:
    """A labelled histogram with fixed upper bounds (``+Inf`` added); an observation is
    counted in the first bucket whose bound is >= it, as Prometheus's ``le`` says."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = (),
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = [float(b) for b in sorted(buckets)]
        if not self.bounds or self.bounds[-1] != math.inf:
            self.bounds.append(math.inf)
        # Per label set: a count per bucket (not cumulative), then the sum.
        self.data: dict[Labels, list[float]] = {}

    def observe(self, labels: Labels, value: float) -> None:
        counts = self.data.get(labels)
        if counts is None:
            counts = self.data[labels] = [0.0] * (len(self.bounds) + 1)
        counts[bisect_left(self.bounds, value)] += 1.0
        counts[-1] += value

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, live in list(self.data.items()):
            counts = list(live)
            cumulative, buckets = 0.0, []
            for bound, count in zip(self.bounds, counts, strict=False):
                cumulative += count
                buckets.append((_le(bound), cumulative))
            family.add_metric(list(labels), buckets, counts[-1])
        return family


def _le(bound: float) -> str:
    """An ``le`` label as prometheus_client spells it."""
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]


class LoopMetrics(Collector):
    """The lock-free metrics of one registry, collected with it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._metrics: list[LoopCounter | LoopHistogram] = []
        registry.register(self)

    def counter(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> LoopCounter:
        counter = LoopCounter(name, documentation, labelnames)
        self._metrics.append(counter)
        return counter

    def histogram(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> LoopHistogram:
        histogram = LoopHistogram(name, documentation, labelnames, buckets)
        self._metrics.append(histogram)
        return histogram

    def collect(self) -> Iterator[Metric]:
        for metric in self._metrics:
            yield metric.collect()

    def describe(self) -> Iterator[Metric]:
        # Names only, for the registry's duplicate check (``auto_describe``).
        for metric in self._metrics:
            empty = (CounterMetricFamily if isinstance(metric, LoopCounter)
                     else HistogramMetricFamily)  # fmt: skip
            yield empty(metric.name, metric.documentation, labels=metric.labelnames)
