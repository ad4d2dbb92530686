"""Pool dynamics: boot delay, FIFO slots, draining and billing of replicas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.fleet import DRAINING, GONE, READY, Fleet
from tests.simulator.conftest import policy, pool, spec_of

# One pool: 2 slots, TPOT 10 ms alone, 20 ms with two; every request 0.1 s prefill.
SPEC = spec_of(policy([pool("a", replicas=(0, 4, 0))]), provisioning_s=30.0)


def _fleet(outputs: list[int]) -> Fleet:
    n = len(outputs)
    return Fleet(SPEC, np.asarray(outputs, dtype=np.intp), np.full((n, 1), 0.1))


def _run(fleet: Fleet) -> None:
    while fleet.events:
        fleet.step()


def test_a_launched_replica_takes_requests_after_its_provisioning_time() -> None:
    fleet = _fleet([1])
    fleet.scale_to(0, 1, now=0.0)
    fleet.submit(0, 0, now=0.0)
    _run(fleet)
    assert fleet.admit_s[0] == pytest.approx(30.0)


def test_a_third_request_waits_fifo_for_a_free_slot() -> None:
    fleet = _fleet([1, 11, 1])
    fleet.launch(0, 0.0, 0.0)
    for i in range(3):
        fleet.submit(i, 0, now=0.0)
    _run(fleet)
    # Request 0 ends with its prefill at 0.1 s; request 2 takes its slot then.
    assert fleet.admit_s.tolist() == pytest.approx([0.0, 0.0, 0.1])


def test_a_draining_replica_finishes_its_work_and_is_billed_until_then() -> None:
    fleet = _fleet([11, 1])
    first = fleet.launch(0, 0.0, 0.0)
    fleet.launch(0, 0.0, 0.0)
    fleet.submit(0, 0, now=0.0)  # lands on the first replica (fewest running, first)
    fleet.scale_to(0, 1, now=0.05)  # drains the idle second replica at once
    fleet.scale_to(0, 0, now=0.05)  # keeps draining the busy first one
    assert first.state == DRAINING
    _run(fleet)
    assert first.state == GONE
    assert first.ended_s == pytest.approx(fleet.done_s[0])


def test_scaling_down_keeps_one_replica_while_requests_are_queued() -> None:
    fleet = _fleet([11, 11, 11])
    replica = fleet.launch(0, 0.0, 0.0)
    for i in range(3):
        fleet.submit(i, 0, now=0.0)
    fleet.scale_to(0, 0, now=0.01)
    assert replica.state == READY
    assert math.isinf(replica.ended_s)


def test_scaling_up_undrains_before_launching() -> None:
    fleet = _fleet([11])
    replica = fleet.launch(0, 0.0, 0.0)
    fleet.submit(0, 0, now=0.0)
    fleet.scale_to(0, 0, now=0.01)
    fleet.scale_to(0, 1, now=0.02)
    assert replica.state == READY
    assert len(fleet.all_replicas) == 1
