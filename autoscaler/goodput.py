"""Goodput profiles: what one replica sustains within an SLO, corrected by what it really did.

A pool's profile in the policy (``GoodputProfile``) gives its output tokens/s at the
model's default SLO, the batch it runs for that (``max_concurrency``) and its TPOT with
one sequence (``tpot_ms``). Between those two points TPOT is taken to grow linearly with
the batch, as in the simulated engine's model, which gives the goodput at any TPOT target.

Online correction follows the Dynamo planner: the ratio of the TPOT measured at the
pool's observed batch occupancy to the TPOT the profile predicts there is smoothed into
a correction factor, but only from measurements taken while the SLO held. A factor of
1.25 means the replicas decode 25 % slower than profiled, so each one sustains less
within the SLO. All functions are pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from router.policy import GoodputProfile, SLOClass

__all__ = [
    "CORRECTION_BOUNDS",
    "GoodputObservation",
    "goodput_tokens_per_s",
    "observed_correction",
    "slot_load",
    "tpot_at",
    "update_correction",
]

# A profile is never trusted less than half or more than twice: beyond that the
# profile is wrong and should be re-measured (``skyroute profile``).
CORRECTION_BOUNDS = (0.5, 2.0)


@dataclass(frozen=True, slots=True)
class GoodputObservation:
    """What the gateways measured on one pool recently.

    ``tpot_ms`` and ``ttft_ms`` are the pool's smoothed latencies (ms, NaN if unknown or
    stale), ``inflight`` the requests in flight summed over gateway replicas, and
    ``ready`` the replicas serving them.
    """

    tpot_ms: float
    ttft_ms: float
    inflight: float
    ready: int


def _full_tpot_ms(profile: GoodputProfile) -> float:
    """TPOT (ms) with ``max_concurrency`` sequences running, implied by the profile."""
    return max(profile.max_concurrency * 1000.0 / profile.tokens_per_s, profile.tpot_ms)


def tpot_at(profile: GoodputProfile, running: float) -> float:
    """Predicted TPOT (ms) with ``running`` sequences per replica (clipped to
    [1, max_concurrency])."""
    top = profile.max_concurrency
    occupied = min(max(running, 1.0), float(top))
    if top == 1:
        return profile.tpot_ms
    slope = (_full_tpot_ms(profile) - profile.tpot_ms) / (top - 1)
    return profile.tpot_ms + slope * (occupied - 1.0)


def goodput_tokens_per_s(
    profile: GoodputProfile, slo: SLOClass, correction: float = 1.0, *, embedding: bool = False
) -> float:
    """Output tokens/s one replica sustains while every sequence meets ``slo.tpot_ms``.

    Its measured TPOT is ``correction`` times the profile's. An embedding pool has no
    decode: its goodput is the profile's ``tokens_per_s`` (input tokens) / correction.
    Returns 0 if even one sequence misses the TPOT target.
    """
    factor = min(max(correction, CORRECTION_BOUNDS[0]), CORRECTION_BOUNDS[1])
    if embedding:
        return profile.tokens_per_s / factor
    target = slo.tpot_ms / factor  # the profile's TPOT that becomes slo.tpot_ms once corrected
    if target < profile.tpot_ms:
        return 0.0
    running = _slo_running(profile, target)
    return running * 1000.0 / (tpot_at(profile, running) * factor)


def _slo_running(profile: GoodputProfile, target_ms: float) -> float:
    """The largest batch whose profiled TPOT is within ``target_ms`` (>= the base TPOT)."""
    top = profile.max_concurrency
    full = _full_tpot_ms(profile)
    if target_ms >= full or top == 1:
        return float(top)
    slope = (full - profile.tpot_ms) / (top - 1)
    return float(min(1 + math.floor((target_ms - profile.tpot_ms) / slope + 1e-9), top))


def slot_load(
    profile: GoodputProfile,
    slo: SLOClass,
    prompt_tokens: float,
    output_tokens: float,
    correction: float = 1.0,
) -> float:
    """Batch-slot time one output token of a request mix costs on this replica, relative
    to what ``goodput_tokens_per_s`` assumes (1: the mix is what goodput is measured on).

    Goodput counts decode only: each slot emits a token every TPOT at the SLO's batch.
    But a request holds its slot through its prefill too (``prompt_tokens`` /
    ``prefill_tokens_per_s``), and its first token comes out of the prefill (vLLM), so it
    costs prefill + (``output_tokens`` - 1) x TPOT of slot time for ``output_tokens``
    tokens. A conversation mix (1,155 prompt / 211 output tokens) is within 1 % of 1; code
    completion (2,048 / 28) or long contexts cost 5-10 % more slot time per output token,
    and sizing them by goodput alone leaves their pools short. ``prompt_tokens`` and
    ``output_tokens`` are means per request; 1.0 if either is unknown (<= 0) or the pool
    cannot meet the TPOT target (goodput 0).
    """
    factor = min(max(correction, CORRECTION_BOUNDS[0]), CORRECTION_BOUNDS[1])
    target = slo.tpot_ms / factor
    if output_tokens <= 0 or prompt_tokens < 0 or target < profile.tpot_ms:
        return 1.0
    tpot_ms = tpot_at(profile, _slo_running(profile, target)) * factor
    prefill_ms = prompt_tokens * 1000.0 / profile.prefill_tokens_per_s
    return (prefill_ms + max(output_tokens - 1.0, 0.0) * tpot_ms) / (output_tokens * tpot_ms)


def observed_correction(
    profile: GoodputProfile, slo: SLOClass, obs: GoodputObservation
) -> float | None:
    """This observation's correction factor (measured / predicted TPOT), or None if it
    says nothing: no ready replica, less than one request in flight per replica, no
    fresh TPOT, or the SLO did not hold (TPOT or TTFT over target)."""
    if obs.ready < 1 or not math.isfinite(obs.tpot_ms) or obs.tpot_ms <= 0:
        return None
    running = obs.inflight / obs.ready
    if running < 1.0 or obs.tpot_ms > slo.tpot_ms:
        return None
    if math.isfinite(obs.ttft_ms) and obs.ttft_ms > slo.ttft_ms:
        return None
    return obs.tpot_ms / tpot_at(profile, running)


def update_correction(previous: float, observed: float | None, alpha: float = 0.3) -> float:
    """Smooth a new factor into ``previous`` (EWMA in log space, weight ``alpha`` on the
    new one) within ``CORRECTION_BOUNDS``; ``previous`` unchanged if ``observed`` is None."""
    if observed is None or not math.isfinite(observed) or observed <= 0:
        return previous
    low, high = CORRECTION_BOUNDS
    mixed = math.exp((1 - alpha) * math.log(previous) + alpha * math.log(observed))
    return min(max(mixed, low), high)
