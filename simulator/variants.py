"""Stress variants of a trace, so that no routing constant is tuned on one workload.

Each variant keeps a trace's arrivals (or multiplies them) and reshapes its token
counts by a rule fixed here, the same for every source trace:

- ``code``: code completion, long prompts and short outputs. Prompts are scaled to a
  mean of 2,048 tokens and outputs to a mean of 28 (the Azure 2023 code trace's
  published means, Splitwise, ISCA'24), each keeping its own distribution's shape.
- ``long-context``: multi-turn conversation with long contexts, prompts scaled to a
  mean of 12,000 tokens (outputs unchanged), capped at 131,072 (the 70B context).
- ``burst``: every ``burst_period_s`` the arrivals of a ``burst_width_s`` window come
  ``burst_factor`` times (copies spread evenly over the window's requests' gaps), a
  flash crowd on top of the trace's own variation.

- ``x6-hours``: the trace played ``REPEAT_TIMES`` times back to back (each copy one
  mean inter-arrival gap after the last), a steady stretch of hours in which a scaler's
  holds are learnt and forgotten, and every join a step from the trace's end to its
  start.

The Mooncake synthetic trace (prompt mean 15k tokens, millisecond stamps) is read as it
is with ``simulator.trace.read_trace``; it needs no reshaping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from base.types import FloatArray, IntArray
from simulator.errors import SimulationError
from simulator.trace import Trace

CODE_PROMPT_MEAN = 2048.0
CODE_OUTPUT_MEAN = 28.0
LONG_PROMPT_MEAN = 12_000.0
MAX_CONTEXT = 131_072
BURST_FACTOR = 3
BURST_PERIOD_S = 600.0
BURST_WIDTH_S = 60.0
REPEAT_TIMES = 6


def _to_mean(tokens: IntArray, mean: float, cap: int = MAX_CONTEXT) -> IntArray:
    """``tokens`` scaled to ``mean`` (rounded, at least 1, at most ``cap``)."""
    now = float(tokens.mean()) if len(tokens) else 0.0
    if now <= 0:
        raise SimulationError("cannot rescale a trace whose token counts are all 0")
    out: IntArray = np.clip(np.rint(tokens * (mean / now)), 1, cap).astype(np.intp)
    return out


def code(trace: Trace) -> Trace:
    """Long prompts (mean 2,048), short outputs (mean 28); see the module docstring."""
    return replace(
        trace,
        prompt_tokens=_to_mean(trace.prompt_tokens, CODE_PROMPT_MEAN),
        output_tokens=_to_mean(trace.output_tokens, CODE_OUTPUT_MEAN),
        source=f"{trace.source} [code]",
    )


def long_context(trace: Trace) -> Trace:
    """Prompts scaled to a 12,000-token mean; see the module docstring."""
    return replace(
        trace,
        prompt_tokens=_to_mean(trace.prompt_tokens, LONG_PROMPT_MEAN),
        source=f"{trace.source} [long-context]",
    )


def burst(
    trace: Trace,
    factor: int = BURST_FACTOR,
    period_s: float = BURST_PERIOD_S,
    width_s: float = BURST_WIDTH_S,
) -> Trace:
    """Requests arriving in the first ``width_s`` of every ``period_s`` come ``factor``
    times: copy k of a request arrives k / factor of the way to the next arrival."""
    if factor < 1 or width_s <= 0 or period_s < width_s:
        raise SimulationError("burst: need factor >= 1 and 0 < width <= period")
    t = trace.arrival_s
    gap: FloatArray = np.diff(t, append=t[-1] if len(t) else 0.0)
    hot = (t % period_s) < width_s
    idx = np.flatnonzero(hot)
    times = [t]
    for k in range(1, factor):
        times.append(t[idx] + gap[idx] * k / factor)
    arrival = np.concatenate(times)
    pick = np.concatenate([np.arange(len(t))] + [idx] * (factor - 1))
    order = np.argsort(arrival, kind="stable")
    return replace(
        trace,
        arrival_s=arrival[order],
        prompt_tokens=trace.prompt_tokens[pick][order],
        output_tokens=trace.output_tokens[pick][order],
        source=f"{trace.source} [burst x{factor}]",
    )


def repeat(trace: Trace, times: int = REPEAT_TIMES) -> Trace:
    """``trace`` ``times`` times back to back: copy k arrives k x (its duration + one
    mean gap) later."""
    if times < 1:
        raise SimulationError("repeat: need times >= 1")
    n = len(trace)
    gap = trace.duration_s / (n - 1) if n > 1 else 0.0
    period = trace.duration_s + gap
    return replace(
        trace,
        arrival_s=np.concatenate([trace.arrival_s + k * period for k in range(times)]),
        prompt_tokens=np.tile(trace.prompt_tokens, times),
        output_tokens=np.tile(trace.output_tokens, times),
        source=f"{trace.source} [x{times} back to back]",
    )


VARIANTS: dict[str, Callable[[Trace], Trace]] = {
    "original": lambda t: t,
    "code": code,
    "long-context": long_context,
    "burst": burst,
    "code+burst": lambda t: burst(code(t)),
    "x6-hours": repeat,
}


def variant(trace: Trace, name: str) -> Trace:
    """``trace`` reshaped by the variant ``name``. Raises SimulationError if unknown."""
    try:
        return VARIANTS[name](trace)
    except KeyError:
        raise SimulationError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}") from None
