"""Derived tables of a snapshot's per-model views (``router.snapshot.ModelView``): the
arrays as Python lists for the scalar scoring, the stacked constants of the vectorised
scoring, and the test of whether a price order is a cost order."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from base.types import FloatArray, IntArray

__all__ = ["RegionLists", "Stacked", "ViewLists", "price_order_exact"]


class ViewLists(NamedTuple):
    """A ModelView's arrays as Python lists (same names, same order), for the scalar
    scoring of models with few pools (``router.score_core``)."""

    members: list[int]
    inflight: list[float]
    tpot_base_ms: list[float]
    tpot_span_ms: list[float]
    tpot_measured_ms: list[float]
    tpot_queue_ms: list[float]
    queue_output_ms: list[float]
    prefill_ms_per_token: list[float]
    inv_slots: list[float]
    one_minus_slots: list[float]
    usd_per_token: list[float]
    priced: list[bool]
    available: list[bool]
    weight: list[float]
    has_capacity: list[bool]
    ready: list[bool]


class RegionLists(NamedTuple):
    """A RegionView's arrays as Python lists, for the scalar scoring."""

    rtt_ms: list[float]
    region_ok: list[bool]
    ready_ok: list[bool]
    slot_limit: list[float] | None


class Stacked(NamedTuple):
    """A ModelView's constants for the vectorised scoring, two rows deep: row 0 feeds the
    TTFT prediction, row 1 the load and TPOT (``router.score_core.score_vector``). One
    NumPy call on two same-shaped rows costs about what it costs on one, while a call
    that broadcasts a row over two costs three times as much: the request path works on
    both rows at once, against these."""

    members: IntArray  # members, twice
    inflight: FloatArray  # inflight, twice
    offset: FloatArray  # one_minus_slots; 1
    inv_slots: FloatArray  # inv_slots, twice
    upper: FloatArray  # +inf; 1 (the load's cap in the TPOT profile)
    lower: FloatArray  # 0; -inf (no queueing wait below zero)
    scale: FloatArray  # 1; tpot_span_ms


def price_order_exact(sorted_price: FloatArray) -> bool:
    """Whether, for every whole number of tokens t in [1, 2**53), ``t * p`` orders the
    prices ``sorted_price`` (ascending) as ``p`` does, ties exactly where ``p`` ties.

    Rounding is monotonic, so ``t * p0 <= t * p1`` whenever ``p0 <= p1``; but two prices
    a rounding step or so apart can give the same cost, which a stable sort by cost then
    orders by policy position, not by price. When neighbouring distinct prices differ
    by a factor of at least 1 + 2**-48, their exact products do too, and two roundings
    (each within 2**-53 relative, the products being normal numbers: prices between the
    smallest normal double and 1e280) cannot bring them together. Unpriced (+inf) pools
    are never feasible and do not count.
    """
    p = sorted_price[np.isfinite(sorted_price)]
    if not len(p):
        return True
    if not (p[0] >= np.finfo(np.float64).tiny and p[-1] <= 1e280):
        return False
    lo, hi = p[:-1], p[1:]
    return bool(np.all((hi == lo) | (hi >= lo * (1.0 + 2.0**-48))))
