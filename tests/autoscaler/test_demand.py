"""Demand lines: telemetry gaps are not demand drops, and each line keeps its calibration."""

from __future__ import annotations

import numpy as np

from autoscaler.decide import decide
from autoscaler.demand import forecast_lines, line_key
from autoscaler.state import ScalerState
from tests.autoscaler.conftest import (
    BUCKET_S,
    config,
    history,
    make_policy,
    pool_doc,
    prices,
    statuses,
    steady,
)


def _noisy(tokens_per_s: float, seed: int, hours: float = 24.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = steady(tokens_per_s, hours)
    return np.asarray(base * np.exp(0.05 * rng.standard_normal(len(base))), dtype=np.float64)


def test_buckets_where_nobody_reported_do_not_drop_the_forecast() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    demand = _noisy(2500.0, 1)
    gapped = demand.copy()
    gapped[-4:] = 0.0  # the gateways' flushes of the last 20 min never landed
    (line,) = forecast_lines(history({"us": gapped}), policy, config())
    (clean,) = forecast_lines(history({"us": demand[:-4]}), policy, config())
    assert line.reliable
    assert line.mean > 0.8 * 2500.0
    assert abs(line.upper / clean.upper - 1.0) < 0.2


def test_a_quiet_line_with_genuine_zeros_is_forecast_low() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    rng = np.random.default_rng(2)
    # About 0.3 requests per bucket (100 tokens each): most buckets see none.
    trickle = rng.poisson(0.3, int(24 * 3600 / BUCKET_S)) * 100.0 / BUCKET_S
    trickle[-6:] = 0.0
    (line,) = forecast_lines(history({"us": trickle}), policy, config())
    assert line.mean < 0.5  # tokens/s: the zeros were believed


def test_each_line_carries_its_upper_bound_calibration_from_cycle_to_cycle() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a", max_replicas=50)])
    demand = _noisy(2500.0, 3, hours=30.0)
    state = ScalerState()
    cut = len(demand) - 12
    for end in range(cut, len(demand)):
        plan = decide(
            history({"us": demand[:end]}), statuses(policy), prices(policy), policy, state,
            config(),
        )  # fmt: skip
        state = ScalerState.from_json(plan.state.to_json())  # as stored between cycles
    cal = state.calibration[line_key("chat", "us")]
    assert cal.pending  # the latest bounds await their outcome
    assert cal.scored >= 10  # the earlier ones were scored against what happened
