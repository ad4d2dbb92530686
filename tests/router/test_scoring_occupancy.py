"""TPOT predicted from the fresh batch occupancy, its own headroom, and the slots a pool
keeps for near clients (trunk reservation)."""

from __future__ import annotations

import numpy as np
import pytest

from router.compiled import CompiledPolicy
from router.score_core import TrafficMix
from router.scoring import rank
from router.snapshot import PoolRow
from tests.router.test_scoring import (
    CHEAP,
    FULL_AT_60MS,
    PRICEY,
    _compile,
    _order,
    _pool,
    _req,
    _snap,
)

# The cheap pool is 1 ms from "eu" and 80 ms from "us"; the pricey one only serves "us".
REGIONS = {
    "us": {"aws:us-east-1": 80.0, "gcp:us-central1": 1.0},
    "eu": {"aws:us-east-1": 1.0},
}


def _reserved(reserve: float, near_rtt_ms: float = 50.0) -> CompiledPolicy:
    return _compile(
        _pool(CHEAP, price=1.0),
        _pool(PRICEY, price=2.0),
        client_regions=REGIONS,
        near_reserve=reserve,
        near_rtt_ms=near_rtt_ms,
    )


def test_a_low_measured_tpot_does_not_hide_fresh_load() -> None:
    # Measured at a light load; 6 of 8 slots are now busy, so the profile's 30 -> 60 ms
    # curve at 7/8 occupancy is the prediction.
    policy = _compile(_pool(CHEAP, price=1.0, goodput=FULL_AT_60MS))
    row = PoolRow(inflight=6.0, tpot_ewma_ms=33.0)

    ranking = rank(_req(), policy, _snap(policy, cheap=row))

    assert ranking.tpot_ms[0] == pytest.approx(30 + 30 * 7 / 8)


def test_fresh_local_inflight_raises_the_predicted_tpot_before_the_next_snapshot() -> None:
    policy = _compile(_pool(CHEAP, price=1.0, goodput=FULL_AT_60MS))
    snapshot = _snap(policy, cheap=PoolRow(inflight=0.0, tpot_ewma_ms=31.0))

    idle = rank(_req(), policy, snapshot, np.zeros(1))
    busy = rank(_req(), policy, snapshot, np.full(1, 7.0))

    assert idle.tpot_ms[0] == pytest.approx(33.75)
    assert busy.tpot_ms[0] == pytest.approx(60.0)


def test_a_measured_tpot_above_the_profile_is_a_floor() -> None:
    policy = _compile(_pool(CHEAP, price=1.0))
    ranking = rank(_req(), policy, _snap(policy, cheap=PoolRow(tpot_ewma_ms=50.0)))
    assert ranking.tpot_ms[0] == 50.0


def test_tpot_headroom_is_separate_from_the_ttft_headroom() -> None:
    row = PoolRow(tpot_ewma_ms=57.0)  # 5 % under the 60 ms target
    own = _compile(
        _pool(CHEAP, price=1.0), _pool(PRICEY, price=2.0), slo_headroom=0.1, tpot_headroom=0.0
    )
    inherited = _compile(_pool(CHEAP, price=1.0), _pool(PRICEY, price=2.0), slo_headroom=0.1)

    assert _order(rank(_req(), own, _snap(own, cheap=row))) == [CHEAP, PRICEY]
    assert _order(rank(_req(), inherited, _snap(inherited, cheap=row))) == [PRICEY, CHEAP]
    assert (own.keep_ttft, own.keep_tpot) == (0.9, 1.0)
    assert inherited.keep_tpot == 0.9


def test_far_clients_leave_the_reserved_slots_to_near_ones() -> None:
    policy = _reserved(0.25)
    # 5 busy + this request = 6/8 = 75 % of the cheap pool's slots: at the far cap.
    at_cap = _snap(policy, cheap=PoolRow(inflight=5.0))
    over_cap = _snap(policy, cheap=PoolRow(inflight=6.0))

    assert _order(rank(_req(client_region="us"), policy, at_cap))[0] == CHEAP
    assert _order(rank(_req(client_region="us"), policy, over_cap)) == [PRICEY, CHEAP]
    assert _order(rank(_req(client_region="eu"), policy, over_cap)) == [CHEAP]


def test_the_reserve_explains_itself() -> None:
    policy = _reserved(0.25)
    snapshot = _snap(policy, cheap=PoolRow(inflight=6.0))

    explained = rank(_req(client_region="us"), policy, snapshot).explain()

    reason = {e.pool_id: e.reason for e in explained}[CHEAP]
    assert "slots over 75% are kept for nearer clients" in reason


def test_no_reserve_without_a_near_region_or_when_off() -> None:
    busy = {"cheap": PoolRow(inflight=6.0)}
    # No region within 0.5 ms of the cheap pool: nobody to keep slots for.
    nobody_near = _reserved(0.25, near_rtt_ms=0.5)
    off = _reserved(0.0)

    for policy in (nobody_near, off):
        ranking = rank(_req(client_region="us"), policy, _snap(policy, **busy))
        assert _order(ranking)[0] == CHEAP
        assert ranking.local_load_cap is None


def test_an_unknown_client_region_gets_the_default_regions_reserve() -> None:
    policy = _reserved(0.25)  # the default client region is "us", the first one
    snapshot = _snap(policy, cheap=PoolRow(inflight=6.0))
    assert _order(rank(_req(client_region="atlantis"), policy, snapshot)) == [PRICEY, CHEAP]


def test_queued_work_drains_at_a_full_batchs_tpot_whatever_the_last_measurement_saw() -> None:
    # 8 busy of 8 slots: this request queues behind one. Measured at a light load (31 ms),
    # but a queue only forms behind a full batch, which decodes at the 60 ms SLO TPOT.
    policy = _compile(_pool(CHEAP, price=1.0))
    light = _snap(policy, cheap=PoolRow(inflight=8.0, tpot_ewma_ms=31.0))
    slow = _snap(policy, cheap=PoolRow(inflight=8.0, tpot_ewma_ms=90.0))

    prefill_ms = 500 / 10_000 * 1000
    # RTT 1 ms + one queued request of (prefill + 100 typical tokens × TPOT) over 8 slots.
    for snapshot, drain_ms in ((light, 60.0), (slow, 90.0)):
        ranking = rank(_req(), policy, snapshot)
        expected = 1.0 + (prefill_ms + 100 * drain_ms) / 8 + prefill_ms
        assert ranking.ttft_ms[0] == pytest.approx(expected)


def test_the_queue_ahead_is_priced_by_the_traffic_mix_when_given() -> None:
    # 8 slots all busy: this request is first in the queue and waits 1/8 of the service
    # time of a request ahead, which the mix says is 10 output tokens at the drain TPOT
    # (the 60 ms SLO: nothing measured) and no prompt.
    policy = _compile(_pool(CHEAP, price=1.0, goodput=FULL_AT_60MS))
    idle = rank(_req(), policy, _snap(policy, cheap=PoolRow(inflight=0.0)))
    busy = _snap(policy, cheap=PoolRow(inflight=8.0))
    mixed = rank(_req(), policy, busy, mix=TrafficMix(prompt_tokens=0.0, output_tokens=10.0))
    default = rank(_req(), policy, busy)

    assert mixed.ttft_ms[0] - idle.ttft_ms[0] == pytest.approx(10 * 60.0 / 8)
    # Without a mix the policy's expected output (and this prompt) price the queue.
    assert default.ttft_ms[0] > mixed.ttft_ms[0]


def test_the_near_reserve_is_whole_slots_so_a_small_pool_takes_far_clients_when_busy() -> None:
    policy = _compile(
        _pool(CHEAP, price=1.0, goodput={**FULL_AT_60MS, "max_concurrency": 2}),
        _pool(PRICEY, price=2.0, goodput=FULL_AT_60MS),
        client_regions=REGIONS,
        near_reserve=0.25,
        near_rtt_ms=50.0,
    )
    # 25 % of 2 slots is half a slot: rounded down, nothing is kept back, so a far client
    # may take the second slot (the share alone capped it at 1.5 of 2 slots: one).
    one_busy = _snap(policy, cheap=PoolRow(inflight=1.0))
    assert _order(rank(_req(client_region="us"), policy, one_busy))[0] == CHEAP
