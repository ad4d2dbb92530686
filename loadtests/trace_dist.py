"""Request lengths and arrival times from the Azure LLM inference trace (conversation service).

The trace (``TIMESTAMP,ContextTokens,GeneratedTokens``, ~19k requests over ~1 h) is read from
``../shared/data/traces/`` relative to the repository root, or from the 300-second sample
packaged beside this file when that is absent. Load generators draw prompt and output
lengths from its empirical distribution, or replay its arrivals with a speed-up.
"""

from __future__ import annotations

import bisect
import csv
import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
PACKAGED_SAMPLE = Path(__file__).resolve().parent / "azure_conv_trace_sample.csv"
# Characters per token the simulated engine and the gateway assume (ceil(chars / 4)).
CHARS_PER_TOKEN = 4
_FILLER = (
    "skyroute routes each request to the cheapest GPU pool that still meets its latency "
    "objective across clouds and regions while the autoscaler follows the demand. "
)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One trace row: arrival offset from the trace's first request (s) and lengths (tokens)."""

    offset_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Trace:
    """A trace's requests in arrival order."""

    requests: tuple[TraceRequest, ...]
    source: Path

    @property
    def duration_s(self) -> float:
        return self.requests[-1].offset_s if self.requests else 0.0

    def draw(self, rng: random.Random) -> TraceRequest:
        """A request drawn uniformly from the trace: lengths follow its empirical distribution."""
        return self.requests[rng.randrange(len(self.requests))]

    def window(self, start_s: float, length_s: float | None) -> Trace:
        """The requests arriving in ``[start_s, start_s + length_s)``, offsets re-based to 0."""
        end = float("inf") if length_s is None else start_s + length_s
        picked = [r for r in self.requests if start_s <= r.offset_s < end]
        base = picked[0].offset_s if picked else 0.0
        rebased = tuple(
            TraceRequest(r.offset_s - base, r.prompt_tokens, r.output_tokens) for r in picked
        )
        return Trace(rebased, self.source)


def default_trace_path() -> Path:
    """The full shared trace if present, else the packaged sample."""
    return SHARED_TRACE if SHARED_TRACE.exists() else PACKAGED_SAMPLE


def _timestamp(text: str) -> datetime:
    # The trace has 7 fractional digits; datetime takes at most 6.
    head, _, frac = text.strip().partition(".")
    return datetime.fromisoformat(f"{head}.{frac[:6]}" if frac else head)


def load_trace(path: Path | None = None) -> Trace:
    """Parse a trace CSV (``#`` comment lines allowed). Raises ValueError on a bad row."""
    path = path or default_trace_path()
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    if not rows:
        raise ValueError(f"{path}: no requests")
    requests: list[TraceRequest] = []
    t0 = _timestamp(rows[0]["TIMESTAMP"])
    for n, row in enumerate(rows, start=2):
        try:
            offset = (_timestamp(row["TIMESTAMP"]) - t0).total_seconds()
            prompt, output = int(row["ContextTokens"]), int(row["GeneratedTokens"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: row {n}: {exc}") from exc
        requests.append(TraceRequest(offset, max(prompt, 1), max(output, 1)))
    requests.sort(key=lambda r: r.offset_s)
    return Trace(tuple(requests), path)


def prompt_text(tokens: int) -> str:
    """Text the engine counts as ``tokens`` prompt tokens (``tokens * 4`` characters)."""
    chars = tokens * CHARS_PER_TOKEN
    return (_FILLER * (chars // len(_FILLER) + 1))[:chars]


class ReplaySchedule:
    """Trace arrivals scaled by ``speedup``, handed out one at a time in order.

    Offsets are seconds after ``start()``. Not thread-safe; locust users are greenlets on one
    thread, so ``claim`` needs no lock.
    """

    def __init__(self, trace: Trace, speedup: float) -> None:
        if speedup <= 0:
            raise ValueError("speedup must be > 0")
        self.requests = trace.requests
        self.speedup = speedup
        self._due = [r.offset_s / speedup for r in trace.requests]
        self._next = 0
        self.in_flight = 0
        self.sent = 0
        self.late = 0
        self.max_lag_s = 0.0

    @property
    def duration_s(self) -> float:
        return self._due[-1] if self._due else 0.0

    @property
    def exhausted(self) -> bool:
        return self._next >= len(self._due)

    @property
    def done(self) -> bool:
        return self.exhausted and self.in_flight == 0

    def claim(self) -> tuple[float, TraceRequest] | None:
        """The next request and its due time (s after start), or None when none is left."""
        if self.exhausted:
            return None
        i = self._next
        self._next += 1
        self.in_flight += 1
        return self._due[i], self.requests[i]

    def sent_at(self, lag_s: float, late_after_s: float = 1.0) -> None:
        """Record that a claimed request went out ``lag_s`` after its due time."""
        self.sent += 1
        self.max_lag_s = max(self.max_lag_s, lag_s)
        if lag_s > late_after_s:
            self.late += 1

    def finished(self) -> None:
        self.in_flight -= 1

    def arrival_rate(self, at_s: float, window_s: float = 10.0) -> float:
        """Scheduled arrivals per second over ``[at_s, at_s + window_s)``."""
        lo = bisect.bisect_left(self._due, at_s)
        hi = bisect.bisect_left(self._due, at_s + window_s)
        return (hi - lo) / window_s


def weighted_choice(rng: random.Random, names: Sequence[str], weights: Sequence[float]) -> str:
    return rng.choices(names, weights=weights, k=1)[0]
