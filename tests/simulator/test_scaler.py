"""The reactive scaler: follows routed work with headroom, spills past max, waits to shrink."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from simulator.scaler import DemandSample, FleetState, ReactiveScaler, StaticScaler
from tests.simulator.conftest import policy, pool, spec_of

# Two pools of 2-slot replicas, TPOT SLO 20 ms = the full-batch TPOT: a replica serves
# 2 slots at 20 ms/token. A request with 0 prompt and 101 output tokens needs 2 slot-s.
SPEC = spec_of(
    policy(
        [
            pool("cheap", usd_per_gpu_hour=1.0, replicas=(0, 3, 0)),
            pool("dear", usd_per_gpu_hour=5.0, replicas=(0, 8, 0)),
        ],
        tpot_ms=20.0,
    )
)
STATE = FleetState.static(SPEC)


def _sample(end_s: float, cheap_requests: float, dear_requests: float = 0.0) -> DemandSample:
    """A 10 s tick in which each pool got that many (0 prompt, 101 output) requests."""
    arrivals = np.array([[cheap_requests, dear_requests]])
    return DemandSample(
        end_s=end_s,
        duration_s=10.0,
        arrivals=arrivals,
        prompt_tokens=np.zeros_like(arrivals),
        output_tokens=arrivals * 101,
        running=np.zeros(2),
        waiting=np.zeros(2),
    )


def test_targets_cover_the_routed_work_with_headroom() -> None:
    # 5 requests per 10 s × 2 slot-s = 1 slot busy; at 80 % of 2 slots that is 1 replica.
    history = [_sample(10.0 * k, 5) for k in range(1, 7)]
    assert ReactiveScaler().decide(60.0, history, STATE).tolist() == [1, 0]
    # 8 per 10 s: 1.6 slots -> 1.6 / (2 × 0.8) = 1.0 -> 1; 9 per 10 s -> 1.125 -> 2.
    history = [_sample(10.0 * k, 9) for k in range(1, 7)]
    assert ReactiveScaler().decide(60.0, history, STATE).tolist() == [2, 0]


def test_work_beyond_a_pools_max_spills_to_the_next_cheapest_allowed_pool() -> None:
    # 40 per 10 s: 8 slots = 4 full replicas, 1 over cheap's max of 3; the spill of one
    # full replica's tokens needs 1 / 0.8 dear replicas -> 2.
    history = [_sample(10.0 * k, 40) for k in range(1, 7)]
    assert ReactiveScaler().decide(60.0, history, STATE).tolist() == [3, 2]


def test_scale_down_waits_until_the_lookback_and_down_window_are_quiet() -> None:
    busy = [_sample(10.0 * k, 9) for k in range(1, 7)]
    quiet = [_sample(60.0 + 10.0 * k, 0) for k in range(1, 24)]
    scaler = ReactiveScaler(lookback_s=60.0, down_window_s=180.0)
    # The 18 ticks of the down window still see a whole busy lookback after 17 quiet ones,
    # and none of it after 23.
    assert scaler.decide(230.0, busy + quiet[:17], STATE).tolist() == [2, 0]
    assert scaler.decide(290.0, busy + quiet, STATE).tolist() == [0, 0]


def test_a_queue_without_new_requests_needs_slots_for_every_request_held() -> None:
    # 3 queued at dear: 3 slots -> 3 / (2 × 0.8) = 1.9 -> 2 replicas.
    sample = replace(_sample(10.0, 0), waiting=np.array([0.0, 3.0]))
    assert ReactiveScaler().decide(10.0, [sample], STATE).tolist() == [0, 2]


def test_static_scaler_keeps_every_pool_as_it_is() -> None:
    state = replace(STATE, booting=np.array([1, 0]), ready=np.array([2, 1]))
    assert StaticScaler().decide(0.0, [], state).tolist() == [3, 1]


def test_a_queue_the_ready_slots_start_within_the_ttft_slo_is_not_a_backlog() -> None:
    # 5 requests per 10 s = 1 busy slot (2 slot-s each): 1 replica. With 1 ready replica
    # (2 slots) and a 2 s TTFT SLO, 2 × 2 s / 2 slot-s = 2 queued requests start in time.
    state = replace(STATE, ready=np.array([1, 0]), ttft_slo_s=2.0)
    history = [_sample(10.0 * k, 5) for k in range(1, 7)]
    history[-1] = replace(history[-1], waiting=np.array([2.0, 0.0]))
    assert ReactiveScaler().decide(60.0, history, state).tolist() == [1, 0]


def test_a_queue_beyond_the_ttft_slo_is_a_backlog_cleared_within_the_lookback() -> None:
    # 32 queued: 30 beyond the 2 that start in time, 60 slot-s over the 60 s lookback = 1
    # more busy slot: 2 slots / (2 × 0.8) -> 2 replicas.
    state = replace(STATE, ready=np.array([1, 0]), ttft_slo_s=2.0)
    history = [_sample(10.0 * k, 5) for k in range(1, 7)]
    history[-1] = replace(history[-1], waiting=np.array([32.0, 0.0]))
    assert ReactiveScaler().decide(60.0, history, state).tolist() == [2, 0]


def _replay(scaler: ReactiveScaler, rate: Callable[[float], int], until_s: float) -> list[int]:
    """Targets of the cheap pool, tick by tick, for ``rate(t)`` requests in the 10 s tick
    starting at t; every target is ready at once (the state follows the scaler)."""
    history: list[DemandSample] = []
    state, out = STATE, []
    for k in range(1, round(until_s / 10.0) + 1):
        end = 10.0 * k
        history.append(_sample(end, rate(end - 10.0)))
        targets = scaler.decide(end, history, state)
        state = replace(STATE, ready=targets)
        out.append(int(targets[0]))
    return out


def _bursts(t: float) -> int:
    # 60 s of 20 requests per 10 s (4 busy slots: 3 replicas, the pool's max) every 500 s.
    return 20 if t % 500.0 < 60.0 else 0


def test_a_scale_down_regretted_by_a_recurring_burst_lengthens_the_pools_hold() -> None:
    learning = _replay(ReactiveScaler(), _bursts, 1500.0)
    fixed = _replay(ReactiveScaler(max_hold_s=240.0), _bursts, 1500.0)
    # Just before the second burst (t = 490 s) both have let the first one's replicas go;
    # the learner regretted it when the second came and holds its peak to the third.
    assert learning[48] == fixed[48] == 0
    assert fixed[98] == 0
    assert learning[98] == 3


def test_a_one_off_peak_is_held_only_for_the_down_window() -> None:
    # One burst, then quiet: the same as without learning.
    once = _replay(ReactiveScaler(), lambda t: 20 if t < 60.0 else 0, 900.0)
    assert once == _replay(ReactiveScaler(max_hold_s=240.0), lambda t: 20 if t < 60.0 else 0, 900.0)
    assert once[-1] == 0


def test_demand_that_comes_back_short_of_the_released_level_is_not_a_regret() -> None:
    # A burst at 3 replicas' work, and after its release a return at 1 replica's (5
    # requests per 10 s): not regretted, so nothing is held longer than without learning.
    def rate(t: float) -> int:
        return 20 if t < 60.0 else (5 if 360.0 <= t < 420.0 else 0)

    learning = _replay(ReactiveScaler(), rate, 1000.0)
    assert learning == _replay(ReactiveScaler(max_hold_s=240.0), rate, 1000.0)
    assert max(learning[36:]) == 1
