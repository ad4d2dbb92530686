"""OutlierDetector: passive ejection with doubling backoff and a half-open trial.

Every call takes an explicit ``now`` (unix seconds), so no test reads a clock.
"""

from __future__ import annotations

import pytest

from gateway.outlier import OutlierDetector
from router.policy import OutlierSettings
from router.snapshot import PoolState
from router.tables import HealthUpdate

POOL = "aws:us-east-1:p"
OTHER = "gcp:us-central1:q"
T0 = 1_000_000.0
BASE = 5.0
CAP = 18.0


@pytest.fixture
def detector() -> OutlierDetector:
    settings = OutlierSettings(consecutive_failures=3, base_ejection_s=BASE, max_ejection_s=CAP)
    return OutlierDetector(settings)


def _eject(detector: OutlierDetector, now: float = T0, pool: str = POOL) -> None:
    for _ in range(detector.settings.consecutive_failures):
        detector.on_failure(pool, now, "boom")
    assert pool in detector.blocked(now)


def _start_trial(detector: OutlierDetector, pool: str = POOL) -> float:
    """Advance past the current backoff and claim the trial; returns the time used."""
    until = detector.take_updates()[pool].until_s
    assert detector.allows(pool, until)
    return until


# -- ejection -------------------------------------------------------------------------


def test_failures_below_the_threshold_do_not_eject(detector: OutlierDetector) -> None:
    ejected = [detector.on_failure(POOL, T0, "boom") for _ in range(2)]
    assert (ejected, detector.blocked(T0), detector.allows(POOL, T0)) == (
        [False, False],
        set(),
        True,
    )


def test_the_nth_consecutive_failure_ejects(detector: OutlierDetector) -> None:
    ejected = [detector.on_failure(POOL, T0, "boom") for _ in range(3)]
    assert ejected == [False, False, True]


def test_a_success_resets_the_failure_count(detector: OutlierDetector) -> None:
    detector.on_failure(POOL, T0, "boom")
    detector.on_failure(POOL, T0, "boom")
    detector.on_success(POOL)
    ejected = [detector.on_failure(POOL, T0, "boom") for _ in range(2)]
    assert (ejected, detector.blocked(T0)) == ([False, False], set())


def test_an_ejected_pool_is_blocked_and_not_allowed(detector: OutlierDetector) -> None:
    _eject(detector)
    assert (detector.blocked(T0 + BASE - 0.01), detector.allows(POOL, T0 + BASE - 0.01)) == (
        {POOL},
        False,
    )


def test_ejection_blocks_only_the_failing_pool(detector: OutlierDetector) -> None:
    _eject(detector)
    assert (detector.blocked(T0), detector.allows(OTHER, T0)) == ({POOL}, True)


def test_ejection_queues_an_ejected_update_until_the_backoff_ends(
    detector: OutlierDetector,
) -> None:
    _eject(detector)
    update = detector.take_updates()[POOL]
    assert (update.state, update.weight, update.until_s) == (PoolState.EJECTED, 0.0, T0 + BASE)


def test_ejection_update_names_the_reason(detector: OutlierDetector) -> None:
    for _ in range(3):
        detector.on_failure(POOL, T0, "connect refused")
    assert "connect refused" in detector.take_updates()[POOL].reason


# -- half-open ------------------------------------------------------------------------


def test_after_the_backoff_exactly_one_trial_is_allowed(detector: OutlierDetector) -> None:
    _eject(detector)
    now = T0 + BASE
    assert [detector.allows(POOL, now) for _ in range(3)] == [True, False, False]


def test_a_running_trial_keeps_the_pool_blocked(detector: OutlierDetector) -> None:
    _eject(detector)
    now = T0 + BASE
    before = detector.blocked(now)
    detector.allows(POOL, now)
    assert (before, detector.blocked(now)) == (set(), {POOL})


def test_trial_success_readmits_the_pool(detector: OutlierDetector) -> None:
    _eject(detector)
    now = _start_trial(detector)
    detector.on_success(POOL)
    assert (detector.blocked(now), [detector.allows(POOL, now) for _ in range(2)]) == (
        set(),
        [True, True],
    )


def test_trial_success_queues_a_healthy_update(detector: OutlierDetector) -> None:
    _eject(detector)
    _start_trial(detector)
    detector.on_success(POOL)
    assert detector.take_updates()[POOL].state is PoolState.HEALTHY


def test_success_of_a_healthy_pool_queues_nothing(detector: OutlierDetector) -> None:
    detector.on_failure(POOL, T0, "boom")
    detector.on_success(POOL)
    assert detector.take_updates() == {}


def test_trial_failure_re_ejects_at_once_with_double_backoff(detector: OutlierDetector) -> None:
    _eject(detector)
    now = _start_trial(detector)
    ejected = detector.on_failure(POOL, now, "boom")
    assert (ejected, detector.take_updates()[POOL].until_s) == (True, now + 2 * BASE)


def test_backoff_is_capped_at_max_ejection(detector: OutlierDetector) -> None:
    _eject(detector)
    until = detector.take_updates()[POOL].until_s
    backoffs = []
    for _ in range(4):
        detector.allows(POOL, until)
        detector.on_failure(POOL, until, "boom")
        next_until = detector.take_updates()[POOL].until_s
        backoffs.append(next_until - until)
        until = next_until
    # 5 s doubled: 10, then 20 capped at 18, and it stays there.
    assert backoffs == [10.0, CAP, CAP, CAP]


def test_readmission_resets_the_backoff(detector: OutlierDetector) -> None:
    _eject(detector)
    now = _start_trial(detector)
    detector.on_failure(POOL, now, "boom")  # second ejection: 10 s
    now = _start_trial(detector)
    detector.on_success(POOL)
    _eject(detector, now)
    assert detector.take_updates()[POOL].until_s == now + BASE


def test_release_trial_frees_the_slot(detector: OutlierDetector) -> None:
    _eject(detector)
    now = _start_trial(detector)
    detector.release_trial(POOL)
    assert (detector.blocked(now), detector.allows(POOL, now)) == (set(), True)


def test_release_trial_keeps_the_pool_half_open(detector: OutlierDetector) -> None:
    _eject(detector)
    now = _start_trial(detector)
    detector.release_trial(POOL)
    detector.allows(POOL, now)
    assert detector.allows(POOL, now) is False


def test_release_trial_of_an_unknown_pool_is_a_no_op(detector: OutlierDetector) -> None:
    detector.release_trial("never-seen")
    assert detector.blocked(T0) == set()


# -- the update queue -----------------------------------------------------------------


def test_take_updates_drains_the_queue(detector: OutlierDetector) -> None:
    _eject(detector)
    first = detector.take_updates()
    assert (set(first), detector.take_updates()) == ({POOL}, {})


def test_take_updates_keeps_one_update_per_pool(detector: OutlierDetector) -> None:
    _eject(detector)
    _eject(detector, pool=OTHER)
    assert set(detector.take_updates()) == {POOL, OTHER}


def test_requeue_puts_back_an_update_that_was_not_written(detector: OutlierDetector) -> None:
    _eject(detector)
    taken = detector.take_updates()
    detector.requeue(POOL, taken[POOL])
    assert detector.take_updates() == taken


def test_requeue_keeps_a_newer_update(detector: OutlierDetector) -> None:
    _eject(detector)
    stale = detector.take_updates()[POOL]
    now = stale.until_s
    detector.allows(POOL, now)
    detector.on_success(POOL)  # newer: HEALTHY
    detector.requeue(POOL, stale)
    assert detector.take_updates()[POOL].state is PoolState.HEALTHY


def test_requeue_of_a_pool_without_pending_update_adds_it(detector: OutlierDetector) -> None:
    update = HealthUpdate(PoolState.HEALTHY, "x")
    detector.requeue(OTHER, update)
    assert detector.take_updates() == {OTHER: update}
