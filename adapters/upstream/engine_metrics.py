"""Read a replica's load from its engine's Prometheus ``/metrics`` page.

``parse_engine_load(text)`` turns the text exposition of vLLM, SGLang or TGI into one
:class:`EngineLoad`: requests running and waiting, KV-cache use and the prefix-cache hit
rate, whichever the engine reports. Pure text in, value out: the scraper that fetches the
page (interval, timeouts, bounded concurrency) lives elsewhere.

The metric names are the engines' own, read from their sources and documentation:

- vLLM (V1 engine, ``vllm/v1/metrics/loggers.py``): gauges ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (0-1; before 0.9 it was
  ``vllm:gpu_cache_usage_perc``, kept by later releases as a deprecated alias), counters
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (tokens; before
  0.9 ``vllm:gpu_prefix_cache_*``). The V0 engine reported the rate itself as the gauge
  ``vllm:gpu_prefix_cache_hit_rate`` (-1 with prefix caching off). Labels ``engine``
  (data-parallel rank) and ``model_name``.
- SGLang (``python/sglang/srt/metrics/collector.py``, docs "Production Metrics"): gauges
  ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage`` (used /
  total KV tokens, 0-1) and ``sglang:cache_hit_rate`` (0-1). Labels ``model_name``,
  ``engine_type``, ``tp_rank``, ``pp_rank`` and, with data parallelism, ``dp_rank``.
- TGI (docs "Metrics", ``router/src``): gauges ``tgi_batch_current_size`` (running) and
  ``tgi_queue_size`` (waiting), without labels. TGI reports no KV-cache use or hit rate.

Label sets are shares of one replica (one per data-parallel engine or model name), so
request counts are summed across them and fractions averaged. Comment lines, unknown
metrics, malformed lines and NaN samples are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from base.errors import EngineMetricsError

__all__ = ["EngineKind", "EngineLoad", "parse_engine_load"]


class EngineKind(StrEnum):
    """The inference engine a metrics page came from."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One replica's load as its engine reports it.

    Attributes:
        kind: which engine answered.
        running: requests in the running batch (summed over engines/label sets).
        waiting: requests queued for the batch.
        kv_cache_usage: fraction of KV-cache capacity in use, 0-1; None if not reported.
        prefix_cache_hit_rate: fraction of prompt tokens served from the prefix cache
            since the engine started, 0-1; None if not reported or nothing queried yet.
        prefix_cache_queries: cumulative prompt tokens looked up in the prefix cache
            (vLLM's counter); None where the engine reports only a rate.
        prefix_cache_hits: cumulative prompt tokens found there (vLLM's counter).
    """

    kind: EngineKind
    running: float
    waiting: float
    kv_cache_usage: float | None = None
    prefix_cache_hit_rate: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None

    def hit_rate_since(self, earlier: EngineLoad) -> float | None:
        """Prefix-cache hit rate over the interval since ``earlier`` (a previous scrape of
        the same replica), from the counters' deltas; falls back to the cumulative rate.

        A counter that went down means the engine restarted: the interval is then this
        scrape's totals. None when no tokens were looked up in the interval.
        """
        if self.prefix_cache_queries is None or self.prefix_cache_hits is None:
            return self.prefix_cache_hit_rate
        queries, hits = self.prefix_cache_queries, self.prefix_cache_hits
        if earlier.prefix_cache_queries is not None and earlier.prefix_cache_hits is not None:
            dq = queries - earlier.prefix_cache_queries
            dh = hits - earlier.prefix_cache_hits
            if dq >= 0 and dh >= 0:
                queries, hits = dq, dh
        return _ratio(hits, queries)


@dataclass(frozen=True)
class _Spec:
    """Where one engine reports each value; within a tuple, the first name present wins
    (current name first, deprecated aliases after)."""

    kind: EngineKind
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_usage: tuple[str, ...] = ()
    hit_rate: tuple[str, ...] = ()
    hits: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()

    @property
    def names(self) -> frozenset[str]:
        return frozenset(
            self.running + self.waiting + self.kv_usage + self.hit_rate + self.hits + self.queries
        )


_SPECS: tuple[_Spec, ...] = (
    _Spec(
        EngineKind.VLLM,
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        hit_rate=("vllm:gpu_prefix_cache_hit_rate",),
        hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    ),
    _Spec(
        EngineKind.SGLANG,
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        kv_usage=("sglang:token_usage",),
        hit_rate=("sglang:cache_hit_rate",),
    ),
    _Spec(EngineKind.TGI, running=("tgi_batch_current_size",), waiting=("tgi_queue_size",)),
)
_KNOWN: frozenset[str] = frozenset().union(*(spec.names for spec in _SPECS))


def parse_engine_load(text: str) -> EngineLoad:
    """The load reported by a vLLM, SGLang or TGI ``/metrics`` page (Prometheus text 0.0.4).

    The engine is recognised by its metric names (vLLM, then SGLang, then TGI). A
    running or waiting gauge the page lacks reads as 0: TGI, for one, creates its gauges
    only when it first queues or batches a request.

    Raises:
        EngineMetricsError: if the page holds none of the metrics above (an HTML page,
            another program's metrics, or a TGI that has served nothing yet).
    """
    samples = _samples(text, _KNOWN)
    for spec in _SPECS:
        if not spec.names.isdisjoint(samples):
            return _load(spec, samples)
    raise EngineMetricsError(
        "the metrics page has none of the load metrics of vLLM "
        "(vllm:num_requests_running), SGLang (sglang:num_running_reqs) or TGI "
        "(tgi_queue_size); is this an engine's /metrics endpoint?"
    )


def _load(spec: _Spec, samples: dict[str, list[float]]) -> EngineLoad:
    hits = _first(samples, spec.hits)
    queries = _first(samples, spec.queries)
    rate = _ratio(sum(hits), sum(queries)) if hits and queries else None
    if rate is None:
        # vLLM's V0 engine reports -1 when prefix caching is off: not a rate.
        rate = _mean([v for v in _first(samples, spec.hit_rate) if v >= 0.0])
    return EngineLoad(
        kind=spec.kind,
        running=sum(_first(samples, spec.running)),
        waiting=sum(_first(samples, spec.waiting)),
        kv_cache_usage=_mean(_first(samples, spec.kv_usage)),
        prefix_cache_hit_rate=rate,
        prefix_cache_queries=sum(queries) if queries else None,
        prefix_cache_hits=sum(hits) if hits else None,
    )


def _first(samples: dict[str, list[float]], names: Iterable[str]) -> list[float]:
    for name in names:
        if name in samples:
            return samples[name]
    return []


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ratio(hits: float, queries: float) -> float | None:
    return min(max(hits / queries, 0.0), 1.0) if queries > 0 else None


def _samples(text: str, wanted: frozenset[str]) -> dict[str, list[float]]:
    """Values of the ``wanted`` metrics, one per sample line (label set), in page order.

    Tolerant by design: a line that does not parse is skipped, not fatal, because one odd
    line from an exporter must not blind the router to a replica's whole load.
    """
    out: dict[str, list[float]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        end = 0
        while end < len(line) and line[end] not in "{ \t":
            end += 1
        name = line[:end]
        if name not in wanted:
            continue
        rest = line[end:]
        if rest.startswith("{"):
            close = _labels_end(rest)
            if close < 0:
                continue
            rest = rest[close + 1 :]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out.setdefault(name, []).append(value)
    return out


def _labels_end(rest: str) -> int:
    """Index of the ``}`` closing the label set that ``rest`` opens, -1 if none: label
    values are quoted and may hold ``}``, ``,`` and escaped quotes."""
    quoted = False
    i = 1
    while i < len(rest):
        ch = rest[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch == "}":
            return i
        i += 1
    return -1
