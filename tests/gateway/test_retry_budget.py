"""RetryBudget: ``min_retries`` per window always, beyond that at most ``ratio`` ×
requests over a sliding window of one-second buckets.

Every call takes an explicit ``now`` (unix seconds), so no test reads a clock.
"""

from __future__ import annotations

from gateway.retry_budget import RetryBudget

T0 = 1_000_000.0
WINDOW = 10.0
EPS = 0.001


def _requests(budget: RetryBudget, n: int, now: float = T0) -> None:
    for _ in range(n):
        budget.on_request(now)


def _retries(budget: RetryBudget, n: int, now: float = T0) -> list[bool]:
    return [budget.try_retry(now) for _ in range(n)]


def test_min_retries_are_allowed_without_any_request() -> None:
    budget = RetryBudget(ratio=0.2, min_retries=3, window_s=WINDOW)
    assert _retries(budget, 4) == [True, True, True, False]


def test_no_retry_is_allowed_with_no_min_and_no_requests() -> None:
    budget = RetryBudget(ratio=0.5, min_retries=0, window_s=WINDOW)
    assert budget.try_retry(T0) is False


def test_retries_beyond_the_min_are_bounded_by_the_ratio_of_requests() -> None:
    budget = RetryBudget(ratio=0.5, min_retries=0, window_s=WINDOW)
    _requests(budget, 10)
    assert _retries(budget, 6) == [True] * 5 + [False]


def test_the_min_is_a_floor_not_added_to_the_ratio_share() -> None:
    # The module docstring's reading; router.policy's comment says "plus" (see report).
    budget = RetryBudget(ratio=0.5, min_retries=2, window_s=WINDOW)
    _requests(budget, 10)
    assert _retries(budget, 6) == [True] * 5 + [False]


def test_a_ratio_share_below_the_min_still_allows_the_min() -> None:
    budget = RetryBudget(ratio=0.1, min_retries=3, window_s=WINDOW)
    _requests(budget, 10)
    assert _retries(budget, 4) == [True, True, True, False]


def test_a_denied_retry_is_not_counted() -> None:
    budget = RetryBudget(ratio=0.5, min_retries=0, window_s=WINDOW)
    _requests(budget, 2)
    _retries(budget, 3)  # one allowed, two denied
    _requests(budget, 2)
    assert budget.try_retry(T0) is True


def test_requests_within_the_window_still_fund_retries() -> None:
    budget = RetryBudget(ratio=0.5, min_retries=0, window_s=WINDOW)
    _requests(budget, 2)
    assert budget.try_retry(T0 + WINDOW - EPS) is True


def test_requests_older_than_the_window_age_out() -> None:
    budget = RetryBudget(ratio=0.5, min_retries=0, window_s=WINDOW)
    _requests(budget, 2)
    assert budget.try_retry(T0 + WINDOW) is False


def test_retries_within_the_window_still_count() -> None:
    budget = RetryBudget(ratio=0.0, min_retries=1, window_s=WINDOW)
    budget.try_retry(T0)
    assert budget.try_retry(T0 + WINDOW - EPS) is False


def test_retries_older_than_the_window_age_out() -> None:
    budget = RetryBudget(ratio=0.0, min_retries=1, window_s=WINDOW)
    budget.try_retry(T0)
    assert budget.try_retry(T0 + WINDOW) is True


def test_the_window_slides_one_second_bucket_at_a_time() -> None:
    budget = RetryBudget(ratio=0.5, min_retries=0, window_s=WINDOW)
    _requests(budget, 2, T0)
    _requests(budget, 2, T0 + 5)
    budget.try_retry(T0 + 5)
    # At T0 + 10 the first two requests are gone: two left fund only the one retry spent.
    assert budget.try_retry(T0 + WINDOW) is False
