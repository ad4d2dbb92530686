"""The cheapest replica mix that covers the forecast, as a small mixed-integer program.

As Mélange does for heterogeneous GPUs, the choice of how many replicas each pool runs
is a MILP, solved with HiGHS (``autoscaler.highs``):

    minimise    Σ_p cost_p · n_p  +  ε Σ_p |n_p − current_p|  +  M Σ_l short_l
    subject to  Σ_{p feasible for l} x_{p,l} + short_l ≥ demand_l        every demand line l
                Σ_l load_{p,l} · x_{p,l} ≤ goodput_p · n_p               every pool p
                Σ_{q: in_time_{q,l} ≤ s} x_{q,l} ≤ s · demand_l           every line l, share s
                Σ_{p spot, l of m} x_{p,l} ≤ Σ_{l of m} (demand_l − (1 − spot_cap) · firm_l)
                                                                         every model m
                Σ_p cost_p · n_p ≤ budget
                lower_p ≤ n_p ≤ upper_p,  n_p integer,  x, short ≥ 0

A demand line is one model from one client region (tokens/s); ``x`` is the goodput a
pool gives a line. Shortfall is allowed but priced far above any replica, so it is used
only when the bounds or the budget leave no other way, and then it says how much is
missing. The ε term prefers, among equally cheap mixes, the one closest to now.
``load`` is the slot time a token of line l costs on pool p relative to the token
goodput is measured in (``autoscaler.goodput.slot_load``; 1 by default): a line of long
prompts uses more of a pool than its output tokens/s say.

``firm`` is the part of the demand that must not hang on spot capacity beyond the spot
cap (by default all of it, which makes the spot row read Σ spot x ≤ spot_cap · demand).
The planner passes the forecast mean: on-demand replicas then carry at least
(1 − spot_cap) of the expected demand, and the margin above it (upper quantile − mean)
may go to the cheapest pool that can serve it, spot included. That margin exists for
the rare window that needs it, which is exactly the capacity a reclaim may take.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoscaler.highs import Program, solve
from base.types import BoolArray, FloatArray, IntArray

__all__ = ["MixProblem", "MixSolution", "solve_mix"]


@dataclass(frozen=True, eq=False)
class MixProblem:
    """One planning problem over P pools and L demand lines (arrays aligned so).

    ``cost``: USD/hour per replica (0 where the price is unknown; such pools should be
    pinned by their bounds). ``goodput``: tokens/s per replica within the SLO (0: the
    pool counts no capacity). ``feasible[p, l]``: pool p can serve line l within its
    SLO. ``pool_model`` and ``line_model``: model index of each pool and line.
    ``firm``: tokens/s per line that on-demand pools must carry (1 − ``spot_cap``) of
    (None: all of ``demand``; values above ``demand`` count as ``demand``).
    ``load[p, l]``: pool capacity one token/s of line l uses on pool p (> 0; None: 1).
    ``in_time[p, l]``: share (0-1) of line l's requests pool p serves within the TTFT
    target (None: all). Prompt lengths are nested (a pool that prefills a prompt in
    time prefills every shorter one), so the pools whose share is at most pool p's
    carry at most that share of the line between them, unless no pool does better:
    the requests nobody serves in time are still served, by the fastest pools.
    """

    cost: FloatArray
    goodput: FloatArray
    lower: IntArray
    upper: IntArray
    current: IntArray
    spot: BoolArray
    pool_model: IntArray
    demand: FloatArray
    line_model: IntArray
    feasible: BoolArray
    budget_usd_per_hour: float | None = None
    spot_cap: float = 1.0
    firm: FloatArray | None = None
    load: FloatArray | None = None
    in_time: FloatArray | None = None


@dataclass(frozen=True, eq=False)
class MixSolution:
    """Replicas per pool, tokens/s each pool gives each line, and tokens/s short per line."""

    replicas: IntArray
    assigned: FloatArray
    shortfall: FloatArray
    usd_per_hour: float


def solve_mix(problem: MixProblem, time_limit_s: float = 10.0) -> MixSolution | None:
    """Solve ``problem``; None if it is infeasible (bounds against budget), which no
    shortfall can fix. Pure apart from the solver's own time limit."""
    pr = problem
    n_pools, n_lines = pr.feasible.shape
    pairs = np.argwhere(pr.feasible & (pr.goodput[:, None] > 0))
    k = len(pairs)
    # Variables: n (pools), x (pairs), short (lines), move (pools).
    n_var = 2 * n_pools + k + n_lines
    xs = slice(n_pools, n_pools + k)
    shorts = slice(n_pools + k, n_pools + k + n_lines)
    moves = slice(n_pools + k + n_lines, n_var)
    positive = pr.cost[pr.cost > 0]
    epsilon = 1e-3 * float(positive.min()) if len(positive) else 1e-3
    big = 100.0 * max(float(pr.cost.max(initial=0.0)), 1.0)
    c = np.zeros(n_var)
    c[:n_pools] = pr.cost
    c[shorts] = big
    c[moves] = epsilon

    rows: list[FloatArray] = []
    low: list[float] = []
    high: list[float] = []

    def row() -> FloatArray:
        r = np.zeros(n_var)
        rows.append(r)
        return r

    for line in range(n_lines):
        r = row()
        r[xs][pairs[:, 1] == line] = 1.0
        r[shorts][line] = 1.0
        low.append(float(pr.demand[line]))
        high.append(np.inf)
    load = np.ones(pr.feasible.shape) if pr.load is None else pr.load
    for pool in range(n_pools):
        r = row()
        mine = pairs[:, 0] == pool
        r[xs][mine] = load[pool, pairs[mine, 1]]
        r[pool] = -pr.goodput[pool]
        low.append(-np.inf)
        high.append(0.0)
        for sign in (1.0, -1.0):  # move_p >= |n_p - current_p|
            r = row()
            r[pool] = sign
            r[moves][pool] = -1.0
            low.append(-np.inf)
            high.append(sign * float(pr.current[pool]))
    if pr.in_time is not None:
        for line in range(n_lines):
            mine = pairs[:, 1] == line
            share = pr.in_time[pairs[:, 0], line]
            # Requests no pool serves in time still go to the fastest: no cap on those.
            top = float(share[mine].max(initial=0.0))
            for cap in np.unique(share[mine & (share < top - 1e-9)]):
                r = row()
                r[xs][mine & (share <= cap + 1e-12)] = 1.0
                low.append(-np.inf)
                high.append(float(cap * pr.demand[line]))
    if pr.spot_cap < 1.0:
        firm = pr.demand if pr.firm is None else np.clip(pr.firm, 0.0, pr.demand)
        for model in np.unique(pr.line_model):
            spot_pairs = pr.spot[pairs[:, 0]] & (pr.line_model[pairs[:, 1]] == model)
            if spot_pairs.any():
                r = row()
                r[xs][spot_pairs] = 1.0
                low.append(-np.inf)
                mine = pr.line_model == model
                flexible = float(pr.demand[mine].sum()) - float(firm[mine].sum())
                high.append(pr.spot_cap * float(firm[mine].sum()) + flexible)
    if pr.budget_usd_per_hour is not None:
        r = row()
        r[:n_pools] = pr.cost
        low.append(-np.inf)
        high.append(pr.budget_usd_per_hour)

    lb = np.zeros(n_var)
    ub = np.full(n_var, np.inf)
    lb[:n_pools] = pr.lower
    ub[:n_pools] = pr.upper
    integer = np.zeros(n_var, dtype=np.bool_)
    integer[:n_pools] = pr.lower != pr.upper  # a pinned pool needs no branching
    matrix = np.vstack(rows) if rows else np.zeros((0, n_var))
    program = Program.dense(c, matrix, np.asarray(low), np.asarray(high), lb, ub, integer)
    result = solve(program, time_limit_s, mip_rel_gap=1e-6)
    if result is None:
        return None
    sol = result.x
    replicas = np.rint(sol[:n_pools]).astype(np.intp)
    assigned = np.zeros((n_pools, n_lines))
    assigned[pairs[:, 0], pairs[:, 1]] = sol[xs]
    shortfall = np.clip(sol[shorts], 0.0, None)
    return MixSolution(replicas, assigned, shortfall, float(pr.cost @ replicas))
