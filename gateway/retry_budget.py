"""A retry budget: retries may be at most a share of requests over a sliding window.

When many pools fail at once, unbounded retries multiply the load on whatever is still
standing. The budget lets ``min_retries`` through per window regardless (so a quiet
gateway still fails over), and beyond that at most ``ratio`` × requests.
"""

from __future__ import annotations

import math
from collections import deque


class RetryBudget:
    """Counts requests and retries in one-second buckets. ``now`` is unix seconds."""

    def __init__(self, ratio: float, min_retries: int, window_s: float) -> None:
        self.ratio = ratio
        self.min_retries = min_retries
        self.window_s = window_s
        self._buckets: deque[list[int]] = deque()  # [second, requests, retries]
        self._requests = 0
        self._retries = 0

    def _bucket(self, now: float) -> list[int]:
        second = math.floor(now)
        buckets = self._buckets
        horizon = second - self.window_s
        while buckets and buckets[0][0] <= horizon:
            _, requests, retries = buckets.popleft()
            self._requests -= requests
            self._retries -= retries
        if not buckets or buckets[-1][0] != second:
            buckets.append([second, 0, 0])
        return buckets[-1]

    def reconfigure(self, ratio: float, min_retries: int, window_s: float) -> None:
        """Apply new limits (a policy reload); the counts so far stay, and a shorter
        window drops the buckets it no longer covers at the next count."""
        self.ratio, self.min_retries, self.window_s = ratio, min_retries, window_s

    def on_request(self, now: float) -> None:
        """Count one new request."""
        self._bucket(now)[1] += 1
        self._requests += 1

    def try_retry(self, now: float) -> bool:
        """Spend one retry if the budget allows it; False means do not retry."""
        bucket = self._bucket(now)
        if self._retries >= max(self.min_retries, self.ratio * self._requests):
            return False
        bucket[2] += 1
        self._retries += 1
        return True
