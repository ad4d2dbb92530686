"""When each feed is next due: the refresh interval with jitter, and exponential backoff
after failures. Pure: the caller passes the time and may pass the random source."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable


class Schedule:
    """Per-feed due times (unix s).

    After a success a feed is due again in ``interval_s × (1 ± jitter)``; after its n-th
    failure in a row in ``min(backoff_base_s × 2^(n-1), interval_s) × (1 ± jitter)``, so a
    broken feed is retried soon, then less and less often, never less often than normal.
    Jitter spreads sidecars (and feeds) so they do not all call an API at once.
    """

    def __init__(
        self,
        names: Iterable[str],
        interval_s: float,
        jitter: float,
        backoff_base_s: float,
        now_s: float,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.interval_s = interval_s
        self.jitter = jitter
        self.backoff_base_s = backoff_base_s
        self._rand = rand
        self._due = dict.fromkeys(names, now_s)
        self.failures = dict.fromkeys(self._due, 0)

    def delay_s(self, failures: int) -> float:
        """Seconds until the next try after ``failures`` failures in a row (0: success)."""
        if failures <= 0:
            base = self.interval_s
        else:
            base = min(self.backoff_base_s * 2 ** (failures - 1), self.interval_s)
        return base * (1.0 + self.jitter * (2.0 * self._rand() - 1.0))

    def due(self, now_s: float) -> list[str]:
        """Feeds due at ``now_s``, in name order."""
        return sorted(name for name, at in self._due.items() if at <= now_s)

    def next_due_s(self) -> float:
        """The earliest due time of any feed (+inf without feeds)."""
        return min(self._due.values(), default=float("inf"))

    def record(self, name: str, ok: bool, now_s: float) -> float:
        """Note the outcome of a refresh of ``name`` at ``now_s``; its next due time."""
        self.failures[name] = 0 if ok else self.failures.get(name, 0) + 1
        self._due[name] = now_s + self.delay_s(self.failures[name])
        return self._due[name]

    def retune(self, interval_s: float, jitter: float) -> None:
        """Take a new interval and jitter (a reloaded policy) from the next record on."""
        self.interval_s = interval_s
        self.jitter = jitter
