"""The achievable reference's search: cost floors that never exceed the bill, and a pruned
search that returns what replaying every candidate returns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.bound import lower_bound
from simulator.engine import SimConfig, Workload
from simulator.metrics import attainable
from simulator.reference import achievable_reference, candidate_fleets, cost_floor
from simulator.relaxation import relaxation_bound
from simulator.trace import from_columns
from tests.simulator.conftest import policy, pool, spec_of

# A cheap slow pool and a dear fast one; boots take 120 s, so plans launch ahead.
SPEC = spec_of(
    policy(
        [
            pool("cheap", replicas=(0, 3, 1), usd_per_gpu_hour=1.0),
            pool("dear", "FAST", replicas=(0, 3, 1), usd_per_gpu_hour=4.0),
        ],
        ttft_ms=800.0,
        tpot_ms=20.0,
    ),
    provisioning_s=120.0,
)
CONFIG = SimConfig(seed=0, tick_s=10.0, warmup_s=60.0)


def _workload(seed: int) -> Workload:
    """Ten minutes of Poisson arrivals whose rate steps up and down."""
    rng = np.random.default_rng(seed)
    rate = np.where((np.arange(600) // 150) % 2 == 0, 1.5, 4.0)
    t = np.sort(np.concatenate([s + rng.random(rng.poisson(r)) for s, r in enumerate(rate)]))
    prompt = rng.integers(50, 400, len(t)).tolist()
    out = rng.integers(5, 60, len(t)).tolist()
    trace = from_columns(t.tolist(), prompt, out, "test")
    return Workload.build(trace, SPEC, {SPEC.regions[0]: 1.0}, CONFIG)


def _sources(work: Workload) -> tuple[tuple[str, np.ndarray, float], ...]:
    plan = lower_bound(SPEC, work, 60.0, integer=True, block_s=120.0)
    relaxed = relaxation_bound(SPEC, work, 0.99, 60.0)
    return (
        ("integer plan", plan.replicas, plan.window_s),
        ("relaxation plan", relaxed.replicas, relaxed.window_s),
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_candidate_is_billed_below_its_floor(seed: int) -> None:
    work = _workload(seed)
    for fleet in candidate_fleets(SPEC, work, _sources(work)):
        floor = cost_floor(SPEC, fleet.schedule(SPEC, work, CONFIG))
        billed = fleet.replay(SPEC, work, CONFIG).usd
        assert 0 < floor <= billed + 1e-9, fleet.label


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_pruned_search_finds_what_replaying_every_candidate_finds(seed: int) -> None:
    work = _workload(seed)
    sources = _sources(work)
    fleets = candidate_fleets(SPEC, work, sources)
    every = [fleet.replay(SPEC, work, CONFIG) for fleet in fleets]
    threshold = 0.99 * attainable(SPEC, work)
    ok = [c for c in every if c.attainment >= threshold - 1e-9]
    ref = achievable_reference(SPEC, work, CONFIG, 0.99, window_s=60.0)
    assert ref.threshold == pytest.approx(threshold)
    assert [c.label for c in ref.candidates] == [f.label for f in fleets]
    assert ref.best is not None and ok
    assert ref.best.usd == pytest.approx(min(c.usd for c in ok))
    # A replayed candidate reports what the full search's replay of it gave.
    full = {c.label: c for c in every}
    for c in ref.candidates:
        if c.replayed:
            assert (c.usd, c.attainment) == pytest.approx((full[c.label].usd,
                                                            full[c.label].attainment))  # fmt: skip
        else:
            assert math.isnan(c.attainment) and c.usd >= ref.best.usd
    # Every pool at its max is never the cheapest here, so it is never replayed.
    assert not ref.candidates[-1].replayed
