"""Refresh scheduling: interval with jitter, exponential backoff after failures."""

from __future__ import annotations

import pytest

from pricing.schedule import Schedule


def _schedule(rand: float = 0.5, jitter: float = 0.1) -> Schedule:
    return Schedule(["aws", "gcp"], 300.0, jitter, 5.0, now_s=1000.0, rand=lambda: rand)


def test_every_feed_is_due_at_start() -> None:
    assert _schedule().due(1000.0) == ["aws", "gcp"]


def test_success_is_due_again_after_the_interval() -> None:
    s = _schedule()

    assert s.record("aws", ok=True, now_s=1000.0) == 1300.0


@pytest.mark.parametrize(("rand", "expected"), [(0.0, 270.0), (1.0, 330.0)])
def test_jitter_moves_the_next_refresh_within_its_fraction(rand: float, expected: float) -> None:
    s = _schedule(rand=rand)

    assert s.record("aws", ok=True, now_s=0.0) == pytest.approx(expected)


def test_failures_back_off_exponentially() -> None:
    s = _schedule(jitter=0.0)

    delays = [s.record("aws", ok=False, now_s=0.0) for _ in range(4)]

    assert delays == [5.0, 10.0, 20.0, 40.0]


def test_backoff_never_exceeds_the_interval() -> None:
    s = _schedule(jitter=0.0)

    for _ in range(20):
        delay = s.record("aws", ok=False, now_s=0.0)

    assert delay == 300.0


def test_success_resets_the_backoff() -> None:
    s = _schedule(jitter=0.0)
    s.record("aws", ok=False, now_s=0.0)
    s.record("aws", ok=True, now_s=0.0)

    assert s.record("aws", ok=False, now_s=0.0) == 5.0


def test_next_due_is_the_earliest_feed() -> None:
    s = _schedule(jitter=0.0)
    s.record("aws", ok=True, now_s=1000.0)

    assert s.next_due_s() == 1000.0 and s.due(1000.0) == ["gcp"]
