"""A valid lower bound on the provisioned cost of reaching a target SLO attainment.

Unlike ``simulator.bound`` (tokens pinned to a pace from arrival, one share per
window and class, every request served), this relaxation keeps only what every run of
the simulator must satisfy, so no policy and no scaler can beat it:

- **Per-request routing.** ``y[i, p]`` in [0, 1] is the share of request i served within
  its SLO by pool p, allowed where i alone meets the TTFT target there (RTT + prefill)
  and, if it decodes, where one sequence meets the TPOT target. At most one pool per
  request, and at least ``target`` of the measured requests served: the rest (1 % at a
  99 % target) may be left out, the largest first if that is cheapest.
- **Flexible time.** Served within its SLO on p, request i starts prefill (``P`` s)
  somewhere in ``[a, a + TTFT - RTT - P]``, emits its first token by ``f = a + TTFT -
  RTT`` and its ``d = out - 1`` decode tokens within ``[a + P, f + d × TPOT]``, at most
  one per ``tpot_base`` (the engine's TPOT with one sequence). Any placement counts.
- **Capacity** per pool and interval ``I`` (a run of consecutive windows): the slot
  energy requests must spend inside ``I``, whatever their placement (energetic
  reasoning: the prefill's overlap with ``I`` at its earliest or latest start,
  whichever is smaller, plus ``tpot_full`` × the decode tokens that cannot fit outside
  ``I``), is at most ``slots`` × the pool's ready replica-seconds in ``I``. A replica
  with ``q`` sequences in prefill and the rest decoding at ``tpot(n)`` emits tokens at
  a rate ``r`` with ``r × tpot_full + q ≤ slots`` (``tpot`` linear from base to full,
  base ≥ its slope), so the rows hold at every instant, hence over every interval.
  Short intervals make TTFT bursts count; long ones, throughput.
- **Cost**: ready replicas per window, continuous, at the pool's price: billed replicas
  (booting, ready, draining) are at least the ready ones. Boots are not charged.

Only the measured requests and ``[0, horizon]`` count: warm-up load and capacity past
the horizon are dropped, which can only lower the bound. The LP is solved by HiGHS; a
large trace is solved in chunks of time, joined by pricing the coverage row
(``_chunked``), which keeps the bound valid.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.optimize import linprog  # type: ignore[import-untyped]
from scipy.sparse import coo_matrix  # type: ignore[import-untyped]

from base.types import FloatArray, IntArray
from simulator.bound import chunk
from simulator.engine import Workload
from simulator.errors import SimulationError
from simulator.metrics import servable
from simulator.spec import FleetSpec

# Interval lengths (in windows) and the stride of their starts (any subset of rows is
# valid; more rows bind tighter where a pool's max replicas caps a burst, and cost time).
METHOD = "highs"
INTERVALS: tuple[tuple[int, int], ...] = ((1, 1), (5, 5))
# A trace of more than CHUNK_REQUESTS measured requests over more than two CHUNK_S is
# bounded chunk by chunk (``_chunked``): HiGHS's time on the one LP grows faster than the
# trace (the conversation trace's 19,366 requests: 2.2 s; the same hour six times over,
# 116,196: 60 s and 720 MB more), and a day's would not fit the machine. Chunked, the
# six hours took 10 s and 110 MB, and the bound moved by 5e-7 of itself.
CHUNK_S = 3600.0
CHUNK_REQUESTS = 40_000
# Solves of every chunk in the search for the coverage row's price (``_chunked``).
_SEARCH_STEPS = 6


@dataclass(frozen=True, eq=False)
class Relaxation:
    """The bound (USD) for serving at least ``target`` of the measured requests within
    the SLO; the plan's mean ready replicas ``[window, pool]``; requests served per pool
    (fractions summed); requests needed; the solver's status."""

    total_usd: float
    target: float
    window_s: float
    replicas: FloatArray
    served_per_pool: FloatArray
    needed: float
    status: str


def _overlap(lo: FloatArray, hi: FloatArray, t1: FloatArray, t2: FloatArray) -> FloatArray:
    out: FloatArray = np.maximum(np.minimum(hi, t2) - np.maximum(lo, t1), 0.0)
    return out


def energy(
    arrival: FloatArray,
    prefill: FloatArray,
    first_by: FloatArray,
    decode: FloatArray,
    tpot_slo_s: float,
    base_s: float,
    full_s: float,
    t1: FloatArray,
    t2: FloatArray,
) -> FloatArray:
    """Slot-seconds each request must spend in ``[t1, t2]`` however it is placed within
    its SLO envelope (module docstring); arrays broadcast."""
    early = _overlap(arrival, arrival + prefill, t1, t2)
    late = _overlap(first_by - prefill, first_by, t1, t2)
    start, end = arrival + prefill, first_by + decode * tpot_slo_s
    outside = (end - start) - _overlap(start, end, t1, t2)
    tokens = np.maximum(decode - outside / base_s, 0.0)
    out: FloatArray = np.minimum(early, late) + tokens * full_s
    return out


def token_slot_s(slots: int, tpot_ms: Callable[[int], float]) -> float:
    """Slot-seconds one decode token may be charged, s: the largest ``c`` with ``rate ×
    c + q ≤ slots`` in every state of a replica (``q`` sequences in prefill, ``rate``
    tokens/s from the rest). It is the full-batch TPOT when TPOT's base is at least its
    slope; in general min over n of slots × tpot(n) / n (the state with no prefill)."""
    return min(slots * tpot_ms(n) / n for n in range(1, slots + 1)) / 1000.0


def _rows(
    spec: FleetSpec, work: Workload, ok: np.ndarray, window_s: float, n_win: int, horizon: float
) -> tuple[list[IntArray], list[IntArray], list[FloatArray], int]:
    """Capacity rows: (row, y column, energy) triples and the number of rows."""
    m = slice(work.n_warm, None)
    arrival = work.arrival_s[m]
    decode = np.maximum(work.output_tokens[m] - 1, 0).astype(np.float64)
    ttft_s, tpot_s = spec.slo.ttft_ms / 1000.0, spec.slo.tpot_ms / 1000.0
    rows: list[IntArray] = []
    cols: list[IntArray] = []
    vals: list[FloatArray] = []
    col_of = np.cumsum(ok.ravel()).reshape(ok.shape) - 1
    row = 0
    for p in range(spec.size):
        req = np.flatnonzero(ok[:, p])
        if len(req) == 0:
            continue
        prof = spec.profiles[p]
        base, full = prof.tpot_ms(1) / 1000.0, token_slot_s(prof.batch_slots, prof.tpot_ms)
        a = arrival[req]
        pre = work.prefill_s[m][req, p]
        first_by = a + ttft_s - spec.rtt_s[work.client[m][req], p]
        end = first_by + decode[req] * tpot_s
        for length, stride in INTERVALS:
            starts = np.arange(0, max(n_win - length, 0) + 1, stride)
            if len(starts) == 0:
                continue
            # Intervals overlapping each request's envelope [a, end].
            lo = np.clip(np.floor((a / window_s - length) / stride).astype(np.intp) + 1, 0, None)
            hi = np.minimum(np.floor(end / window_s / stride).astype(np.intp), len(starts) - 1)
            count = np.maximum(hi - lo + 1, 0)
            idx = np.repeat(np.arange(len(req)), count)
            k = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
            interval = lo[idx] + k
            t1 = starts[interval] * window_s
            t2 = np.minimum((starts[interval] + length) * window_s, horizon)
            e = energy(
                a[idx], pre[idx], first_by[idx], decode[req][idx], tpot_s, base, full, t1, t2
            )
            keep = e > 1e-12
            rows.append(row + interval[keep])
            cols.append(col_of[req[idx[keep]], p])
            vals.append(e[keep])
            # Each interval's row also holds -slots × the replica-seconds of its windows.
            row += len(starts)
    return rows, cols, vals, row


def relaxation_bound(
    spec: FleetSpec,
    work: Workload,
    target: float = 0.99,
    window_s: float = 60.0,
    chunk_s: float | None = CHUNK_S,
    chunk_requests: int = CHUNK_REQUESTS,
) -> Relaxation:
    """The LP bound for serving at least ``target`` × the attainable share (requests
    some pool can serve alone; ``metrics.attainable``) of the measured requests within
    the SLO; see the module docstring. A trace of more than ``chunk_requests`` over more
    than two ``chunk_s`` is bounded chunk by chunk (``_chunked``; None: one LP whatever
    the size). Raises
    SimulationError if a solve fails or no fleet within the pools' max replicas reaches
    the target.
    """
    needed = target * float(servable(spec, work).sum())
    big = len(work.arrival_s) - work.n_warm > chunk_requests
    if chunk_s is not None and big and work.horizon_s > 2 * chunk_s:
        return _chunked(spec, work, target, window_s, chunk_s, needed)
    lp = _solve(spec, work, window_s, needed=needed)
    return Relaxation(
        total_usd=lp.usd,
        target=target,
        window_s=window_s,
        replicas=lp.replicas,
        served_per_pool=lp.served,
        needed=needed,
        status=lp.status,
    )


class _LP(NamedTuple):
    usd: float  # the objective: USD, less ``reward`` x the requests served if rewarded
    replicas: FloatArray  # [window, pool]
    served: FloatArray  # requests served per pool
    status: str
    price_of_needed: float  # USD a further request served costs (the coverage row's dual)


def _solve(
    spec: FleetSpec, work: Workload, window_s: float, *, needed: float = 0.0, reward: float = 0.0
) -> _LP:
    """One LP over ``work``'s measured requests: serve at least ``needed`` of them at
    least cost, or (``needed`` 0) minimise cost less ``reward`` per request served."""
    m = slice(work.n_warm, None)
    n_req = len(work.arrival_s[m])
    horizon = max(work.horizon_s, 1e-9)
    n_win = max(math.ceil(horizon / window_s), 1)
    lengths = np.minimum(window_s, horizon - window_s * np.arange(n_win))
    client = work.client[m]
    ttft_ok = (spec.rtt_s[client] + work.prefill_s[m]) * 1000.0 <= spec.slo.ttft_ms + 1e-6
    tpot_ok = np.asarray([pr.tpot_ms(1) <= spec.slo.tpot_ms for pr in spec.profiles])
    decodes = (work.output_tokens[m] > 1)[:, None]
    ok = ttft_ok & (~decodes | tpot_ok[None, :])
    n_y, size = int(ok.sum()), spec.size
    rows, cols, vals, n_rows = _rows(spec, work, ok, window_s, n_win, horizon)
    # Capacity rows again, now over the replica variables n[w, p] (after the y's).
    cap_r, cap_c, cap_v = [], [], []
    row = 0
    slots = spec.batch_slots.astype(np.float64)
    for p in range(size):
        if not ok[:, p].any():
            continue
        for length, stride in INTERVALS:
            starts = np.arange(0, max(n_win - length, 0) + 1, stride)
            for j in range(length):
                w = np.minimum(starts + j, n_win - 1)
                valid = starts + j < n_win
                cap_r.append(row + np.arange(len(starts))[valid])
                cap_c.append(n_y + w[valid] * size + p)
                cap_v.append(-slots[p] * lengths[w[valid]])
            row += len(starts)
    assert row == n_rows
    req_of = np.nonzero(ok)[0]
    pool_of = np.nonzero(ok)[1]
    n_var = n_y + n_win * size
    # Rows: capacity (<= 0), each request served at most once (<= 1), and with a
    # coverage target the served total at least ``needed`` (as -sum <= -needed).
    cover = needed > 0
    n_cover = n_y if cover else 0  # the coverage row's entries
    a = coo_matrix(
        (
            np.concatenate([*vals, *cap_v, np.ones(n_y), -np.ones(n_cover)]),
            (
                np.concatenate([*rows, *cap_r, n_rows + req_of, np.full(n_cover, n_rows + n_req)]),
                np.concatenate([*cols, *cap_c, np.arange(n_y), np.arange(n_cover)]),
            ),
        ),
        shape=(n_rows + n_req + int(cover), n_var),
    ).tocsr()
    b = np.concatenate((np.zeros(n_rows), np.ones(n_req), [-needed] if cover else []))
    price = np.outer(lengths, spec.usd_per_replica_hour / 3600.0).ravel()
    upper = np.concatenate((np.ones(n_y), np.tile(spec.max_replicas, n_win).astype(float)))
    res = linprog(
        np.concatenate((np.full(n_y, -reward), price)),
        A_ub=a,
        b_ub=b,
        bounds=np.column_stack((np.zeros(n_var), upper)),
        method=METHOD,
    )
    if res.x is None:
        raise SimulationError(f"relaxation bound: no solution ({res.message})")
    sol = np.asarray(res.x, dtype=np.float64)
    served = np.bincount(pool_of, weights=sol[:n_y], minlength=size).astype(np.float64)
    dual = -float(res.ineqlin.marginals[-1]) if cover else 0.0
    return _LP(float(res.fun), sol[n_y:].reshape(n_win, size), served, str(res.message), dual)


def _chunked(
    spec: FleetSpec, work: Workload, target: float, window_s: float, chunk_s: float,
    needed: float,
) -> Relaxation:  # fmt: skip
    """The bound of a long trace, chunk by chunk: still a valid lower bound.

    Each chunk (about ``chunk_s``: whole windows, a multiple of every interval's stride)
    keeps its own requests and capacity rows; a request's energy past its chunk's end
    and every row across a chunk boundary are dropped (fewer constraints can only lower
    the optimum). What couples the chunks is the one coverage row, which is priced
    instead (Lagrangian relaxation): for any price ``lam`` >= 0 a request served,
    ``L(lam)`` = the sum over chunks of min(cost - lam x served) + lam x ``needed`` is
    at most the optimum. ``L`` is concave and peaks where the requests served cross
    ``needed``: the search starts at the coverage row's dual on the busiest chunk
    solved alone, doubles or halves until the crossing is bracketed, then bisects it
    (``_SEARCH_STEPS`` solves of every chunk at most), and keeps the best ``L`` seen.
    """
    # Whole intervals of every length, so that the chunks' intervals are the one LP's
    # (but for the trace's last, cut short by its end: a valid row too), not shifted.
    step = math.lcm(*(stride for _, stride in INTERVALS))
    span = max(round(chunk_s / window_s / step), 1) * step * window_s
    starts = np.arange(0.0, work.horizon_s, span)
    pieces = [chunk(work, t, min(t + span, work.horizon_s)) for t in starts]
    busiest = max(pieces, key=lambda piece: len(piece.arrival_s))
    share = target * float(servable(spec, busiest).sum())
    lam = max(_solve(spec, busiest, window_s, needed=share).price_of_needed, 1e-9)
    lo, hi = 0.0, math.inf  # prices known to serve too few / enough
    best: tuple[float, list[_LP], float] = (-math.inf, [], 0.0)
    for _ in range(_SEARCH_STEPS):
        parts = [_solve(spec, piece, window_s, reward=lam) for piece in pieces]
        total = sum(part.usd for part in parts) + lam * needed
        if total > best[0]:
            best = (total, parts, lam)
        if sum(float(part.served.sum()) for part in parts) < needed:
            lo = lam
        else:
            hi = lam
        lam = lam * 2.0 if hi == math.inf else (lam / 2.0 if lo == 0.0 else math.sqrt(lo * hi))
    total, parts, lam = best
    return Relaxation(
        total_usd=max(total, 0.0),
        target=target,
        window_s=window_s,
        replicas=np.vstack([part.replicas for part in parts]),
        served_per_pool=np.sum([part.served for part in parts], axis=0),
        needed=needed,
        status=f"{len(parts)} chunks of {span:g} s, coverage priced at {lam:.3g} USD a "
        f"request; {parts[0].status}",
    )
