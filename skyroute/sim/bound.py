"""Offline lower bound on provisioned cost: an LP over time windows with the whole trace known.

Variables: replicas ``n[w, p]`` of each pool in each window (continuous: the LP
relaxation), and the share ``x[w, c, p]`` of window w's requests of class c sent to
pool p. A class is a client region with the set of pools on which a lone request meets
the TTFT SLO (RTT + prefill), so a share can only go where the class is feasible. A pool
whose TPOT misses the SLO even with one sequence serves nothing. Capacity: output tokens
a pool emits in a window stay within n × fluid goodput × window, the most a replica emits
with TPOT within the SLO (``spec.fluid_goodput_tokens_per_s``); a request's tokens are
spread over its decode, paced at that goodput's occupancy. Objective: sum of n × $/replica-
hour × window. Prefill time, queueing and provisioning delay are ignored, so the bound is
optimistic. Requests no pool can serve in time, or beyond every pool's max, are left out
and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog  # type: ignore[import-untyped]
from scipy.sparse import coo_matrix, hstack, identity  # type: ignore[import-untyped]

from router.types import BoolArray, FloatArray, IntArray
from skyroute.sim.engine import Workload
from skyroute.sim.errors import SimulationError
from skyroute.sim.spec import FleetSpec, fluid_goodput_tokens_per_s


@dataclass(frozen=True, eq=False)
class Bound:
    """The optimum: total and per-window USD, replicas ``[window, pool]`` (fractional),
    requests routed to each pool, and how many measured requests it leaves unserved (no
    pool meets their TTFT, or every pool is at its max)."""

    total_usd: float
    window_s: float
    window_usd: FloatArray
    replicas: FloatArray
    requests_per_pool: FloatArray
    unservable: int
    status: str


def _tokens_by_window(
    start: FloatArray, tokens: FloatArray, pace_s: float, window_s: float, horizon: float
) -> tuple[np.ndarray, np.ndarray, FloatArray]:
    """Spread each request's ``tokens`` over [start, start + tokens × pace]; returns
    (request index, window index, tokens) triples for windows inside the horizon."""
    end = start + tokens * pace_s
    span = int(np.ceil(max(float((end - start).max(initial=0.0)), 0.0) / window_s)) + 1
    first = np.floor(start / window_s).astype(np.intp)
    rows, cols, vals = [], [], []
    duration = np.maximum(end - start, 1e-12)
    for k in range(span + 1):
        w = first + k
        lo = np.maximum(start, w * window_s)
        hi = np.minimum(np.minimum(end, (w + 1) * window_s), horizon)
        share = np.clip(hi - lo, 0.0, None) / duration
        keep = (share > 0) & (tokens > 0)
        rows.append(np.flatnonzero(keep))
        cols.append(w[keep])
        vals.append((tokens * share)[keep])
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)


def _classes(
    spec: FleetSpec, client: IntArray, prefill: FloatArray, goodput: FloatArray
) -> tuple[BoolArray, IntArray, BoolArray]:
    """Per request: pools where a lone request meets the TTFT SLO (and the TPOT SLO can be
    met at all), its class (client region × that pool set), and each class's pool set."""
    ttft_ms = (spec.rtt_s[client] + prefill) * 1000.0
    feasible = (ttft_ms <= spec.slo.ttft_ms + 1e-6) & (goodput > 0)[None, :]
    key = client * (1 << spec.size) + (feasible * (1 << np.arange(spec.size))).sum(axis=1)
    classes, cls = np.unique(key, return_inverse=True)
    mask = (((classes % (1 << spec.size))[:, None] >> np.arange(spec.size)) & 1).astype(bool)
    return feasible, cls.astype(np.intp), mask


def lower_bound(spec: FleetSpec, work: Workload, window_s: float = 60.0) -> Bound:
    """Solve the LP over the measured requests and ``[0, horizon]`` with HiGHS.

    Demand no pool can carry (beyond every ``max_replicas``, or no pool fast enough) is
    left unserved at a prohibitive price and counted in ``unservable``. Raises
    SimulationError if the solver fails.
    """
    m = slice(work.n_warm, None)
    arrival, client = work.arrival_s[m], work.client[m]
    output, prefill = work.output_tokens[m].astype(np.float64), work.prefill_s[m]
    horizon = max(work.horizon_s, 1e-9)
    n_win, size = int(np.ceil(horizon / window_s)), spec.size
    lengths = np.minimum(window_s, horizon - window_s * np.arange(n_win))
    slo = spec.slo
    goodput = np.asarray([fluid_goodput_tokens_per_s(pr, slo.tpot_ms) for pr in spec.profiles])
    feasible, cls, mask = _classes(spec, client, prefill, goodput)
    win = np.minimum((arrival / window_s).astype(np.intp), n_win - 1)
    # One share variable x per (window, class) with requests and pool allowed for the class.
    demand, row_of, count = np.unique(
        win * len(mask) + cls, return_inverse=True, return_counts=True
    )
    pair_i, pair_p = np.nonzero(mask[demand % len(mask)])
    n_x, n_n, n_d = len(pair_i), n_win * size, len(demand)
    xid = np.full((n_d, size), -1, dtype=np.intp)
    xid[pair_i, pair_p] = np.arange(n_x)
    rows, cols, vals = [], [], []
    for p in range(size):
        on = np.flatnonzero(feasible[:, p])
        # TPOT at the goodput's occupancy: the SLO, or the full-batch TPOT below it.
        pace = min(slo.tpot_ms, spec.profiles[p].tpot_full_ms) / 1000.0
        i, w, tok = _tokens_by_window(
            arrival[on] + prefill[on, p], np.maximum(output[on] - 1, 0), pace, window_s, horizon
        )
        rows.append(w * size + p)
        cols.append(xid[row_of[on[i]], p])
        vals.append(tok)
    load = coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), (n_n, n_x)
    )
    capacity = coo_matrix(
        (-(goodput * lengths[:, None]).ravel(), (np.arange(n_n),) * 2), (n_n, n_n)
    )
    share = coo_matrix((np.ones(n_x), (pair_i, np.arange(n_x))), (n_d, n_x))
    price = (spec.usd_per_replica_hour * lengths[:, None] / 3600.0).ravel()
    # Leaving a request unserved costs more than a replica of the dearest pool all along.
    penalty = count * (price.sum() + 1.0) * 1e3
    res = linprog(
        np.concatenate((np.zeros(n_x), price, penalty)),
        A_ub=hstack([load, capacity, coo_matrix((n_n, n_d))]).tocsr(),
        b_ub=np.zeros(n_n),
        A_eq=hstack([share, coo_matrix((n_d, n_n)), identity(n_d)]).tocsr(),
        b_eq=np.ones(n_d),
        bounds=np.concatenate(
            (
                np.tile([[0.0, 1.0]], (n_x, 1)),
                np.column_stack(
                    (np.tile(spec.min_replicas, n_win), np.tile(spec.max_replicas, n_win))
                ),
                np.tile([[0.0, 1.0]], (n_d, 1)),
            )
        ),
        method="highs",
    )
    if res.x is None:
        raise SimulationError(f"lower bound: the LP solver failed ({res.message})")
    x, n, unserved = res.x[:n_x], res.x[n_x : n_x + n_n].reshape(n_win, size), res.x[n_x + n_n :]
    routed = np.zeros(size)
    np.add.at(routed, pair_p, x * count[pair_i])
    window_usd = (n * spec.usd_per_replica_hour * lengths[:, None] / 3600.0).sum(axis=1)
    return Bound(
        total_usd=float(window_usd.sum()),
        window_s=window_s,
        window_usd=window_usd,
        replicas=n,
        requests_per_pool=routed,
        unservable=round(float((unserved * count).sum())),
        status=str(res.message),
    )
