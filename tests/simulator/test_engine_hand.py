"""A three-request trace on one replica, checked against values worked out by hand.

Pool: 1 replica, 2 batch slots, prefill 1000 tok/s, TPOT 10 ms alone and 20 ms with two
running; $3.6/GPU-hour, goodput 100 tok/s (so $1e-5/token); client RTT 20 ms.

A (t=0, 100 prompt, 21 out): prefill 0-0.1 s; 10 tokens at 10 ms to 0.2 s; B joins, so
the last 10 tokens take 20 ms each: done 0.4 s. TTFT 0.1 + 0.02 = 0.12 s; TPOT 0.3/20 =
15 ms. B (t=0.2, 100, 11): prefill 0.2-0.3; 5 tokens at 20 ms to 0.4; alone, 5 at 10 ms:
done 0.45 s. TTFT 0.12 s; TPOT 0.15/10 = 15 ms. C (t=10, 500, 1): TTFT 0.5 + 0.02 s.
Provisioned: 1 replica × $3.6/h × 10 s = $0.01. Attributed: 733 tokens × $1e-5.
"""

from __future__ import annotations

import pytest

from simulator.engine import SimConfig, simulate
from simulator.metrics import latencies, summarize
from simulator.policies import RoutingPolicy
from simulator.scaler import StaticScaler
from tests.simulator.conftest import policy, pool, spec_of, workload

ROWS = [(0.0, 100, 21), (0.2, 100, 11), (10.0, 500, 1)]


@pytest.fixture
def run(rng):
    spec = spec_of(policy([pool("a", replicas=(1, 1, 1))]))
    work = workload(spec, ROWS)
    router = RoutingPolicy.create("round-robin", spec, rng)
    result = simulate(spec, work, router, StaticScaler(), SimConfig(warmup_s=0.0))
    return spec, work, result


def test_completion_times_follow_the_shared_tpot(run) -> None:
    _, _, result = run
    assert result.done_s.tolist() == pytest.approx([0.4, 0.45, 10.5])


def test_ttft_is_rtt_plus_prefill_and_tpot_the_mean_over_decode(run) -> None:
    spec, work, result = run
    ttft, tpot = latencies(spec, work, result)
    assert ttft.tolist() == pytest.approx([0.12, 0.12, 0.52])
    assert tpot.tolist() == pytest.approx([0.015, 0.015, 0.0])


def test_provisioned_cost_is_replicas_times_time_times_price(run) -> None:
    summary, _ = summarize(*run)
    assert summary.provisioned_usd == pytest.approx(0.01)


def test_attributed_cost_is_tokens_times_usd_per_token(run) -> None:
    summary, _ = summarize(*run)
    assert summary.attributed_usd == pytest.approx(733 * 1e-5)


def test_slo_attainment_counts_the_request_over_its_ttft(run) -> None:
    summary, _ = summarize(*run)  # SLO: TTFT 500 ms, TPOT 15 ms; C takes 520 ms
    assert (summary.ttft_attainment, summary.tpot_attainment) == pytest.approx((2 / 3, 1.0))
