"""How long a request waits on one replica before its prefill starts: the pool's latency
envelope (``PoolTiming``) and the wait as a function of the replica's load.

Pure arithmetic, no state. Times in ms, loads in requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from base.types import FloatArray

__all__ = ["PoolTiming", "WaitCurve", "wait_ms"]

# Beyond any real load: the last interpolation point of the wait curve.
_LOAD_MAX = 1e12


@dataclass(frozen=True, slots=True)
class PoolTiming:
    """One replica's latency envelope (the pool's profile). Times in ms.

    ``slots`` is the batch size a replica runs at once; TPOT grows linearly from
    ``tpot_base_ms`` (one sequence) to ``tpot_full_ms`` (all slots busy);
    ``mean_output_tokens`` is how long a request ahead holds its slot.
    """

    slots: int
    prefill_ms_per_token: float
    tpot_base_ms: float
    tpot_full_ms: float
    mean_output_tokens: float = 200.0

    def __post_init__(self) -> None:
        if self.slots < 1 or self.tpot_full_ms < self.tpot_base_ms:
            raise ValueError("slots must be >= 1 and tpot_full_ms >= tpot_base_ms")


def wait_ms(load: float, timing: PoolTiming) -> float:
    """Queueing plus one decode step for a request joining ``load`` requests, ms: the
    part of the time to first token that depends on the replica's load. Requests beyond
    the slots each hold one for ``mean_output_tokens`` decode steps of a full batch,
    ``slots`` at a time; the decode step grows with the occupancy the request joins."""
    slots = timing.slots
    ahead = max(load + 1.0 - slots, 0.0)
    step_ms = (timing.tpot_full_ms - timing.tpot_base_ms) / slots
    drain_ms = timing.mean_output_tokens * timing.tpot_full_ms / slots
    return ahead * drain_ms + min(load, slots) * step_ms


@dataclass(frozen=True, slots=True)
class WaitCurve:
    """``wait_ms`` for one timing, in two forms that give the same values: interpolation
    points (``xs``, ``ys``: it is piecewise linear in the load, with breaks at
    ``slots - 1`` and ``slots``, so ``np.interp`` evaluates it exactly for a whole pool
    in one call) and the constants of its scalar form (``ms``). ``strict``: it grows with
    every unit of load, so the least loaded replica is the one of least wait."""

    xs: FloatArray
    ys: FloatArray
    slots: float
    step_ms: float
    drain_ms: float
    strict: bool
    prefill_ms_per_token: float

    @classmethod
    def of(cls, timing: PoolTiming) -> WaitCurve:
        """The curve of ``timing``."""
        slots = float(timing.slots)
        xs = [0.0, slots - 1.0, slots, _LOAD_MAX] if slots > 1 else [0.0, 1.0, _LOAD_MAX]
        step_ms = (timing.tpot_full_ms - timing.tpot_base_ms) / slots
        drain_ms = timing.mean_output_tokens * timing.tpot_full_ms / slots
        return cls(
            xs=np.array(xs),
            ys=np.array([wait_ms(x, timing) for x in xs]),
            slots=slots,
            step_ms=step_ms,
            drain_ms=drain_ms,
            strict=step_ms > 0.0 and drain_ms > 0.0,
            prefill_ms_per_token=timing.prefill_ms_per_token,
        )

    def ms(self, load: float) -> float:
        """The wait for a request joining ``load`` requests, ms."""
        ahead = load + 1.0 - self.slots
        return (ahead * self.drain_ms if ahead > 0.0 else 0.0) + min(
            load, self.slots
        ) * self.step_ms
