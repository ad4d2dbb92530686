"""Autoscalers in the simulation loop: a small protocol and a reactive one with headroom.

Every ``tick_s`` the engine records a DemandSample, asks ``decide(now, history, state)``
for each pool's target replicas, and applies it (new replicas ready after the pool's
provisioning time). The same scaler runs for every routing policy, so a policy changes the
bill only through where it puts load. The real autoscaler's ``decide()`` (in
``autoscaler/``) runs behind the same protocol in ``skyroute.simulate_planner``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from base.types import BoolArray, FloatArray, IntArray
from simulator.spec import FleetSpec


@dataclass(frozen=True, eq=False)
class DemandSample:
    """What each pool saw in one tick ending at ``end_s`` (length ``duration_s``): requests
    routed to it and their prompt and output tokens, per client region (shape
    ``(regions, pools)``); sequences running and requests queued at the end (per pool).
    """

    end_s: float
    duration_s: float
    arrivals: FloatArray
    prompt_tokens: FloatArray
    output_tokens: FloatArray
    running: FloatArray
    waiting: FloatArray


@dataclass(frozen=True, eq=False)
class FleetState:
    """Replicas per pool now (booting, ready, draining) with each pool's static capacity:
    ``slo_slots`` (sequences a replica runs within the TPOT SLO), ``tpot_at_slo_s`` (TPOT
    at that occupancy), ``prefill_tokens_per_s``, ``goodput_tokens_per_s`` (output tokens/s
    a replica sustains within the SLO), ``usd_per_token`` (the router's price) and
    ``allowed[region, pool]`` (the client region may use the pool)."""

    booting: IntArray
    ready: IntArray
    draining: IntArray
    min_replicas: IntArray
    max_replicas: IntArray
    slo_slots: IntArray
    tpot_at_slo_s: FloatArray
    prefill_tokens_per_s: FloatArray
    goodput_tokens_per_s: FloatArray
    usd_per_token: FloatArray
    allowed: BoolArray
    ttft_slo_s: float

    @classmethod
    def static(cls, spec: FleetSpec) -> FleetState:
        """The spec's static columns with no replicas; fill the counts with ``replace``."""
        slots = spec.slo_slots
        profiles = spec.profiles
        zero = np.zeros(spec.size, dtype=np.intp)
        return cls(
            booting=zero,
            ready=zero,
            draining=zero,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            slo_slots=slots,
            tpot_at_slo_s=np.asarray(
                [pr.tpot_ms(max(int(n), 1)) / 1000.0 for pr, n in zip(profiles, slots, strict=True)]
            ),
            prefill_tokens_per_s=np.asarray([pr.prefill_tokens_per_s for pr in profiles]),
            goodput_tokens_per_s=np.asarray(
                [pr.goodput_tokens_per_s(spec.slo.tpot_ms) for pr in profiles]
            ),
            usd_per_token=spec.usd_per_token,
            allowed=np.isfinite(spec.rtt_s),
            ttft_slo_s=spec.slo.ttft_ms / 1000.0,
        )


class Scaler(Protocol):
    """Decides target replicas per pool. Deterministic; a scaler may keep state from
    call to call within one run, so each run gets a fresh one."""

    def decide(
        self, now: float, demand_history: Sequence[DemandSample], fleet_state: FleetState
    ) -> IntArray:
        """Target replicas per pool (booting + ready), within each pool's bounds."""
        ...


class StaticScaler:
    """Keeps every pool at the replicas it has (booting + ready): a fixed fleet."""

    def decide(
        self, now: float, demand_history: Sequence[DemandSample], fleet_state: FleetState
    ) -> IntArray:
        """The current booting + ready count of each pool."""
        targets: IntArray = fleet_state.booting + fleet_state.ready
        return targets


@dataclass
class ReactiveScaler:
    """Follows the work routed to each pool, with headroom, like an HPA per pool.

    Work is slot-seconds per second with every request priced at the SLO occupancy: (prompt
    / prefill rate + (output - 1) × TPOT at ``slo_slots``) over ``lookback_s``. A backlog
    adds to it: the requests queued at the end of the window beyond those the ready slots
    start within the TTFT SLO (at the window's mean slot-seconds per request), priced so
    that it clears within ``lookback_s``. A queue that drains in time is not a backlog: it
    is what a router that fills a pool up to its SLO leaves, and counting it held idle
    spill replicas. (A pool with a queue and no arrivals in the window needs its running
    and queued requests' slots.) Pricing decode at the full-batch TPOT overstates work at
    light load; that, with ``utilisation``, is the headroom that rides out the
    provisioning delay. A pool needs work / (slo_slots × ``utilisation``) replicas. Work
    beyond ``max_replicas`` full replicas spills, as output tokens/s split by the client
    regions it came from, to the pools each region may use, cheapest per token first (a
    price expander, as in cluster-autoscaler).

    Scale-down is stabilised: a pool's target is the largest need computed at any tick of
    its hold window, ``down_window_s`` to start with, so demand has left it about
    ``lookback_s + down_window_s`` after it stopped: 300 s, a replica's provisioning time,
    by default (ski rental: an idle replica is held about as long as a boot would cost).
    Ski rental prices only the boot, not the requests that miss their SLO while it runs,
    so each pool learns from its own regrets: when the need comes back to the level a
    scale-down released, with work that would run the kept replicas past ``1 /
    utilisation`` of their capacity (requests queue for a boot), and the time from the
    peak that justified the released replicas to now is at most ``max_hold_s`` (900 s,
    three boots of the default 300 s lead time: an idle replica held longer costs more
    than the boots it saves),
    the pool's hold grows to that time, which would have bridged the gap; a scale-down
    nobody regretted halves it again, down to ``down_window_s``. Recurring bursts are then held
    for, and a one-off peak costs one hold. Stateful: one instance per run.
    """

    utilisation: float = 0.8
    lookback_s: float = 60.0
    down_window_s: float = 240.0
    max_hold_s: float = 900.0
    # Per-tick needs by the end time of their tick, and per-pool learning state (see the
    # class docstring): hold window (s); when the current level was last needed; the last
    # scale-down: its time, the level kept, the level it started from and when that was
    # last needed; and whether it is still open to regret.
    _needs: dict[float, FloatArray] = field(default_factory=dict, init=False, repr=False)
    _hold_s: FloatArray = field(default_factory=lambda: np.zeros(0), init=False, repr=False)
    _needed_at: FloatArray = field(default_factory=lambda: np.zeros(0), init=False, repr=False)
    _released_at: FloatArray = field(default_factory=lambda: np.zeros(0), init=False, repr=False)
    _kept: FloatArray = field(default_factory=lambda: np.zeros(0), init=False, repr=False)
    _released_from: FloatArray = field(default_factory=lambda: np.zeros(0), init=False, repr=False)
    _peak_at: FloatArray = field(default_factory=lambda: np.zeros(0), init=False, repr=False)
    _open: BoolArray = field(default_factory=lambda: np.zeros(0, bool), init=False, repr=False)

    def decide(
        self, now: float, demand_history: Sequence[DemandSample], fleet_state: FleetState
    ) -> IntArray:
        """Targets per pool from the demand history; see the class docstring."""
        st = fleet_state
        if not demand_history:
            targets: IntArray = st.booting + st.ready
            return targets
        n = len(st.ready)
        if len(self._hold_s) != n:
            self._reset(n, now)
        tick = demand_history[-1].duration_s
        ticks = max(1, round(self.lookback_s / tick))
        horizon = max(1, round(max(self.max_hold_s, self.down_window_s) / tick))
        needs = []
        for k in range(min(horizon, len(demand_history))):
            end = len(demand_history) - k
            key = demand_history[end - 1].end_s
            need = self._needs.get(key)
            if need is None:
                need = self._needs[key] = self._need(demand_history[max(0, end - ticks) : end], st)
            needs.append(need)
        oldest = demand_history[-min(horizon, len(demand_history))].end_s
        for key in [k for k in self._needs if k < oldest]:
            del self._needs[key]
        held = np.arange(len(needs))[:, None] < np.round(self._hold_s / tick)[None, :]
        need = np.where(held, np.asarray(needs), 0.0).max(axis=0)
        out: IntArray = np.clip(np.ceil(need - 1e-9), st.min_replicas, st.max_replicas).astype(
            np.intp
        )
        self._learn(now, tick, needs[0], st.booting + st.ready, out)
        return out

    def _reset(self, n: int, now: float) -> None:
        self._hold_s = np.full(n, self.down_window_s)
        self._needed_at = np.full(n, now)
        self._released_at = np.full(n, -np.inf)
        self._kept = np.zeros(n)
        self._released_from = np.zeros(n)
        self._peak_at = np.zeros(n)
        self._open = np.zeros(n, dtype=np.bool_)

    def _learn(
        self, now: float, tick: float, need: FloatArray, current: IntArray, target: IntArray
    ) -> None:
        """Update each pool's hold from this tick's need and decision (class docstring)."""
        self._needed_at = np.where(need >= current - 1e-9, now, self._needed_at)
        # Soon after a scale-down, the need is back at the released level and its work
        # would run the kept replicas past 1 / utilisation: past the headroom this scaler
        # provisions anyway, so requests queue for a boot. (A return just over the kept
        # replicas' capacity is the ordinary noise that headroom absorbs.) The released
        # replicas were needed: bridge from their peak to now.
        bridge = np.maximum(now - self._peak_at + tick, self.down_window_s)
        regret = (
            self._open
            & (bridge <= self.max_hold_s)
            & (np.ceil(need - 1e-9) >= self._released_from)
            & (need * self.utilisation**2 > self._kept + 1e-9)
        )
        self._hold_s = np.where(regret, np.maximum(self._hold_s, bridge), self._hold_s)
        self._open &= ~regret
        release = target < current
        # A scale-down's first step; the later steps of the same scale-down (the level
        # was not needed again since the last step) belong to it.
        episode = release & (self._needed_at > self._released_at)
        # A new scale-down after one that nobody regretted: the hold was longer than needed.
        calm = episode & self._open
        self._hold_s = np.where(
            calm, np.maximum(self._hold_s / 2.0, self.down_window_s), self._hold_s
        )
        self._peak_at = np.where(episode, self._needed_at, self._peak_at)
        self._released_from = np.where(episode, current, self._released_from)
        self._kept = np.where(release, target, self._kept)
        self._released_at = np.where(release, now, self._released_at)
        self._open |= release

    def _need(self, window: Sequence[DemandSample], st: FleetState) -> FloatArray:
        seconds = sum(s.duration_s for s in window)
        arrivals = sum(s.arrivals for s in window)
        decode = np.maximum(sum(s.output_tokens for s in window) - arrivals, 0.0)
        prompt = sum(s.prompt_tokens for s in window)
        by_region = (prompt / st.prefill_tokens_per_s + decode * st.tpot_at_slo_s) / seconds
        work = by_region.sum(axis=0)
        requests = np.sum([s.arrivals for s in window], axis=(0, 1))
        per_request = work * seconds / np.maximum(requests, 1.0)  # slot-s per request
        starts = st.ready * st.slo_slots * st.ttft_slo_s / np.maximum(per_request, 1e-9)
        backlog = np.maximum(window[-1].waiting - starts, 0.0)
        held = np.where(
            requests > 0,
            work + backlog * per_request / self.lookback_s,
            window[-1].running + window[-1].waiting,
        )
        full = np.maximum(work, held) / np.maximum(st.slo_slots, 1)
        need: FloatArray = full / self.utilisation
        over = np.maximum(full - st.max_replicas, 0.0) * st.goodput_tokens_per_s
        share = np.divide(by_region, work, out=np.zeros_like(by_region), where=work > 0)
        order = np.argsort(st.usd_per_token, kind="stable")
        for region, excess in enumerate((share * over).sum(axis=1)):
            spill = float(excess)
            for p in order:
                room = float(st.max_replicas[p]) - need[p]
                cap = st.goodput_tokens_per_s[p] * self.utilisation
                if spill <= 0 or not st.allowed[region, p] or room <= 0 or cap <= 0:
                    continue
                take = min(room, spill / cap)
                need[p] += take
                spill -= take * cap
        return need
