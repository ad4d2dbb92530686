"""Small linear and mixed-integer programs, solved by HiGHS through its own binding.

The autoscaler solves thousands of tiny programs (a cycle's replica mix: a few integer
variables per pool; a quantile regression: a few rows over the history's windows). For
those the solver's fixed costs dominate. Through ``scipy.optimize`` a four-pool mix ran
HiGHS's MIP heuristics (a sub-MIP, feasibility jump) on every call, which SciPy has no
option to turn off, its wrapper validated options and built sparse matrices for another
fifth of the time, and HiGHS's worker threads spun beside the solve. Here the program goes
to HiGHS as built, on one thread, with presolve and the primal heuristics off: branch and
bound alone proves these programs optimal sooner than the heuristics find a first point
(``loadtests/README.md``, "The autoscaler's solver").

``highspy.Highs`` adds interrupt and callback plumbing this does not use and prints a
banner on construction, so the bare binding it wraps is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from highspy._core import (
    HighsLp,
    HighsModelStatus,
    HighsStatus,
    HighsVarType,
    MatrixFormat,
    ObjSense,
    _Highs,
    kSolutionStatusFeasible,
)

from base.types import BoolArray, FloatArray, IntArray

__all__ = ["Program", "Solution", "solve"]

# Presolve and heuristics cost more than they save on programs of tens of columns, and
# HiGHS's idle worker threads spin: with two, a 4.5 ms solve used 13 ms of CPU.
_OPTIONS: dict[str, bool | float | str] = {
    "output_flag": False,
    "threads": 1,
    "presolve": "off",
    "mip_heuristic_effort": 0.0,
    "mip_heuristic_run_feasibility_jump": False,
}
_NO_ANSWER = (
    HighsModelStatus.kInfeasible,
    HighsModelStatus.kUnbounded,
    HighsModelStatus.kUnboundedOrInfeasible,
)


@dataclass(frozen=True, eq=False)
class Program:
    """Minimise (or maximise) ``cost`` · x subject to ``row_lower`` <= A x <= ``row_upper``
    and ``col_lower`` <= x <= ``col_upper``, x integer where ``integer`` says so.

    A is given column by column in compressed form (``start`` of length n + 1, row
    ``index`` and ``value`` per nonzero), as HiGHS stores it: build it with ``dense``,
    or directly where the columns are regular (``autoscaler.quantreg``). Infinite bounds
    are written as ``inf``.
    """

    cost: FloatArray
    start: IntArray
    index: IntArray
    value: FloatArray
    row_lower: FloatArray
    row_upper: FloatArray
    col_lower: FloatArray
    col_upper: FloatArray
    integer: BoolArray | None = None
    maximise: bool = False

    @classmethod
    def dense(
        cls,
        cost: FloatArray,
        matrix: FloatArray,
        row_lower: FloatArray,
        row_upper: FloatArray,
        col_lower: FloatArray,
        col_upper: FloatArray,
        integer: BoolArray | None = None,
        *,
        maximise: bool = False,
    ) -> Program:
        """The program whose constraint matrix is ``matrix`` (rows x columns; zeros are
        left out). Raises ValueError if the shapes disagree."""
        rows, cols = matrix.shape
        if len(cost) != cols or len(row_lower) != rows or len(row_upper) != rows:
            raise ValueError("matrix, cost and row bounds disagree in shape")
        col, row = np.nonzero(matrix.T)  # sorted by column, then row
        start = np.searchsorted(col, np.arange(cols + 1)).astype(np.intp)
        return cls(
            np.asarray(cost, dtype=np.float64), start, row.astype(np.intp),
            np.asarray(matrix.T[col, row], dtype=np.float64),
            np.asarray(row_lower, dtype=np.float64), np.asarray(row_upper, dtype=np.float64),
            np.asarray(col_lower, dtype=np.float64), np.asarray(col_upper, dtype=np.float64),
            integer, maximise,
        )  # fmt: skip


@dataclass(frozen=True, eq=False)
class Solution:
    """The best point found: ``x`` (one value per column), the objective, the duals of
    the rows (d objective / d row bound, in the program's own sense) and whether it is
    proven optimal (False: the time limit stopped the search at a feasible point)."""

    x: FloatArray
    objective: float
    row_dual: FloatArray
    optimal: bool


def solve(
    program: Program, time_limit_s: float = math.inf, mip_rel_gap: float = 1e-6
) -> Solution | None:
    """Solve ``program``. None when it has no feasible point, is unbounded, or the time
    limit passed before any feasible point was found. Deterministic for a given program;
    ``mip_rel_gap`` is the relative gap at which a MIP counts as solved. Pure apart from
    the solver's own time limit. Raises RuntimeError if HiGHS itself fails (a malformed
    program, or another user of HiGHS in this process started its scheduler with more
    threads): that is a fault to see, not an infeasible program."""
    p = program
    n = len(p.cost)
    lp = HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(p.row_lower)
    lp.sense_ = ObjSense.kMaximize if p.maximise else ObjSense.kMinimize
    lp.col_cost_ = p.cost
    lp.col_lower_ = p.col_lower
    lp.col_upper_ = p.col_upper
    lp.row_lower_ = p.row_lower
    lp.row_upper_ = p.row_upper
    lp.a_matrix_.format_ = MatrixFormat.kColwise
    lp.a_matrix_.start_ = p.start
    lp.a_matrix_.index_ = p.index
    lp.a_matrix_.value_ = p.value
    if p.integer is not None and p.integer.any():
        lp.integrality_ = [
            HighsVarType.kInteger if flag else HighsVarType.kContinuous for flag in p.integer
        ]
    highs = _Highs()
    for name, value in _OPTIONS.items():
        highs.setOptionValue(name, value)
    highs.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    if math.isfinite(time_limit_s):
        highs.setOptionValue("time_limit", float(time_limit_s))
    if highs.passModel(lp) == HighsStatus.kError or highs.run() == HighsStatus.kError:
        raise RuntimeError(f"HiGHS failed: {highs.getModelStatus().name}")
    status = highs.getModelStatus()
    info = highs.getInfo()
    feasible = info.primal_solution_status == kSolutionStatusFeasible
    if status in _NO_ANSWER or (status != HighsModelStatus.kOptimal and not feasible):
        return None
    solution = highs.getSolution()
    return Solution(
        np.asarray(solution.col_value, dtype=np.float64),
        float(info.objective_function_value),
        np.asarray(solution.row_dual, dtype=np.float64),
        status == HighsModelStatus.kOptimal,
    )
