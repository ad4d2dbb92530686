"""Each attempt's deadline, derived from the request's SLO rather than a constant.

A hung engine must cost a client about one SLO, not a minute; a long valid request must
never look like a hung engine. So the wait for an attempt's first byte is:

- streaming: ``deadline_factor`` × the larger of the SLO class's TTFT target and the
  pool's predicted TTFT, capped by the policy's ``first_byte_timeout_ms``;
- non-streaming (the answer comes whole, after the last token): the same TTFT part plus
  the output tokens asked for (or expected) × the TPOT target, times the factor, with no
  cap: it scales with what was asked for.

Either is at least ``deadline_floor_ms``. A missed deadline is a timeout of that pool
(it counts against it) and the request fails over. Pure: no clock.
"""

from __future__ import annotations

import math

from router.policy import RoutingSettings


def first_byte_deadline_s(
    routing: RoutingSettings,
    *,
    stream: bool,
    slo_ttft_ms: float,
    slo_tpot_ms: float,
    predicted_ttft_ms: float,
    output_tokens: int,
) -> float:
    """Seconds an attempt may wait for its first byte (see the module docstring)."""
    ttft_ms = max(slo_ttft_ms, predicted_ttft_ms if math.isfinite(predicted_ttft_ms) else 0.0)
    if stream:
        wait_ms = min(routing.deadline_factor * ttft_ms, routing.first_byte_timeout_ms)
    else:
        wait_ms = routing.deadline_factor * (ttft_ms + max(output_tokens, 0) * slo_tpot_ms)
    return max(wait_ms, routing.deadline_floor_ms) / 1000.0


def hedge_after_s(
    *, slo_ttft_ms: float, predicted_ttft_ms: float, predicted_tpot_ms: float, output_tokens: int
) -> float:
    """Seconds of silence from the first attempt after which a hedge starts (for SLO
    classes with ``hedge``): the TTFT target, or 1.5 × the time the first pool was
    predicted to take (to its first byte; for a non-streaming request, to its last
    token at its predicted TPOT), whichever is later. So a hedge never fires before the
    answer could be late, and fires well before the deadline (``deadline_factor`` ×
    the target) that would fail the attempt over."""
    predicted = predicted_ttft_ms if math.isfinite(predicted_ttft_ms) else 0.0
    if output_tokens > 0 and math.isfinite(predicted_tpot_ms):
        predicted += output_tokens * predicted_tpot_ms
    return max(slo_ttft_ms, 1.5 * predicted) / 1000.0
