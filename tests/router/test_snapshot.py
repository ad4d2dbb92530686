"""Snapshot.build taking over the previous snapshot's views: only when they would be the
same views, so a rebuilt snapshot routes exactly as a fresh one would."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import numpy as np

from router.health import HealthRecord, PoolState
from router.snapshot import PoolRow, Snapshot
from tests.router.test_score_core import random_policy, random_row

TRIALS = 300


def same(a: Any, b: Any) -> bool:
    """Deep equality of views: arrays by value (NaN equal to NaN), dataclasses by field."""
    if isinstance(a, np.ndarray):
        if a.dtype == object:
            return bool(a.shape == b.shape and a.tolist() == b.tolist())
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and np.isnan(a):
        return isinstance(b, float) and bool(np.isnan(b))
    return bool(a == b)


def changed(row: PoolRow, what: str) -> PoolRow:
    """``row`` with one value the views depend on (or, for "ttft", one they do not)."""
    match what:
        case "inflight":
            return replace(row, inflight=row.inflight + 1)
        case "ready":
            ready = row.ready_replicas
            return replace(row, ready_replicas=1.0 if np.isnan(ready) else ready + 1)
        case "tpot":
            return replace(row, tpot_ewma_ms=33.0, tpot_at_s=99.0)
        case "price":
            return replace(row, usd_per_gpu_hour=5.5)
        case "state":
            ejected = row.state is PoolState.EJECTED
            return replace(
                row,
                health=HealthRecord()
                if ejected
                else HealthRecord(state=PoolState.EJECTED, until_s=60.0),
            )
        case _:
            return replace(row, ttft_ewma_ms=row.ttft_ewma_ms + 5.0, ttft_at_s=99.0)


def test_views_are_reused_only_when_a_fresh_build_gives_the_same_views() -> None:
    rng = np.random.default_rng(7)
    reused = 0
    for _ in range(TRIALS):
        policy = random_policy(rng)
        rows = {p: random_row(rng) for p in policy.pool_ids}
        first = Snapshot.build(policy, rows, 100.0)
        what = str(rng.choice(["none", "inflight", "ready", "tpot", "price", "state", "ttft"]))
        if what != "none":
            pid = policy.pool_ids[int(rng.integers(len(policy.pool_ids)))]
            rows = {**rows, pid: changed(rows[pid], what)}
        again = Snapshot.build(policy, rows, 100.0, previous=first)
        fresh = Snapshot.build(policy, rows, 100.0)
        # Whatever was taken over, the views are what a fresh build gives.
        assert same(again.views, fresh.views), what
        taken = again.views is first.views
        if what in ("none", "ttft"):
            assert taken, what  # nothing the views read changed
            reused += 1
        elif what in ("inflight", "state"):
            assert not taken, what  # always a different column or state
    assert reused > TRIALS // 5


def test_a_ramping_pool_is_rebuilt_as_time_passes() -> None:
    rng = np.random.default_rng(5)
    policy = random_policy(rng)
    rows = {p: PoolRow(health=HealthRecord(readmitted_s=90.0)) for p in policy.pool_ids}
    first = Snapshot.build(policy, rows, 100.0)
    later = Snapshot.build(policy, rows, 101.0, previous=first)
    assert later.views is not first.views  # its traffic share grew
    assert same(later.views, Snapshot.build(policy, rows, 101.0).views)


def test_a_snapshot_for_another_policy_is_not_reused_by_shape_alone() -> None:
    rng = np.random.default_rng(3)
    a, b = random_policy(rng), random_policy(rng)
    first = Snapshot.build(a, {}, 0.0)
    other = Snapshot.build(b, {}, 0.0, previous=first)
    assert same(other.views, Snapshot.build(b, {}, 0.0).views)
