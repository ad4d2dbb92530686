"""The offline LP bound: no SLO-meeting way to serve a tiny trace is cheaper."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

from simengine.perf_model import EngineProfile
from simulator.bound import lower_bound
from simulator.engine import SimConfig, simulate
from simulator.fleet import Fleet
from simulator.metrics import summarize
from simulator.scaler import StaticScaler
from simulator.spec import fluid_goodput_tokens_per_s
from tests.simulator.conftest import policy, pool, spec_of, workload

# SLO: TTFT 600 ms, TPOT 10 ms, so a SLOW replica ($1/h) runs one sequence (100 tok/s) and
# a FAST one ($3/h) two (200 tok/s). Four requests keep a SLOW replica each busy for 1 s
# (0.1 s prefill + 90 tokens at 10 ms); the fifth, at 1.05 s, puts every token inside the
# horizon. Best fleet: 4 SLOW × 1.05 s; bound: 360 tokens at 100 tok/s = 3.6 replica-s.
ROWS = [(0.0, 100, 91), (0.01, 100, 91), (0.02, 100, 91), (0.03, 100, 91), (1.05, 1, 1)]


@dataclass
class Fixed:
    """Routes request i to ``assignment[i]``."""

    assignment: tuple[int, ...]
    name: str = "fixed"

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        return self.assignment[i]

    def observe(self, client: int, pool: int, latency_s: float, output_tokens: int) -> None:
        pass


def _spec(slow: int, fast: int, tpot_ms: float = 10.0):
    pols = policy(
        [
            pool("slow", "SLOW", usd_per_gpu_hour=1.0, replicas=(0, 4, slow)),
            pool("fast", "FAST", usd_per_gpu_hour=3.0, replicas=(0, 4, fast)),
        ],
        ttft_ms=600.0,
        tpot_ms=tpot_ms,
    )
    return spec_of(pols)


def test_brute_force_over_every_slo_meeting_assignment_never_beats_the_bound() -> None:
    spec = _spec(0, 0)
    work = workload(spec, ROWS)
    bound = lower_bound(spec, work, window_s=work.horizon_s)
    whole = lower_bound(spec, work, window_s=work.horizon_s, integer=True)
    best = np.inf
    for slow, fast in itertools.product(range(5), range(3)):
        fleet_spec = _spec(slow, fast)
        for assignment in itertools.product(range(2), repeat=len(ROWS)):
            run = simulate(
                fleet_spec, work, Fixed(assignment), StaticScaler(), SimConfig(warmup_s=0.0)
            )
            summary, _ = summarize(fleet_spec, work, run, window_s=work.horizon_s)
            if summary.slo_attainment == 1.0:
                best = min(best, summary.provisioned_usd)
    assert np.isfinite(best), "no assignment met every SLO: the test proves nothing"
    assert bound.total_usd == pytest.approx(3.6 / 3600.0)
    assert best >= whole.total_usd >= bound.total_usd * (1 - 1e-6)


def test_integer_bound_bills_a_boot_and_keeps_a_replica_between_close_peaks() -> None:
    # One SLOW pool ($1/h, 100 tok/s within 10 ms), boots in 2 s; 1 s windows and blocks.
    # 50 decode tokens in [8, 8.5) and in [9, 9.5) s: the LP buys 0.5 replica-s twice.
    # Whole replicas: one boot (2 s) and the replica kept from window 8 into window 9, so
    # 2 + 0.5 + 0.5 = 3 replica-s; two boots would cost 5, a replica held from t = 0 9.
    # (The best real plan, launched at 6 s and held 8-9.5 s, costs 3.5: capacity is
    # counted per window, so the bound may boot it any time in window 8.)
    spec = spec_of(
        policy([pool("slow", "SLOW", usd_per_gpu_hour=1.0, replicas=(0, 4, 0))], tpot_ms=10.0),
        provisioning_s=2.0,
    )
    work = workload(spec, [(0.0, 1, 1), (8.0, 1, 51), (9.0, 1, 51), (10.0, 1, 1)])
    lp = lower_bound(spec, work, window_s=1.0)
    whole = lower_bound(spec, work, window_s=1.0, integer=True, block_s=1.0)
    assert lp.total_usd == pytest.approx(1.0 / 3600.0)
    assert whole.total_usd == pytest.approx(3.0 / 3600.0, rel=1e-3)
    assert whole.launches.sum() == pytest.approx(1.0)


def test_bound_sends_a_class_only_where_a_lone_request_meets_the_ttft_slo() -> None:
    # 800 prompt tokens take 0.8 s on SLOW (+20 ms RTT > 600 ms): only FAST can serve it.
    spec = _spec(0, 0, tpot_ms=15.0)
    work = workload(spec, [(0.0, 800, 50), (30.0, 10, 1)])
    bound = lower_bound(spec, work, window_s=work.horizon_s)
    # FAST emits 200 tok/s within 15 ms TPOT at $3/h; SLOW would have cost 2/3 of that.
    assert bound.total_usd == pytest.approx(49 / 200 * 3.0 / 3600.0)


def test_bound_costs_the_tokens_at_the_fluid_goodput_of_the_cheapest_feasible_pool() -> None:
    spec = _spec(0, 0, tpot_ms=15.0)
    work = workload(spec, [(0.0, 10, 101), (30.0, 10, 1)])
    bound = lower_bound(spec, work, window_s=work.horizon_s)
    # SLOW meets 15 ms at 1.5 sequences: 1.5 / 15 ms = 100 tok/s; 100 tokens = 1 replica-s.
    assert bound.total_usd == pytest.approx(1.0 / 3600.0)


def test_demand_beyond_every_pools_max_is_left_unserved_and_counted() -> None:
    # At most two SLOW (100 tok/s each) and two FAST (200 tok/s) replicas: 600 tok/s, or
    # 12,000 tokens in 20 s, against 20 requests of 1,000 decode tokens: 8 left over.
    spec = spec_of(
        policy(
            [
                pool("slow", "SLOW", usd_per_gpu_hour=1.0, replicas=(0, 2, 0)),
                pool("fast", "FAST", usd_per_gpu_hour=3.0, replicas=(0, 2, 0)),
            ],
            tpot_ms=10.0,
        )
    )
    work = workload(spec, [(0.0, 10, 1001)] * 20 + [(20.0, 10, 1)])
    bound = lower_bound(spec, work, window_s=20.0)
    assert bound.unservable == 8
    assert bound.replicas[0].tolist() == pytest.approx([2.0, 2.0])


def test_fluid_goodput_is_the_occupancy_where_tpot_meets_the_slo() -> None:
    profile = EngineProfile("p", 256, 8000.0, 25.0, 75.0, 8000.0, 1000)
    n = 1 + (60.0 - 25.0) / (50.0 / 255)
    assert fluid_goodput_tokens_per_s(profile, 60.0) == pytest.approx(n / 60.0 * 1000.0)
    assert fluid_goodput_tokens_per_s(profile, 100.0) == pytest.approx(256 / 75.0 * 1000.0)
    assert fluid_goodput_tokens_per_s(profile, 20.0) == 0.0


def _long_workload(seconds: int, seed: int = 0):
    """Poisson arrivals for ``seconds`` whose rate steps up and down every 40 s."""
    spec = _spec(0, 0, tpot_ms=15.0)
    rng = np.random.default_rng(seed)
    rate = np.where((np.arange(seconds) // 40) % 2 == 0, 2.0, 6.0)
    t = np.sort(np.concatenate([s + rng.random(rng.poisson(r)) for s, r in enumerate(rate)]))
    rows = [(float(a), int(p), int(o)) for a, p, o in
            zip(t, rng.integers(20, 200, len(t)), rng.integers(5, 40, len(t)), strict=True)]  # fmt: skip
    return spec, workload(spec, rows)


def test_a_long_trace_is_bounded_in_chunks_and_the_bound_stays_below_the_whole_solve() -> None:
    spec, work = _long_workload(300)
    args = {"window_s": 10.0, "integer": True, "block_s": 20.0}
    whole = lower_bound(spec, work, **args, chunk_s=None)
    chunked = lower_bound(spec, work, **args, chunk_s=60.0)
    assert chunked.status.startswith("5 chunks")
    # Each chunk relaxes the whole problem: a weaker bound, never a higher one.
    # (Within the solver's relative gap of 1e-3, which either solve may stop at.)
    assert 0 < chunked.total_usd <= whole.total_usd * (1 + 1e-3) + 1e-9
    assert chunked.total_usd <= chunked.primal_usd + 1e-9
    # One plan over every window, each chunk's windows in place.
    assert chunked.replicas.shape == whole.replicas.shape
    assert len(chunked.window_usd) == len(whole.window_usd)
    assert chunked.requests_per_pool.sum() == pytest.approx(whole.requests_per_pool.sum())
    # And it is below what a fixed fleet that serves the trace pays.
    fleet = _spec(4, 4, tpot_ms=15.0)
    halves = Fixed(tuple(i % 2 for i in range(len(work.arrival_s))))
    run = simulate(fleet, work, halves, StaticScaler(), SimConfig(warmup_s=0.0))
    assert chunked.total_usd <= summarize(fleet, work, run)[0].provisioned_usd


def test_a_trace_up_to_two_chunks_long_is_solved_whole_as_before() -> None:
    spec, work = _long_workload(190)
    args = {"window_s": 10.0, "integer": True, "block_s": 20.0}
    one = lower_bound(spec, work, **args, chunk_s=100.0)
    whole = lower_bound(spec, work, **args, chunk_s=None)
    assert "chunks" not in one.status
    assert one.total_usd == whole.total_usd and np.array_equal(one.replicas, whole.replicas)
