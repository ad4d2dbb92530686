"""autoscaler.highs: small programs straight to HiGHS, checked against known optima and
against SciPy's own HiGHS interface on random programs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import Bounds, LinearConstraint, milp  # type: ignore[import-untyped]

from autoscaler.highs import Program, solve

INF = np.inf


def _program(
    cost: list[float],
    rows: list[list[float]],
    lo: list[float],
    hi: list[float],
    integer: list[bool] | None = None,
    *,
    maximise: bool = False,
) -> Program:
    n = len(cost)
    return Program.dense(
        np.asarray(cost, dtype=np.float64),
        np.asarray(rows, dtype=np.float64).reshape(len(rows), n),
        np.asarray(lo, dtype=np.float64),
        np.asarray(hi, dtype=np.float64),
        np.zeros(n),
        np.full(n, INF),
        None if integer is None else np.asarray(integer),
        maximise=maximise,
    )


def test_lp_optimum_and_row_dual() -> None:
    # min x + y, x + 2y >= 2: y = 1, and a unit more on the row costs 1/2.
    out = solve(_program([1.0, 1.0], [[1.0, 2.0]], [2.0], [INF]))
    assert out is not None and out.optimal
    assert out.x == pytest.approx([0.0, 1.0])
    assert out.objective == pytest.approx(1.0)
    assert out.row_dual == pytest.approx([0.5])


def test_integrality_is_honoured() -> None:
    # min 3a + 5b, 2a + 4b >= 7: the relaxation is b = 1.75 ($8.75), whole b = 2 is $10.
    relaxed = solve(_program([3.0, 5.0], [[2.0, 4.0]], [7.0], [INF]))
    whole = solve(_program([3.0, 5.0], [[2.0, 4.0]], [7.0], [INF], [True, True]))
    assert relaxed is not None and relaxed.objective == pytest.approx(8.75)
    assert whole is not None and whole.optimal
    assert whole.x == pytest.approx([0.0, 2.0])
    assert whole.objective == pytest.approx(10.0)


def test_maximise() -> None:
    # x + y <= 3 and x <= 2: minimised, nothing; maximised, 3.
    out = solve(_program([1.0, 1.0], [[1.0, 1.0], [1.0, 0.0]], [-INF, -INF], [3.0, 2.0]))
    assert out is not None and out.objective == pytest.approx(0.0)
    top = solve(
        _program([1.0, 1.0], [[1.0, 1.0], [1.0, 0.0]], [-INF, -INF], [3.0, 2.0], maximise=True)
    )
    assert top is not None and top.objective == pytest.approx(3.0)


@pytest.mark.parametrize("integer", [None, [True]])
def test_infeasible_is_none(integer: list[bool] | None) -> None:
    assert solve(_program([1.0], [[1.0], [1.0]], [2.0, -INF], [INF, 1.0], integer)) is None


def test_unbounded_is_none() -> None:
    assert solve(_program([-1.0], [[1.0]], [0.0], [INF])) is None


def test_no_rows() -> None:
    out = solve(_program([1.0, 2.0], [], [], []))
    assert out is not None and out.x == pytest.approx([0.0, 0.0])


def test_shapes_must_agree() -> None:
    with pytest.raises(ValueError, match="shape"):
        Program.dense(np.ones(2), np.ones((1, 3)), np.ones(1), np.ones(1), np.zeros(3), np.ones(3))


def test_same_optimum_as_scipy_on_random_covering_mixes() -> None:
    """Random replica mixes (integer counts, continuous assignments, covering rows and
    capacity rows, as ``solve_mix`` builds them): the optimum is SciPy's."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        pools, lines = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        cost = rng.uniform(1.0, 30.0, pools)
        goodput = rng.uniform(50.0, 400.0, pools)
        demand = rng.uniform(0.0, 2000.0, lines)
        n = pools + pools * lines  # replicas, then x[p, l]
        c = np.concatenate([cost, np.zeros(pools * lines)])
        rows, lo, hi = [], [], []
        for line in range(lines):  # sum_p x[p, line] >= demand
            r = np.zeros(n)
            r[pools + np.arange(pools) * lines + line] = 1.0
            rows.append(r)
            lo.append(demand[line])
            hi.append(INF)
        for pool in range(pools):  # sum_l x[pool, l] <= goodput * n_pool
            r = np.zeros(n)
            r[pools + pool * lines + np.arange(lines)] = 1.0
            r[pool] = -goodput[pool]
            rows.append(r)
            lo.append(-INF)
            hi.append(0.0)
        upper = np.concatenate([np.full(pools, 20.0), np.full(pools * lines, INF)])
        integer = np.arange(n) < pools
        a = np.vstack(rows)
        ours = solve(
            Program.dense(c, a, np.asarray(lo), np.asarray(hi), np.zeros(n), upper, integer)
        )
        ref = milp(
            c,
            integrality=integer.astype(float),
            bounds=Bounds(np.zeros(n), upper),
            constraints=LinearConstraint(a, lo, hi),
            options={"mip_rel_gap": 1e-6},
        )
        assert (ours is None) == (ref.x is None)
        if ours is not None:
            assert ours.objective == pytest.approx(ref.fun, rel=1e-6, abs=1e-6)
            assert np.allclose(ours.x[:pools], np.rint(ours.x[:pools]))
