"""Linear quantile regression, as the linear program HiGHS solves fastest.

For quantile ``tau`` the coefficients ``b`` minimise the pinball loss
Σ_i ρ_tau(y_i − X_i b), with ρ_tau(u) = u · (tau − [u < 0]). That is a linear program;
its dual has one bounded variable per sample and one equality per coefficient:

    maximise  yᵀa   subject to  Xᵀa = (1 − tau) · Xᵀ1,   0 ≤ a ≤ 1

and ``b`` is (minus) the multipliers of the equalities. On a few thousand samples and a
handful of columns the dual solves in milliseconds, the primal in a second.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog  # type: ignore[import-untyped]

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
    result = linprog(
        -target,
        A_eq=features.T,
        b_eq=(1.0 - tau) * features.sum(axis=0),
        bounds=(0.0, 1.0),
        method="highs",
    )
    if result.status != 0:
        return None
    return np.asarray(-result.eqlin.marginals, dtype=np.float64)
