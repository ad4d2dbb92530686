"""RoutingState: local in-flight counts, observations and outlier state on top of the
compiled policy. Pure: policies are parsed from text, ``now`` is passed explicitly."""

from __future__ import annotations

import pytest
import yaml

from gateway.routing_state import RoutingState
from router.compiled import CompiledPolicy, compile_policy
from router.health import HealthRecord
from router.policy_loader import parse_policy
from router.scoring import Ranking, RouteRequest
from router.snapshot import PoolRow

A = "aws:us-east-1:a"
B = "gcp:us-central1:b"
C = "azure:eastus:c"
NOW = 1_000_000.0
REQUEST = RouteRequest(
    model="m", prompt_tokens=100, max_output_tokens=10, slo_class="fast", client_region="here"
)
# Every pool: one replica of 4 slots, same price, so the near-tie group orders by load.
SLOTS = 4


def _policy(*pool_ids: str, failures: int = 2, **routing: object) -> CompiledPolicy:
    pools = []
    for pid in pool_ids:
        provider, region, _ = pid.split(":")
        pools.append(
            {
                "id": pid,
                "provider": provider,
                "region": region,
                "model": "m",
                "upstream_model": "org/m",
                "gpu_type": "H100",
                "gpus_per_replica": 1,
                "endpoints": [f"http://{region}.example:8000/v1"],
                "price": {"usd_per_gpu_hour": 2.0},
                "goodput": {
                    "tokens_per_s": 1000,
                    "prefill_tokens_per_s": 10000,
                    "max_concurrency": SLOTS,
                    "tpot_ms": 30,
                },
                "replicas": {"min": 0, "max": 4, "initial": 1},
            }
        )
    doc = {
        "version": 1,
        "slo_classes": {"fast": {"ttft_ms": 60000, "tpot_ms": 100}},
        "models": {"m": {"default_slo": "fast", "expected_output_tokens": 10}},
        "pools": pools,
        "client_regions": {"here": {"rtt_ms": {pid.rsplit(":", 1)[0]: 5 for pid in pool_ids}}},
        "routing": {
            "default_client_region": "here",
            "outlier": {
                "consecutive_failures": failures,
                "base_ejection_s": 10,
                "max_ejection_s": 60,
            },
            **routing,
        },
    }
    return compile_policy(parse_policy(yaml.safe_dump(doc)))


def _order(ranking: Ranking) -> list[str]:
    return [pid for pid, _, _ in ranking.attempts()]


def _load(state: RoutingState, pool_id: str) -> float:
    """The load the ranking sees on ``pool_id``: (in flight + this request) / slots."""
    ranking = state.rank(REQUEST, NOW)
    return float(ranking.load[state.policy.index[pool_id]])


@pytest.fixture
def state() -> RoutingState:
    return RoutingState(_policy(A, B))


# -- in-flight counts -----------------------------------------------------------------


def test_acquire_counts_requests_in_flight(state: RoutingState) -> None:
    state.acquire(A)
    state.acquire(A)
    assert (state.inflight[A], _load(state, A)) == (2, 3 / SLOTS)


def test_release_undoes_acquire(state: RoutingState) -> None:
    state.acquire(A)
    state.acquire(A)
    state.release(A)
    assert (state.inflight[A], _load(state, A)) == (1, 2 / SLOTS)


def test_release_never_goes_below_zero(state: RoutingState) -> None:
    state.release(A)
    state.acquire(A)
    state.release(A)
    state.release(A)
    assert (state.inflight[A], _load(state, A)) == (0, 1 / SLOTS)


def test_counts_of_one_pool_leave_the_others_alone(state: RoutingState) -> None:
    state.acquire(A)
    assert (state.inflight.get(B, 0), _load(state, B)) == (0, 1 / SLOTS)


def test_acquire_of_a_pool_outside_the_policy_is_counted_without_error(
    state: RoutingState,
) -> None:
    state.acquire(C)
    assert (state.inflight[C], _load(state, A), _load(state, B)) == (1, 1 / SLOTS, 1 / SLOTS)


# -- ranking --------------------------------------------------------------------------


def test_rank_without_load_tries_every_pool(state: RoutingState) -> None:
    assert set(_order(state.rank(REQUEST, NOW))) == {A, B}


def test_rank_prefers_the_pool_with_fewer_local_requests_in_flight(state: RoutingState) -> None:
    state.acquire(A)
    state.acquire(A)
    assert _order(state.rank(REQUEST, NOW)) == [B, A]


def test_rank_follows_local_in_flight_the_other_way(state: RoutingState) -> None:
    state.acquire(B)
    assert _order(state.rank(REQUEST, NOW)) == [A, B]


def test_an_outlier_ejected_pool_is_not_ranked(state: RoutingState) -> None:
    state.outlier.on_failure(A, NOW, "boom")
    state.outlier.on_failure(A, NOW, "boom")
    assert _order(state.rank(REQUEST, NOW)) == [B]


def test_an_outlier_ejected_pool_is_ranked_again_for_its_trial(state: RoutingState) -> None:
    state.outlier.on_failure(A, NOW, "boom")
    state.outlier.on_failure(A, NOW, "boom")
    assert A in _order(state.rank(REQUEST, NOW + 10))


# -- policy swaps ---------------------------------------------------------------------


def test_swap_policy_routes_with_the_new_pools(state: RoutingState) -> None:
    state.swap_policy(_policy(B, C))
    assert set(_order(state.rank(REQUEST, NOW))) == {B, C}


def test_swap_policy_carries_in_flight_over_by_pool_id(state: RoutingState) -> None:
    state.acquire(A)
    state.acquire(B)
    state.acquire(B)
    state.swap_policy(_policy(C, B))  # C takes A's index; B keeps its own count
    assert (_load(state, C), _load(state, B)) == (1 / SLOTS, 3 / SLOTS)


def test_swap_policy_carries_in_flight_to_a_new_index(state: RoutingState) -> None:
    state.acquire(B)
    state.swap_policy(_policy(B, C))  # B moves from index 1 to index 0
    assert (_load(state, B), _load(state, C)) == (2 / SLOTS, 1 / SLOTS)


def test_swap_policy_drops_a_removed_pool_from_the_ranking(state: RoutingState) -> None:
    state.acquire(A)
    state.swap_policy(_policy(B))
    ranking = state.rank(REQUEST, NOW)
    assert (A in ranking.pool_ids, _order(ranking)) == (False, [B])


def test_release_of_a_removed_pool_after_a_swap_only_lowers_its_count(
    state: RoutingState,
) -> None:
    state.acquire(A)
    state.swap_policy(_policy(B))
    state.release(A)
    assert (state.inflight[A], _load(state, B)) == (0, 1 / SLOTS)


def test_swap_policy_takes_the_new_outlier_settings(state: RoutingState) -> None:
    state.swap_policy(_policy(A, B, failures=5))
    assert state.outlier.settings.consecutive_failures == 5


def test_swap_policy_keeps_an_ejected_pool_out_of_the_ranking(state: RoutingState) -> None:
    state.outlier.on_failure(A, NOW, "boom")
    state.outlier.on_failure(A, NOW, "boom")
    state.swap_policy(_policy(A, B))
    assert _order(state.rank(REQUEST, NOW + 1)) == [B]


# -- observations ---------------------------------------------------------------------


def test_observe_counts_successes_and_errors(state: RoutingState) -> None:
    state.observe(A, ok=True)
    state.observe(A, ok=True)
    state.observe(A, ok=False)
    obs = state.take_pending()[A]
    assert (obs.ok, obs.errors) == (2, 1)


def test_observe_keeps_latencies_in_order(state: RoutingState) -> None:
    state.observe(A, ok=True, ttft_ms=120.0, tpot_ms=30.0)
    state.observe(A, ok=True, ttft_ms=80.0)
    obs = state.take_pending()[A]
    assert (obs.ttft_ms, obs.tpot_ms) == ([120.0, 80.0], [30.0])


def test_observe_keeps_pools_apart(state: RoutingState) -> None:
    state.observe(A, ok=True)
    state.observe(B, ok=False)
    pending = state.take_pending()
    assert (pending[A].ok, pending[A].errors, pending[B].ok, pending[B].errors) == (1, 0, 0, 1)


def test_take_pending_drains(state: RoutingState) -> None:
    state.observe(A, ok=True)
    state.take_pending()
    assert state.take_pending() == {}


def test_observations_after_take_pending_start_afresh(state: RoutingState) -> None:
    state.observe(A, ok=True, ttft_ms=1.0)
    taken = state.take_pending()
    state.observe(A, ok=False)
    assert (taken[A].ok, taken[A].ttft_ms, state.take_pending()[A].ok) == (1, [1.0], 0)


def test_snapshot_age_is_infinite_before_any_snapshot(state: RoutingState) -> None:
    assert state.snapshot_age_s() == float("inf")


def test_a_reload_applies_the_new_retry_budget() -> None:
    state = RoutingState(_policy(A, B, retry_budget_ratio=0.0, retry_budget_min=0))
    state.retry_budget.on_request(NOW)
    assert not state.retry_budget.try_retry(NOW)

    state.swap_policy(_policy(A, B, retry_budget_ratio=0.5, retry_budget_min=3))

    assert [state.retry_budget.try_retry(NOW) for _ in range(4)] == [True, True, True, False]


def test_a_reload_applies_the_new_outlier_thresholds() -> None:
    state = RoutingState(_policy(A, B, failures=5))
    state.swap_policy(_policy(A, B, failures=1))
    assert state.outlier.settings.consecutive_failures == 1


def test_a_local_block_ends_when_the_shared_state_readmits_the_pool() -> None:
    state = RoutingState(_policy(A, B, failures=1))
    state.outlier.on_failure(A, NOW, "boom")
    assert A in state.outlier.blocked(NOW + 1)
    readmitted = PoolRow(health=HealthRecord(readmitted_s=NOW + 1))

    state.swap_snapshot({A: readmitted}, taken_at_s=NOW + 1)

    assert A not in state.outlier.blocked(NOW + 1)
