"""Offline lower bounds on provisioned cost, with the whole trace known: an LP and a MILP.

Shares: ``x[w, c, p]`` of window w's requests of class c sent to pool p. A class is a
client region with the set of pools on which a lone request meets the TTFT SLO (RTT +
prefill), so a share can only go where the class is feasible. A pool whose TPOT misses
the SLO even with one sequence serves nothing. Capacity: output tokens a pool emits in a
window stay within n × fluid goodput × window, n being the pool's mean booted replicas
(ready or draining) over the window and fluid goodput the most a replica emits with TPOT
within the SLO (``spec.fluid_goodput_tokens_per_s``); a request's tokens are spread over
its decode, paced at that goodput's occupancy. Prefill time and queueing are ignored.

**LP relaxation** (``integer=False``): minimise Σ n × $/replica-hour × window, n
continuous. It covers a one-minute peak with a fifth of a dear replica and never pays
for a replica's boot.

**Integer bound** (``integer=True``): what any scaler of this simulator must also pay.
The booted replicas ``a(t)`` of a pool are a whole number. Per pool and block of
``block_s`` (whole windows): ``e`` is a(t) at the block's start, ``j`` its minimum and
``k`` its maximum within the block, all integers, with j ≤ n ≤ k in each of its windows
and j ≤ e ≤ k. A replica booting at b > 0 was launched at b - provisioning_s and is
billed from max(0, launch), so each boot completing in a block costs min(provisioning_s,
block start) replica-seconds on top of n. Boots completing in a block number at least
k - e (a(t) rose from e to k) and at least e' - j (from its minimum to the next block's
start e'), so ``u ≥ max(0, k - e, e' - j)`` are billed. The fleet at t = 0 is free (the
warm-up builds it). Every trajectory of whole replicas maps onto a feasible point that
costs no more, so the MILP's proven dual bound is a lower bound; the solver stops at a
node limit, not a clock, so the same inputs give the same bound. Shorter blocks give a
tighter bound and a slower solve.

**Long traces** (``chunk_s``): the MILP's solve time grows faster than the trace (10.5 s
for the one-hour conversation trace, 70.5 s for three copies of it end to end), so a trace
longer than twice ``chunk_s`` (an hour) is solved in chunks of that length (whole
blocks), each on its own requests, with its fleet at the chunk's start free and the
tokens that run past its end left out. Each chunk's problem relaxes the whole one's, so
the sum of their bounds is still a lower bound (a weaker one). The plan is the chunks'
plans end to end, and its cost adds the boots where a chunk starts with more replicas
than the last one ended with. On three copies of the conversation trace end to end the
whole solve stopped at HiGHS's solution limit (bound $14.72, plan $16.57); in three chunks
each was solved to optimality in 39.5 s in all (bound $14.79, plan $14.81). A trace up to
two chunks long is solved whole, as before.

Requests no pool can serve in time, or beyond every pool's max, are left out and
counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp  # type: ignore[import-untyped]
from scipy.sparse import coo_matrix, diags, hstack, identity, vstack  # type: ignore[import-untyped]

from base.types import BoolArray, FloatArray, IntArray
from simulator.engine import Workload
from simulator.errors import SimulationError
from simulator.spec import FleetSpec, fluid_goodput_tokens_per_s

_OPTIMAL = 0  # scipy.optimize.milp status
# The integer bound's chunk (module docstring), s.
CHUNK_S = 3600.0


@dataclass(frozen=True, eq=False)
class Bound:
    """A lower bound, USD: ``kind`` ("LP relaxation" or "integer"); ``total_usd`` the
    proven bound (the MILP's dual bound, within ``mip_rel_gap`` of the optimum when
    ``optimal``), ``primal_usd`` the cost of the plan found, ``window_usd`` that plan per
    window; mean booted replicas ``[window, pool]``; boots billed ``[block, pool]``;
    requests routed to each pool; measured requests left unserved (no pool meets their
    TTFT, or every pool is at its max)."""

    kind: str
    total_usd: float
    primal_usd: float
    optimal: bool
    window_s: float
    window_usd: FloatArray
    replicas: FloatArray
    launches: FloatArray
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


def _integer_rows(n_win: int, size: int, per_block: int) -> coo_matrix:
    """Rows ``≤ 0`` over n (``[window, pool]``) then u, j, k, e (``[block, pool]``, a
    block being ``per_block`` windows): j ≤ n ≤ k in each window of the block, j ≤ e ≤ k,
    k - e ≤ u and e[b + 1] - j[b] ≤ u[b]."""
    nn, n_blk = n_win * size, -(-n_win // per_block)
    nb = n_blk * size
    cell = np.arange(nn)
    # G[(w, p), (b, p)] = 1 where window w lies in block b.
    g = coo_matrix((np.ones(nn), (cell, (cell // size) // per_block * size + cell % size)),
                   (nn, nb))  # fmt: skip
    eye, zn, zb = identity(nb, format="csr"), coo_matrix((nn, nb)), coo_matrix((nb, nb))
    nxt = diags(np.ones(nb - size), size, shape=(nb, nb))  # row (b, p) picks e[b + 1, p]
    rows = [
        # n, u, j, k, e
        hstack([-identity(nn), zn, g, zn, zn]),
        hstack([identity(nn), zn, zn, -g, zn]),
        hstack([coo_matrix((nb, nn)), zb, eye, zb, -eye]),
        hstack([coo_matrix((nb, nn)), zb, zb, -eye, eye]),
        hstack([coo_matrix((nb, nn)), -eye, zb, eye, -eye]),
        hstack([coo_matrix((nb, nn)), -eye, -eye, zb, nxt]).tocsr()[: nb - size],
    ]
    return vstack(rows)


def lower_bound(
    spec: FleetSpec,
    work: Workload,
    window_s: float = 60.0,
    *,
    integer: bool = False,
    provisioning: bool | None = None,
    block_s: float = 120.0,
    node_limit: int = 2000,
    mip_rel_gap: float = 1e-3,
    chunk_s: float | None = CHUNK_S,
) -> Bound:
    """Solve the LP (or, with ``integer``, the MILP) over the measured requests and
    ``[0, horizon]`` with HiGHS; see the module docstring. ``provisioning`` bills boots
    (default: only in the MILP); ``node_limit`` and ``mip_rel_gap`` stop the MILP (per
    chunk). An integer bound over more than twice ``chunk_s`` (rounded to whole blocks;
    None: never) is solved in chunks of ``chunk_s``.

    Demand no pool can carry (beyond every ``max_replicas``, or no pool fast enough) is
    left unserved at a prohibitive price and counted in ``unservable``. Raises
    SimulationError if the solver finds no solution.
    """
    solve = partial(_solve, spec, window_s=window_s, integer=integer,
                    provisioning=provisioning, block_s=block_s, node_limit=node_limit,
                    mip_rel_gap=mip_rel_gap)  # fmt: skip
    per_block = max(1, round(block_s / window_s))
    span = per_block * window_s * max(1, round((chunk_s or 0.0) / (per_block * window_s)))
    if not integer or chunk_s is None or work.horizon_s <= 2 * span:
        return solve(work)
    starts = np.arange(0.0, work.horizon_s, span)
    parts = [solve(chunk(work, t, min(t + span, work.horizon_s))) for t in starts]
    return _joined(spec, parts, starts, provisioning is not False)


def chunk(work: Workload, start_s: float, end_s: float) -> Workload:
    """The measured requests arriving in ``[start_s, end_s)``, on a clock that starts at
    ``start_s``, with no warm-up."""
    arrival = work.arrival_s[work.n_warm :]
    # The last request arrives at the horizon itself: the last chunk keeps it.
    inside = arrival <= end_s if end_s >= work.horizon_s else arrival < end_s
    keep = work.n_warm + np.flatnonzero((arrival >= start_s) & inside)
    return Workload(
        arrival_s=work.arrival_s[keep] - start_s,
        prompt_tokens=work.prompt_tokens[keep],
        output_tokens=work.output_tokens[keep],
        client=work.client[keep],
        prefill_s=work.prefill_s[keep],
        n_warm=0,
        horizon_s=end_s - start_s,
    )


def _joined(spec: FleetSpec, parts: list[Bound], starts: FloatArray, boots: bool) -> Bound:
    """The chunks' bounds as one: bounds and plans end to end, each chunk's opening
    boots (more replicas than the last chunk ended with, launched a provisioning time
    before) added to the plan's cost."""
    window_usd = [part.window_usd.copy() for part in parts]
    usd_s = spec.usd_per_replica_hour / 3600.0
    for k in range(1, len(parts)) if boots else ():
        rise = np.maximum(np.ceil(parts[k].replicas[0] - 1e-6)
                          - np.ceil(parts[k - 1].replicas[-1] - 1e-6), 0.0)  # fmt: skip
        window_usd[k][0] += float((rise * usd_s * np.minimum(spec.provisioning_s, starts[k])).sum())
    joined = np.concatenate(window_usd)
    statuses = dict.fromkeys(part.status for part in parts)
    return Bound(
        kind=parts[0].kind,
        total_usd=float(sum(part.total_usd for part in parts)),
        primal_usd=float(joined.sum()),
        optimal=all(part.optimal for part in parts),
        window_s=parts[0].window_s,
        window_usd=joined,
        replicas=np.concatenate([part.replicas for part in parts]),
        launches=np.concatenate([part.launches for part in parts]),
        requests_per_pool=np.sum([part.requests_per_pool for part in parts], axis=0),
        unservable=sum(part.unservable for part in parts),
        status=f"{len(parts)} chunks: " + "; ".join(statuses),
    )


def _solve(
    spec: FleetSpec,
    work: Workload,
    *,
    window_s: float,
    integer: bool,
    provisioning: bool | None,
    block_s: float,
    node_limit: int,
    mip_rel_gap: float,
) -> Bound:
    """``lower_bound`` over the whole of ``work`` in one solve."""
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
    n_x, nn, n_d = len(pair_i), n_win * size, len(demand)
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
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), (nn, n_x)
    )
    capacity = diags(-(goodput * lengths[:, None]).ravel())
    share = coo_matrix((np.ones(n_x), (pair_i, np.arange(n_x))), (n_d, n_x))
    # Variables: x; n per [window, pool]; u, j, k, e per [block, pool]; unserved per demand.
    per_block = max(1, round(block_s / window_s)) if integer else 1
    n_blk = -(-n_win // per_block)
    nb = n_blk * size
    usd_s = spec.usd_per_replica_hour / 3600.0
    price = (usd_s * lengths[:, None]).ravel()
    starts = window_s * per_block * np.arange(n_blk)
    lead = spec.provisioning_s if (integer if provisioning is None else provisioning) else 0.0
    boot = (usd_s * np.minimum(lead, starts[:, None])).ravel()
    # Leaving a request unserved costs more than any plan of replicas and boots.
    top = np.tile(spec.max_replicas, n_win).astype(np.float64)
    penalty = count * (price @ top + boot @ np.tile(spec.max_replicas, n_blk) + 1.0)
    ties = _integer_rows(n_win, size, per_block)
    n_tie = ties.shape[0]
    a = vstack([
        hstack([load, capacity, coo_matrix((nn, 4 * nb + n_d))]),
        hstack([share, coo_matrix((n_d, nn + 4 * nb)), identity(n_d)]),
        hstack([coo_matrix((n_tie, n_x)), ties, coo_matrix((n_tie, n_d))]),
    ]).tocsr()  # fmt: skip
    lo = np.concatenate((np.full(nn, -np.inf), np.ones(n_d), np.full(n_tie, -np.inf)))
    hi = np.concatenate((np.zeros(nn), np.ones(n_d), np.zeros(n_tie)))
    btop = np.tile(spec.max_replicas, n_blk).astype(np.float64)
    low = np.concatenate((np.zeros(n_x), np.tile(spec.min_replicas, n_win), np.zeros(4 * nb + n_d)))
    high = np.concatenate((np.ones(n_x), top, np.full(nb, np.inf), btop, btop, btop, np.ones(n_d)))
    integrality = np.zeros(len(low))
    if integer:
        integrality[n_x + nn + nb : n_x + nn + 4 * nb] = 1
    res = milp(
        np.concatenate((np.zeros(n_x), price, boot, np.zeros(3 * nb), penalty)),
        integrality=integrality,
        bounds=Bounds(low, high),
        constraints=LinearConstraint(a, lo, hi),
        options={"node_limit": node_limit, "mip_rel_gap": mip_rel_gap, "disp": False},
    )
    if res.x is None:
        raise SimulationError(f"lower bound: the solver found no solution ({res.message})")
    sol = np.asarray(res.x, dtype=np.float64)
    x, unserved = sol[:n_x], sol[n_x + nn + 4 * nb :]
    n = sol[n_x : n_x + nn].reshape(n_win, size)
    launches = sol[n_x + nn : n_x + nn + nb].reshape(n_blk, size) * (boot.reshape(n_blk, size) > 0)
    routed = np.zeros(size)
    np.add.at(routed, pair_p, x * count[pair_i])
    window_usd = (n * usd_s * lengths[:, None]).sum(axis=1)
    # A block's boots are billed in its first window.
    window_usd[::per_block] += (launches * boot.reshape(n_blk, size)).sum(axis=1)
    primal = float(window_usd.sum())
    dual = getattr(res, "mip_dual_bound", None)
    proven = primal if not integer or dual is None else min(primal, float(dual))
    return Bound(
        kind="integer" if integer else "LP relaxation",
        total_usd=proven,
        primal_usd=primal,
        optimal=res.status == _OPTIMAL,
        window_s=window_s,
        window_usd=window_usd,
        replicas=n,
        launches=launches,
        requests_per_pool=routed,
        unservable=round(float((unserved * count).sum())),
        status=str(res.message),
    )
