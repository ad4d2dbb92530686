"""The fold of the observations stream: pure, no Redis."""

from __future__ import annotations

import math

import pytest

from live.observations import (
    ObservationFold,
    PoolObservations,
    encode_clear,
    encode_flush,
    encode_release,
    encode_rtt,
    stream_went_back,
)
from router.snapshot import EWMA_ALPHA

POOL, OTHER = "aws:a", "gcp:b"


def _flush(replica: str, at_ms: int, inflight: dict[str, int], **obs: PoolObservations) -> bytes:
    return encode_flush(replica, at_ms, inflight, {k.replace("_", ":"): v for k, v in obs.items()})


def _entries(*values: bytes, start_ms: int = 1000) -> list[tuple[str, bytes]]:
    return [(f"{start_ms + n}-0", v) for n, v in enumerate(values)]


def test_applying_the_same_entries_twice_changes_nothing() -> None:
    entries = _entries(
        _flush("gw-a", 1, {POOL: 2}, aws_a=PoolObservations([100.0], [10.0], ok=1)),
        _flush("gw-b", 2, {POOL: 3}, aws_a=PoolObservations([300.0], [30.0], ok=1, errors=1)),
    )
    fold = ObservationFold()
    assert fold.apply(entries) == 2
    once = fold.to_checkpoint()

    assert fold.apply(entries) == 0
    assert fold.to_checkpoint() == once
    est = fold.pools[POOL]
    assert est.ttft_ms == pytest.approx(100.0 + EWMA_ALPHA * 200.0)
    assert (est.samples, est.errors, fold.last_id) == (2, 1, "1001-0")


def test_a_checkpoint_restores_the_same_fold_and_continues_alike() -> None:
    first = _entries(
        _flush("gw-a", 1, {POOL: 2}, aws_a=PoolObservations([100.0, 120.0], [10.0], ok=2)),
        encode_rtt(2, {OTHER: 40.0}),
    )
    later = _entries(
        _flush("gw-a", 3, {POOL: 1}, gcp_b=PoolObservations([50.0], [])), start_ms=2000
    )
    whole = ObservationFold()
    whole.apply(first)
    restored = ObservationFold.from_checkpoint(whole.to_checkpoint())
    whole.apply(later)
    restored.apply(later)

    assert restored.to_checkpoint() == whole.to_checkpoint()
    assert restored.pools[OTHER].rtt_ms == 40.0
    assert math.isnan(restored.pools[OTHER].tpot_ms)


def test_an_unreadable_checkpoint_or_entry_is_skipped_not_fatal() -> None:
    fold = ObservationFold.from_checkpoint(b"{not json")
    assert fold.last_id == "0-0" and not fold.pools

    n = fold.apply(_entries(b"garbage", b'{"t": 1, "r": "x"}', _flush("gw-a", 5, {POOL: 1})))

    assert n == 1 and fold.last_id == "1002-0"
    assert fold.inflight(5, 1000) == {POOL: 1.0}


def test_inflight_sums_live_shares_and_forgets_dead_and_released_ones() -> None:
    fold = ObservationFold()
    fold.apply(_entries(
        _flush("gw-a", 10_000, {POOL: 2, OTHER: 1}),
        _flush("gw-b", 10_000, {POOL: 5}),
        _flush("gw-dead", 1_000, {POOL: 40}),
        _flush("gw-gone", 10_000, {POOL: 7}),
        encode_release("gw-gone", 10_001),
    ))  # fmt: skip

    assert fold.inflight(10_500, 3_000) == {POOL: 7.0, OTHER: 1.0}
    assert fold.inflight(10_500, 3_000, exclude_replica="gw-a") == {POOL: 5.0}
    assert "gw-dead" not in fold.shares  # reaped: a later, longer cutoff does not revive it
    assert fold.inflight(10_500, 60_000) == {POOL: 7.0, OTHER: 1.0}


def test_a_cleared_pool_starts_again_from_nothing() -> None:
    fold = ObservationFold()
    fold.apply(_entries(
        _flush("gw-a", 1, {}, aws_a=PoolObservations([100.0], [10.0], ok=1)),
        encode_clear(2, [POOL]),
        _flush("gw-a", 3, {}, aws_a=PoolObservations([300.0], [], ok=1)),
    ))  # fmt: skip

    assert fold.pools[POOL].ttft_ms == 300.0
    assert fold.pools[POOL].samples == 1
    assert math.isnan(fold.pools[POOL].tpot_ms)


def test_an_entry_id_at_or_before_the_fold_means_the_stream_was_recreated() -> None:
    assert stream_went_back("1000-0", "1000-0")
    assert stream_went_back("999-5", "1000-0")
    assert not stream_went_back("1000-1", "1000-0")
