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
the horizon are dropped, which can only lower the bound. The LP is solved by HiGHS.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog  # type: ignore[import-untyped]
from scipy.sparse import coo_matrix  # type: ignore[import-untyped]

from base.types import FloatArray, IntArray
from simulator.engine import Workload
from simulator.errors import SimulationError
from simulator.metrics import servable
from simulator.spec import FleetSpec

# Interval lengths (in windows) and the stride of their starts (any subset of rows is
# valid; more rows bind tighter where a pool's max replicas caps a burst, and cost time).
METHOD = "highs"
INTERVALS: tuple[tuple[int, int], ...] = ((1, 1), (5, 5))


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
    spec: FleetSpec, work: Workload, target: float = 0.99, window_s: float = 60.0
) -> Relaxation:
    """The LP bound for serving at least ``target`` × the attainable share (requests
    some pool can serve alone; ``metrics.attainable``) of the measured requests within
    the SLO; see the module docstring. Raises SimulationError if the solve fails or no
    fleet within the pools' max replicas reaches the target.
    """
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
    needed = target * float(servable(spec, work).sum())
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
    # Rows: capacity (<= 0), each request served at most once (<= 1), and the served
    # total at least ``needed`` (as -sum <= -needed).
    a = coo_matrix(
        (
            np.concatenate([*vals, *cap_v, np.ones(n_y), -np.ones(n_y)]),
            (
                np.concatenate([*rows, *cap_r, n_rows + req_of, np.full(n_y, n_rows + n_req)]),
                np.concatenate([*cols, *cap_c, np.arange(n_y), np.arange(n_y)]),
            ),
        ),
        shape=(n_rows + n_req + 1, n_var),
    ).tocsr()
    b = np.concatenate((np.zeros(n_rows), np.ones(n_req), [-needed]))
    price = np.outer(lengths, spec.usd_per_replica_hour / 3600.0).ravel()
    upper = np.concatenate((np.ones(n_y), np.tile(spec.max_replicas, n_win).astype(float)))
    res = linprog(
        np.concatenate((np.zeros(n_y), price)),
        A_ub=a,
        b_ub=b,
        bounds=np.column_stack((np.zeros(n_var), upper)),
        method=METHOD,
    )
    if res.x is None:
        raise SimulationError(f"relaxation bound: no solution ({res.message})")
    sol = np.asarray(res.x, dtype=np.float64)
    served = np.bincount(pool_of, weights=sol[:n_y], minlength=size).astype(np.float64)
    return Relaxation(
        total_usd=float(res.fun),
        target=target,
        window_s=window_s,
        replicas=sol[n_y:].reshape(n_win, size),
        served_per_pool=served,
        needed=needed,
        status=str(res.message),
    )
