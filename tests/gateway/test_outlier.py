"""OutlierDetector: passive ejection on consecutive failures or on the error rate over a
window, with a doubling local backoff, a half-open trial and a queue of EJECT events.

Every call takes an explicit ``now`` (unix seconds), so no test reads a clock.
"""

from __future__ import annotations

import pytest

from gateway.outlier import OutlierDetector
from router.policy import HealthSettings, OutlierSettings

POOL = "aws:us-east-1:p"
OTHER = "gcp:us-central1:q"
T0 = 1_000_000.0
BASE = 5.0
CAP = 18.0
WINDOW = 10.0
EPS = 0.001


@pytest.fixture
def detector() -> OutlierDetector:
    """Consecutive failures only: the error rate never has enough requests to judge."""
    settings = OutlierSettings(consecutive_failures=3, base_ejection_s=BASE, max_ejection_s=CAP)
    return OutlierDetector(settings, HealthSettings(error_rate_min_requests=1000))


@pytest.fixture
def rate_detector() -> OutlierDetector:
    """Error rate only: 50 % over 10 s with at least 4 requests; no failure streak trips."""
    settings = OutlierSettings(consecutive_failures=1000, base_ejection_s=BASE)
    health = HealthSettings(
        error_rate_window_s=WINDOW, error_rate_threshold=0.5, error_rate_min_requests=4
    )
    return OutlierDetector(settings, health)


def _eject(detector: OutlierDetector, now: float = T0, pool: str = POOL) -> None:
    for _ in range(detector.settings.consecutive_failures):
        detector.on_failure(pool, now, "boom")
    assert pool in detector.blocked(now)


def _blocked_until(detector: OutlierDetector, until: float, pool: str = POOL) -> bool:
    """Whether the pool is blocked right up to ``until`` and free from then on."""
    return pool in detector.blocked(until - EPS) and pool not in detector.blocked(until)


# -- consecutive failures -------------------------------------------------------------


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
    detector.on_success(POOL, T0)
    ejected = [detector.on_failure(POOL, T0, "boom") for _ in range(2)]
    assert (ejected, detector.blocked(T0)) == ([False, False], set())


def test_an_ejected_pool_is_blocked_and_not_allowed(detector: OutlierDetector) -> None:
    _eject(detector)
    now = T0 + BASE - EPS
    assert (detector.blocked(now), detector.allows(POOL, now)) == ({POOL}, False)


def test_the_first_ejection_lasts_the_base_backoff(detector: OutlierDetector) -> None:
    _eject(detector)
    assert _blocked_until(detector, T0 + BASE)


def test_ejection_blocks_only_the_failing_pool(detector: OutlierDetector) -> None:
    _eject(detector)
    assert (detector.blocked(T0), detector.allows(OTHER, T0)) == ({POOL}, True)


def test_nothing_is_blocked_before_any_failure(detector: OutlierDetector) -> None:
    assert (detector.blocked(T0), detector.allows(POOL, T0)) == (set(), True)


def test_a_success_during_the_backoff_keeps_the_pool_blocked(detector: OutlierDetector) -> None:
    _eject(detector)
    detector.on_success(POOL, T0 + 1)  # an attempt that was in flight when it was ejected
    assert POOL in detector.blocked(T0 + 1)


# -- error rate over the window -------------------------------------------------------


def test_error_rate_at_the_threshold_ejects(rate_detector: OutlierDetector) -> None:
    rate_detector.on_success(POOL, T0)
    rate_detector.on_failure(POOL, T0, "boom")
    rate_detector.on_success(POOL, T0)
    assert rate_detector.on_failure(POOL, T0, "boom") is True


def test_error_rate_below_the_threshold_does_not_eject(rate_detector: OutlierDetector) -> None:
    for _ in range(3):
        rate_detector.on_success(POOL, T0)
    assert rate_detector.on_failure(POOL, T0, "boom") is False


def test_error_rate_needs_the_minimum_number_of_requests(
    rate_detector: OutlierDetector,
) -> None:
    ejected = [rate_detector.on_failure(POOL, T0, "boom") for _ in range(3)]
    assert (ejected, rate_detector.blocked(T0)) == ([False, False, False], set())


def test_failures_within_the_window_add_up(rate_detector: OutlierDetector) -> None:
    for _ in range(3):
        rate_detector.on_failure(POOL, T0, "boom")
    assert rate_detector.on_failure(POOL, T0 + WINDOW - EPS, "boom") is True


def test_failures_older_than_the_window_age_out(rate_detector: OutlierDetector) -> None:
    for _ in range(3):
        rate_detector.on_failure(POOL, T0, "boom")
    assert rate_detector.on_failure(POOL, T0 + WINDOW, "boom") is False


def test_successes_older_than_the_window_no_longer_dilute_the_rate(
    rate_detector: OutlierDetector,
) -> None:
    for _ in range(5):
        rate_detector.on_success(POOL, T0)
    ejected = [rate_detector.on_failure(POOL, T0 + WINDOW, "boom") for _ in range(4)]
    assert ejected == [False, False, False, True]


def test_error_rate_ejection_names_the_rate(rate_detector: OutlierDetector) -> None:
    rate_detector.on_success(POOL, T0)
    rate_detector.on_failure(POOL, T0, "boom")
    rate_detector.on_success(POOL, T0)
    rate_detector.on_failure(POOL, T0, "boom")
    assert rate_detector.take_ejections()[POOL].startswith("error rate 2/4")


def test_an_ejection_starts_the_error_rate_window_afresh(rate_detector: OutlierDetector) -> None:
    for _ in range(2):
        rate_detector.on_success(POOL, T0)
        rate_detector.on_failure(POOL, T0, "boom")  # ejects on the second: 2/4
    now = T0 + BASE
    rate_detector.allows(POOL, now)
    rate_detector.on_success(POOL, now)  # the trial readmits it
    assert rate_detector.on_failure(POOL, now, "boom") is False


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


def test_trial_success_lifts_the_block(detector: OutlierDetector) -> None:
    _eject(detector)
    now = T0 + BASE
    detector.allows(POOL, now)
    detector.on_success(POOL, now)
    assert (detector.blocked(now), [detector.allows(POOL, now) for _ in range(2)]) == (
        set(),
        [True, True],
    )


def test_trial_failure_re_ejects_at_once_with_double_backoff(detector: OutlierDetector) -> None:
    _eject(detector)
    now = T0 + BASE
    detector.allows(POOL, now)
    ejected = detector.on_failure(POOL, now, "boom")
    assert (ejected, _blocked_until(detector, now + 2 * BASE)) == (True, True)


def test_backoff_doubling_is_capped_at_max_ejection(detector: OutlierDetector) -> None:
    _eject(detector)
    until = T0 + BASE
    # 5 s doubled: 10, then 20 capped at 18, and it stays there.
    for backoff in (10.0, CAP, CAP):
        assert detector.allows(POOL, until)
        detector.on_failure(POOL, until, "boom")
        until += backoff
    assert _blocked_until(detector, until)


def _settle(detector: OutlierDetector) -> float:
    return max(detector.health.ramp_s, detector.health.probe_interval_s)


def test_a_relapse_soon_after_readmission_doubles_the_backoff(detector: OutlierDetector) -> None:
    _eject(detector)
    now = T0 + BASE
    detector.allows(POOL, now)
    detector.on_success(POOL, now)  # readmitted by its trial
    _eject(detector, now + 1)  # fails again at once: a relapse
    assert _blocked_until(detector, now + 1 + 2 * BASE)


def test_a_pool_healthy_through_its_settle_time_starts_from_the_base_backoff(
    detector: OutlierDetector,
) -> None:
    _eject(detector)
    now = T0 + BASE
    detector.allows(POOL, now)
    detector.on_failure(POOL, now, "boom")  # second ejection: 10 s
    now += 2 * BASE
    detector.allows(POOL, now)
    detector.on_success(POOL, now)
    later = now + _settle(detector)
    _eject(detector, later)
    assert _blocked_until(detector, later + BASE)


def test_failures_of_requests_in_flight_at_the_ejection_do_not_eject_again(
    detector: OutlierDetector,
) -> None:
    _eject(detector)  # 3 failures: ejected for BASE
    # Nine more requests that were already in flight fail over the next second.
    ejected_again = [detector.on_failure(POOL, T0 + 0.1 * i, "boom") for i in range(9)]
    assert not any(ejected_again)
    assert _blocked_until(detector, T0 + BASE)  # not 40 s
    assert list(detector.take_ejections()) == [POOL]  # one EJECT event for the incident


def test_a_local_block_never_outlives_the_shared_readmission(detector: OutlierDetector) -> None:
    _eject(detector)
    detector.shared_readmitted(POOL, readmitted_s=T0 - 1, now=T0 + 1)  # an older readmission
    assert POOL in detector.blocked(T0 + 1)
    detector.shared_readmitted(POOL, readmitted_s=T0 + 2, now=T0 + 2)
    assert POOL not in detector.blocked(T0 + 2) and detector.allows(POOL, T0 + 2)


def test_release_trial_frees_the_slot(detector: OutlierDetector) -> None:
    _eject(detector)
    now = T0 + BASE
    detector.allows(POOL, now)
    detector.release_trial(POOL)
    assert (detector.blocked(now), detector.allows(POOL, now)) == (set(), True)


def test_release_trial_keeps_the_pool_half_open(detector: OutlierDetector) -> None:
    _eject(detector)
    now = T0 + BASE
    detector.allows(POOL, now)
    detector.release_trial(POOL)
    detector.allows(POOL, now)
    assert detector.allows(POOL, now) is False


def test_release_trial_of_an_unknown_pool_is_a_no_op(detector: OutlierDetector) -> None:
    detector.release_trial("never-seen")
    assert (detector.blocked(T0), detector.allows("never-seen", T0)) == (set(), True)


# -- the ejection queue ---------------------------------------------------------------


def test_ejection_queues_the_pool_with_the_failure_reason(detector: OutlierDetector) -> None:
    for _ in range(3):
        detector.on_failure(POOL, T0, "connect refused")
    assert detector.take_ejections() == {POOL: "3 consecutive failures: connect refused"}


def test_trial_failure_queues_the_trial_reason(detector: OutlierDetector) -> None:
    _eject(detector)
    detector.take_ejections()
    detector.allows(POOL, T0 + BASE)
    detector.on_failure(POOL, T0 + BASE, "timeout")
    assert detector.take_ejections() == {POOL: "trial request failed: timeout"}


def test_take_ejections_drains_the_queue(detector: OutlierDetector) -> None:
    _eject(detector)
    first = detector.take_ejections()
    assert (set(first), detector.take_ejections()) == ({POOL}, {})


def test_take_ejections_returns_every_ejected_pool(detector: OutlierDetector) -> None:
    _eject(detector)
    _eject(detector, pool=OTHER)
    assert set(detector.take_ejections()) == {POOL, OTHER}


def test_a_failure_that_does_not_eject_queues_nothing(detector: OutlierDetector) -> None:
    detector.on_failure(POOL, T0, "boom")
    assert detector.take_ejections() == {}


def test_requeue_puts_back_an_ejection_that_was_not_recorded(detector: OutlierDetector) -> None:
    _eject(detector)
    taken = detector.take_ejections()
    detector.requeue(POOL, taken[POOL])
    assert detector.take_ejections() == taken


def test_requeue_keeps_a_newer_reason(detector: OutlierDetector) -> None:
    _eject(detector)
    stale = detector.take_ejections()[POOL]
    detector.allows(POOL, T0 + BASE)
    detector.on_failure(POOL, T0 + BASE, "timeout")  # newer ejection, queued
    detector.requeue(POOL, stale)
    assert detector.take_ejections() == {POOL: "trial request failed: timeout"}


def test_requeue_of_a_pool_without_a_pending_ejection_adds_it(
    detector: OutlierDetector,
) -> None:
    detector.requeue(OTHER, "from an earlier sync")
    assert detector.take_ejections() == {OTHER: "from an earlier sync"}
