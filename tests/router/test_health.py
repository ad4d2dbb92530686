"""The per-pool health state machine: every transition, the traffic ramp and the Redis
fields. ``transition`` is pure, so every test passes an explicit ``now`` (unix seconds).
"""

from __future__ import annotations

import pytest

from router.health import HealthEvent, HealthRecord, PoolState, transition
from router.policy import HealthSettings, OutlierSettings

T0 = 1_000_000.0
BASE = 5.0
CAP = 120.0
RAMP = 30.0
HEALTH = HealthSettings(
    probe_interval_s=5.0,
    unhealthy_threshold=2,
    healthy_threshold=3,
    ramp_s=RAMP,
    max_readmissions=3,
)
OUTLIER = OutlierSettings(base_ejection_s=BASE, max_ejection_s=CAP)


def _step(
    rec: HealthRecord,
    event: HealthEvent,
    now: float,
    reason: str = "",
    health: HealthSettings = HEALTH,
) -> HealthRecord | None:
    return transition(rec, event, now, health, OUTLIER, reason)


def _must(
    rec: HealthRecord,
    event: HealthEvent,
    now: float,
    reason: str = "",
    health: HealthSettings = HEALTH,
) -> HealthRecord:
    out = _step(rec, event, now, reason, health)
    assert out is not None
    return out


EJECTED = HealthRecord(state=PoolState.EJECTED, since_s=T0 - BASE, until_s=T0, ejections=1)
PROBING = HealthRecord(state=PoolState.PROBING, since_s=T0, ejections=1)
DRAINING = HealthRecord(state=PoolState.DRAINING, since_s=T0)
# Readmitted at T0 after one ejection, so still ramping until T0 + RAMP.
READMITTED = HealthRecord(state=PoolState.HEALTHY, since_s=T0, readmitted_s=T0, ejections=1)


# -- drain ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rec",
    [HealthRecord(), EJECTED, PROBING],
    ids=["healthy", "ejected", "probing"],
)
def test_drain_moves_any_other_state_to_draining(rec: HealthRecord) -> None:
    out = _must(rec, HealthEvent.DRAIN, T0 + 1)
    assert (out.state, out.since_s) == (PoolState.DRAINING, T0 + 1)


def test_drain_records_the_operators_reason() -> None:
    assert _must(HealthRecord(), HealthEvent.DRAIN, T0, "maintenance").reason == "maintenance"


def test_drain_of_a_draining_pool_is_a_no_op() -> None:
    assert _step(DRAINING, HealthEvent.DRAIN, T0 + 1) is None


@pytest.mark.parametrize("event", [HealthEvent.PROBE_OK, HealthEvent.PROBE_FAIL, HealthEvent.EJECT])
def test_a_draining_pool_ignores_probes_and_ejections(event: HealthEvent) -> None:
    assert _step(DRAINING, event, T0 + 1) is None


# -- uncordon -------------------------------------------------------------------------


def test_uncordon_makes_a_draining_pool_healthy() -> None:
    assert _must(DRAINING, HealthEvent.UNCORDON, T0 + 1).state is PoolState.HEALTHY


def test_uncordon_starts_a_traffic_ramp() -> None:
    out = _must(DRAINING, HealthEvent.UNCORDON, T0 + 1)
    assert out.readmitted_s == T0 + 1
    assert out.weight(T0 + 1, RAMP) == pytest.approx(0.1)


def test_uncordon_clears_ejections_relapses_and_the_replacement_flag() -> None:
    rec = HealthRecord(state=PoolState.DRAINING, ejections=4, relapses=2, needs_replacement=True)
    out = _must(rec, HealthEvent.UNCORDON, T0)
    assert (out.ejections, out.relapses, out.needs_replacement) == (0, 0, False)


def test_the_uncordon_reason_is_cleared_once_the_ramp_is_over() -> None:
    out = _must(DRAINING, HealthEvent.UNCORDON, T0, "uncordoned by operator")
    assert _step(out, HealthEvent.PROBE_OK, T0 + RAMP / 2) is None  # still ramping: kept

    settled = _must(out, HealthEvent.PROBE_OK, T0 + RAMP)

    assert (settled.state, settled.reason) == (PoolState.HEALTHY, "")


def test_uncordon_keeps_the_version_for_the_caller_to_bump() -> None:
    rec = HealthRecord(state=PoolState.DRAINING, version=7)
    assert _must(rec, HealthEvent.UNCORDON, T0).version == 7


def test_uncordon_readmits_a_pool_flagged_for_replacement() -> None:
    rec = HealthRecord(state=PoolState.EJECTED, until_s=T0 + 100, needs_replacement=True)
    out = _must(rec, HealthEvent.UNCORDON, T0)
    assert (out.state, out.needs_replacement) == (PoolState.HEALTHY, False)


@pytest.mark.parametrize(
    "rec",
    [HealthRecord(), EJECTED, PROBING],
    ids=["healthy", "ejected", "probing"],
)
def test_uncordon_of_a_pool_neither_draining_nor_flagged_is_a_no_op(rec: HealthRecord) -> None:
    assert _step(rec, HealthEvent.UNCORDON, T0) is None


# -- eject ----------------------------------------------------------------------------


def test_eject_moves_a_healthy_pool_to_ejected() -> None:
    out = _must(HealthRecord(), HealthEvent.EJECT, T0, "5 consecutive failures")
    assert (out.state, out.reason, out.since_s) == (
        PoolState.EJECTED,
        "5 consecutive failures",
        T0,
    )


def test_eject_moves_a_probing_pool_to_ejected() -> None:
    assert _must(PROBING, HealthEvent.EJECT, T0 + 1).state is PoolState.EJECTED


def test_eject_counts_the_ejection() -> None:
    assert _must(HealthRecord(ejections=2), HealthEvent.EJECT, T0).ejections == 3


def test_eject_clears_the_probe_counts() -> None:
    rec = HealthRecord(state=PoolState.PROBING, probe_ok=2, probe_fail=1)
    out = _must(rec, HealthEvent.EJECT, T0)
    assert (out.probe_ok, out.probe_fail) == (0, 0)


def test_eject_keeps_the_version_for_the_caller_to_bump() -> None:
    assert _must(HealthRecord(version=9), HealthEvent.EJECT, T0).version == 9


@pytest.mark.parametrize(("ejections", "backoff"), [(0, 5.0), (1, 10.0), (2, 20.0), (3, 40.0)])
def test_eject_backoff_doubles_with_each_ejection(ejections: int, backoff: float) -> None:
    out = _must(HealthRecord(ejections=ejections), HealthEvent.EJECT, T0)
    assert out.until_s == T0 + backoff


@pytest.mark.parametrize("ejections", [5, 20])
def test_eject_backoff_is_capped_at_max_ejection(ejections: int) -> None:
    out = _must(HealthRecord(ejections=ejections), HealthEvent.EJECT, T0)
    assert out.until_s == T0 + CAP


def test_eject_of_a_pool_still_backing_off_is_a_no_op() -> None:
    assert _step(EJECTED, HealthEvent.EJECT, EJECTED.until_s - 0.001) is None


def test_eject_after_the_backoff_ejects_again_for_longer() -> None:
    out = _must(EJECTED, HealthEvent.EJECT, EJECTED.until_s)
    assert (out.state, out.until_s, out.ejections) == (
        PoolState.EJECTED,
        EJECTED.until_s + 2 * BASE,
        2,
    )


# -- ejected and probing --------------------------------------------------------------


@pytest.mark.parametrize("event", [HealthEvent.PROBE_OK, HealthEvent.PROBE_FAIL])
def test_an_ejected_pool_ignores_probes_until_its_backoff_ends(event: HealthEvent) -> None:
    assert _step(EJECTED, event, EJECTED.until_s - 0.001) is None


def test_a_good_probe_after_the_backoff_moves_the_pool_to_probing() -> None:
    out = _must(EJECTED, HealthEvent.PROBE_OK, EJECTED.until_s)
    assert (out.state, out.since_s, out.probe_ok) == (PoolState.PROBING, EJECTED.until_s, 1)


def test_good_probes_below_the_healthy_threshold_keep_the_pool_probing() -> None:
    rec = _must(PROBING, HealthEvent.PROBE_OK, T0 + 1)
    rec = _must(rec, HealthEvent.PROBE_OK, T0 + 2)
    assert (rec.state, rec.probe_ok) == (PoolState.PROBING, 2)


def test_healthy_threshold_good_probes_readmit_the_pool() -> None:
    rec = PROBING
    for i in range(1, 4):
        rec = _must(rec, HealthEvent.PROBE_OK, T0 + i)
    assert (rec.state, rec.since_s, rec.readmitted_s, rec.probe_ok) == (
        PoolState.HEALTHY,
        T0 + 3,
        T0 + 3,
        0,
    )


def test_readmission_keeps_the_replacement_flag_for_the_operator() -> None:
    rec = HealthRecord(state=PoolState.PROBING, probe_ok=2, needs_replacement=True)
    assert _must(rec, HealthEvent.PROBE_OK, T0).needs_replacement is True


def test_a_failed_probe_while_probing_re_ejects_with_a_longer_backoff() -> None:
    rec = HealthRecord(state=PoolState.PROBING, probe_ok=2, ejections=1)
    out = _must(rec, HealthEvent.PROBE_FAIL, T0)
    assert (out.state, out.until_s, out.ejections, out.probe_ok) == (
        PoolState.EJECTED,
        T0 + 2 * BASE,
        2,
        0,
    )


# -- healthy and probes ---------------------------------------------------------------


def test_a_failed_probe_below_the_unhealthy_threshold_is_only_counted() -> None:
    out = _must(HealthRecord(), HealthEvent.PROBE_FAIL, T0)
    assert (out.state, out.probe_fail) == (PoolState.HEALTHY, 1)


def test_unhealthy_threshold_failed_probes_eject_a_healthy_pool() -> None:
    rec = _must(HealthRecord(), HealthEvent.PROBE_FAIL, T0)
    out = _must(rec, HealthEvent.PROBE_FAIL, T0 + 5)
    assert (out.state, out.until_s) == (PoolState.EJECTED, T0 + 5 + BASE)


def test_a_good_probe_resets_the_failed_probe_count() -> None:
    rec = _must(HealthRecord(), HealthEvent.PROBE_FAIL, T0)
    rec = _must(rec, HealthEvent.PROBE_OK, T0 + 5)
    out = _must(rec, HealthEvent.PROBE_FAIL, T0 + 10)
    assert (out.state, out.probe_fail) == (PoolState.HEALTHY, 1)


def test_a_good_probe_of_a_healthy_pool_with_nothing_to_reset_is_a_no_op() -> None:
    assert _step(HealthRecord(), HealthEvent.PROBE_OK, T0) is None


# -- relapses and the ramp window -----------------------------------------------------


def test_an_ejection_within_the_ramp_of_readmission_is_a_relapse() -> None:
    assert _must(READMITTED, HealthEvent.EJECT, T0 + RAMP - 0.001).relapses == 1


def test_an_ejection_after_the_ramp_is_not_a_relapse() -> None:
    assert _must(READMITTED, HealthEvent.EJECT, T0 + RAMP).relapses == 0


def test_the_relapse_window_lasts_at_least_one_probe_interval() -> None:
    no_ramp = HEALTH.model_copy(update={"ramp_s": 0.0})
    assert _must(READMITTED, HealthEvent.EJECT, T0 + 4, health=no_ramp).relapses == 1


def test_a_pool_never_readmitted_does_not_relapse() -> None:
    assert _must(HealthRecord(), HealthEvent.EJECT, T0).relapses == 0


def test_relapses_below_max_readmissions_do_not_flag_the_pool() -> None:
    rec = HealthRecord(readmitted_s=T0, ejections=2, relapses=1)
    out = _must(rec, HealthEvent.EJECT, T0 + 1)
    assert (out.relapses, out.needs_replacement) == (2, False)


def test_max_readmissions_relapses_flag_the_pool_for_replacement() -> None:
    rec = HealthRecord(readmitted_s=T0, ejections=3, relapses=2)
    out = _must(rec, HealthEvent.EJECT, T0 + 1)
    assert (out.relapses, out.needs_replacement) == (3, True)


def test_a_failed_probe_while_probing_is_not_another_relapse() -> None:
    relapsed = _must(READMITTED, HealthEvent.EJECT, T0 + 1)  # backoff 10 s, relapse 1
    out = _must(relapsed, HealthEvent.PROBE_FAIL, relapsed.until_s)
    assert out.relapses == 1


def test_a_good_probe_after_the_ramp_resets_ejections_and_relapses() -> None:
    rec = HealthRecord(readmitted_s=T0, ejections=3, relapses=2)
    out = _must(rec, HealthEvent.PROBE_OK, T0 + RAMP)
    assert (out.ejections, out.relapses) == (0, 0)


def test_a_good_probe_during_the_ramp_keeps_the_ejection_count() -> None:
    rec = HealthRecord(readmitted_s=T0, ejections=3, relapses=2)
    assert _step(rec, HealthEvent.PROBE_OK, T0 + RAMP - 0.001) is None


# -- weight ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rec", [EJECTED, PROBING, DRAINING], ids=["ejected", "probing", "draining"]
)
def test_weight_is_zero_when_not_healthy(rec: HealthRecord) -> None:
    assert rec.weight(T0 + 1000, RAMP) == 0.0


def test_weight_of_a_pool_never_readmitted_is_one() -> None:
    assert HealthRecord().weight(T0, RAMP) == 1.0


def test_weight_starts_at_the_ramp_floor_on_readmission() -> None:
    assert READMITTED.weight(T0, RAMP) == pytest.approx(0.1)


def test_weight_ramps_linearly_over_the_ramp() -> None:
    assert READMITTED.weight(T0 + RAMP / 2, RAMP) == pytest.approx(0.55)


def test_weight_is_one_once_the_ramp_is_over() -> None:
    assert READMITTED.weight(T0 + RAMP, RAMP) == 1.0


def test_weight_is_one_without_a_ramp() -> None:
    assert READMITTED.weight(T0, 0.0) == 1.0


def test_weight_before_readmission_stays_at_the_ramp_floor() -> None:
    assert READMITTED.weight(T0 - 5, RAMP) == pytest.approx(0.1)


# -- Redis fields ---------------------------------------------------------------------


def test_fields_round_trip() -> None:
    rec = HealthRecord(
        state=PoolState.PROBING,
        reason="2 failed probe(s)",
        since_s=T0 + 0.125,
        until_s=T0 + 10.5,
        ejections=3,
        probe_ok=1,
        probe_fail=2,
        readmitted_s=T0 - 60.25,
        relapses=2,
        needs_replacement=True,
        version=42,
    )
    assert HealthRecord.from_fields(rec.to_fields()) == rec


def test_fields_are_all_strings() -> None:
    fields = HealthRecord(ejections=2, needs_replacement=True).to_fields()
    assert all(isinstance(v, str) for v in fields.values())


def test_missing_fields_give_the_default_record() -> None:
    assert HealthRecord.from_fields({}) == HealthRecord()


def test_an_unknown_state_falls_back_to_healthy() -> None:
    assert HealthRecord.from_fields({"state": "on-fire"}).state is PoolState.HEALTHY


@pytest.mark.parametrize("field", ["since_s", "until_s", "ejections", "relapses", "version"])
@pytest.mark.parametrize("bad", ["", "garbage"])
def test_a_bad_number_falls_back_to_zero(field: str, bad: str) -> None:
    rec = HealthRecord.from_fields({"state": "ejected", field: bad})
    assert getattr(rec, field) == 0


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_a_non_finite_count_falls_back_to_zero(bad: str) -> None:
    assert HealthRecord.from_fields({"ejections": bad}).ejections == 0


def test_needs_replacement_is_set_only_by_one() -> None:
    assert HealthRecord.from_fields({"needs_replacement": "true"}).needs_replacement is False
