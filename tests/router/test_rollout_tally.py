"""Per-stage rollout counts: buckets, the hash round trip, and the evidence they give."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from router.rollout_plan import RolloutPlan
from router.rollout_tally import BUCKETS, StageCounts, bucket, bucket_upper, evidence

PLAN = RolloutPlan.model_validate({"steps": [{"share": 0.1}]})


@given(st.floats(min_value=0.11, max_value=1e6))
def test_a_value_falls_below_its_buckets_upper_edge(value: float) -> None:
    b = bucket(value)
    assert 0 <= b < BUCKETS
    assert value <= bucket_upper(b) * (1 + 1e-9)
    assert b == 0 or value >= bucket_upper(b - 1) * (1 - 1e-9)


def test_hash_fields_round_trip_and_merge() -> None:
    counts = StageCounts()
    counts.record("v1", ok=True, slo_miss=True, ttft_ms=120.0, tpot_ms=25.0, output_tokens=80)
    counts.record("v1", ok=False)
    counts.record("v2", ok=True, ttft_ms=None, tpot_ms=None, output_tokens=3)
    raw = {k: str(v) for k, v in counts.fields().items()}
    raw["v9|unknown"] = "1"
    raw["v9|n"] = "not a number"
    back = StageCounts.parse(raw)
    back.merge(StageCounts.parse(counts.fields()))

    v1 = back.versions["v1"]
    assert (v1.n, v1.err, v1.miss, v1.tok) == (4, 2, 2, 160)
    assert v1.ttft == {bucket(120.0): 2} and v1.tpot == {bucket(25.0): 2}
    assert back.versions["v2"].out == {bucket(3): 2}


def _counts(seed: int, canary_tpot_factor: float, canary_errors: float) -> StageCounts:
    rng = random.Random(seed)
    counts = StageCounts()
    for version, factor, errors in (("v1", 1.0, 0.0), ("v2", canary_tpot_factor, canary_errors)):
        for _ in range(2000):
            ok = rng.random() >= errors
            tpot = rng.lognormvariate(3.0, 0.3) * factor
            counts.record(version, ok=ok, ttft_ms=rng.lognormvariate(5.0, 0.5),
                          tpot_ms=tpot, output_tokens=int(rng.lognormvariate(5.0, 1.0)))  # fmt: skip
    return counts


def test_an_identical_canary_shows_the_stable_rates() -> None:
    ev = evidence(_counts(1, 1.0, 0.0), "v1", "v2", PLAN)
    for name in ("ttft_over_reference", "tpot_over_reference", "output_under_reference"):
        assert abs(ev.canary[name].rate - ev.stable[name].rate) < 0.04, name
    assert 0.03 < ev.stable["tpot_over_reference"].rate <= 0.1


def test_a_slower_canary_crosses_the_stable_reference_far_more_often() -> None:
    ev = evidence(_counts(2, 1.5, 0.05), "v1", "v2", PLAN)
    assert (
        ev.canary["tpot_over_reference"].rate > 0.35 > 0.1 >= ev.stable["tpot_over_reference"].rate
    )
    assert abs(ev.canary["error_rate"].rate - 0.05) < 0.015
    assert ev.canary_requests == 2000


def test_shadow_comparisons_give_the_mismatch_rate_against_a_stable_that_matches_itself() -> None:
    counts = StageCounts()
    for i in range(10):
        counts.record("v1", ok=True, output_tokens=5)
        counts.record("v2", ok=True, output_tokens=5, mismatch=i < 3)
    counts.record("v2", ok=True)  # not compared (a streamed request)
    back = StageCounts.parse(counts.fields())
    ev = evidence(back, "v1", "v2", PLAN)
    assert (ev.canary["answer_mismatch_rate"].n, ev.canary["answer_mismatch_rate"].bad) == (10, 3)
    assert (ev.stable["answer_mismatch_rate"].n, ev.stable["answer_mismatch_rate"].bad) == (10, 0)
