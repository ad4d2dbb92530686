"""Linear quantile regression, as the linear program HiGHS solves fastest.

For quantile ``tau`` the coefficients ``b`` minimise the pinball loss
Σ_i ρ_tau(y_i − X_i b), with ρ_tau(u) = u · (tau − [u < 0]). That is a linear program;
its dual has one bounded variable per sample and one equality per coefficient:

    maximise  yᵀa   subject to  Xᵀa = (1 − tau) · Xᵀ1,   0 ≤ a ≤ 1

and ``b`` is the multipliers of the equalities. On a few thousand samples and a handful
of columns the dual solves in milliseconds, the primal in a second.
"""

from __future__ import annotations

import numpy as np

from autoscaler.highs import Program, solve
from base.types import FloatArray

__all__ = ["quantile_regression"]


def quantile_regression(features: FloatArray, target: FloatArray, tau: float) -> FloatArray | None:
    """Coefficients of the ``tau`` conditional quantile of ``target`` (n) given
    ``features`` (n x p; include a column of ones for an intercept). None when the
    program has no solution (no samples, or non-finite input). Raises ValueError
    unless 0 < ``tau`` < 1 and the shapes agree."""
    if not 0.0 < tau < 1.0 or features.ndim != 2 or len(features) != len(target):
        raise ValueError("need 0 < tau < 1 and features (n x p) aligned with target (n)")
    if len(target) == 0 or not (np.isfinite(features).all() and np.isfinite(target).all()):
        return None
    n, p = features.shape
    rhs = (1.0 - tau) * features.sum(axis=0)
    # Sample i is column i of the dual, holding its features: a dense column each.
    program = Program(
        cost=np.asarray(target, dtype=np.float64),
        start=np.arange(0, n * p + 1, p, dtype=np.intp),
        index=np.tile(np.arange(p, dtype=np.intp), n),
        value=np.ascontiguousarray(features, dtype=np.float64).ravel(),
        row_lower=rhs,
        row_upper=rhs,
        col_lower=np.zeros(n),
        col_upper=np.ones(n),
        maximise=True,
    )
    solution = solve(program)
    if solution is None or not solution.optimal:
        return None
    return solution.row_dual
