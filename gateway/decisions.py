"""A short in-memory record of recent routing decisions and traffic per provider, for
the live dashboard. Bounded: the last ``size`` decisions and ``horizon_s`` seconds."""

from __future__ import annotations

import math
from collections import deque
from typing import Any, NamedTuple


class Decision(NamedTuple):
    """One routed request: where it went and why. Times unix s, cost USD. A named tuple:
    one is built per request (a frozen dataclass cost ~2.5 us more)."""

    ts_s: float
    model: str
    tenant: str
    pool: str
    provider: str
    region: str
    reason: str
    candidates: int
    attempts: int
    predicted_ttft_ms: float
    cost_usd: float
    status: str


class DecisionLog:
    """Ring buffer of decisions plus per-second request counts by provider."""

    def __init__(self, size: int = 200, horizon_s: int = 300) -> None:
        self._decisions: deque[Decision] = deque(maxlen=size)
        self._horizon_s = horizon_s
        self._seconds: deque[tuple[int, dict[str, int]]] = deque()
        self.spend_nusd: dict[str, int] = {}

    def add(self, decision: Decision) -> None:
        """Record one decision (O(1))."""
        self._decisions.append(decision)
        second = math.floor(decision.ts_s)
        if not self._seconds or self._seconds[-1][0] != second:
            self._seconds.append((second, {}))
            while self._seconds and self._seconds[0][0] <= second - self._horizon_s:
                self._seconds.popleft()
        counts = self._seconds[-1][1]
        counts[decision.provider] = counts.get(decision.provider, 0) + 1
        self.spend_nusd[decision.provider] = self.spend_nusd.get(decision.provider, 0) + round(
            decision.cost_usd * 1e9
        )

    def recent(self, n: int = 50) -> list[dict[str, Any]]:
        """The newest ``n`` decisions, newest first."""
        return [d._asdict() for d in list(self._decisions)[-n:][::-1]]

    def traffic(self) -> list[dict[str, Any]]:
        """Per-second request counts by provider over the horizon, oldest first."""
        return [{"t": t, **counts} for t, counts in self._seconds]

    def spend_usd(self) -> dict[str, float]:
        """Estimated spend by provider since this replica started, USD."""
        return {p: n / 1e9 for p, n in self.spend_nusd.items()}
